package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/store/storetest"
)

func TestMemConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMem() })
}

func TestFileConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(t.Context(), "file://"+t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestFaultyConformance(t *testing.T) {
	// With no faults configured the wrapper must be transparent.
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewFaulty(store.NewMem(), 1) })
}

func TestBadURLs(t *testing.T) {
	for _, c := range []struct{ url, mention string }{
		{"ftp://host/x", `"ftp"`},
		{"file://relative/dir", "file:///abs/dir"},
		{"file:relative", "file:///abs/dir"},
		{"/no/scheme", "file:///abs/dir"},
		{"mem://", "mem://name"},
		{"s3:///prefix-only", "bucket"},
	} {
		_, err := store.Open(t.Context(), c.url)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("open %q: want ErrInvalid, got %v", c.url, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, c.mention) {
			t.Errorf("open %q: error %q should be one line mentioning %s", c.url, msg, c.mention)
		}
		// The commands refuse mem:// (it dies with the process): a fix
		// must not suggest it.
		if !strings.HasPrefix(c.url, "mem:") && strings.Contains(msg, "mem://") {
			t.Errorf("open %q: error %q suggests mem://, which the commands refuse", c.url, msg)
		}
	}
}

// TestURLCredentialsRefused: user info anywhere in a store URL (at the
// top, inside endpoint= with or without a scheme, inside any query value
// that is a URL) is refused with one line pointing at the credential chain
// or the volume's secret, before any request; neither that line nor
// Redact ever shows the secret (issue 32 item 1).
func TestURLCredentialsRefused(t *testing.T) {
	const secret = "SuperSecret123"
	for _, u := range []string{
		"s3://AKIAUSERX:" + secret + "@b/p",
		"s3://b/p?endpoint=http://AKIAUSERX:" + secret + "@127.0.0.1:1&region=us-east-1",
		"s3://b/p?endpoint=http%3A%2F%2FAKIAUSERX%3A" + secret + "%40127.0.0.1%3A1",
		"s3://b/p?endpoint=AKIAUSERX:" + secret + "@127.0.0.1:1",
		"s3://b/p?endpoint=http://AKIAUSERX:" + secret + "%zz@127.0.0.1:1",
		"s3://b/p?endpoint=http://127.0.0.1:1&token=https://AKIAUSERX:" + secret + "@host",
		"file:///tmp/x?endpoint=http://AKIAUSERX:" + secret + "@127.0.0.1:1",
	} {
		_, err := store.Open(t.Context(), u)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "carries credentials") ||
			!strings.Contains(err.Error(), "credential chain") || !strings.Contains(err.Error(), "volume's secret") {
			t.Errorf("open %q: %v; want ErrInvalid saying to use the credential chain or the volume's secret", u, err)
		}
		if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "\n")) {
			t.Errorf("open %q: %q shows the secret or is not one line", u, err)
		}
		if r := store.Redact(u); strings.Contains(r, secret) {
			t.Errorf("Redact(%q) = %q shows the secret", u, r)
		}
	}
	// What says where the store is stays readable.
	if r := store.Redact("s3://b/p?endpoint=http://k:s@10.0.0.1:9000&region=eu-west-1"); !strings.Contains(r, "10.0.0.1%3A9000") || !strings.Contains(r, "eu-west-1") {
		t.Errorf("Redact dropped the endpoint's host or the region: %s", r)
	}
}

// TestFileNoPartialObjects checks that the file store never shows a partial
// object under its final name and leaves no temp files behind when a put
// fails halfway.
func TestFileNoPartialObjects(t *testing.T) {
	dir := t.TempDir()
	s, err := store.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.Put(t.Context(), "obj", pr, 1<<20) }()
	if _, err := pw.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	// Half written: the key must not exist yet.
	if _, err := os.Stat(filepath.Join(dir, "obj")); !os.IsNotExist(err) {
		t.Fatalf("partial object visible under its final name: %v", err)
	}
	pw.CloseWithError(errors.New("writer died"))
	if err := <-done; err == nil {
		t.Fatal("put of a truncated stream succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "obj")); !os.IsNotExist(err) {
		t.Fatalf("failed put left an object: %v", err)
	}
	tmp, _ := os.ReadDir(filepath.Join(dir, ".lakefs-tmp"))
	if len(tmp) != 0 {
		t.Fatalf("failed put left %d temp files", len(tmp))
	}
}

// putIsCreate is a store that ignores create-if-absent, to prove the probe
// catches it.
type putIsCreate struct{ store.Store }

func (p putIsCreate) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return p.Put(ctx, key, r, size)
}

