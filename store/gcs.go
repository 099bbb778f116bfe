package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/api/option/internaloption"
	htransport "google.golang.org/api/transport/http"
)

// gcsChunk is the GCS writer's largest request: an object up to it goes
// up in one request from a buffer of its size (so the SDK can retry it),
// a larger one as a resumable upload in chunks of it.
const gcsChunk = 16 << 20

// gcsDeleteParallel bounds the deletes in flight: GCS's JSON API deletes
// one object per request.
const gcsDeleteParallel = 16

// gcsAttempts is how many times the SDK sends one request before the
// error reaches the caller, so that an outage surfaces as ErrUnavailable
// (the SDK's default retries idempotent requests without end).
const gcsAttempts = 3

// gcsKeyEnv holds a service-account key's JSON itself, where
// GOOGLE_APPLICATION_CREDENTIALS names a file of it.
const gcsKeyEnv = "GOOGLE_APPLICATION_CREDENTIALS_JSON"

type gcsStore struct {
	bucket   *storage.BucketHandle
	name     string // the bucket
	prefix   string // "" or "some/prefix/"
	endpoint string // shown in errors: the emulator's, or "GCS"
	cred     string // the credential source, named in errors; "" for none
}

// GCSOptions configure a GCS store.
type GCSOptions struct {
	Bucket string
	Prefix string
	// Endpoint is a JSON API endpoint other than Google's, e.g.
	// http://127.0.0.1:4443 for fake-gcs-server: an http:// one is sent
	// no credentials. Empty: STORAGE_EMULATOR_HOST if set, else GCS.
	Endpoint string
	Timeouts Timeouts
}

// openGCS parses gs://bucket/prefix?endpoint=.
func openGCS(ctx context.Context, u *url.URL, raw string) (Store, error) {
	bad := badURL(raw)
	bucket, prefix, query, err := bucketURL(u, bad, "bucket", "gs")
	if err != nil {
		return nil, err
	}
	o := GCSOptions{Bucket: bucket, Prefix: prefix}
	for k, vs := range query {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			if !validEndpoint(v) {
				return nil, bad(fmt.Sprintf("has endpoint %q", redactEndpoint(v)), "use endpoint=http://host:port")
			}
			o.Endpoint = strings.TrimSuffix(v, "/")
			if strings.HasSuffix(o.Endpoint, gcsAPIPath) {
				// The client adds the path itself: .../storage/v1/storage/v1/
				// would answer 404 and read as a missing bucket.
				return nil, bad(fmt.Sprintf("has endpoint %q, which ends in the JSON API's path %s/", redactEndpoint(v), gcsAPIPath),
					"give the endpoint without its path (endpoint="+redactEndpoint(strings.TrimSuffix(o.Endpoint, gcsAPIPath))+"): the client adds "+gcsAPIPath+"/ itself")
			}
		default:
			return nil, bad(fmt.Sprintf("has unknown parameter %q", k), "use endpoint= (credentials come from GOOGLE_APPLICATION_CREDENTIALS or the metadata server, never the URL)")
		}
	}
	if err := checkGCSBucketName(o.Bucket); err != nil {
		return nil, bad(err.Error(), "GCS bucket names are 3-63 characters of a-z, 0-9, '-', '_' and '.' (up to 222 with dots, each dot-separated part at most 63), beginning and ending with a letter or digit, not an IP address, without \"goog\" at the start or \"google\" anywhere")
	}
	return OpenGCS(ctx, o)
}

// checkGCSBucketName applies GCS's bucket naming rules, which are not
// S3's: underscores are allowed, and a name with dots may run to 222
// characters.
func checkGCSBucketName(b string) error {
	limit := 63
	if strings.Contains(b, ".") {
		limit = 222
	}
	if len(b) < 3 || len(b) > limit {
		return fmt.Errorf("names bucket %q of %d characters", b, len(b))
	}
	for i, c := range b {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && !((c == '-' || c == '_' || c == '.') && i > 0 && i < len(b)-1) {
			return fmt.Errorf("names bucket %q, which has %q at position %d", b, c, i)
		}
	}
	for part := range strings.SplitSeq(b, ".") {
		if part == "" || len(part) > 63 {
			return fmt.Errorf("names bucket %q, which has a dot-separated part of %d characters", b, len(part))
		}
	}
	switch {
	case net.ParseIP(b) != nil:
		return fmt.Errorf("names bucket %q, an IP address", b)
	case strings.HasPrefix(b, "goog") || strings.Contains(b, "google") || strings.Contains(b, "g00gle"):
		return fmt.Errorf("names bucket %q (GCS refuses \"goog\" at the start and \"google\" anywhere)", b)
	}
	return nil
}

