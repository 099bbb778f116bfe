package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-04T15:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := format(bi, ""), "v1.2.3 commit 0123456789ab 2026-12-04T15:00:00Z modified go1.26.8"; got != want {
		t.Errorf("format = %q; want %q", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.8"}
	if got := format(bi, ""); !strings.HasPrefix(got, "(devel) commit unknown") {
		t.Errorf("format without VCS = %q", got)
	}
}

// TestVersionMatchesGoVersionM: lakefs-mount --version reports the module
// version and the commit `go version -m` shows for the same binary, or
// says the commit is unknown when the build recorded none (Go records it
// only from a checkout whose .git is a directory, not a git worktree).
func TestVersionMatchesGoVersionM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lakefs-mount")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "github.com/lakestream/lakestream/cmd/lakefs-mount")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var mod, rev string
	for _, line := range strings.Split(string(m), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			mod = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			rev = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	want := "commit unknown"
	if rev != "" {
		want = "commit " + rev[:12]
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "lakefs-mount version "+mod+" ") || !strings.Contains(string(out), want) {
		t.Errorf("lakefs-mount --version = %q; want version %s and %q (go version -m:\n%s)", out, mod, want, m)
	}
}