func TestProbeRefusesNonAtomicStore(t *testing.T) {
	err := store.Probe(t.Context(), putIsCreate{store.NewMem()})
	if !errors.Is(err, store.ErrNoAtomicCreate) {
		t.Fatalf("probe accepted a store without create-if-absent: %v", err)
	}
}

// retriedCreate is a store whose first Create is applied and then sent
// again, as a client retries a request whose answer was lost on the
// network: the caller gets the retry's answer, ErrExists.
type retriedCreate struct {
	store.Store
	done bool
}

func (r *retriedCreate) Create(ctx context.Context, key string, rd io.Reader, size int64) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	if err := r.Store.Create(ctx, key, bytes.NewReader(b), size); err != nil || r.done {
		return err
	}
	r.done = true
	return r.Store.Create(ctx, key, bytes.NewReader(b), size)
}

// TestProbeFirstCreateAnswerLost: the probe's first create answered
// ErrExists because its own earlier attempt made the key (the chaos soak
// on SeaweedFS found producers refusing the store for it after a network
// fault); the probe reads the key back and passes, and still refuses a
// store that has no create-if-absent.
func TestProbeFirstCreateAnswerLost(t *testing.T) {
	if err := store.Probe(t.Context(), &retriedCreate{Store: store.NewMem()}); err != nil {
		t.Fatalf("probe after a retried first create: %v", err)
	}
	if err := store.Probe(t.Context(), &retriedCreate{Store: putIsCreate{store.NewMem()}}); !errors.Is(err, store.ErrNoAtomicCreate) {
		t.Fatalf("probe of a store without create-if-absent after a retried first create: %v", err)
	}
}

func TestFaulty(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	f := store.NewFaulty(mem, 42)

	// Lost responses: the create is applied, the caller sees an error.
	f.Set(store.Fault{LostRate: 1}, store.OpCreate)
	err := store.CreateBytes(ctx, f, "k", []byte("v"))
	if !errors.Is(err, store.ErrInjected) {
		t.Fatalf("lost create: %v", err)
	}
	if got, err := store.ReadAll(ctx, mem, "k"); err != nil || string(got) != "v" {
		t.Fatalf("a lost-response create was not applied: %q %v", got, err)
	}
	// Other operations are untouched.
	if _, err := f.Stat(ctx, "k"); err != nil {
		t.Fatalf("stat with create faults only: %v", err)
	}

	// Errors: not applied.
	f.Set(store.Fault{ErrRate: 1}, store.OpPut)
	if err := store.PutBytes(ctx, f, "p", []byte("v")); !errors.Is(err, store.ErrInjected) {
		t.Fatalf("failed put: %v", err)
	}
	if _, err := mem.Stat(ctx, "p"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an injected put error was applied: %v", err)
	}

	// Rates are rates: about half of 2000 gets fail.
	f.Set(store.Fault{ErrRate: 0.5}, store.OpGet)
	failed := 0
	for range 2000 {
		if _, err := f.Get(ctx, "k"); err != nil {
			failed++
		}
	}
	if failed < 800 || failed > 1200 {
		t.Fatalf("ErrRate 0.5 failed %d of 2000", failed)
	}
	if got := f.Injected(store.OpGet); got != int64(failed) {
		t.Fatalf("Injected(get) = %d, want %d", got, failed)
	}

	// Latency honours the context.
	f.Set(store.Fault{Latency: time.Hour}, store.OpList)
	lctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, _, err := f.List(lctx, "", "", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("list under latency with a deadline: %v", err)
	}
}