// gcsAPIPath is the JSON API's path under an endpoint; the client adds it.
const gcsAPIPath = "/storage/v1"

// OpenGCS connects to a bucket and checks that it can be listed, so that a
// typo or a missing permission fails at start in one line.
func OpenGCS(ctx context.Context, o GCSOptions) (Store, error) {
	s := &gcsStore{name: o.Bucket, endpoint: "GCS"}
	if o.Prefix != "" {
		s.prefix = strings.Trim(o.Prefix, "/") + "/"
	}
	hc := httpClient(o.Timeouts)
	// With our own client the SDK adds no User-Agent of the caller's.
	hc.Transport = agentTransport{rt: hc.Transport, agent: userAgent()}
	opts := []option.ClientOption{
		storage.WithJSONReads(),
		// The SDK would otherwise export its own metrics to Cloud
		// Monitoring, a second service and a second permission.
		storage.WithDisabledClientMetrics(),
	}
	emulator := os.Getenv("STORAGE_EMULATOR_HOST")
	switch {
	case o.Endpoint != "":
		s.endpoint = o.Endpoint
		opts = append(opts, option.WithEndpoint(o.Endpoint+gcsAPIPath+"/"))
		if strings.HasPrefix(o.Endpoint, "http://") {
			opts = append(opts, option.WithoutAuthentication())
		} else if err := s.authorize(ctx, hc); err != nil {
			return nil, err
		}
	case emulator != "":
		s.endpoint = emulator // the SDK sends it no credentials
	default:
		if err := s.authorize(ctx, hc); err != nil {
			return nil, err
		}
	}
	opts = append(opts, option.WithHTTPClient(hc))
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: gs store %s: %w", ErrInvalid, o.Bucket, err)
	}
	client.SetRetry(storage.WithMaxAttempts(gcsAttempts),
		// Put replaces and Delete ignores a missing object, so every
		// request of ours may be sent again; Create's condition makes a
		// repeat that follows a landed first attempt answer 412, which
		// the commit path resolves by reading back.
		storage.WithPolicy(storage.RetryAlways),
		storage.WithErrorFunc(gcsRetryable))
	s.bucket = client.Bucket(o.Bucket)
	// One listing of one name: it needs only the permission every command
	// needs (objects.list), unlike a read of the bucket's metadata.
	it := s.bucket.Objects(ctx, &storage.Query{Prefix: s.prefix, Delimiter: "/"})
	if _, err := iterator.NewPager(it, 1, "").NextPage(new([]*storage.ObjectAttrs)); err != nil {
		return nil, s.openError(ctx, err)
	}
	return s, nil
}

// gcsRetryable is the SDK's rule without our own timeouts: the callers
// retry those, and SDK attempts on top would multiply how long a hung
// store holds a reader.
func gcsRetryable(err error) bool {
	var ge *googleapi.Error
	if errors.As(err, &ge) && ge.Code == http.StatusNotImplemented {
		return false // a 501 stays one
	}
	return !timedOut(err) && storage.ShouldRetry(err)
}

// authorize puts Application Default Credentials on hc's requests, or says
// in one line where they were looked for.
func (s *gcsStore) authorize(ctx context.Context, hc *http.Client) error {
	opts := []option.ClientOption{option.WithScopes(storage.ScopeFullControl),
		// The newer auth library keeps the token endpoint's answer in the
		// error chain (tokenFailure); the older one, chosen by default
		// for a key file or the metadata server, flattens it to text.
		internaloption.EnableNewAuthLibrary()}
	s.cred = "Application Default Credentials (the metadata server or gcloud auth application-default login)"
	if f := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); f != "" {
		s.cred = "GOOGLE_APPLICATION_CREDENTIALS (" + f + ")"
	}
	if key := os.Getenv(gcsKeyEnv); key != "" {
		// A service-account key given as content (a Kubernetes secret's
		// value), kept off the disk and off any command line.
		opts = append(opts, option.WithAuthCredentialsJSON(option.ServiceAccount, []byte(key)))
		s.cred = gcsKeyEnv
	}
	rt, err := htransport.NewTransport(ctx, sentTransport{rt: hc.Transport}, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("gs store %s: %w", s.name, ctx.Err())
		}
		return shortError{msg: fmt.Sprintf("no Google credentials for gs bucket %q (%s); set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file (or "+gcsKeyEnv+" to its content), run under a service account (GCE metadata server, GKE Workload Identity), or run gcloud auth application-default login",
			s.name, errText(err)), err: fmt.Errorf("%w: %w", ErrCredentials, err)}
	}
	hc.Transport = authTransport{rt: rt}
	return nil
}

