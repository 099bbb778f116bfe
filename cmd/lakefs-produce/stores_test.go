package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/internal/aztest"
	"github.com/lakestream/lakestream/internal/gcstest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// conditional tells a conditional create: If-None-Match: * (S3, Azure)
// or ifGenerationMatch=0 (GCS).
func conditional(r *http.Request) bool {
	return r.Header.Get("If-None-Match") == "*" || r.URL.Query().Get("ifGenerationMatch") == "0"
}

// brokenStore puts a proxy before the server at endpoint that breaks its
// conditional creates in one of two ways, and returns the proxy's
// endpoint: "two-win" makes a losing create look like a win (a 412 or 409
// answered as 200, or on GCS the condition dropped from the request, so
// the second write replaces the first); "501" answers every conditional
// create 501 Not Implemented, as Backblaze B2 was reported to.
func brokenStore(t *testing.T, endpoint, mode string) string {
	up, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: up.Scheme, Host: up.Host})
	rp.ModifyResponse = func(resp *http.Response) error {
		if mode == "two-win" && conditional(resp.Request) && (resp.StatusCode == http.StatusPreconditionFailed || resp.StatusCode == http.StatusConflict) {
			resp.StatusCode, resp.Status = http.StatusCreated, "201 Created"
			resp.Body, resp.ContentLength = http.NoBody, 0
			resp.Header.Del("Content-Length")
			resp.Header.Del("x-ms-error-code")
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conditional(r) {
			switch {
			case mode == "501":
				http.Error(w, "conditional writes are not implemented", http.StatusNotImplemented)
				return
			case mode == "two-win" && r.URL.Query().Has("ifGenerationMatch"):
				q := r.URL.Query()
				q.Del("ifGenerationMatch")
				r.URL.RawQuery = q.Encode()
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.Replace(endpoint, up.Host, strings.TrimPrefix(srv.URL, "http://"), 1)
}

// TestInitRefusesStoreWithoutAtomicCreate: on every backend, init runs
// the create-if-absent probe and refuses, in one line naming the store
// and the cause, a store that lets two creates of one key win or answers
// a conditional create 501; it writes no stream there. Through the
// unbroken server the same init succeeds.
func TestInitRefusesStoreWithoutAtomicCreate(t *testing.T) {
	// Each kind's server and a function from it to a fresh stream URL.
	servers := []struct {
		kind  string
		start func(t *testing.T) (endpoint string, newURL func(t *testing.T) string)
	}{
		{"s3", func(t *testing.T) (string, func(*testing.T) string) {
			srv := s3test.Start(t)
			return srv.Endpoint, func(t *testing.T) string { return srv.NewBucketURL(t) }
		}},
		{"gs", func(t *testing.T) (string, func(*testing.T) string) {
			srv := gcstest.Start(t)
			return srv.Endpoint, func(t *testing.T) string { return srv.NewBucketURL(t) }
		}},
		{"az", func(t *testing.T) (string, func(*testing.T) string) {
			srv := aztest.Start(t)
			return srv.Endpoint, func(t *testing.T) string { return srv.NewBucketURL(t) }
		}},
	}
	for _, sv := range servers {
		t.Run(sv.kind, func(t *testing.T) {
			endpoint, newURL := sv.start(t)
			for _, mode := range []string{"two-win", "501"} {
				good := newURL(t)
				u := strings.Replace(good, endpoint, brokenStore(t, endpoint, mode), 1)
				code, _, stderr := invoke(t, "init", "--store", u, "--ranks", "1")
				line := strings.TrimSpace(stderr)
				if code == 0 || !strings.Contains(line, "create-if-absent") || !strings.Contains(line, store.Redact(u)) || strings.Contains(line, "\n") {
					t.Errorf("init through a store whose creates are broken (%s): exit %d, %q; want one line naming the store and the probe's finding", mode, code, line)
				}
				s, err := store.Open(t.Context(), good)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Stat(t.Context(), txn.StreamKey); err == nil {
					t.Errorf("%s: init wrote %s on a store it refused", mode, txn.StreamKey)
				}
				t.Logf("%s: exit %d: %s", mode, code, line)
			}
			if code, _, stderr := invoke(t, "init", "--store", newURL(t), "--ranks", "1"); code != 0 {
				t.Fatalf("init on the server itself: exit %d, %s", code, stderr)
			}
		})
	}
}
