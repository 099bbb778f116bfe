package integration

import (
	"testing"

	"github.com/lakestream/lakestream/internal/s3test"
)

// mntS3Backends are the S3 stores mount tests also run on: a real versitygw
// on 127.0.0.1, one server per test, a fresh bucket per store.
func mntS3Backends(t testing.TB) []mntBackend {
	var srv *s3test.Server
	return []mntBackend{{"s3", func(t testing.TB) string {
		if srv == nil {
			srv = s3test.Start(t)
		}
		return srv.NewBucketURL(t)
	}}}
}
