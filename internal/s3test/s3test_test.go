package s3test

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestLaunchOutsideATest checks what the benchmark report relies on:
// Launch serves with the credentials it was given (a client signing with
// them creates a bucket), and a stopped server restarts on the same port
// with its data.
func TestLaunchOutsideATest(t *testing.T) {
	if _, err := Binary(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("versitygw not found under CI: %v; install it with %s", err, InstallHint)
		}
		t.Skipf("versitygw not found (%v); install it with %s", err, InstallHint)
	}
	var log bytes.Buffer
	s, err := Launch(LaunchOptions{Dir: t.TempDir(), AccessKey: "bench-key", SecretKey: "bench-secret", Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(syscall.SIGTERM)
	if err := s.CreateBucket(t.Context(), "kept"); err != nil {
		t.Fatal(err)
	}
	s.Stop(syscall.SIGKILL)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String("kept")}); err != nil {
		t.Fatalf("bucket after restart: %v", err)
	}
}
