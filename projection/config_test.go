package projection_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/projection"
)

// TestConfigMongoNames: the names a projection gives MongoDB follow MongoDB's rules (package
// internal/mongoname), NUL included.
func TestConfigMongoNames(t *testing.T) {
	ok := projection.Config{Name: "orders-view", Topic: "orders", Database: "shop", Collection: "orders",
		Indexes: []projection.Index{{Fields: []string{"status", "-customer.created"}}}}
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name   string
		mutate func(*projection.Config)
		want   string
	}{
		{"no database", func(c *projection.Config) { c.Database = "" }, "Database"},
		{"database with a dot", func(c *projection.Config) { c.Database = "a.b" }, "Database"},
		{"database with NUL", func(c *projection.Config) { c.Database = "sh\x00op" }, "Database"},
		{"collection with $", func(c *projection.Config) { c.Collection = "a$b" }, "Collection"},
		{"collection with NUL", func(c *projection.Config) { c.Collection = "ord\x00ers" }, "Collection"},
		{"collection of MongoDB's", func(c *projection.Config) { c.Collection = "system.views" }, "Collection"},
		{"index field with NUL", func(c *projection.Config) { c.Indexes[0].Fields = []string{"sta\x00tus"} }, "Indexes[0]"},
		{"index field with $", func(c *projection.Config) { c.Indexes[0].Fields = []string{"-$status"} }, "Indexes[0]"},
		{"index field with an empty name", func(c *projection.Config) { c.Indexes[0].Fields = []string{"customer..id"} }, "Indexes[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Indexes = []projection.Index{{Fields: append([]string(nil), ok.Indexes[0].Fields...)}}
			tc.mutate(&c)
			err := c.Validate()
			require.ErrorIs(t, err, projection.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestConfigMaxVersionStep: a negative MaxVersionStep is refused; 0 is the default, and
// UnboundedVersionStep is valid.
func TestConfigMaxVersionStep(t *testing.T) {
	c := projection.Config{Name: "orders-view", Topic: "orders", Database: "shop", Collection: "orders", Version: "/v"}
	c.MaxVersionStep = -1
	err := c.Validate()
	require.ErrorIs(t, err, projection.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "MaxVersionStep")
	for _, step := range []int64{0, 1, projection.DefaultMaxVersionStep, projection.UnboundedVersionStep} {
		c.MaxVersionStep = step
		assert.NoError(t, c.Validate(), "%d", step)
	}
}
