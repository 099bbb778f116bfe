package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// DefaultAzureBlockSize is the Azure backend's single-request limit and
// block size: an object up to it goes up in one Put Blob, a larger one
// as blocks of it (one reused buffer) made visible by Put Block List.
const DefaultAzureBlockSize = 16 << 20

// azMaxBlocks is Azure's limit on the blocks of one blob.
const azMaxBlocks = 50000

// azDeleteParallel bounds the deletes in flight: Delete Blob removes one
// blob per request (batches need another permission and API).
const azDeleteParallel = 16

// azAppIDMax is azcore's limit on TelemetryOptions.ApplicationID: it
// silently cuts a longer one.
const azAppIDMax = 24

type azureStore struct {
	container *container.Client
	name      string // the container
	account   string // as the store URL names it
	prefix    string // "" or "some/prefix/"
	endpoint  string // the service URL, shown in errors (never with a SAS)
	cred      string // the credential source, named in errors
	blockSize int64
}

// AzureOptions configure an Azure Blob Storage store.
type AzureOptions struct {
	Account   string
	Container string
	Prefix    string
	// Endpoint is the service URL of another server than Azure, e.g.
	// Azurite's path-style http://127.0.0.1:10000/devstoreaccount1; one
	// without a path gets "/"+Account. Empty:
	// https://ACCOUNT.blob.core.windows.net/.
	Endpoint  string
	BlockSize int64 // 0: DefaultAzureBlockSize
	Timeouts  Timeouts
}

// azSecretParam tells a query parameter that carries a SAS or a key: the
// URL is logged and shown, so such a parameter is refused, not ignored.
func azSecretParam(k string) bool {
	k = strings.ToLower(k)
	switch k {
	case "sig", "sv", "ss", "srt", "sp", "se", "st", "spr", "sr", "skoid", "sktid", "token", "password", "connection-string":
		return true
	}
	return strings.Contains(k, "key") || strings.Contains(k, "sas") || strings.Contains(k, "secret")
}

// openAzure parses az://container/prefix?account=&endpoint=.
func openAzure(ctx context.Context, u *url.URL, raw string) (Store, error) {
	bad := badURL(raw)
	bucket, prefix, query, err := bucketURL(u, bad, "container", "az")
	if err != nil {
		return nil, err
	}
	o := AzureOptions{Container: bucket, Prefix: prefix}
	for k, vs := range query {
		v := vs[len(vs)-1]
		switch {
		case k == "account":
			o.Account = v
		case k == "endpoint":
			if !validEndpoint(v) || strings.Contains(v, "?") { // a query there could carry a SAS
				return nil, bad(fmt.Sprintf("has endpoint %q", redactEndpoint(v)), "use endpoint=http://host:port/account")
			}
			o.Endpoint = v
		case azSecretParam(k):
			return nil, bad(fmt.Sprintf("carries a secret (%s=)", k), "remove it: put the account key in AZURE_STORAGE_KEY or the SAS in AZURE_STORAGE_SAS_TOKEN")
		default:
			return nil, bad(fmt.Sprintf("has unknown parameter %q", k), "use account= and endpoint= (credentials come from AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or Entra ID, never the URL)")
		}
	}
	from := "its account="
	if o.Account == "" {
		o.Account, from = os.Getenv("AZURE_STORAGE_ACCOUNT"), "the account in AZURE_STORAGE_ACCOUNT"
	}
	if o.Account == "" {
		return nil, bad("names no storage account", "add account=NAME or set AZURE_STORAGE_ACCOUNT")
	}
	if err := checkAzureAccount(o.Account); err != nil {
		if errors.Is(err, errAccountSecret) {
			return nil, bad(fmt.Sprintf("is refused: %s %v", from, err), azAccountFix)
		}
		return nil, bad(fmt.Sprintf("is refused: %s %v", from, err), "account names are 3-24 characters of a-z and 0-9")
	}
	if err := checkContainerName(o.Container); err != nil {
		return nil, bad(err.Error(), "container names are 3-63 characters of a-z, 0-9 and '-', beginning and ending with a letter or digit, without \"--\"")
	}
	return OpenAzure(ctx, o)
}

