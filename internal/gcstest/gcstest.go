// Package gcstest starts fake-gcs-server, a GCS emulator, on 127.0.0.1 for
// tests. Under CI (CI set in the environment) a missing binary is a test
// failure; elsewhere the test is skipped with the install command.
package gcstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/lakestream/lakestream/internal/testproc"
)

// InstallHint is how to get the server binary.
const InstallHint = "make tools (or: GOBIN=$PWD/.tools/bin go install github.com/fsouza/fake-gcs-server@v1.56.1)"

// Server is a running fake-gcs-server.
type Server struct {
	*testproc.Proc
	Endpoint string // http://127.0.0.1:port
	buckets  atomic.Int64
}

// Options configure Launch.
type Options struct {
	// Dir, when set, keeps the objects in files under it (the filesystem
	// backend), so that they outlive a restart; else they are in memory.
	Dir string
	Log io.Writer
}

// Binary finds fake-gcs-server: $FAKE_GCS_SERVER, $LAKEFS_TOOLS/bin,
// the repository's .tools/bin, then PATH.
func Binary() (string, error) { return testproc.Find("FAKE_GCS_SERVER", "bin/fake-gcs-server") }

// Start starts a server with its objects in memory, stopped when t ends.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := Binary(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("fake-gcs-server not found under CI: %v; install it with %s", err, InstallHint)
		}
		t.Skipf("fake-gcs-server not found (%v); install it with %s", err, InstallHint)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", "") // URLs name the server with endpoint=
	s, err := Launch(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(syscall.SIGTERM) })
	return s
}

// Launch starts a server on a free port; the caller stops it.
func Launch(o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("fake-gcs-server not found (install it with %s): %w", InstallHint, err)
	}
	if o.Log == nil {
		o.Log = io.Discard // it logs every request
	}
	p, err := testproc.Launch(testproc.Options{Name: "fake-gcs-server", Bin: bin, Log: o.Log, Args: func(addr string) []string {
		host, port, _ := strings.Cut(addr, ":")
		args := []string{"-scheme", "http", "-host", host, "-port", port, "-external-url", "http://" + addr, "-log-level", "error"}
		if o.Dir != "" {
			return append(args, "-backend", "filesystem", "-filesystem-root", o.Dir)
		}
		return append(args, "-backend", "memory")
	}})
	if err != nil {
		return nil, err
	}
	return &Server{Proc: p, Endpoint: "http://" + p.Addr}, nil
}

// NewBucket creates a fresh bucket and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("b%d-%s", s.buckets.Add(1), hex.EncodeToString(rnd[:]))
	if err := s.CreateBucket(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// CreateBucket creates bucket name through the JSON API.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	body, _ := json.Marshal(map[string]string{"name": name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint+"/storage/v1/b?project=test", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("creating bucket %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("creating bucket %s: HTTP %d: %s", name, resp.StatusCode, msg)
	}
	return nil
}

// URL returns a store URL for bucket/prefix on this server.
func (s *Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("gs://%s/%s?endpoint=%s", bucket, strings.Trim(prefix, "/"), s.Endpoint)
}

// NewBucketURL creates a fresh bucket and returns a store URL for it with
// a prefix, so that prefix handling is always exercised.
func (s *Server) NewBucketURL(t testing.TB) string { return s.URL(s.NewBucket(t), "stream") }

// Env is this process's environment without Google credentials or an
// emulator host, for a child process that is given the server in its
// store URL.
func (s *Server) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOOGLE_APPLICATION_CREDENTIALS=") && !strings.HasPrefix(kv, "STORAGE_EMULATOR_HOST=") {
			env = append(env, kv)
		}
	}
	return env
}
