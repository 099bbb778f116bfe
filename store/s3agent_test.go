package store_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
)

// TestS3UserAgent: every S3 request names the binary and its version, so
// a bucket's access logs tell the mount's reads from the producer's.
func TestS3UserAgent(t *testing.T) {
	s3test.Start(t) // for its credentials in the environment
	var mu sync.Mutex
	var agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		agents = append(agents, r.Header.Get("User-Agent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>`))
	}))
	defer srv.Close()
	s, err := store.Open(t.Context(), "s3://bkt/p?endpoint="+srv.URL+"&path-style=true")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(t.Context(), "", "", 10); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	checkAgents(t, agents)
}
