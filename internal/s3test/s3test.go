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
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/testproc"
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
	*testproc.Proc
	Endpoint  string // http://127.0.0.1:port
	Dir       string
	AccessKey string
	SecretKey string
	buckets   atomic.Int64
}

// Binary finds versitygw: $VERSITYGW, $LAKEFS_TOOLS/bin, the repository's
// .tools/bin, then PATH.
func Binary() (string, error) { return testproc.Find("VERSITYGW", "bin/versitygw") }

// Start starts a server with a temp data dir, stopped when t ends. It sets
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION for the test, so it
// cannot be used from parallel tests.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWithCredentials(t, AccessKey, SecretKey)
}

// SetEnv gives the test's environment (and the processes it starts) the
// credentials access and secret and Region, and nothing from the
// machine's AWS config: any S3 server the test starts, not only
// versitygw, is reached with them.
func SetEnv(t testing.TB, access, secret string) {
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
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
	SetEnv(t, access, secret)
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
	// CPUs, if set, confines the server to these CPUs (a taskset list,
	// "0" or "0-3"), as a cloud store serves from machines of its own.
	CPUs string
}

// Launch starts versitygw on a free 127.0.0.1 port and waits until it
// listens. It keeps connections alive, as cloud stores do (versitygw's
// default answers every request with Connection: close). The caller
// stops it with Stop.
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
	bin, pre := o.Bin, []string(nil)
	if o.CPUs != "" {
		bin, pre = "taskset", []string{"-c", o.CPUs, o.Bin}
	}
	p, err := testproc.Launch(testproc.Options{Name: "versitygw", Bin: bin, Log: o.Log, Args: func(addr string) []string {
		return append(pre, "--access", o.AccessKey, "--secret", o.SecretKey, "--region", Region, "--port", addr, "--quiet", "--keep-alive", "posix", o.Dir)
	}})
	if err != nil {
		return nil, err
	}
	return &Server{Proc: p, Endpoint: "http://" + p.Addr, Dir: o.Dir, AccessKey: o.AccessKey, SecretKey: o.SecretKey}, nil
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
