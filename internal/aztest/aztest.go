// Package aztest starts Azurite, the Azure Storage emulator, on 127.0.0.1
// for tests (its blob service only). Under CI (CI set in the environment)
// a missing binary is a test failure; elsewhere the test is skipped with
// the install command.
package aztest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/lakestream/lakestream/internal/testproc"
)

// InstallHint is how to get the server.
const InstallHint = "make tools (or: npm install --prefix .tools/azurite azurite@3.35.0)"

// Account and Key are Azurite's well-known development account and its
// shared key (public, documented by Microsoft; not a secret).
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Server is a running Azurite blob service.
type Server struct {
	*testproc.Proc
	// Endpoint is the account's service URL, path-style:
	// http://127.0.0.1:port/devstoreaccount1.
	Endpoint   string
	Dir        string // Azurite's --location; "" when in memory
	containers atomic.Int64
}

// Options configure Launch.
type Options struct {
	// Persist keeps the blobs in files under Dir (--location), so that
	// they outlive a Restart; else they are in memory and Dir is unused.
	Persist bool
	// Dir is the directory of a persistent server; empty: a new
	// temporary directory.
	Dir string
	Log io.Writer
}

// Binary finds azurite-blob: $AZURITE_BLOB, $LAKEFS_TOOLS/azurite/...,
// the repository's .tools/azurite/..., then PATH.
func Binary() (string, error) {
	return testproc.Find("AZURITE_BLOB", "azurite/node_modules/.bin/azurite-blob")
}

// Start starts a server with its blobs in memory, stopped when t ends.
// It puts the well-known key in AZURE_STORAGE_KEY and clears the other
// Azure credential variables for the test's duration, so that stores
// opened from URL authenticate as the emulator's account.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options; a persistent server with no Dir gets
// a t.TempDir().
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if _, err := Binary(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("azurite-blob not found under CI: %v; install it with %s", err, InstallHint)
		}
		t.Skipf("azurite-blob not found (%v); install it with %s", err, InstallHint)
	}
	t.Setenv("AZURE_STORAGE_KEY", Key)
	for _, k := range []string{"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_SAS_TOKEN"} {
		t.Setenv(k, "") // restored when t ends
		os.Unsetenv(k)
	}
	if o.Persist && o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Launch(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(syscall.SIGTERM) })
	return s
}

// Launch starts a server on a free port; the caller stops it (and
// removes Dir when Launch made it).
func Launch(o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("azurite-blob not found (install it with %s): %w", InstallHint, err)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if !o.Persist {
		o.Dir = ""
	} else if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "azurite-"); err != nil {
			return nil, err
		}
	}
	p, err := testproc.Launch(testproc.Options{Name: "azurite-blob", Bin: bin, Log: o.Log, Args: func(addr string) []string {
		host, port, _ := strings.Cut(addr, ":")
		// --skipApiVersionCheck: the SDK speaks a newer service version
		// than the emulator knows, and uses nothing it lacks.
		args := []string{"--blobHost", host, "--blobPort", port, "--skipApiVersionCheck", "--silent"}
		if !o.Persist {
			// Azurite refuses --location with it.
			return append(args, "--inMemoryPersistence")
		}
		return append(args, "--location", o.Dir)
	}})
	if err != nil {
		return nil, err
	}
	return &Server{Proc: p, Endpoint: "http://" + p.Addr + "/" + Account, Dir: o.Dir}, nil
}

// NewBucket creates a container with a fresh name and returns the name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("c%d-%s", s.containers.Add(1), hex.EncodeToString(rnd[:]))
	if err := s.CreateContainer(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// CreateContainer creates container name with the account's key.
func (s *Server) CreateContainer(ctx context.Context, name string) error {
	cred, err := azblob.NewSharedKeyCredential(Account, Key)
	if err != nil {
		return err
	}
	c, err := azblob.NewClientWithSharedKeyCredential(s.Endpoint+"/", cred, nil)
	if err != nil {
		return err
	}
	if _, err := c.CreateContainer(ctx, name, nil); err != nil {
		return fmt.Errorf("creating container %s: %w", name, err)
	}
	return nil
}

// URL returns a store URL for container/prefix on this server.
func (s *Server) URL(container, prefix string) string {
	return fmt.Sprintf("az://%s/%s?account=%s&endpoint=%s", container, strings.Trim(prefix, "/"), Account, s.Endpoint)
}

// NewBucketURL creates a fresh container and returns a store URL for it
// with a prefix, so that prefix handling is always exercised.
func (s *Server) NewBucketURL(t testing.TB) string { return s.URL(s.NewBucket(t), "stream") }

// Env is this process's environment without any AZURE_* variable, plus
// the emulator's key in AZURE_STORAGE_KEY, for a child process that is
// given the server in its store URL.
func (s *Server) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AZURE_") {
			env = append(env, kv)
		}
	}
	return append(env, "AZURE_STORAGE_KEY="+Key)
}

// Stop stops the server. A persistent Azurite keeps its blob index in a
// LokiJS database that it saves every few seconds and on a clean exit, so
// a SIGKILL loses the last seconds' containers and blobs: the emulator's
// limit, not a cloud's. Stop therefore turns SIGKILL into SIGTERM (a
// clean, prompt stop) when the data must outlive a Restart; a crash of
// the store process itself is tested on versitygw and fake-gcs-server.
func (s *Server) Stop(sig syscall.Signal) {
	if s.Dir != "" && sig == syscall.SIGKILL {
		sig = syscall.SIGTERM
	}
	s.Proc.Stop(sig)
}
