package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/s3test"
)

// TestGCAbortsStaleUploads: gc --dry-run names the multipart upload a killed
// producer left under data/, and gc aborts it.
func TestGCAbortsStaleUploads(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	url := srv.URL(bucket, "stream")
	if code, _, stderr := invoke(t, "init", "--store", url, "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	c := srv.Client()
	key := aws.String("stream/data/p0/1/3/tgb.pack")
	mp, err := c.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.UploadPart(t.Context(), &s3.UploadPartInput{Bucket: aws.String(bucket), Key: key, UploadId: mp.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(make([]byte, 1<<20))})
	if err != nil {
		t.Fatal(err)
	}
	uploads := func() int {
		out, err := c.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Uploads)
	}

	code, out, stderr := invoke(t, "gc", "--store", url, "--grace", "0s", "--dry-run")
	if code != 0 || !strings.Contains(out, "would abort stale multipart upload: data/p0/1/3/tgb.pack (begun ") || uploads() != 1 {
		t.Fatalf("gc --dry-run: exit %d, stdout %q, stderr %q, %d uploads left (want 1)", code, out, stderr, uploads())
	}
	code, out, stderr = invoke(t, "gc", "--store", url, "--grace", "0s")
	if code != 0 || !strings.Contains(out, "aborted stale multipart upload: data/p0/1/3/tgb.pack") || uploads() != 0 {
		t.Fatalf("gc: exit %d, stdout %q, stderr %q, %d uploads left (want 0)", code, out, stderr, uploads())
	}
}
