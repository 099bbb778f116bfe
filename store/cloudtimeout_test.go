package store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/aztest"
	"github.com/lakestream/lakestream/store"
)

// TestCloudTimeouts: the GCS and Azure backends have S3's per-request
// timeouts on their transport: a server that takes the request and never
// answers fails it after the first-byte timeout as ErrUnreachable (a
// transient store failure), and the SDK does not send it again (its
// callers retry).
func TestCloudTimeouts(t *testing.T) {
	const firstByte = 500 * time.Millisecond
	t.Setenv("AZURE_STORAGE_KEY", aztest.Key)
	for _, tc := range []struct {
		name   string
		isOpen func(r *http.Request) bool // open's listing, which is answered
		list   string                     // its answer
		open   func(ctx context.Context, endpoint string) (store.Store, error)
	}{
		{"gs", func(r *http.Request) bool { return r.URL.Query().Get("delimiter") == "/" }, `{"kind":"storage#objects"}`,
			func(ctx context.Context, endpoint string) (store.Store, error) {
				return store.OpenGCS(ctx, store.GCSOptions{Bucket: "bkt", Prefix: "p", Endpoint: endpoint, Timeouts: store.Timeouts{FirstByte: firstByte}})
			}},
		{"az", func(r *http.Request) bool { return r.URL.Query().Get("comp") == "list" },
			`<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs></Blobs><NextMarker/></EnumerationResults>`,
			func(ctx context.Context, endpoint string) (store.Store, error) {
				return store.OpenAzure(ctx, store.AzureOptions{Account: aztest.Account, Container: "ctr", Prefix: "p", Endpoint: endpoint + "/" + aztest.Account,
					Timeouts: store.Timeouts{FirstByte: firstByte}})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hung atomic.Int32
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.isOpen(r) {
					_, _ = w.Write([]byte(tc.list))
					return
				}
				hung.Add(1)
				<-release
			}))
			defer srv.Close()
			defer close(release)
			s, err := tc.open(t.Context(), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			_, err = s.Stat(t.Context(), "k")
			took := time.Since(began)
			if !errors.Is(err, store.ErrUnreachable) || !store.Transient(err) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("stat against a server that never answers: %v; want ErrUnreachable in one line", err)
			}
			if n := hung.Load(); n != 1 {
				t.Errorf("the request was sent %d times; want once (timeouts are not retried by the SDK)", n)
			}
			t.Logf("%s: gave up after %s: %v", tc.name, took.Round(time.Millisecond), err)
		})
	}
}
