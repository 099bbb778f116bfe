package store_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/internal/gcstest"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/store/storetest"
)

func TestGCSConformance(t *testing.T) {
	srv := gcstest.Start(t)
	open := func(t *testing.T) store.Store {
		s, err := store.Open(t.Context(), srv.NewBucketURL(t))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("direct", func(t *testing.T) { storetest.Run(t, open) })
	// The wrapper the crash tests inject faults with must be transparent
	// over GCS too.
	t.Run("fault-wrapper", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return store.NewFaulty(open(t), 1) })
	})
}

// gcsStub is a GCS JSON API server for the answers fake-gcs-server cannot
// give: open's listing succeeds, every other request goes to answer,
// which sees the attempt's number (from 1) among the requests for its
// path.
func gcsStub(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, attempt int)) (url string, agents *[]string) {
	var mu sync.Mutex
	seen := map[string]int{}
	agents = new([]string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*agents = append(*agents, r.Header.Get("User-Agent"))
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		mu.Unlock()
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/o") && r.URL.Query().Get("delimiter") == "/" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"storage#objects"}`))
			return
		}
		answer(w, r, n)
	}))
	t.Cleanup(srv.Close)
	return "gs://bkt/p?endpoint=" + srv.URL, agents
}

func gcsError(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"errors":[{"reason":%q,"message":%q}]}}`, code, msg, reason, msg)
}

// TestGCSErrorMapping: throttling and 5xx after the SDK's retries are
// ErrUnavailable (producers wait, mounts ride out), in one line; a
// conditional create whose first attempt got a 503 and whose retry got
// 412 (the first had landed) is ErrExists, which the commit path resolves
// by reading back; 401/403 are ErrCredentials.
func TestGCSErrorMapping(t *testing.T) {
	ctx := t.Context()
	t.Run("429 is unavailable", func(t *testing.T) {
		u, _ := gcsStub(t, func(w http.ResponseWriter, r *http.Request, _ int) {
			gcsError(w, http.StatusTooManyRequests, "rateLimitExceeded", "The object exceeded the rate limit.")
		})
		s, err := store.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Stat(ctx, "k")
		if !errors.Is(err, store.ErrUnavailable) || !store.Transient(err) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("stat answered 429: %v; want ErrUnavailable in one line", err)
		}
		err = store.PutBytes(ctx, s, "k", []byte("x"))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("put answered 429: %v; want ErrUnavailable", err)
		}
	})
	t.Run("503 then 412 is exists", func(t *testing.T) {
		var attempts atomic.Int32
		u, _ := gcsStub(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Method != http.MethodPost || r.URL.Query().Get("ifGenerationMatch") != "0" {
				t.Errorf("create sent %s %s; want a POST with ifGenerationMatch=0", r.Method, r.URL)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			attempts.Add(1)
			if n == 1 {
				gcsError(w, http.StatusServiceUnavailable, "backendError", "Backend Error")
				return
			}
			gcsError(w, http.StatusPreconditionFailed, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")
		})
		s, err := store.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		err = store.CreateBytes(ctx, s, "_log/00000001", []byte("version"))
		if !errors.Is(err, store.ErrExists) || attempts.Load() != 2 {
			t.Fatalf("create: %v after %d attempts; want ErrExists after 2 (the SDK's retry answered 412)", err, attempts.Load())
		}
	})
	t.Run("403 is credentials", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gcsError(w, http.StatusForbidden, "forbidden", "caller does not have storage.objects.list access")
		}))
		defer srv.Close()
		_, err := store.Open(ctx, "gs://bkt/p?endpoint="+srv.URL)
		if !errors.Is(err, store.ErrCredentials) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "roles/storage.objectAdmin") {
			t.Fatalf("open answered 403: %v; want ErrCredentials in one line naming the role", err)
		}
	})
}

// TestGCSUserAgent: every request names the binary and its version.
func TestGCSUserAgent(t *testing.T) {
	u, agents := gcsStub(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		gcsError(w, http.StatusNotFound, "notFound", "No such object")
	})
	s, err := store.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stat: %v; want ErrNotFound", err)
	}
	checkAgents(t, *agents)
}

// checkAgents asserts that every request carried this binary's
// "<name>/<version>" (a test binary is store.test).
func checkAgents(t *testing.T, agents []string) {
	t.Helper()
	if len(agents) == 0 {
		t.Fatal("no requests seen")
	}
	for _, a := range agents {
		if !strings.Contains(a, "store.test/") {
			t.Fatalf("a request's User-Agent is %q; want it to name the binary (store.test/<version>)", a)
		}
	}
}

// TestGCSNoCredentials: without Application Default Credentials the open
// fails in one line that says where they are looked for.
func TestGCSNoCredentials(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(home, "missing.json"))
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1") // no metadata server
	_, err := store.Open(t.Context(), "gs://some-bucket/p")
	if !errors.Is(err, store.ErrCredentials) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS") {
		t.Fatalf("open without credentials: %v; want ErrCredentials in one line naming GOOGLE_APPLICATION_CREDENTIALS", err)
	}
}

// TestGCSKeyContent: a service-account key given as content (the CSI
// driver's way, from a volume's secret) is used, and a broken one fails
// the open in one line naming the variable, without quoting it.
func TestGCSKeyContent(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS_JSON", `{"type":"service_account","private_key":"SECRET-not-a-key"`)
	_, err := store.Open(t.Context(), "gs://some-bucket/p")
	if !errors.Is(err, store.ErrCredentials) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "SECRET") ||
		!strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS_JSON") {
		t.Fatalf("open with a broken key: %v; want ErrCredentials in one line naming the variable and not quoting it", err)
	}
}
