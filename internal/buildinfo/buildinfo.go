// Package buildinfo reports what a binary was built from, as `go version
// -m` shows it: the module version and the VCS commit. Every command's
// --version prints Version().
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// version is set by the image build (go build -ldflags "-X
// github.com/lakestream/lakestream/internal/buildinfo.version=v1.2.3", see
// the Dockerfile), where no VCS information is at hand; "" otherwise.
var version string

// Version returns the main module's version and, when the build recorded
// them (go build -buildvcs=auto in a git checkout), the commit, its time
// and whether the tree had uncommitted changes, e.g.
// "(devel) commit 1a2b3c4d5e6f 2026-12-04T15:00:00Z modified go1.26.8".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in this binary)"
	}
	return format(bi, version)
}

// Short is the version alone, as CSI's GetPluginInfo reports it: the one
// the build was given, else the module's, else "devel" and the commit.
func Short() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return "devel-" + s.Value[:min(len(s.Value), 12)]
		}
	}
	return "devel"
}

// format is Version of bi, with given as the version if the build set one.
func format(bi *debug.BuildInfo, given string) string {
	parts := []string{bi.Main.Version}
	if given != "" {
		parts[0] = given
	}
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
	} else if given == "" {
		parts = append(parts, "commit unknown (built without VCS information; make build records it)")
	}
	return strings.Join(append(parts, bi.GoVersion), " ")
}
