package store_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/internal/gcstest"
	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/store/storetest"
)

func TestGCSConformance(t *testing.T) {
	srv := gcstest.Start(t)
	open := func(t *testing.T) store.Store {
		s, err := store.Open(t.Context(), srv.NewBucketURL(t))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("direct", func(t *testing.T) { storetest.Run(t, open) })
	// The wrapper the crash tests inject faults with must be transparent
	// over GCS too.
	t.Run("fault-wrapper", func(t *testing.T) {
		longtest.Skip(t, "the conformance suite again through the fault wrapper")
		storetest.Run(t, func(t *testing.T) store.Store { return store.NewFaulty(open(t), 1) })
	})
}

// gcsStub is a GCS JSON API server for the answers fake-gcs-server cannot
// give: open's listing succeeds, every other request goes to answer,
// which sees the attempt's number (from 1) among the requests for its
// path.
func gcsStub(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, attempt int)) (url string, agents *[]string) {
	var mu sync.Mutex
	seen := map[string]int{}
	agents = new([]string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*agents = append(*agents, r.Header.Get("User-Agent"))
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		mu.Unlock()
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/o") && r.URL.Query().Get("delimiter") == "/" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"storage#objects"}`))
			return
		}
		answer(w, r, n)
	}))
	t.Cleanup(srv.Close)
	return "gs://bkt/p?endpoint=" + srv.URL, agents
}

func gcsError(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"errors":[{"reason":%q,"message":%q}]}}`, code, msg, reason, msg)
}

// TestGCSErrorMapping: throttling and 5xx after the SDK's retries are
// ErrUnavailable (producers wait, mounts ride out), in one line; a
// conditional create whose first attempt got a 503 and whose retry got
// 412 (the first had landed) is ErrExists, which the commit path resolves
// by reading back; 401/403 are ErrCredentials.
func TestGCSErrorMapping(t *testing.T) {
	ctx := t.Context()
	t.Run("429 is unavailable", func(t *testing.T) {
		u, _ := gcsStub(t, func(w http.ResponseWriter, r *http.Request, _ int) {
			gcsError(w, http.StatusTooManyRequests, "rateLimitExceeded", "The object exceeded the rate limit.")
		})
		s, err := store.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Stat(ctx, "k")
		if !errors.Is(err, store.ErrUnavailable) || !store.Transient(err) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("stat answered 429: %v; want ErrUnavailable in one line", err)
		}
		err = store.PutBytes(ctx, s, "k", []byte("x"))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("put answered 429: %v; want ErrUnavailable", err)
		}
	})
	t.Run("503 then 412 is exists", func(t *testing.T) {
		var attempts atomic.Int32
		u, _ := gcsStub(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Method != http.MethodPost || r.URL.Query().Get("ifGenerationMatch") != "0" {
				t.Errorf("create sent %s %s; want a POST with ifGenerationMatch=0", r.Method, r.URL)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			attempts.Add(1)
			if n == 1 {
				gcsError(w, http.StatusServiceUnavailable, "backendError", "Backend Error")
				return
			}
			gcsError(w, http.StatusPreconditionFailed, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")
		})
		s, err := store.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		err = store.CreateBytes(ctx, s, "_log/00000001", []byte("version"))
		if !errors.Is(err, store.ErrExists) || attempts.Load() != 2 {
			t.Fatalf("create: %v after %d attempts; want ErrExists after 2 (the SDK's retry answered 412)", err, attempts.Load())
		}
	})
	t.Run("403 is credentials", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gcsError(w, http.StatusForbidden, "forbidden", "caller does not have storage.objects.list access")
		}))
		defer srv.Close()
		_, err := store.Open(ctx, "gs://bkt/p?endpoint="+srv.URL)
		if !errors.Is(err, store.ErrCredentials) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "roles/storage.objectAdmin") {
			t.Fatalf("open answered 403: %v; want ErrCredentials in one line naming the role", err)
		}
	})
}

// TestGCSUserAgent: every request names the binary and its version.
func TestGCSUserAgent(t *testing.T) {
	u, agents := gcsStub(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		gcsError(w, http.StatusNotFound, "notFound", "No such object")
	})
	s, err := store.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stat: %v; want ErrNotFound", err)
	}
	checkAgents(t, *agents)
}

// checkAgents asserts that every request carried this binary's
// "<name>/<version>" (a test binary is store.test).
func checkAgents(t *testing.T, agents []string) {
	t.Helper()
	if len(agents) == 0 {
		t.Fatal("no requests seen")
	}
	for _, a := range agents {
		if !strings.Contains(a, "store.test/") {
			t.Fatalf("a request's User-Agent is %q; want it to name the binary (store.test/<version>)", a)
		}
	}
}

// TestGCSNoCredentials: without Application Default Credentials the open
// fails in one line that says where they are looked for.
func TestGCSNoCredentials(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(home, "missing.json"))
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1") // no metadata server
	_, err := store.Open(t.Context(), "gs://some-bucket/p")
	if !errors.Is(err, store.ErrCredentials) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS") {
		t.Fatalf("open without credentials: %v; want ErrCredentials in one line naming GOOGLE_APPLICATION_CREDENTIALS", err)
	}
}

// TestGCSKeyContent: a service-account key given as content (the CSI
// driver's way, from a volume's secret) is used, and a broken one fails
// the open in one line naming the variable, without quoting it.
func TestGCSKeyContent(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS_JSON", `{"type":"service_account","private_key":"SECRET-not-a-key"`)
	_, err := store.Open(t.Context(), "gs://some-bucket/p")
	if !errors.Is(err, store.ErrCredentials) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "SECRET") ||
		!strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS_JSON") {
		t.Fatalf("open with a broken key: %v; want ErrCredentials in one line naming the variable and not quoting it", err)
	}
}

// serviceAccountKey writes a service-account key file whose token
// endpoint is tokenURI and returns its path and content.
func serviceAccountKey(t *testing.T, tokenURI string) (path, content string) {
	t.Helper()
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	key, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "sa@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokenURI,
	})
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(path, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, string(key)
}

// TestGCSTokenEndpointFailures (issue 55 item 11): a service-account key
// whose token endpoint answers 400 invalid_grant (a revoked key) is
// ErrCredentials naming the credential source and the fix, never
// transient (a producer exits instead of waiting for a store that is not
// down), and an unreachable token endpoint is named as such, not as the
// storage endpoint. Both ways of giving the key (a file, the content).
func TestGCSTokenEndpointFailures(t *testing.T) {
	var asked atomic.Int32
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`)
	}))
	defer tokens.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	for _, asContent := range []bool{false, true} {
		use := func(t *testing.T, tokenURI string) (source string) {
			path, content := serviceAccountKey(t, tokenURI)
			if asContent {
				t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
				t.Setenv("GOOGLE_APPLICATION_CREDENTIALS_JSON", content)
				return "GOOGLE_APPLICATION_CREDENTIALS_JSON"
			}
			t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
			t.Setenv("GOOGLE_APPLICATION_CREDENTIALS_JSON", "")
			return "GOOGLE_APPLICATION_CREDENTIALS"
		}
		t.Run(fmt.Sprintf("revoked,content=%v", asContent), func(t *testing.T) {
			source := use(t, tokens.URL+"/token")
			before := asked.Load()
			_, err := store.Open(t.Context(), "gs://some-bucket/p")
			t.Logf("open: %v", err)
			if asked.Load() == before {
				t.Fatalf("the token endpoint was never asked; the test proves nothing")
			}
			if !errors.Is(err, store.ErrCredentials) || store.Transient(err) || errors.Is(err, store.ErrUnreachable) {
				t.Fatalf("open with a revoked key: %v; want ErrCredentials, not transient", err)
			}
			msg := err.Error()
			for _, want := range []string{source, "invalid_grant", "token endpoint " + tokens.URL, "service-account key"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not name %q", msg, want)
				}
			}
			if strings.Contains(msg, "\n") || strings.Contains(msg, "check the network") || strings.Contains(msg, "PRIVATE KEY") {
				t.Errorf("message %q: want one line, not blaming the network, not quoting the key", msg)
			}
		})
		t.Run(fmt.Sprintf("unreachable,content=%v", asContent), func(t *testing.T) {
			use(t, "http://"+closed+"/token")
			_, err := store.Open(t.Context(), "gs://some-bucket/p")
			t.Logf("open: %v", err)
			if !errors.Is(err, store.ErrUnreachable) || !strings.Contains(err.Error(), "token endpoint http://"+closed) ||
				strings.Contains(err.Error(), "cannot reach GCS") || strings.Contains(err.Error(), "storage.googleapis.com") {
				t.Fatalf("open with the token endpoint down: %v; want ErrUnreachable naming the token endpoint %s, not the storage endpoint", err, closed)
			}
		})
	}
}

