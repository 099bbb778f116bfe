package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/lakestream/lakestream/internal/aztest"
	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/store/storetest"
)

func TestAzureConformance(t *testing.T) {
	srv := aztest.Start(t)
	open := func(t *testing.T) store.Store {
		s, err := store.Open(t.Context(), srv.NewBucketURL(t))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("direct", func(t *testing.T) { storetest.Run(t, open) })
	// The wrapper the crash tests inject faults with must be transparent
	// over Azure too; 1 MiB blocks put LargeObject's 40 MiB through 41
	// Put Block and one Put Block List.
	t.Run("fault-wrapper", func(t *testing.T) {
		longtest.Skip(t, "the conformance suite again through the fault wrapper")
		storetest.Run(t, func(t *testing.T) store.Store {
			s, err := store.OpenAzure(t.Context(), store.AzureOptions{
				Account: aztest.Account, Container: srv.NewBucket(t), Prefix: "stream",
				Endpoint: srv.Endpoint, BlockSize: 1 << 20,
			})
			if err != nil {
				t.Fatal(err)
			}
			return store.NewFaulty(s, 1)
		})
	})
}

// azStub is an Azure Blob endpoint that answers what Azurite cannot:
// answer handles a request or returns false, and then a container
// listing is answered empty (open's check) and anything else 201.
type azStub struct {
	*httptest.Server
	answer   func(w http.ResponseWriter, r *http.Request) bool
	attempts atomic.Int32 // requests other than listings
	mu       sync.Mutex
	agents   []string // GUARDED_BY(mu)
}

func newAzStub(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) bool) *azStub {
	t.Setenv("AZURE_STORAGE_KEY", aztest.Key)
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "")
	s := &azStub{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.agents = append(s.agents, r.Header.Get("User-Agent"))
		s.mu.Unlock()
		listing := r.URL.Query().Get("comp") == "list"
		if !listing {
			s.attempts.Add(1)
		}
		if s.answer != nil && s.answer(w, r) {
			return
		}
		if listing {
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprint(w, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="`+s.URL+`/" ContainerName="cont"><Blobs /><NextMarker /></EnumerationResults>`)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *azStub) url() string { return "az://cont/p?account=devstoreaccount1&endpoint=" + s.URL }

// azError answers as Azure does: the code in x-ms-error-code and in an
// XML body whose message runs to several lines.
func azError(w http.ResponseWriter, r *http.Request, status int, code string) {
	w.Header().Set("x-ms-error-code", code)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>%s</Code><Message>The stub says %s.\nRequestId:0000\nTime:2026-01-01T00:00:00.0000000Z</Message></Error>", code, code)
	}
}

func oneLine(t *testing.T, what string, err error) {
	t.Helper()
	t.Logf("%s: %v", what, err)
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("%s: error is not one line: %q", what, err)
	}
}

// TestAzureErrorMapping: the server's answers Azurite cannot give map to
// the sentinels, in one line each.
func TestAzureErrorMapping(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		status int
		code   string
	}{{503, "ServerBusy"}, {500, "InternalError"}} {
		stub := newAzStub(t, func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Query().Get("comp") == "list" {
				return false
			}
			azError(w, r, c.status, c.code)
			return true
		})
		s, err := store.Open(ctx, stub.url())
		if err != nil {
			t.Fatal(err)
		}
		_, getErr := s.Get(ctx, "k")
		for op, err := range map[string]error{
			"get": getErr, "put": store.PutBytes(ctx, s, "k", []byte("x")), "create": store.CreateBytes(ctx, s, "k", []byte("x")),
		} {
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("%d %s: %s: want ErrUnavailable, got %v", c.status, c.code, op, err)
			}
			oneLine(t, op, err)
		}
		if n := stub.attempts.Load(); n != 9 {
			t.Errorf("%d: %d requests for 3 calls, want 3 attempts each", c.status, n)
		}
	}
	for _, c := range []struct {
		status int
		code   string
	}{{412, "ConditionNotMet"}, {409, "BlobAlreadyExists"}} {
		stub := newAzStub(t, func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPut {
				return false
			}
			azError(w, r, c.status, c.code)
			return true
		})
		s, err := store.Open(ctx, stub.url())
		if err != nil {
			t.Fatal(err)
		}
		err = store.CreateBytes(ctx, s, "k", []byte("x"))
		if !errors.Is(err, store.ErrExists) {
			t.Errorf("create answered %d %s: want ErrExists, got %v", c.status, c.code, err)
		}
		oneLine(t, "create", err)
	}
	t.Run("CreateRetriedInto412", testAzureCreateRetried)
	t.Run("AuthenticationFailed", testAzureAuthFailed)
	t.Run("NoRetryOfTimeouts", testAzureNoTimeoutRetry)
}

// testAzureCreateRetried: a create whose first attempt got 503 and whose
// SDK retry found the object (412) is ErrExists, in two attempts.
func testAzureCreateRetried(t *testing.T) {
	stub := newAzStub(t, nil)
	stub.answer = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPut {
			return false
		}
		if stub.attempts.Load() == 1 {
			azError(w, r, 503, "ServerBusy")
		} else {
			azError(w, r, 412, "ConditionNotMet")
		}
		return true
	}
	s, err := store.Open(t.Context(), stub.url())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateBytes(t.Context(), s, "k", []byte("x")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("want ErrExists, got %v", err)
	}
	if n := stub.attempts.Load(); n != 2 {
		t.Fatalf("server saw %d attempts, want 2", n)
	}
}

// testAzureAuthFailed: a refused key at open is ErrCredentials in one line
// naming the variable to fix.
func testAzureAuthFailed(t *testing.T) {
	stub := newAzStub(t, func(w http.ResponseWriter, r *http.Request) bool {
		azError(w, r, 403, "AuthenticationFailed")
		return true
	})
	_, err := store.Open(t.Context(), stub.url())
	if !errors.Is(err, store.ErrCredentials) || !strings.Contains(err.Error(), "AZURE_STORAGE_KEY") {
		t.Fatalf("want ErrCredentials naming AZURE_STORAGE_KEY, got %v", err)
	}
	oneLine(t, "open", err)
	if strings.Contains(err.Error(), aztest.Key) {
		t.Fatalf("the message quotes the key: %v", err)
	}
}

// testAzureNoTimeoutRetry: a request that timed out is not sent again by
// the SDK; its caller decides.
func testAzureNoTimeoutRetry(t *testing.T) {
	stub := newAzStub(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || r.URL.Query().Get("comp") == "list" {
			return false
		}
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
		return true
	})
	s, err := store.OpenAzure(t.Context(), store.AzureOptions{Account: "devstoreaccount1", Container: "cont", Endpoint: stub.URL,
		Timeouts: store.Timeouts{FirstByte: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "k"); err == nil {
		t.Fatal("get of a hung server succeeded")
	}
	if n := stub.attempts.Load(); n != 1 {
		t.Fatalf("a timed-out get was sent %d times, want once", n)
	}
}

// TestAzureURLs: a bad store URL is one line of ErrInvalid that names the
// fix, and never echoes a secret.
func TestAzureURLs(t *testing.T) {
	t.Setenv("AZURE_STORAGE_ACCOUNT", "")
	for _, c := range []struct{ url, want string }{
		{"az:///p?account=acct1", "az://container/prefix"},
		{"az://Bad_Name/p?account=acct1", "container names are"},
		{"az://ab/p?account=acct1", "container names are"},
		{"az://a--b/p?account=acct1", "container names are"},
		{"az://-ab/p?account=acct1", "container names are"},
		{"az://cont/p?account=acct1&colour=blue", "use account= and endpoint="},
		{"az://cont/p?account=acct1&sig=SECRETVALUE1", "AZURE_STORAGE_SAS_TOKEN"},
		{"az://cont/p?account=acct1&key=SECRETVALUE2", "AZURE_STORAGE_KEY"},
		{"az://cont/p?account=acct1&account-key=SECRETVALUE3", "AZURE_STORAGE_KEY"},
		{"az://cont/p", "AZURE_STORAGE_ACCOUNT"},
		{"az://cont/p?account=Not_An_Account", "account names are"},
		{"az://cont/a/../b?account=acct1", "clean/prefix"},
		{"az://cont/p?account=acct1&endpoint=ftp://x", "endpoint=http://"},
	} {
		_, err := store.Open(t.Context(), c.url)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want ErrInvalid naming %q, got %v", c.url, c.want, err)
			continue
		}
		oneLine(t, c.url, err)
		if strings.Contains(err.Error(), "SECRETVALUE") {
			t.Errorf("%s: the message echoes the secret: %v", c.url, err)
		}
	}
}

// TestAzureUserAgent: requests name the binary (for a test binary,
// store.test), so that access logs tell the programs apart.
func TestAzureUserAgent(t *testing.T) {
	stub := newAzStub(t, nil)
	if _, err := store.Open(t.Context(), stub.url()); err != nil {
		t.Fatal(err)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if len(stub.agents) == 0 || !strings.Contains(stub.agents[0], "store.test/") {
		t.Fatalf("User-Agent %q does not name the binary store.test", stub.agents)
	}
}

// TestAzureUnreachable: no server at endpoint= is ErrUnreachable at open,
// in one line naming the endpoint.
func TestAzureUnreachable(t *testing.T) {
	t.Setenv("AZURE_STORAGE_KEY", aztest.Key)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = store.Open(t.Context(), "az://cont/p?account=devstoreaccount1&endpoint=http://"+addr)
	if !errors.Is(err, store.ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("want ErrUnreachable naming %s, got %v", addr, err)
	}
	oneLine(t, "open", err)
}

// TestAzureLargeCreateRace: creates of one key staged as blocks at once
// (every racer stages into the blob's one list of uncommitted blocks)
// still have exactly one winner, whose bytes are stored whole.
func TestAzureLargeCreateRace(t *testing.T) {
	srv := aztest.Start(t)
	s, err := store.OpenAzure(t.Context(), store.AzureOptions{
		Account: aztest.Account, Container: srv.NewBucket(t), Endpoint: srv.Endpoint, BlockSize: 256 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	const racers, size = 6, 1<<20 + 17
	for round := range 3 {
		key := fmt.Sprintf("big/%d", round)
		var wins atomic.Int32
		var winner atomic.Int32
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				body := bytes.Repeat([]byte{byte('a' + i)}, size)
				for {
					err := s.Create(t.Context(), key, bytes.NewReader(body), size)
					switch {
					case err == nil:
						wins.Add(1)
						winner.Store(int32(i))
					case errors.Is(err, store.ErrConflict):
						continue
					case !errors.Is(err, store.ErrExists):
						t.Errorf("round %d racer %d: %v", round, i, err)
					}
					return
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d winners", round, wins.Load())
		}
		got, err := store.ReadAll(t.Context(), s, key)
		if want := bytes.Repeat([]byte{byte('a' + winner.Load())}, size); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: stored %d bytes (err %v), not the winner's %d", round, len(got), err, size)
		}
	}
}

// TestAzureAccountNeverQuoted (issue 55 items 10 and 15): an account
// value that carries the key (account=NAME:KEY), a connection string in
// account= or in AZURE_STORAGE_ACCOUNT is refused before any request in
// one line that says what it looks like and where the key goes, and
// neither that line nor Redact quotes any of the key.
func TestAzureAccountNeverQuoted(t *testing.T) {
	t.Setenv("AZURE_STORAGE_KEY", "")
	conn := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + aztest.Key + ";BlobEndpoint=http://127.0.0.1:1/devstoreaccount1"
	for _, c := range []struct{ name, url, env, source string }{
		{"account=NAME:KEY", "az://cont/p?account=devstoreaccount1:" + aztest.Key, "", "account="},
		{"escaped", "az://cont/p?account=" + url.QueryEscape("devstoreaccount1:"+aztest.Key), "", "account="},
		{"account=NAME;AccountKey=KEY", "az://cont/p?account=devstoreaccount1;AccountKey=" + aztest.Key, "", "account="},
		{"AZURE_STORAGE_ACCOUNT", "az://cont/p", conn, "AZURE_STORAGE_ACCOUNT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("AZURE_STORAGE_ACCOUNT", c.env)
			_, err := store.Open(t.Context(), c.url)
			oneLine(t, "open", err)
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("%v; want ErrInvalid", err)
			}
			msg := err.Error()
			for _, want := range []string{"connection string", "AZURE_STORAGE_KEY", c.source} {
				if !strings.Contains(msg, want) {
					t.Errorf("%q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, "escape '%'") {
				t.Errorf("%q gives the hint for a malformed escape", msg)
			}
			for _, shown := range []string{msg, store.Redact(c.url)} {
				for i := 0; i+8 <= len(aztest.Key); i++ {
					if frag := aztest.Key[i : i+8]; strings.Contains(shown, frag) || strings.Contains(shown, url.QueryEscape(frag)) {
						t.Fatalf("%q quotes the key (%q)", shown, frag)
					}
				}
			}
		})
	}
}

// TestAzureEndpointOtherAccount (issue 55 item 15): an endpoint= naming
// another account than account= (Azurite answers ResourceNotFound) says
// the two differ and to check them, naming both.
func TestAzureEndpointOtherAccount(t *testing.T) {
	srv := aztest.Start(t)
	c := srv.NewBucket(t)
	other := strings.Replace(srv.Endpoint, "/"+aztest.Account, "/otheraccount", 1)
	_, err := store.Open(t.Context(), "az://"+c+"/p?account="+aztest.Account+"&endpoint="+other)
	oneLine(t, "open", err)
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), `"otheraccount"`) || !strings.Contains(err.Error(), `"`+aztest.Account+`"`) ||
		!strings.Contains(err.Error(), "check account= and endpoint=") {
		t.Fatalf("open: %v; want ErrInvalid naming both accounts and saying to check account= and endpoint=", err)
	}
}

// TestAzureReadOnlySAS (issue 55 item 15): with a SAS that may read and
// list but not write, the open passes (it lists) and init's
// create-if-absent probe fails as ErrCredentials naming
// AZURE_STORAGE_SAS_TOKEN and the write (create) permission it lacks,
// without printing the SAS.
func TestAzureReadOnlySAS(t *testing.T) {
	srv := aztest.Start(t)
	c := srv.NewBucket(t)
	cred, err := azblob.NewSharedKeyCredential(aztest.Account, aztest.Key)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := sas.BlobSignatureValues{
		Protocol: sas.ProtocolHTTPSandHTTP, ExpiryTime: time.Now().Add(time.Hour), ContainerName: c,
		Permissions: (&sas.ContainerPermissions{Read: true, List: true}).String(),
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", qp.Encode())
	s, err := store.Open(t.Context(), srv.URL(c, "stream"))
	if err != nil {
		t.Fatalf("open with a read-only SAS: %v", err)
	}
	err = store.Probe(t.Context(), s)
	oneLine(t, "probe", err)
	if !errors.Is(err, store.ErrCredentials) || !strings.Contains(err.Error(), "AZURE_STORAGE_SAS_TOKEN") || !strings.Contains(err.Error(), "write (create) permission") {
		t.Fatalf("probe with a read-only SAS: %v; want ErrCredentials naming AZURE_STORAGE_SAS_TOKEN and the write permission", err)
	}
	if strings.Contains(err.Error(), "sig=") || strings.Contains(err.Error(), qp.Signature()) {
		t.Fatalf("probe: %v shows the SAS", err)
	}
}
