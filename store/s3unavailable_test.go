package store_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
)

// TestS3UnavailableIsTransient: a server that answers but cannot serve
// (503 SlowDown, as SeaweedFS while it cannot write, or S3 throttling) is
// ErrUnavailable, which store.Transient reports (producers wait it out),
// and is neither unreachable nor not-found; a server that is not there is
// transient too; a missing bucket is not.
func TestS3UnavailableIsTransient(t *testing.T) {
	srv := s3test.Start(t) // for its credentials in the environment
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
	}))
	defer busy.Close()
	_, err := store.Open(t.Context(), "s3://bucket-x/p?endpoint="+busy.URL+"&path-style=true")
	if !errors.Is(err, store.ErrUnavailable) || !store.Transient(err) || errors.Is(err, store.ErrUnreachable) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("open against a server answering 503: %v; want ErrUnavailable, transient", err)
	}
	_, err = store.Open(t.Context(), "s3://bucket-x/p?endpoint=http://127.0.0.1:1&path-style=true")
	if !store.Transient(err) {
		t.Fatalf("open of an endpoint nobody listens on: %v; want transient", err)
	}
	_, err = store.Open(t.Context(), srv.URL("no-such-bucket", "p"))
	if store.Transient(err) {
		t.Fatalf("open of a missing bucket: %v; want not transient (waiting cannot create it)", err)
	}
}