// openError says what the bucket check's failure means and what to do.
func (s *gcsStore) openError(ctx context.Context, err error) error {
	var ge *googleapi.Error
	if ctx.Err() == nil {
		if terr := s.tokenFailure(err); terr != nil {
			return fmt.Errorf("gs store: checking bucket %q: %w", s.name, terr)
		}
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("gs store %s: %w", s.name, ctx.Err())
	case errors.Is(err, storage.ErrBucketNotExist):
		return fmt.Errorf("%w: gs bucket %q does not exist at %s; create it (gcloud storage buckets create gs://%s) or fix the store URL",
			ErrNotFound, s.name, s.endpoint, s.name)
	case errors.As(err, &ge) && (ge.Code == http.StatusUnauthorized || ge.Code == http.StatusForbidden):
		return shortError{msg: fmt.Sprintf("%s refused these credentials for gs bucket %q (HTTP %d: %s); grant them roles/storage.objectAdmin on the bucket, or fix GOOGLE_APPLICATION_CREDENTIALS",
			s.endpoint, s.name, ge.Code, ge.Message), err: fmt.Errorf("%w: %w", ErrCredentials, err)}
	}
	if terr := transportError(s.endpoint, "SSL_CERT_FILE", err); terr != nil {
		if errors.Is(terr, ErrUnreachable) {
			return fmt.Errorf("%w: cannot reach %s for gs bucket %q (%s); check the network, or that the emulator runs at endpoint= / STORAGE_EMULATOR_HOST",
				ErrUnreachable, s.endpoint, s.name, terr)
		}
		return fmt.Errorf("gs store: checking bucket %q: %w", s.name, terr)
	}
	return fmt.Errorf("gs store: checking bucket %q at %s: %w", s.name, s.endpoint, s.flatten(err))
}

func (s *gcsStore) key(k string) string { return s.prefix + k }

// flatten gives an SDK error one line, classified.
func (s *gcsStore) flatten(err error) error {
	if terr := s.tokenFailure(err); terr != nil {
		return terr
	}
	if terr := transportError(s.endpoint, "SSL_CERT_FILE", err); terr != nil {
		return terr
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return shortError{msg: errText(err), err: err}
	}
	msg := fmt.Sprintf("%s (HTTP %d)", cmp.Or(redactText(ge.Message), http.StatusText(ge.Code)), ge.Code)
	switch {
	case ge.Code == http.StatusNotImplemented:
		err = fmt.Errorf("%w: %w", ErrUnsupported, err)
	case ge.Code == http.StatusTooManyRequests || ge.Code >= 500:
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	case ge.Code == http.StatusUnauthorized || ge.Code == http.StatusForbidden:
		err = fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	return shortError{msg: msg, err: err}
}

// classify maps a GCS error to the package's sentinels. Cancellation wins.
func (s *gcsStore) classify(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("gs %s %s: %w", op, key, cerr)
	}
	var ge *googleapi.Error
	code := 0
	if errors.As(err, &ge) {
		code = ge.Code
	}
	var sentinel error
	switch {
	case errors.Is(err, storage.ErrBucketNotExist): // before the 404 it also is
		return fmt.Errorf("gs %s %s: bucket %q is gone: %w", op, key, s.name, ErrNotFound)
	case errors.Is(err, storage.ErrObjectNotExist) || code == http.StatusNotFound:
		sentinel = ErrNotFound
	case code == http.StatusPreconditionFailed:
		sentinel = ErrExists
	case code == http.StatusRequestedRangeNotSatisfiable:
		sentinel = ErrRange
	}
	if sentinel != nil {
		return fmt.Errorf("gs %s %s: %w", op, key, sentinel)
	}
	return fmt.Errorf("gs %s %s: %w", op, key, s.flatten(err))
}

func (s *gcsStore) obj(key string) *storage.ObjectHandle { return s.bucket.Object(s.key(key)) }

func (s *gcsStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	r, err := s.obj(key).NewReader(ctx)
	if err != nil {
		return nil, s.classify(ctx, "get", key, err)
	}
	return &body{c: s, ctx: ctx, op: "get", key: key, rc: r}, nil
}

func (s *gcsStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return readRange(ctx, s, key, off, n)
}

// GetRangeStream implements RangeStreamer.
func (s *gcsStore) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if rc, done, err := rangeStart(ctx, s, key, off, n); done {
		return rc, err
	}
	r, err := s.obj(key).NewRangeReader(ctx, off, n)
	if err != nil {
		return nil, s.classify(ctx, "get range", key, err)
	}
	// GCS answers a range running past the end with the bytes that exist.
	return &exactReader{r: &body{c: s, ctx: ctx, op: "get range", key: key, rc: r}, left: n, errLine: func(got int64) error {
		return fmt.Errorf("gs get range %s [%d,%d): object ends after %d bytes: %w", key, off, off+n, off+got, ErrRange)
	}}, nil
}

