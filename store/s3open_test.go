package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
)

// TestS3OpenMistakes: each ordinary mistake opening an S3 store is one line
// naming the cause and the fix, classified, without the SDK's RequestID or
// HostID trailer; a bad bucket name is refused before any request.
func TestS3OpenMistakes(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	cases := []struct {
		name     string
		env      map[string]string
		url      string
		sentinel error
		says     string
	}{
		{"wrong access key", map[string]string{"AWS_ACCESS_KEY_ID": "nobody"}, srv.URL(bucket, "p"), store.ErrCredentials, "does not know the access key"},
		{"wrong secret", map[string]string{"AWS_SECRET_ACCESS_KEY": "wrong"}, srv.URL(bucket, "p"), store.ErrCredentials, "secret key (AWS_SECRET_ACCESS_KEY) does not match"},
		{"no credentials", map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_EC2_METADATA_DISABLED": "true"}, srv.URL(bucket, "p"), store.ErrCredentials, "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"bucket name", nil, srv.URL("b", "p"), store.ErrInvalid, "bucket names are 3-63 characters"},
		{"missing bucket", nil, srv.URL("no-such-bucket", "p"), store.ErrNotFound, "does not exist"},
		// Port 1 on loopback: nothing listens there.
		{"unreachable endpoint", nil, "s3://" + bucket + "/p?endpoint=http://127.0.0.1:1&path-style=true", store.ErrUnreachable,
			"cannot reach the S3 endpoint http://127.0.0.1:1 (dial tcp 127.0.0.1:1: connect: connection refused); check that the server is running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := store.Open(t.Context(), c.url)
			if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v; want %v saying %q", err, c.sentinel, c.says)
			}
			for _, noise := range []string{"RequestID", "HostID", "https", "StatusCode", "\n"} {
				if strings.Contains(err.Error(), noise) {
					t.Fatalf("%q contains %q", err, noise)
				}
			}
		})
	}
}

// TestS3OpenWithoutEndpoint: a URL without endpoint= goes to AWS; whether
// AWS is reachable from here or not, the one line says so and how to name
// another server.
func TestS3OpenWithoutEndpoint(t *testing.T) {
	s3test.Start(t) // for its credentials in the environment
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	_, err := store.Open(t.Context(), "s3://lakestream-no-endpoint-test/p")
	if err == nil {
		t.Fatal("opened a bucket on AWS with test credentials")
	}
	t.Log(err)
	for _, want := range []string{"no endpoint=", "add endpoint=http://host:port"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not say %q", err, want)
		}
	}
	for _, noise := range []string{"RequestID", "HostID", "StatusCode", "\n"} {
		if strings.Contains(err.Error(), noise) {
			t.Fatalf("%q contains %q", err, noise)
		}
	}
}

// TestS3HTTPSEndpointOnHTTPServer (issue 47 item 10): an https:// endpoint=
// pointed at a plain HTTP server is a configuration error, refused at once
// with one line saying to use http://, not retried as an unreachable store.
func TestS3HTTPSEndpointOnHTTPServer(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/p?endpoint=" + strings.Replace(srv.Endpoint, "http://", "https://", 1) + "&path-style=true"
	_, err := store.Open(t.Context(), url)
	if !errors.Is(err, store.ErrInvalid) || store.Transient(err) || !strings.Contains(err.Error(), "use an http:// endpoint=") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("https:// endpoint on an HTTP server: %v (Transient %v); want ErrInvalid saying to use http://", err, store.Transient(err))
	}
}
