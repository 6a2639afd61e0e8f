package mongoname_test

import (
	"strings"
	"testing"

	"github.com/jetbus/jetbus/internal/mongoname"
)

type nameCase struct {
	what  string
	check func(string) error
	name  string
	valid bool
}

func TestNames(t *testing.T) {
	tests := []nameCase{
		{"database", mongoname.Database, "jetbus", true},
		{"database", mongoname.Database, "shop_2-eu", true},
		{"database", mongoname.Database, strings.Repeat("d", 63), true},
		{"database", mongoname.Database, strings.Repeat("d", 64), false},
		{"database", mongoname.Database, "", false},
		{"database", mongoname.Database, "shop\x00", false},
		{"database", mongoname.Database, "sh\x00op", false},

		{"collection", mongoname.Collection, "orders", true},
		{"collection", mongoname.Collection, "orders.v2", true},
		{"collection", mongoname.Collection, "my system.x", true},
		{"collection", mongoname.Collection, strings.Repeat("c", 200), true},
		{"collection", mongoname.Collection, strings.Repeat("c", 201), false},
		{"collection", mongoname.Collection, "", false},
		{"collection", mongoname.Collection, "or$ders", false},
		{"collection", mongoname.Collection, "$cmd", false},
		{"collection", mongoname.Collection, "orders\x00", false},
		{"collection", mongoname.Collection, "system.", false},
		{"collection", mongoname.Collection, "system.views", false},

		{"field", mongoname.FieldPath, "status", true},
		{"field", mongoname.FieldPath, "_id", true},
		{"field", mongoname.FieldPath, "customer.address.city", true},
		{"field", mongoname.FieldPath, "a-b c", true},
		{"field", mongoname.FieldPath, "price$", true},
		{"field", mongoname.FieldPath, "", false},
		{"field", mongoname.FieldPath, "sta\x00tus", false},
		{"field", mongoname.FieldPath, "\x00", false},
		{"field", mongoname.FieldPath, "$status", false},
		{"field", mongoname.FieldPath, "customer.$name", false},
		{"field", mongoname.FieldPath, ".status", false},
		{"field", mongoname.FieldPath, "status.", false},
		{"field", mongoname.FieldPath, "customer..name", false},
		{"field", mongoname.FieldPath, ".", false},
	}
	// Each character MongoDB forbids in a database name, alone, leading, inside and trailing.
	for _, c := range mongoname.DatabaseForbidden + "\x00" {
		for _, n := range []string{string(c), string(c) + "shop", "sh" + string(c) + "op", "shop" + string(c)} {
			tests = append(tests, nameCase{"database", mongoname.Database, n, false})
		}
	}
	for _, tt := range tests {
		err := tt.check(tt.name)
		if (err == nil) != tt.valid {
			t.Errorf("%s %q: err = %v, want valid %v", tt.what, tt.name, err, tt.valid)
		}
	}
}

func TestDatabaseForbiddenIsMongoDBsList(t *testing.T) {
	// The manual's list for Windows deployments; it includes the Unix one.
	for _, c := range []string{"/", `\`, ".", " ", `"`, "$", "*", "<", ">", ":", "|", "?"} {
		if !strings.Contains(mongoname.DatabaseForbidden, c) {
			t.Errorf("DatabaseForbidden lacks %q", c)
		}
	}
	if len(mongoname.DatabaseForbidden) != 12 {
		t.Errorf("DatabaseForbidden = %q: 12 characters expected", mongoname.DatabaseForbidden)
	}
}
