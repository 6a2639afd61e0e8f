package schema_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/schema"
)

func TestCheckDirGood(t *testing.T) {
	probs, err := schema.CheckDir("testdata/files/good")
	require.NoError(t, err)
	assert.Empty(t, probs)

	files, probs, err := schema.LoadDir("testdata/files/good")
	require.NoError(t, err)
	assert.Empty(t, probs)
	require.Len(t, files, 5)
	assert.Equal(t, "orders.created", files[0].Topic)
	assert.Equal(t, []int{1, 2, 3, 1, 2}, []int{files[0].Version, files[1].Version, files[2].Version, files[3].Version, files[4].Version})
	assert.Equal(t, schema.ModeNone, files[1].Meta.Compatibility, "lowercase modes are accepted in sidecars")
	require.Len(t, files[1].Meta.Upcast, 1)
	assert.Equal(t, schema.PolicyLenient, files[4].Meta.Policy)

	// users.signedup v2 adds an optional property to an open model: FULL only under LENIENT.
	dir := copyDir(t, "testdata/files/good")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.signedup", "v2.meta.json"), []byte(`{"compatibility":"FULL"}`), 0o644))
	probs, err = schema.CheckDir(dir)
	require.NoError(t, err)
	require.Len(t, probs, 1)
	assert.Contains(t, probs[0].String(), "users.signedup/v2.json: incompatible with v1 under FULL (backward): /properties/locale: PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.signedup", "v2.meta.json"), []byte(`{"compatibility":"FULL","policy":"loose"}`), 0o644))
	probs, err = schema.CheckDir(dir)
	require.NoError(t, err)
	require.Len(t, probs, 1)
	assert.Contains(t, probs[0].String(), "bad sidecar")
}

func TestCheckDirBad(t *testing.T) {
	probs, err := schema.CheckDir("testdata/files/bad")
	require.NoError(t, err)
	want := map[string]string{
		"Bad.Topic":                   "directory name is not a valid topic",
		"stray.json":                  "schema files belong in <topic>/v<N>.json",
		"orders.created/notes.txt":    "unexpected file",
		"orders.created/v1.meta.json": "version 1 has no previous version to upcast from",
		"orders.created/v3.meta.json": "sidecar without a schema",
		"orders.created/v2.json":      "incompatible with v1 under BACKWARD (backward): /properties/qty/type: TYPE_CHANGED",
		"gaps/v3.json":                "versions must be contiguous from v1: v2 is missing",
		"broken/v1.json":              "invalid JSON Schema document",
		"broken/v2.json":              "invalid JSON Schema document",
		"empty":                       "no schema versions",
		"dup/v2.json":                 "identical to v1",
	}
	got := map[string]string{}
	for _, p := range probs {
		rel, err := filepath.Rel("testdata/files/bad", p.File)
		require.NoError(t, err)
		got[filepath.ToSlash(rel)] += p.Message + "|"
		assert.True(t, strings.HasPrefix(p.String(), p.File+": "))
	}
	for file, msg := range want {
		assert.Contains(t, got[file], msg, "problems of %s", file)
	}
	assert.Len(t, got, len(want), "unexpected problems: %v", got)

	_, err = schema.CheckDir("testdata/files/missing")
	require.Error(t, err)
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
	return dst
}

func TestPushDir(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	pushed, err := schema.PushDir(ctx, r, "testdata/files/good")
	require.NoError(t, err)
	require.Len(t, pushed, 5)
	for _, p := range pushed {
		assert.True(t, p.Created, "%+v", p)
	}
	v2, err := r.Get(ctx, "orders.created", 2)
	require.NoError(t, err)
	assert.Equal(t, schema.ModeNone, v2.Mode)
	u2, err := r.Get(ctx, "users.signedup", 2)
	require.NoError(t, err)
	assert.Equal(t, schema.ModeFull, u2.Mode)
	assert.Equal(t, schema.PolicyLenient, u2.Policy)

	// Idempotent.
	pushed, err = schema.PushDir(ctx, r, "testdata/files/good")
	require.NoError(t, err)
	require.Len(t, pushed, 5)
	for _, p := range pushed {
		assert.False(t, p.Created, "%+v", p)
	}

	// The sidecars' upcasters are in the registry.
	out, v, err := r.Upcast(ctx, "orders.created", 1, json.RawMessage(`{"id":"a","qty_count":2}`))
	require.NoError(t, err)
	assert.Equal(t, 3, v)
	assert.JSONEq(t, `{"id":"a","qty":2,"channel":"web"}`, string(out))
	require.NoError(t, r.Validate(ctx, "orders.created", 3, out))

	// A file that differs from the registry's version is a conflict.
	dir := copyDir(t, "testdata/files/good")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.signedup", "v1.json"), []byte(`{"type":"object","title":"x","properties":{"user":{"type":"string"}}}`), 0o644))
	_, err = schema.PushDir(ctx, r, dir)
	var probs schema.Problems
	require.ErrorAs(t, err, &probs)
	require.Len(t, probs, 1)
	assert.Contains(t, probs[0].String(), "users.signedup/v1.json: schema: version conflict")

	// A new compatible version is pushed; bad files push nothing.
	dir = copyDir(t, "testdata/files/good")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.signedup", "v3.json"), []byte(`{"type":"object","properties":{"user":{"type":"string"},"locale":{"type":"string"},"age":{}}}`), 0o644))
	pushed, err = schema.PushDir(ctx, r, dir)
	require.NoError(t, err)
	assert.Contains(t, pushed, schema.Pushed{Topic: "users.signedup", Version: 3, Created: true})

	_, err = schema.PushDir(ctx, r, "testdata/files/bad")
	require.True(t, errors.As(err, &probs))
	topics, _ := r.Topics(ctx)
	assert.Equal(t, []string{"orders.created", "users.signedup"}, topics)
}

// TestExampleSchemas keeps the repository's example schema files valid.
func TestExampleSchemas(t *testing.T) {
	probs, err := schema.CheckDir("../schemas")
	require.NoError(t, err)
	assert.Empty(t, probs)
}