// GetTail implements TailGetter with one suffix read; the size comes
// with the response.
func (s *gcsStore) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	if err := ValidateKey(key); err != nil {
		return nil, 0, err
	}
	r, err := s.obj(key).NewRangeReader(ctx, -n, -1)
	if err != nil {
		err = s.classify(ctx, "get tail", key, err)
		if errors.Is(err, ErrRange) {
			// An empty object has no suffix to return.
			info, serr := s.Stat(ctx, key)
			if serr != nil {
				return nil, 0, serr
			}
			if info.Size == 0 {
				return []byte{}, 0, nil
			}
		}
		return nil, 0, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(&body{c: s, ctx: ctx, op: "get tail", key: key, rc: r}, n+1))
	if err != nil {
		return nil, 0, err
	}
	size := r.Attrs.Size
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	if int64(len(b)) != min(n, size) {
		return nil, 0, fmt.Errorf("gs get tail %s: %d bytes for the last %d of %d: %w", key, len(b), n, size, ErrRange)
	}
	return b, size, nil
}

func (s *gcsStore) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	a, err := s.obj(key).Attrs(ctx)
	if err != nil {
		return Info{}, s.classify(ctx, "stat", key, err)
	}
	return Info{Key: key, Size: a.Size, ModTime: a.Updated}, nil
}

func (s *gcsStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put", key, r, size, false)
}

// Create is an upload with the DoesNotExist precondition
// (ifGenerationMatch=0): of concurrent creates one wins, the others get
// 412.
func (s *gcsStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "create", key, r, size, true)
}

func (s *gcsStore) write(ctx context.Context, op, key string, r io.Reader, size int64, exclusive bool) error {
	if err := writeStart(ctx, "gs", op, key, size); err != nil {
		return err
	}
	// The SDK's loop around a one-request upload knows no attempt limit
	// (only the context ends it), so this write counts its own failures.
	var failures int
	o := s.obj(key).Retryer(storage.WithErrorFunc(func(err error) bool {
		failures++
		return failures < gcsAttempts && gcsRetryable(err)
	}))
	if exclusive {
		o = o.If(storage.Conditions{DoesNotExist: true})
	}
	// Cancelling the writer's context is how an upload is given up: the
	// object is then not written at all.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := o.NewWriter(wctx)
	w.ContentType = "application/octet-stream" // no sniffing of the first bytes
	w.ChunkSize = int(min(max(size, 1), gcsChunk))
	if _, err := io.CopyN(w, r, size); err != nil {
		cancel()
		_ = w.Close()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("gs %s %s: input ended before %d bytes: %w", op, key, size, io.ErrUnexpectedEOF)
		}
		return s.classify(ctx, op, key, err)
	}
	if err := expectEOF(r, size); err != nil {
		cancel()
		_ = w.Close()
		return fmt.Errorf("gs %s %s: %w", op, key, err)
	}
	if err := w.Close(); err != nil {
		return s.classify(ctx, op, key, err)
	}
	return nil
}

func (s *gcsStore) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	q := &storage.Query{Prefix: s.key(prefix)}
	if after != "" {
		// StartOffset is inclusive; the smallest key after `after`.
		q.StartOffset = s.key(after) + "\x00"
	}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, false, fmt.Errorf("gs list %s: %w", prefix, err)
	}
	var page []*storage.ObjectAttrs
	token, err := iterator.NewPager(s.bucket.Objects(ctx, q), limit, "").NextPage(&page)
	if err != nil {
		return nil, false, s.classify(ctx, "list", prefix, err)
	}
	objs := make([]Info, 0, len(page))
	for _, a := range page {
		k := strings.TrimPrefix(a.Name, s.prefix)
		if k <= after || strings.HasSuffix(k, "/") {
			continue // folder placeholders some tools create
		}
		objs = append(objs, Info{Key: k, Size: a.Size, ModTime: a.Updated})
	}
	return objs, token != "", nil
}

func (s *gcsStore) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	if err := ctxErr(ctx, "delete", keysName(keys)); err != nil {
		return err
	}
	return deleteEach(ctx, keys, gcsDeleteParallel, func(ctx context.Context, k string) error {
		err := s.obj(k).Delete(ctx)
		if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
			return nil
		}
		return s.classify(ctx, "delete", k, err)
	})
}

// firstLine is an error's first line: some SDK errors run to paragraphs.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// agentTransport puts the binary's name first in every request's
// User-Agent, before the SDK's own.
type agentTransport struct {
	rt    http.RoundTripper
	agent string
}

func (t agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set("User-Agent", strings.TrimSpace(t.agent+" "+req.Header.Get("User-Agent")))
	return t.rt.RoundTrip(r)
}