// TestGCSBucketDeletedWhileOpen (issue 55 item 6): a listing of a bucket
// deleted under an open store says the bucket is gone, on
// fake-gcs-server, not "object not found".
func TestGCSBucketDeletedWhileOpen(t *testing.T) {
	srv := gcstest.Start(t)
	bucket := srv.NewBucket(t)
	s, err := store.Open(t.Context(), srv.URL(bucket, "stream"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.Endpoint+"/storage/v1/b/"+bucket, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("deleting bucket %s: %s", bucket, resp.Status)
	}
	_, _, err = s.List(t.Context(), "", "", 0)
	t.Logf("list: %v", err)
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("bucket %q is gone", bucket)) {
		t.Fatalf("list of a deleted bucket: %v; want ErrNotFound saying bucket %q is gone", err, bucket)
	}
}

// TestGCSEndpointWithAPIPath (issue 55 item 15): an endpoint= given with
// the JSON API's path (which the client adds itself) is refused naming
// the endpoint to give, not reported as a missing bucket.
func TestGCSEndpointWithAPIPath(t *testing.T) {
	srv := gcstest.Start(t)
	bucket := srv.NewBucket(t)
	for _, ep := range []string{srv.Endpoint + "/storage/v1/", srv.Endpoint + "/storage/v1"} {
		_, err := store.Open(t.Context(), "gs://"+bucket+"/p?endpoint="+ep)
		t.Logf("%s: %v", ep, err)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "endpoint="+srv.Endpoint+")") || strings.Contains(err.Error(), "does not exist") {
			t.Errorf("endpoint=%s: %v; want ErrInvalid saying to give endpoint=%s", ep, err, srv.Endpoint)
		}
	}
}
