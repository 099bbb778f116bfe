package csi

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestCommandUsage: lakefs-csi with bad flags exits 2 with one line that
// names the flag and the fix.
func TestCommandUsage(t *testing.T) {
	_, _, csiBin := bins(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "tcp://0:1", "--node-id", "n"}, "--endpoint"},
		{[]string{"--state-dir", "relative", "--node-id", "n"}, "--state-dir"},
		{[]string{"--endpoint", "unix:///tmp/x.sock"}, "--node-id"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--node-id", "n", "extra"}, "extra"},
	}
	for _, c := range cases {
		cmd := exec.Command(csiBin, c.args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"} // no KUBE_NODE_NAME, no CSI_ENDPOINT
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("lakefs-csi %v: %v, want exit status 2\n%s", c.args, err, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("lakefs-csi %v printed %q, want one line naming %s", c.args, out, c.want)
		}
	}
}
