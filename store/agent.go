package store

import (
	"path"
	"runtime/debug"
	"strings"

	"github.com/lakestream/lakestream/internal/buildinfo"
)

// agent names the program making a store's requests, as the network
// backends put it in their User-Agent (and S3's app id): the binary and
// its version, e.g. "lakefs-mount" and "v0.3.1", so that a bucket's access
// logs and a cloud's billing tell the mount's reads from the producer's
// writes. The binary is the main package's last path element, which a
// renamed executable does not change.
func agent() (name, version string) {
	name = "lakestream"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		name = path.Base(bi.Path)
	}
	return name, buildinfo.Short()
}

// userAgent is agent as one User-Agent product token, "name/version".
func userAgent() string {
	name, version := agent()
	return strings.ReplaceAll(name, " ", "-") + "/" + strings.ReplaceAll(version, " ", "-")
}