// checkContainerName applies Azure's container naming rules, so that a
// bad name is reported as such before any request.
func checkContainerName(c string) error {
	if len(c) < 3 || len(c) > 63 {
		return fmt.Errorf("names container %q of %d characters", c, len(c))
	}
	for i, r := range c {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(c)-1
		if !ok {
			return fmt.Errorf("names container %q, which has %q at position %d", c, r, i)
		}
	}
	if strings.Contains(c, "--") {
		return fmt.Errorf("names container %q (no \"--\")", c)
	}
	return nil
}

// errAccountSecret: an account value that looks like a key or a
// connection string.
var errAccountSecret = errors.New("contains ':' or ';', so it looks like a key or a connection string")

// azAccountFix says where an account's key goes instead.
const azAccountFix = "give only the account name in account= (or AZURE_STORAGE_ACCOUNT) and the key in AZURE_STORAGE_KEY (a SAS in AZURE_STORAGE_SAS_TOKEN)"

// checkAzureAccount applies Azure's storage account naming rules: the
// name is a DNS label of the service URL. Its errors never quote the
// value: a wrong one is often a key or a connection string.
func checkAzureAccount(a string) error {
	if strings.ContainsAny(a, ":;") {
		return errAccountSecret
	}
	if len(a) < 3 || len(a) > 24 {
		return fmt.Errorf("is %d characters long", len(a))
	}
	for i, r := range a {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return fmt.Errorf("has a character other than a-z and 0-9 at position %d", i+1)
		}
	}
	return nil
}

// azureServiceURL is the account's blob service URL, ending in "/".
func azureServiceURL(o AzureOptions) string {
	if o.Endpoint == "" {
		return "https://" + o.Account + ".blob.core.windows.net/"
	}
	e := strings.TrimSuffix(o.Endpoint, "/")
	if u, err := url.Parse(e); err == nil && u.Path == "" {
		e += "/" + o.Account // Azurite and other path-style servers
	}
	return e + "/"
}

// OpenAzure connects to a container and checks that it can be listed, so
// that a typo or a missing permission fails at start in one line.
func OpenAzure(ctx context.Context, o AzureOptions) (Store, error) {
	svc := azureServiceURL(o)
	s := &azureStore{name: o.Container, account: o.Account, endpoint: redactEndpoint(svc), blockSize: cmp.Or(o.BlockSize, DefaultAzureBlockSize)}
	if s.blockSize <= 0 {
		return nil, fmt.Errorf("%w: az store %s: block size %d; use a positive byte count", ErrInvalid, o.Container, s.blockSize)
	}
	if o.Prefix != "" {
		s.prefix = strings.Trim(o.Prefix, "/") + "/"
	}
	client, err := s.newClient(ctx, o, svc)
	if err != nil {
		return nil, err
	}
	s.container = client.ServiceClient().NewContainerClient(o.Container)
	// One flat listing of one name: it needs only the list permission
	// every command needs, unlike a read of the container's properties.
	opts := &container.ListBlobsFlatOptions{MaxResults: to.Ptr[int32](1)}
	if s.prefix != "" {
		opts.Prefix = &s.prefix
	}
	if _, err := s.container.NewListBlobsFlatPager(opts).NextPage(ctx); err != nil {
		return nil, s.openError(ctx, err)
	}
	return s, nil
}

// azClientOptions: our transport (with the timeouts), our name in the
// User-Agent, and few retries, so that an outage surfaces as
// ErrUnavailable after seconds, not minutes.
func azClientOptions(t Timeouts) azcore.ClientOptions {
	return azcore.ClientOptions{
		Transport: httpClient(t),
		Telemetry: policy.TelemetryOptions{ApplicationID: azureAppID(agent())},
		Retry: policy.RetryOptions{
			MaxRetries:    2,
			RetryDelay:    200 * time.Millisecond,
			MaxRetryDelay: 2 * time.Second,
			ShouldRetry:   azShouldRetry,
		},
	}
}

