package store

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"cloud.google.com/go/auth"
)

// TestGCSTokenRefusedMidRun (issue 55 item 11): a key revoked after the
// store was opened fails the next request as ErrCredentials naming the
// source, not as an unreachable store a producer would wait for. (The
// open's side runs against a real token endpoint in
// TestGCSTokenEndpointFailures.)
func TestGCSTokenRefusedMidRun(t *testing.T) {
	s := &gcsStore{name: "bkt", endpoint: "GCS", cred: "GOOGLE_APPLICATION_CREDENTIALS (/k.json)"}
	refused := &auth.Error{
		Response: &http.Response{StatusCode: http.StatusBadRequest, Request: httptest.NewRequest(http.MethodPost, "https://oauth2.googleapis.com/token", nil)},
		Body:     []byte(`{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`),
	}
	err := s.classify(context.Background(), "get", "k", &url.Error{Op: "Get",
		URL: "https://storage.googleapis.com/storage/v1/b/bkt/o/k?alt=json", Err: &tokenError{err: refused}})
	if !errors.Is(err, ErrCredentials) || Transient(err) || !strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS") ||
		!strings.Contains(err.Error(), "https://oauth2.googleapis.com/token") || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("get with the key refused: %v; want ErrCredentials, not transient, naming the source and the token endpoint", err)
	}
}
