package integration

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountStoreDeleted: the store directory deleted under a live mount is
// reported (/health answers 503 naming it, lakefs_mount_healthy is 0) and
// the mount's heartbeat does not bring the directory back (issue 22.9).
// Before, nothing was logged, /health did not exist, and every heartbeat
// recreated <store>/_consumers/.
func TestMountStoreDeleted(t *testing.T) {
	mntRequireFUSE(t)
	url, dir := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	mntNewProducer(t, l, "p1", 200, 1).addN(t, 2)
	_, info := mntMountInProcess(t, mount.Options{Store: url, MetricsAddr: "127.0.0.1:0", HeartbeatInterval: 20 * time.Millisecond})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + info.MetricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/health"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/health of a healthy mount: %d %q", code, body)
	}
	failuresRE := regexp.MustCompile(`(?m)^lakefs_mount_heartbeat_failures_total (\d+)$`)
	failures := func() int {
		_, body := get("/metrics")
		m := failuresRE.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no lakefs_mount_heartbeat_failures_total in /metrics")
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}

	// The heartbeat may be writing while the directory goes: remove until
	// it is gone.
	removeAll := func() {
		waitFor(t, 10*time.Second, "the store directory removed", func() bool { return os.RemoveAll(dir) == nil })
	}
	removeAll()
	waitFor(t, 30*time.Second, "/health to report the stream gone", func() bool {
		code, body := get("/health")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "_stream.json is gone")
	})
	// A heartbeat that checked the stream just before the deletion may
	// have written after it; every later one checks first. Clear what
	// such a write left, then let two more heartbeats run.
	removeAll()
	f := failures()
	waitFor(t, 30*time.Second, "two more heartbeats", func() bool { return failures() >= f+2 })
	if _, err := os.Stat(filepath.Join(dir, "_consumers")); !os.IsNotExist(err) {
		t.Fatalf("the heartbeat recreated the deleted store's _consumers/ (stat: %v)", err)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "\nlakefs_mount_healthy 0\n") {
		t.Fatal("lakefs_mount_healthy is not 0 with the stream gone")
	}
}