// azShouldRetry is azcore's rule (any transport error, 408, 429, 500,
// 502, 503, 504) except for a timed-out request: azcore would retry it,
// and the callers (the block cache, the commit loop) retry on their own;
// three SDK attempts each would multiply how long a hung store holds a
// reader.
func azShouldRetry(resp *http.Response, err error) bool {
	if err != nil {
		return !timedOut(err)
	}
	return runtime.HasStatusCode(resp, http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout)
}

// azureAppID is "name/version" cut to azcore's 24 characters, the
// version shortened first: azcore would cut the end off blindly.
func azureAppID(name, version string) string {
	name = strings.ReplaceAll(name, " ", "-")
	version = strings.ReplaceAll(version, " ", "-")
	if len(name)+1+len(version) <= azAppIDMax {
		return name + "/" + version
	}
	if len(name)+1+3 > azAppIDMax { // a version cut below 3 characters says nothing
		return name[:min(len(name), azAppIDMax)]
	}
	return name + "/" + version[:azAppIDMax-len(name)-1]
}

// newClient picks the credential: AZURE_STORAGE_KEY (shared key), else
// AZURE_STORAGE_SAS_TOKEN, else Entra ID through DefaultAzureCredential
// (environment, workload identity, managed identity, Azure CLI).
func (s *azureStore) newClient(ctx context.Context, o AzureOptions, svc string) (*azblob.Client, error) {
	opts := &azblob.ClientOptions{ClientOptions: azClientOptions(o.Timeouts)}
	if key := os.Getenv("AZURE_STORAGE_KEY"); key != "" {
		s.cred = "AZURE_STORAGE_KEY"
		kc, err := azblob.NewSharedKeyCredential(o.Account, key)
		if err != nil { // the SDK's message is about base64; it never quotes the key
			return nil, fmt.Errorf("%w: AZURE_STORAGE_KEY is not an account key (base64); copy it from az storage account keys list -n %s",
				ErrCredentials, o.Account)
		}
		return s.client(azblob.NewClientWithSharedKeyCredential(svc, kc, opts))
	}
	if sas := strings.TrimPrefix(os.Getenv("AZURE_STORAGE_SAS_TOKEN"), "?"); sas != "" {
		s.cred = "AZURE_STORAGE_SAS_TOKEN"
		return s.client(azblob.NewClientWithNoCredential(svc+"?"+sas, opts))
	}
	s.cred = "Entra ID (DefaultAzureCredential)"
	if strings.HasPrefix(svc, "http://") {
		return nil, fmt.Errorf("%w: az container %q: the endpoint %s is plain http, which carries no Entra ID token; set AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN, or use https",
			ErrCredentials, s.name, s.endpoint)
	}
	noCred := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("az store %s: %w", s.name, ctx.Err())
		}
		return shortError{msg: fmt.Sprintf("no Azure credentials for az container %q (%s); set AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN, or AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, run under a managed or workload identity, or run az login",
			s.name, errText(err)), err: fmt.Errorf("%w: %w", ErrCredentials, err)}
	}
	cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{ClientOptions: opts.ClientOptions})
	if err != nil {
		return nil, noCred(err)
	}
	// A token now, as S3 retrieves its credentials at open: the chain's
	// failure then reads as such, not as a failed listing.
	if _, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{"https://storage.azure.com/.default"}}); err != nil {
		return nil, noCred(err)
	}
	return s.client(azblob.NewClient(svc, cred, opts))
}

func (s *azureStore) client(c *azblob.Client, err error) (*azblob.Client, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: az store %s at %s: %s", ErrInvalid, s.name, s.endpoint, errText(err))
	}
	return c, nil
}

