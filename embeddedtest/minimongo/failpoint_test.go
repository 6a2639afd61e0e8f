package minimongo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/embeddedtest/minimongo"
)

// TestConfigureFailPoint guards the conformance suite's fail point tests, which skip
// against a deployment without configureFailPoint: the backend always has it.
func TestConfigureFailPoint(t *testing.T) {
	_, c := startServer(t, minimongo.Options{})
	ctx := ctx(t)
	admin := c.Database("admin")
	cases := []struct {
		name string
		cmd  any
		code int
		msg  string
	}{
		{"failCommand", d("configureFailPoint", "failCommand", "mode", "off"), 0, ""},
		{"other fail points", d("configureFailPoint", "hangBeforeCommit", "mode", "alwaysOn"), 2, "minimongo does not support fail point"},
		{"bad mode", d("configureFailPoint", "failCommand", "mode", "sometimes"), 2, "unknown mode"},
		{"bad mode document", d("configureFailPoint", "failCommand", "mode", d("often", 1)), 2, "'mode' must be one of"},
		{"unknown failCommand option", d("configureFailPoint", "failCommand", "mode", "off", "data", d("frob", 1)), 2, "frob"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := admin.RunCommand(ctx, tc.cmd).Err()
			if tc.code == 0 {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, tc.code, tc.msg)
		})
	}
	err := c.Database("other").RunCommand(ctx, d("configureFailPoint", "failCommand", "mode", "off")).Err()
	requireCode(t, err, 13, "admin database")
}
