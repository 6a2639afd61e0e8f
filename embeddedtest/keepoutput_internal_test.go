package embeddedtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A failed test's processes leave their whole output in JETBUS_TEST_OUTPUT, one file each,
// named after the test (subtests' slashes flattened) and the process.
func TestKeepOutput(t *testing.T) {
	t.Run("sub/case", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "out")
		t.Setenv(OutputDirEnv, dir)
		p := &Process{Name: "bridge-1", t: t}
		_, _ = p.out.Write([]byte("line 1\nline 2\n"))
		p.keepOutput()
		b, err := os.ReadFile(filepath.Join(dir, "TestKeepOutput_sub_case-bridge-1.log"))
		require.NoError(t, err)
		require.Equal(t, "line 1\nline 2\n", string(b))
	})
}
