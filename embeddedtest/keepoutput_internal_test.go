package embeddedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A failed test's processes leave their whole output in JETBUS_TEST_OUTPUT, one file each,
// named after the test (subtests' slashes flattened), the process and its pid; without the
// variable nothing is written.
func TestKeepOutput(t *testing.T) {
	t.Run("sub/case", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "out")
		p := &Process{Name: "bridge-1", t: t, Cmd: &exec.Cmd{Process: &os.Process{Pid: 4242}}}
		_, _ = p.out.Write([]byte("line 1\nline 2\n"))

		t.Setenv(OutputDirEnv, "")
		p.keepOutput()
		_, err := os.Stat(dir)
		require.True(t, os.IsNotExist(err), "output kept without %s: %v", OutputDirEnv, err)

		t.Setenv(OutputDirEnv, dir)
		p.keepOutput()
		b, err := os.ReadFile(filepath.Join(dir, "TestKeepOutput_sub_case-bridge-1-4242.log"))
		require.NoError(t, err)
		require.Equal(t, "line 1\nline 2\n", string(b))
	})
}
