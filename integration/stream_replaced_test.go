package integration

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
)

// TestStreamReplaced (issue 55 items 8 and 9): every object of a stream
// is deleted and `init` run again at its URL while a producer (`run`) and
// a mount (lakefs-mount) of the old stream run, on file://, versitygw,
// fake-gcs-server and Azurite. The old producer stops, exit 1 naming the
// replacement, its uncommitted batches staged, and writes nothing into
// the new stream's log (before: it committed 30 of its batches into the
// new stream, emptied its staging tree, and the new stream failed for good
// once its own producer reached those versions). The old mount turns
// degraded ("stream replaced; remount") and never shows a step of the new
// stream: it serves what it had (or EIO), never the new stream's bytes
// (before: steps 0-2 served the old stream's bytes and 3-4 the new one's).
// The new stream goes on past the old one's versions; status and verify
// pass, and a fresh mount reads the new stream's bytes.
func TestStreamReplaced(t *testing.T) {
	mntRequireFUSE(t)
	bin, _ := prdBins(t)
	mbin := mntBuildMount(t)
	t.Run("file", func(t *testing.T) {
		url, dir := mntFileURL(t)
		srWithStream(t, bin, mbin, url, func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		})
	})
	forEachServer(t, false, func(t *testing.T, srv storeServer) {
		url := srv.NewBucketURL(t)
		srWithStream(t, bin, mbin, url, func() { srWipe(t, url) })
	})
}

// srWipe deletes every object under url (a prefix may hold a moment's
// heartbeat written meanwhile: delete until none is left).
func srWipe(t *testing.T, url string) {
	t.Helper()
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every object deleted", func() bool {
		var keys []string
		if err := store.Walk(t.Context(), s, "", "", func(o store.Info) error { keys = append(keys, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			return true
		}
		if err := s.Delete(t.Context(), keys...); err != nil {
			t.Fatal(err)
		}
		return false
	})
}

func srWithStream(t *testing.T, bin, mbin, url string, wipe func()) {
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	_, staging, _ := prdStaging(t)
	old, err := prdStart(bin, url, staging, "rp", "--poll", "50ms")
	if err != nil {
		t.Fatal(err)
	}
	defer old.kill()
	oldBatches := []string{"a-001", "a-002", "a-003"}
	for _, b := range oldBatches {
		prdStageSmall(t, staging, b)
	}
	prdWaitStaged(t, old, staging, oldBatches...)

	mnt, addr := t.TempDir(), freeAddr(t)
	m := mntStartMount(t, mbin, "--store", url, "--metrics-addr", addr, "--heartbeat-interval", "200ms",
		"--poll-interval", "50ms", "--idle-poll-interval", "200ms", mnt)
	mntWaitMounted(t, m, mnt)
	t.Cleanup(func() { srStop(t, m) })
	for n, b := range oldBatches {
		srCheckStep(t, mnt, n, b, true)
	}

	wipe()
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	// More batches for the old producer: it must not commit them into the
	// new stream.
	late := []string{"a-004", "a-005"}
	for _, b := range late {
		prdStageSmall(t, staging, b)
	}
	waitFor(t, time.Minute, "the old producer to stop", old.exited)
	if code, tail := old.code(), lastLine(old.tail()); code != 1 || !strings.Contains(tail, "replaced") && !strings.Contains(tail, "gone") {
		t.Fatalf("the old producer exited %d, last line %q; want 1 naming the stream replaced or gone", code, tail)
	}
	for _, b := range late {
		if _, err := os.Stat(filepath.Join(staging, b, "_SEALED")); err != nil {
			t.Errorf("the old producer's batch %s is no longer staged (%v): lost", b, err)
		}
	}

	// The new stream, with a producer of the same id, goes on past the
	// old stream's versions.
	_, staging2, _ := prdStaging(t)
	var fresh []string
	for i := 1; i <= 12; i++ {
		fresh = append(fresh, fmt.Sprintf("b-%03d", i))
		prdStageSmall(t, staging2, fresh[i-1])
	}
	prdMust(t, bin, "run", "--once", "--store", url, "--staging", staging2, "--producer-id", "rp")
	_, l := prdOpen(t, url)
	st := prdLoad(t, l)
	if h, _ := st.Head(); h != int64(len(fresh)-1) {
		t.Fatalf("new stream's head %d, want %d", h, len(fresh)-1)
	}
	for _, tgb := range st.Steps {
		if want := fresh[tgb.Step]; tgb.Batch != want {
			t.Errorf("new stream's step %d is batch %q, want %q", tgb.Step, tgb.Batch, want)
		}
	}
	prdMust(t, bin, "verify", "--store", url)
	prdMust(t, bin, "status", "--store", url)

	// The old mount: degraded, its view never extended or mixed.
	waitFor(t, time.Minute, "/health to say the stream was replaced", func() bool {
		code, body := srGet(t, addr, "/health")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "stream replaced; remount")
	})
	entries, err := os.ReadDir(filepath.Join(mnt, "steps"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(oldBatches) {
		t.Errorf("the old mount lists %d steps, want its %d: it took the new stream's versions\nold producer:\n%s\nmount:\n%s", len(entries), len(oldBatches), old.tail(), m.stderr)
	}
	for n, b := range oldBatches {
		srCheckStep(t, mnt, n, b, false)
	}
	if head, _ := os.ReadFile(filepath.Join(mnt, "head")); strings.TrimSpace(string(head)) != fmt.Sprint(len(oldBatches)-1) {
		t.Errorf("the old mount's head is %q, want %d", head, len(oldBatches)-1)
	}

	// A fresh mount reads the new stream.
	mnt2 := t.TempDir()
	m2 := mntStartMount(t, mbin, "--store", url, mnt2)
	mntWaitMounted(t, m2, mnt2)
	t.Cleanup(func() { srStop(t, m2) })
	for n, b := range fresh {
		srCheckStep(t, mnt2, n, b, true)
	}
}

// srCheckStep reads step n's files: batch's bytes, or, where sound is
// false, an error (the old stream's objects are gone); never other bytes.
func srCheckStep(t *testing.T, mnt string, n int, batch string, sound bool) {
	t.Helper()
	for r := range 2 {
		p := filepath.Join(mnt, "steps", fmt.Sprint(n), fmt.Sprintf("rank-%d", r), "a.bin")
		got, err := os.ReadFile(p)
		want := mntContent(batch, r, "a.bin", 1000)
		switch {
		case err == nil && !bytes.Equal(got, want):
			t.Errorf("%s: %d bytes that are not batch %s's", p, len(got), batch)
		case err != nil && sound:
			t.Errorf("%s: %v", p, err)
		}
	}
}

func srGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// srStop stops a mount with SIGINT and waits for its clean exit.
func srStop(t *testing.T, m *mntMountProc) {
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(os.Interrupt)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		t.Errorf("lakefs-mount did not stop on SIGINT:\n%s", m.stderr)
	}
}