// openError says what the container check's failure means and what to do.
func (s *azureStore) openError(ctx context.Context, err error) error {
	var re *azcore.ResponseError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("az store %s: %w", s.name, ctx.Err())
	case errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 && s.otherAccount() != "":
		// The request went to another account than the one named: its
		// answer (ResourceNotFound, AuthenticationFailed) says nothing
		// of the container.
		return shortError{msg: fmt.Sprintf("the endpoint %s names account %q but the store URL's account is %q (%s, HTTP %d); check account= and endpoint=",
			s.endpoint, s.otherAccount(), s.account, cmp.Or(re.ErrorCode, http.StatusText(re.StatusCode)), re.StatusCode),
			err: fmt.Errorf("%w: %w", ErrInvalid, err)}
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return fmt.Errorf("%w: az container %q does not exist at %s; create it (az storage container create -n %s) or fix the store URL",
			ErrNotFound, s.name, s.endpoint, s.name)
	case errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden):
		return shortError{msg: fmt.Sprintf("%s refused the credentials from %s for az container %q (%s, HTTP %d); %s",
			s.endpoint, s.cred, s.name, cmp.Or(re.ErrorCode, http.StatusText(re.StatusCode)), re.StatusCode, s.credentialFix()),
			err: fmt.Errorf("%w: %w", ErrCredentials, err)}
	}
	if terr := transportError(s.endpoint, "SSL_CERT_FILE", err); terr != nil {
		if why, ok := unreachable(err); ok && errors.Is(terr, ErrUnreachable) {
			return fmt.Errorf("%w: cannot reach %s for az container %q (%s); check the network, or that the server runs at endpoint=",
				ErrUnreachable, s.endpoint, s.name, why)
		}
		return fmt.Errorf("az store: checking container %q: %w", s.name, terr)
	}
	return fmt.Errorf("az store: checking container %q at %s: %w", s.name, s.endpoint, s.flatten(err))
}

// otherAccount is the account the endpoint names when it is not the
// store's: the first label of an Azure host (ACCOUNT.blob.core.windows.net)
// or the first path segment of a path-style one (Azurite's
// http://host:port/ACCOUNT); "" when they agree or the endpoint names none.
func (s *azureStore) otherAccount() string {
	u, err := url.Parse(s.endpoint)
	if err != nil {
		return ""
	}
	named, _, _ := strings.Cut(strings.Trim(u.Path, "/"), "/")
	if host := u.Hostname(); named == "" && strings.Contains(host, ".blob.") {
		named, _, _ = strings.Cut(host, ".")
	}
	if named == s.account {
		return ""
	}
	return named
}

// refused is a 401 or 403 answer to op: the credential source, what op
// needs of it (a read-only SAS can list, so the open passed, but not
// create) and the fix.
func (s *azureStore) refused(op string, re *azcore.ResponseError, err error) error {
	need := "read"
	switch op {
	case "put", "create":
		need = "write (create)"
	case "delete":
		need = "delete"
	case "list":
		need = "list"
	}
	return shortError{msg: fmt.Sprintf("%s refused the credentials from %s (%s, HTTP %d): a %s needs %s permission; %s",
		s.endpoint, s.cred, cmp.Or(re.ErrorCode, http.StatusText(re.StatusCode)), re.StatusCode, op, need, s.credentialFix()),
		err: fmt.Errorf("%w: %w", ErrCredentials, err)}
}

// credentialFix says how to fix the credential source that was refused.
func (s *azureStore) credentialFix() string {
	switch s.cred {
	case "AZURE_STORAGE_KEY":
		return "check that AZURE_STORAGE_KEY holds a current key of the account in the URL (az storage account keys list)"
	case "AZURE_STORAGE_SAS_TOKEN":
		return "give AZURE_STORAGE_SAS_TOKEN an unexpired SAS for this account that grants read, write, delete and list (sp=rwdl)"
	}
	return "grant the identity the Storage Blob Data Contributor role on the container, or set AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN"
}

func (s *azureStore) key(k string) string { return s.prefix + k }

func (s *azureStore) blob(key string) *blockblob.Client {
	return s.container.NewBlockBlobClient(s.key(key))
}