func TestS3Conformance(t *testing.T) {
	srv := s3test.Start(t)
	// A small part size makes LargeObject exercise multipart uploads.
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(t.Context(), srv.NewBucketURL(t)+"&part-size=5242880")
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestS3BadURLs(t *testing.T) {
	srv := s3test.Start(t)
	missing := srv.URL("no-such-bucket", "p")
	_, err := store.Open(t.Context(), missing)
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"no-such-bucket"`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("missing bucket: want one line naming the bucket, got %v", err)
	}
	for _, c := range []struct{ url, mention string }{
		{"s3://b/p?endpoint=127.0.0.1:9000", "endpoint=http://host:port"},
		{"s3://b/p?path-style=maybe", "path-style=true"},
		{"s3://b/p?part-size=10", "part-size"},
		{"s3://b/p?colour=blue", `"colour"`},
		{"s3://b/a/../p", "prefix"},
	} {
		_, err := store.Open(t.Context(), c.url)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("open %q: want ErrInvalid mentioning %s, got %v", c.url, c.mention, err)
		}
	}
}

// TestS3ConflictIsNotExists checks the mapping of S3's 409
// ConditionalRequestConflict (a concurrent conditional write was in flight)
// to ErrConflict, "retry", and never to ErrExists. versitygw never answers
// 409 to a create, so this one answer comes from a stub HTTP server.
func TestS3ConflictIsNotExists(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet: // the bucket check, ListObjectsV2 max-keys 1
			w.Header().Set("Content-Type", "application/xml")
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name><KeyCount>0</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>`)
		case http.MethodPut:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource.</Message></Error>`)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	}))
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
	t.Setenv("AWS_RETRY_MAX_ATTEMPTS", "1")
	s, err := store.Open(t.Context(), "s3://bkt/p?region=us-east-1&path-style=true&endpoint="+srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	err = store.CreateBytes(t.Context(), s, "_log/1", []byte("x"))
	if !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) {
		t.Fatalf("409 ConditionalRequestConflict: want ErrConflict only, got %v", err)
	}
}

// TestQueryParameterTwice (issue 55 item 15): a parameter given twice in
// a store URL is refused naming it, before any request, on every bucket
// scheme; before, the last value was taken silently.
func TestQueryParameterTwice(t *testing.T) {
	t.Setenv("AZURE_STORAGE_KEY", "")
	for _, c := range []struct{ url, param string }{
		{"s3://bkt/p?endpoint=http://127.0.0.1:1&endpoint=http://127.0.0.1:2", "endpoint="},
		{"s3://bkt/p?endpoint=http://127.0.0.1:1&region=us-east-1&region=eu-west-1", "region="},
		{"gs://b-1/p?endpoint=http://127.0.0.1:1&endpoint=http://127.0.0.1:2", "endpoint="},
		{"az://cont/p?account=acct1&endpoint=http://127.0.0.1:1&endpoint=http://127.0.0.1:2", "endpoint="},
		{"az://cont/p?account=acct1&account=acct2&endpoint=http://127.0.0.1:1", "account="},
	} {
		_, err := store.Open(t.Context(), c.url)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "gives "+c.param+" 2 times") || strings.Contains(err.Error(), "\n") {
			t.Errorf("open %q: %v; want one line of ErrInvalid naming %s given twice", c.url, err, c.param)
		}
	}
}

// TestBucketNameRules (issue 55 item 13): gs:// follows GCS's bucket
// naming rules (underscores; up to 222 characters with dots, each part at
// most 63) and az:// Azure's container rules, not S3's. Valid names open
// (on a stub that answers the open's listing); invalid ones are usage
// errors naming the rules.
func TestBucketNameRules(t *testing.T) {
	dotted := strings.Repeat("a", 40) + "." + strings.Repeat("b", 42) // 83
	long := strings.Repeat(strings.Repeat("c", 63)+".", 3) + strings.Repeat("d", 30)
	gsURL, _ := gcsStub(t, func(w http.ResponseWriter, r *http.Request, _ int) { w.WriteHeader(http.StatusNotFound) })
	gsEndpoint := gsURL[strings.Index(gsURL, "?"):]
	az := newAzStub(t, nil)
	for _, c := range []struct {
		scheme, name string
		valid        bool
	}{
		{"gs", "my_bucket", true},
		{"gs", dotted, true},
		{"gs", long, true},
		{"gs", "a-b.c_d", true},
		{"gs", "abc", true},
		{"gs", "ab", false},
		{"gs", strings.Repeat("e", 64), false},
		{"gs", strings.Repeat("e", 64) + ".ab", false},
		{"gs", long + "dddddddddddddddddddddddddd", false}, // 223 and more
		{"gs", "_abc", false},
		{"gs", "abc_", false},
		{"gs", "a..b", false},
		{"gs", "My-bucket", false},
		{"gs", "192.168.1.1", false},
		{"gs", "goog-data", false},
		{"gs", "my-google-data", false},
		{"az", "abc", true},
		{"az", "my-container-1", true},
		{"az", strings.Repeat("f", 63), true},
		{"az", "ab", false},
		{"az", strings.Repeat("f", 64), false},
		{"az", "my_container", false},
		{"az", "my.container", false},
		{"az", "a--b", false},
		{"az", "-abc", false},
		{"az", "abc-", false},
		{"az", "Abc", false},
	} {
		u := "gs://" + c.name + "/p" + gsEndpoint
		if c.scheme == "az" {
			u = "az://" + c.name + "/p?account=devstoreaccount1&endpoint=" + az.URL
		}
		_, err := store.Open(t.Context(), u)
		switch {
		case c.valid && err != nil:
			t.Errorf("%s://%s (%d characters) is valid there: %v", c.scheme, c.name, len(c.name), err)
		case !c.valid && (!errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "names are")):
			t.Errorf("%s://%s (%d characters) is invalid there: %v; want ErrInvalid naming the rules", c.scheme, c.name, len(c.name), err)
		}
	}
}
