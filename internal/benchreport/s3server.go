package benchreport

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Server is a versitygw the report starts on 127.0.0.1 for its runs.
type S3Server struct {
	Endpoint, Region, AccessKey, SecretKey string
	cmd                                    *exec.Cmd
}

// StartS3 starts versitygw (bin) with its data under dir.
func StartS3(bin, dir string) (*S3Server, error) {
	s := &S3Server{Region: "us-east-1", AccessKey: "lakestream-bench", SecretKey: "lakestream-bench-secret"}
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := l.Addr().String()
		l.Close()
		cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
			"--port", addr, "--quiet", "posix", dir)
		// Its log (a line per upload a finished run cuts short) stays
		// out of the progress output.
		if lf, err := os.Create(filepath.Join(filepath.Dir(dir), "versitygw.log")); err == nil {
			defer lf.Close()
			cmd.Stdout, cmd.Stderr = lf, lf
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting versitygw %s (install it with make tools): %w", bin, err)
		}
		s.cmd, s.Endpoint = cmd, "http://"+addr
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
				c.Close()
				return s, nil
			}
		}
		s.Stop()
		if attempt == 2 {
			return nil, fmt.Errorf("versitygw did not start listening on %s", addr)
		}
	}
}

// Stop stops the server.
func (s *S3Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// Env is the environment a child process needs to reach the server with
// the standard AWS chain.
func (s *S3Server) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_ACCESS_KEY_ID=") && !strings.HasPrefix(kv, "AWS_SECRET_ACCESS_KEY=") &&
			!strings.HasPrefix(kv, "AWS_REGION=") && !strings.HasPrefix(kv, "AWS_PROFILE=") {
			env = append(env, kv)
		}
	}
	none := filepath.Join(os.TempDir(), "lakestream-bench-no-aws-config")
	return append(env, "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey,
		"AWS_REGION="+s.Region, "AWS_CONFIG_FILE="+none, "AWS_SHARED_CREDENTIALS_FILE="+none)
}

// URL is a store URL for bucket/prefix on the server.
func (s *S3Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&path-style=true&region=%s", bucket, prefix, s.Endpoint, s.Region)
}

// Client is a raw S3 client for the server.
func (s *S3Server) Client() *s3.Client {
	cfg, _ := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(s.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")))
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.UsePathStyle = true
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
}

// CreateBucket creates bucket name.
func (s *S3Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", name, err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