// flatten gives an SDK error one line, classified: the SDK's own text
// runs to paragraphs and quotes the request URL (a SAS included).
func (s *azureStore) flatten(err error) error {
	if terr := transportError(s.endpoint, "SSL_CERT_FILE", err); terr != nil {
		return terr
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return shortError{msg: errText(err), err: err}
	}
	msg := fmt.Sprintf("%s (HTTP %d)", cmp.Or(re.ErrorCode, http.StatusText(re.StatusCode)), re.StatusCode)
	switch {
	case re.StatusCode == http.StatusNotImplemented:
		err = fmt.Errorf("%w: %w", ErrUnsupported, err)
	case re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= 500:
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		err = fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	return shortError{msg: msg, err: err}
}

// azStatus is the HTTP status of an answer of the service, or 0.
func azStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// classify maps an Azure error to the package's sentinels. Cancellation
// wins.
func (s *azureStore) classify(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("az %s %s: %w", op, key, cerr)
	}
	code := azStatus(err)
	var sentinel error
	var re *azcore.ResponseError
	switch {
	case (code == http.StatusUnauthorized || code == http.StatusForbidden) && errors.As(err, &re):
		return fmt.Errorf("az %s %s: %w", op, key, s.refused(op, re, err))
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return fmt.Errorf("az %s %s: container %q is gone: %w", op, key, s.name, ErrNotFound)
	case bloberror.HasCode(err, bloberror.BlobNotFound) || code == http.StatusNotFound:
		sentinel = ErrNotFound
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) || code == http.StatusPreconditionFailed:
		sentinel = ErrExists
	case bloberror.HasCode(err, bloberror.InvalidRange) || code == http.StatusRequestedRangeNotSatisfiable:
		sentinel = ErrRange
	}
	if sentinel != nil {
		return fmt.Errorf("az %s %s: %w", op, key, sentinel)
	}
	return fmt.Errorf("az %s %s: %w", op, key, s.flatten(err))
}

func (s *azureStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	return s.download(ctx, "get", key, 0, -1)
}

// download opens the n bytes of key at off (n < 0: to the end), resumed
// at the last byte received when a connection is lost (resumeBody).
func (s *azureStore) download(ctx context.Context, op, key string, off, n int64) (io.ReadCloser, error) {
	var etag *azcore.ETag
	open := func(off, n int64) (io.ReadCloser, error) {
		opts := &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: off, Count: max(n, 0)}} // Count 0: to the end
		if etag != nil {
			opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: etag}}
		}
		resp, err := s.blob(key).DownloadStream(ctx, opts)
		if err != nil {
			return nil, s.classify(ctx, op, key, err)
		}
		etag = resp.ETag
		return &body{c: s, ctx: ctx, op: op, key: key, rc: resp.Body}, nil
	}
	first, err := open(off, n)
	if err != nil {
		return nil, err
	}
	return resumable(ctx, first, string(deref(etag, "")), off, n, open), nil
}

func (s *azureStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return readRange(ctx, s, key, off, n)
}

// GetRangeStream implements RangeStreamer.
func (s *azureStore) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if rc, done, err := rangeStart(ctx, s, key, off, n); done {
		return rc, err
	}
	rc, err := s.download(ctx, "get range", key, off, n)
	if err != nil {
		return nil, err
	}
	// Azure answers a range running past the end with the bytes that
	// exist: a short stream means the caller asked past the end.
	return &exactReader{r: rc, left: n, errLine: func(got int64) error {
		return fmt.Errorf("az get range %s [%d,%d): object ends after %d bytes: %w", key, off, off+n, off+got, ErrRange)
	}}, nil
}

