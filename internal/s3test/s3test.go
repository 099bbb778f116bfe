// Package s3test starts a real S3-compatible server (versitygw) on 127.0.0.1:
// Start for tests, Launch for the benchmark report, which runs outside a
// test. Under CI (CI set in the environment) a missing server binary is a
// test failure; elsewhere the test is skipped with the install command.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/listen"
)

// Credentials the test server is started with; tests export them so that the
// standard AWS chain picks them up.
const (
	AccessKey = "lakestream-test"
	SecretKey = "lakestream-test-secret"
	Region    = "us-east-1"
)

// InstallHint is how to get the server binary.
const InstallHint = "make tools (or: GOBIN=$PWD/.tools/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)"

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:port
	Dir       string
	AccessKey string
	SecretKey string
	bin       string
	addr      string
	log       io.Writer
	buckets   atomic.Int64

	mu  sync.Mutex
	cmd *exec.Cmd // GUARDED_BY(mu); nil while stopped
}

// Binary finds versitygw: $VERSITYGW, $LAKEFS_TOOLS/bin, the repository's
// .tools/bin, then PATH.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("LAKEFS_TOOLS"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		dirs = append(dirs, filepath.Join(filepath.Dir(file), "..", "..", ".tools", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("versitygw")
}

// Start starts a server with a temp data dir, stopped when t ends. It sets
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION for the test, so it
// cannot be used from parallel tests.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWithCredentials(t, AccessKey, SecretKey)
}

// StartWithCredentials is Start with the server's access and secret key;
// the environment gets them too.
func StartWithCredentials(t testing.TB, access, secret string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("versitygw not found under CI: %v; install it with %s", err, InstallHint)
		}
		t.Skipf("versitygw not found (%v); install it with %s", err, InstallHint)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	s, err := Launch(LaunchOptions{Bin: bin, Dir: t.TempDir(), AccessKey: access, SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(syscall.SIGTERM) })
	return s
}

// LaunchOptions configure Launch. Zero fields take the defaults named.
type LaunchOptions struct {
	Bin                  string    // the versitygw binary (default: Binary())
	Dir                  string    // its data directory; required
	AccessKey, SecretKey string    // its credentials (default: AccessKey, SecretKey)
	Log                  io.Writer // its output (default: os.Stderr)
}

// Launch starts versitygw on a free 127.0.0.1 port and waits until it
// listens. The port is free when picked but another process may take it
// first, so a server that does not come up is tried twice more on a new
// port. The caller stops it with Stop.
func Launch(o LaunchOptions) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("s3test.Launch: no data directory")
	}
	if o.Bin == "" {
		bin, err := Binary()
		if err != nil {
			return nil, fmt.Errorf("versitygw not found (install it with %s): %w", InstallHint, err)
		}
		o.Bin = bin
	}
	if o.AccessKey == "" {
		o.AccessKey, o.SecretKey = AccessKey, SecretKey
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	for attempt := 0; ; attempt++ {
		addr, err := listen.FreeAddr()
		if err != nil {
			return nil, err
		}
		s := &Server{Endpoint: "http://" + addr, Dir: o.Dir, AccessKey: o.AccessKey, SecretKey: o.SecretKey,
			bin: o.Bin, addr: addr, log: o.Log}
		if err := s.start(); err != nil {
			return nil, err
		}
		if waitListening(addr, 15*time.Second) {
			return s, nil
		}
		s.Stop(syscall.SIGTERM)
		if attempt == 2 {
			return nil, fmt.Errorf("versitygw did not start listening on %s", addr)
		}
	}
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", Region,
		"--port", s.addr, "--quiet", "posix", s.Dir)
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting versitygw %s (install it with %s): %w", s.bin, InstallHint, err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	return nil
}

// Stop stops the server with sig (SIGKILL: a crash; SIGTERM: a clean stop,
// escalated to SIGKILL after 5s) and waits for it to exit. Its data stays
// for Restart.
func (s *Server) Stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped server again on the same port and data, as an
// operator restarts a crashed S3 server.
func (s *Server) Restart() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return fmt.Errorf("versitygw on %s is running", s.addr)
	}
	if err := s.start(); err != nil {
		return err
	}
	if !waitListening(s.addr, 15*time.Second) {
		return fmt.Errorf("restarted versitygw did not listen on %s within 15s", s.addr)
	}
	return nil
}

// waitListening polls until addr accepts connections. A server that
// exits early (say, the port was taken) is noticed by the deadline.
func waitListening(addr string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return true
		}
	}
	return false
}

// Client returns a raw S3 client for the server.
func (s *Server) Client() *s3.Client { return NewClient(s.Endpoint, s.AccessKey, s.SecretKey) }

// NewClient is a raw path-style S3 client for the S3 server at endpoint
// (this package's or another, such as SeaweedFS's gateway), with checksums
// only where an operation requires them, as the store's client sends.
func NewClient(endpoint, access, secret string) *s3.Client {
	cfg, _ := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(access, secret, "")))
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
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

// CreateBucket creates bucket name.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", name, err)
	}
	return nil
}

// Env is this process's environment with the server's credentials in
// place of any AWS settings, for a child process that reaches the server
// through the standard AWS chain.
func (s *Server) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_ACCESS_KEY_ID=") && !strings.HasPrefix(kv, "AWS_SECRET_ACCESS_KEY=") &&
			!strings.HasPrefix(kv, "AWS_REGION=") && !strings.HasPrefix(kv, "AWS_PROFILE=") &&
			!strings.HasPrefix(kv, "AWS_CONFIG_FILE=") && !strings.HasPrefix(kv, "AWS_SHARED_CREDENTIALS_FILE=") {
			env = append(env, kv)
		}
	}
	none := filepath.Join(os.TempDir(), "lakestream-no-aws-config")
	return append(env, "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey,
		"AWS_REGION="+Region, "AWS_PROFILE=", "AWS_CONFIG_FILE="+none, "AWS_SHARED_CREDENTIALS_FILE="+none)
}

// URL returns a store URL for bucket/prefix on this server.
func (s *Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&path-style=true&region=%s",
		bucket, strings.Trim(prefix, "/"), s.Endpoint, Region)
}

// NewBucketURL creates a fresh bucket and returns a store URL for it with a
// prefix, so that prefix handling is always exercised.
func (s *Server) NewBucketURL(t testing.TB) string {
	return s.URL(s.NewBucket(t), "stream")
}

// Signal sends sig to the running server without waiting for it to exit:
// SIGSTOP hangs it (connections accepted, never answered), SIGCONT
// resumes it.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("versitygw on %s is not running", s.addr)
	}
	return s.cmd.Process.Signal(sig)
}
