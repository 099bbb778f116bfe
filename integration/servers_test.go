package integration

import (
	"syscall"
	"testing"

	"github.com/lakestream/lakestream/internal/aztest"
	"github.com/lakestream/lakestream/internal/gcstest"
	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
)

// storeServer is an object-store server a test starts on 127.0.0.1:
// versitygw (s3://), fake-gcs-server (gs://) or Azurite (az://). Child
// processes reach it with Env and a URL from NewBucketURL.
type storeServer interface {
	NewBucketURL(t testing.TB) string
	Env() []string
	Stop(sig syscall.Signal)
	Restart() error
	Signal(sig syscall.Signal) error
}

// serverKinds are the store servers the end-to-end tests run on.
var serverKinds = []string{"s3", "gs", "az"}

// startServer starts a server of kind, stopped when t ends. A durable
// one keeps its objects across Stop and Restart (the emulators otherwise
// keep them in memory, which a restart empties).
func startServer(t testing.TB, kind string, durable bool) storeServer {
	t.Helper()
	switch kind {
	case "s3":
		return s3test.Start(t)
	case "gs":
		o := gcstest.Options{}
		if durable {
			o.Dir = t.TempDir()
		}
		return gcstest.StartWith(t, o)
	case "az":
		return aztest.StartWith(t, aztest.Options{Persist: durable})
	}
	t.Fatalf("no store server of kind %q", kind)
	return nil
}

// forEachServer runs fn as a subtest on a fresh server of every kind
// (under -short, versitygw's only).
func forEachServer(t *testing.T, durable bool, fn func(t *testing.T, srv storeServer)) {
	for _, kind := range serverKinds {
		t.Run(kind, func(t *testing.T) {
			longtest.SkipEmulator(t, kind)
			fn(t, startServer(t, kind, durable))
		})
	}
}

// mntServerBackends are the object stores mount tests also run on, beside
// file://: one server of each kind per subtest, a fresh bucket per store.
func mntServerBackends() []mntBackend {
	var bs []mntBackend
	for _, kind := range serverKinds {
		bs = append(bs, mntBackend{kind, func(t testing.TB) string {
			longtest.SkipEmulator(t, kind)
			return startServer(t, kind, false).NewBucketURL(t)
		}})
	}
	return bs
}