// GetTail implements TailGetter. Azure has no suffix range (its Range
// forms are bytes=start- and bytes=start-end), so this is Get Blob
// Properties, which has no body, then one ranged read of the last bytes,
// conditioned on the ETag the first answered so that the size and the
// bytes are of one version of the blob. A read of the first n bytes could
// learn the size from Content-Range, but it needs a second read whenever
// the object is longer than n, the common case, and moves n bytes for
// nothing. Two requests in all, but no more: callers need not Stat.
func (s *azureStore) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	if err := ValidateKey(key); err != nil {
		return nil, 0, err
	}
	bc := s.blob(key)
	for attempt := 1; ; attempt++ {
		props, err := bc.GetProperties(ctx, nil)
		if err != nil {
			return nil, 0, s.classify(ctx, "get tail", key, err)
		}
		size := deref(props.ContentLength, 0)
		k := min(n, size)
		if k == 0 {
			return []byte{}, 0, nil
		}
		resp, err := bc.DownloadStream(ctx, &blob.DownloadStreamOptions{
			Range:            blob.HTTPRange{Offset: size - k, Count: k},
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag}},
		})
		if err != nil {
			if azStatus(err) == http.StatusPreconditionFailed && attempt < 3 && ctx.Err() == nil {
				continue // replaced between the two requests: ask again
			}
			return nil, 0, s.classify(ctx, "get tail", key, err)
		}
		b := make([]byte, k)
		_, err = io.ReadFull(&body{c: s, ctx: ctx, op: "get tail", key: key, rc: resp.Body}, b)
		resp.Body.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("az get tail %s: %w", key, err)
		}
		return b, size, nil
	}
}

func (s *azureStore) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	props, err := s.blob(key).GetProperties(ctx, nil)
	if err != nil {
		return Info{}, s.classify(ctx, "stat", key, err)
	}
	return Info{Key: key, Size: deref(props.ContentLength, 0), ModTime: deref(props.LastModified, time.Time{})}, nil
}

func (s *azureStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put", key, r, size, false)
}

// Create is a write with If-None-Match: * (on the Put Blob, or on the Put
// Block List that makes a large blob visible): of concurrent creates one
// wins, the others get 409 BlobAlreadyExists or 412 ConditionNotMet. A
// repeat by the SDK after a first attempt that landed answers the same;
// the commit path resolves that by reading back.
func (s *azureStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "create", key, r, size, true)
}

// azWriteHeaders keep the service from guessing a content type.
func azWriteHeaders() *blob.HTTPHeaders {
	return &blob.HTTPHeaders{BlobContentType: to.Ptr("application/octet-stream")}
}

func azCondition(exclusive bool) *blob.AccessConditions {
	if !exclusive {
		return nil
	}
	return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}
}

func (s *azureStore) write(ctx context.Context, op, key string, r io.Reader, size int64, exclusive bool) error {
	if err := writeStart(ctx, "az", op, key, size); err != nil {
		return err
	}
	if size > s.blockSize {
		return s.writeBlocks(ctx, op, key, r, size, exclusive)
	}
	data, err := readExactly(r, size)
	if err != nil {
		return fmt.Errorf("az %s %s: %w", op, key, err)
	}
	_, err = s.blob(key).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
		HTTPHeaders:      azWriteHeaders(),
		AccessConditions: azCondition(exclusive),
	})
	if err != nil {
		return s.writeError(ctx, op, key, err, exclusive)
	}
	return nil
}

