// Package buildinfo reports what a binary was built from, as `go version
// -m` shows it: the module version and the VCS commit. Every command's
// --version prints Version().
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version returns the main module's version and, when the build recorded
// them (go build -buildvcs=auto in a git checkout), the commit, its time
// and whether the tree had uncommitted changes, e.g.
// "(devel) commit 1a2b3c4d5e6f 2026-12-04T15:00:00Z modified go1.26.8".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in this binary)"
	}
	return format(bi)
}

func format(bi *debug.BuildInfo) string {
	parts := []string{bi.Main.Version}
	if parts[0] == "" {
		parts[0] = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		parts = append(parts, "commit "+rev[:min(len(rev), 12)])
		if t := settings["vcs.time"]; t != "" {
			parts = append(parts, t)
		}
		if settings["vcs.modified"] == "true" {
			parts = append(parts, "modified")
		}
	} else {
		parts = append(parts, "commit unknown (built without VCS information; make build records it)")
	}
	return strings.Join(append(parts, bi.GoVersion), " ")
}