// writeBlocks stages the object's blocks one at a time from one reused
// buffer and makes it appear whole at Put Block List, which carries the
// create-if-absent condition. The block IDs start with a random tag of
// this upload: concurrent writers of one name stage into the same list
// of uncommitted blocks, and must not commit each other's. A failed or
// cancelled upload leaves its staged blocks uncommitted, invisible, and
// Azure discards them after 7 days: there is nothing to clean up.
func (s *azureStore) writeBlocks(ctx context.Context, op, key string, r io.Reader, size int64, exclusive bool) error {
	bc := s.blob(key)
	blk := max(s.blockSize, (size+azMaxBlocks-1)/azMaxBlocks)
	var tag [8]byte
	_, _ = rand.Read(tag[:])
	buf := make([]byte, blk)
	var ids []string
	for i, left := 0, size; left > 0; i++ {
		if err := ctxErr(ctx, op, key); err != nil {
			return err
		}
		n := min(left, blk)
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return fmt.Errorf("az %s %s: reading block %d of input: %w", op, key, i, err)
		}
		if left -= n; left == 0 {
			if err := expectEOF(r, size); err != nil {
				return fmt.Errorf("az %s %s: %w", op, key, err)
			}
		}
		// IDs of one length (Azure requires it within a blob).
		id := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s-%06d", hex.EncodeToString(tag[:]), i))
		if _, err := bc.StageBlock(ctx, id, streaming.NopCloser(bytes.NewReader(buf[:n])), nil); err != nil {
			return s.classify(ctx, op, key, err)
		}
		ids = append(ids, id)
	}
	if err := ctxErr(ctx, op, key); err != nil {
		return err
	}
	_, err := bc.CommitBlockList(ctx, ids, &blockblob.CommitBlockListOptions{
		HTTPHeaders:      azWriteHeaders(),
		AccessConditions: azCondition(exclusive),
	})
	if err != nil {
		return s.writeError(ctx, op, key, err, exclusive)
	}
	return nil
}

// writeError classifies a failed write. A commit whose blocks another
// writer's commit discarded (every write of a blob drops its uncommitted
// blocks) did not happen: for a create that lost to an object now
// there, ErrExists; else ErrConflict, retry.
func (s *azureStore) writeError(ctx context.Context, op, key string, err error, exclusive bool) error {
	if ctx.Err() == nil && bloberror.HasCode(err, bloberror.InvalidBlockList) {
		if exclusive {
			if _, serr := s.Stat(ctx, key); serr == nil {
				return fmt.Errorf("az %s %s: %w", op, key, ErrExists)
			}
		}
		return fmt.Errorf("az %s %s: another write of the blob discarded its staged blocks: %w", op, key, ErrConflict)
	}
	return s.classify(ctx, op, key, err)
}

// List pages through a flat listing. Azure has no StartAfter and its
// marker is opaque: startFrom (inclusive, service version 2026-02-06)
// starts the listing at `after` where the server has it; a server that
// ignores it (Azurite) lists from the start of the prefix, and the
// skip of keys <= after below keeps the result right either way.
func (s *azureStore) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	opts := &container.ListBlobsFlatOptions{MaxResults: to.Ptr(int32(limit))}
	if p := s.key(prefix); p != "" {
		opts.Prefix = &p
	}
	if after != "" {
		opts.StartFrom = to.Ptr(s.key(after))
	}
	var objs []Info
	for {
		page, err := s.container.NewListBlobsFlatPager(opts).NextPage(ctx)
		if err != nil {
			return nil, false, s.classify(ctx, "list", prefix, err)
		}
		var items []*container.BlobItem
		if page.Segment != nil {
			items = page.Segment.BlobItems
		}
		for _, it := range items {
			k := strings.TrimPrefix(deref(it.Name, ""), s.prefix)
			if k <= after || strings.HasSuffix(k, "/") {
				continue // before the start, or a folder placeholder
			}
			if len(objs) == limit {
				return objs, true, nil
			}
			info := Info{Key: k}
			if p := it.Properties; p != nil {
				info.Size, info.ModTime = deref(p.ContentLength, 0), deref(p.LastModified, time.Time{})
			}
			objs = append(objs, info)
		}
		if deref(page.NextMarker, "") == "" {
			return objs, false, nil
		}
		if len(objs) == limit {
			return objs, true, nil
		}
		// The marker says where to go on; startFrom has done its work.
		opts.Marker, opts.StartFrom = page.NextMarker, nil
	}
}

func (s *azureStore) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	if err := ctxErr(ctx, "delete", keysName(keys)); err != nil {
		return err
	}
	return deleteEach(ctx, keys, azDeleteParallel, func(ctx context.Context, k string) error {
		_, err := s.blob(k).Delete(ctx, nil)
		if err == nil || bloberror.HasCode(err, bloberror.BlobNotFound) {
			return nil
		}
		return s.classify(ctx, "delete", k, err)
	})
}

// deref is *p, or def when the SDK left the field out.
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
