// Package store is Lakestream's object-store layer: one small interface and
// its backends (file://, s3://, gs://, az://, mem://), a create-if-absent
// probe, the store's clock (Clock: the one clock processes on different
// machines share) and a fault-injecting wrapper for tests.
//
// Invariants every backend keeps (the conformance suite in store/storetest
// checks them):
//   - A reader never sees a partial object under its final key: Put and
//     Create publish the whole object at once or not at all.
//   - Create is atomic create-if-absent: of any number of concurrent Creates
//     of one key exactly one returns nil; the others return ErrExists (or
//     ErrConflict, meaning "lost, retry") and the winner's bytes stay.
//   - Keys are clean relative slash-separated paths (see ValidateKey); a key
//     can never name anything outside the store's root.
//   - Every call honours its context: a cancelled context fails the call
//     with an error that wraps ctx.Err().
//
// Errors are classified with errors.Is against the sentinels below; nothing
// above this package inspects backend-specific errors.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors. Backends wrap them with %w and the key involved.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists: Create lost because the key already holds an object.
	ErrExists = errors.New("object already exists")
	// ErrConflict: a conditional write collided with another one in flight
	// (S3's 409 ConditionalRequestConflict). The write did not happen; the
	// caller should re-read and retry. It is not ErrExists.
	ErrConflict = errors.New("conditional write conflict, retry")
	// ErrRange: a ranged read extends past the end of the object.
	ErrRange = errors.New("range not satisfiable")
	// ErrInvalid: a bad key or store URL. Retrying cannot help.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnreachable: the store's server could not be reached at all (no
	// connection, no such host); no request got an answer.
	ErrUnreachable = errors.New("store unreachable")
	// ErrUnavailable: the server answered but cannot serve now (HTTP 5xx,
	// throttling); the same request may succeed later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrUnsupported: the store does not implement the request (HTTP
	// 501), such as a conditional write on a store without them. Retrying
	// cannot help.
	ErrUnsupported = errors.New("not implemented by the store")
	// ErrLocal: a limit of this process or machine (no file descriptor
	// left, EMFILE/ENFILE) stopped the request before it reached the
	// store. It says nothing of the store, whose health must not be judged
	// by it; it is not Transient (waiting for the store cannot cure it).
	ErrLocal = errors.New("local resource limit")
)

// Transient reports whether err is a store failure that waiting may cure:
// the server unreachable or answering that it cannot serve now. Not found,
// exists, invalid, a corrupt object or a cancelled context are not.
func Transient(err error) bool {
	return errors.Is(err, ErrUnreachable) || errors.Is(err, ErrUnavailable)
}

// Info describes one stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store is an object store rooted at a prefix. All keys are relative to that
// root. Implementations are safe for concurrent use.
type Store interface {
	// Get opens the whole object for reading. The caller closes the reader.
	// A missing key is ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)

	// GetRange returns exactly the n bytes at [off, off+n). n == 0 returns an
	// empty slice without I/O. A range that extends past the end of the
	// object is ErrRange (never a short read); a missing key is ErrNotFound.
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)

	// Stat returns the object's size and modification time, or ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)

	// Put stores size bytes read from r under key, replacing any object
	// there. The object appears whole or not at all. r must yield exactly
	// size bytes.
	Put(ctx context.Context, key string, r io.Reader, size int64) error

	// Create stores the object only if key holds none: atomic
	// create-if-absent. If an object exists it returns ErrExists and leaves
	// it unchanged; ErrConflict means a concurrent conditional write got in
	// the way and nothing was written. Any other error leaves the outcome
	// unknown (the object may exist): callers resolve it by reading.
	Create(ctx context.Context, key string, r io.Reader, size int64) error

	// List returns up to limit objects whose keys start with prefix and sort
	// strictly after `after` (byte order), in ascending key order. more
	// reports whether further keys may follow the last one returned; pass
	// that key as `after` to continue. limit <= 0 means a backend default
	// (1000).
	List(ctx context.Context, prefix, after string, limit int) (objs []Info, more bool, err error)

	// Delete removes the keys. Keys that do not exist are not an error, so
	// Delete is idempotent.
	Delete(ctx context.Context, keys ...string) error
}

// DefaultListLimit is the page size when List is given limit <= 0; it is
// also S3's maximum page.
const DefaultListLimit = 1000

// ValidateKey reports whether key is a clean relative slash-separated path:
// non-empty, at most 1024 bytes, no leading or trailing slash, no empty, "."
// or ".." elements, no backslash or NUL, and not inside a backend's reserved
// directory.
func ValidateKey(key string) error {
	bad := func(why, fix string) error {
		return fmt.Errorf("%w: key %q %s; %s", ErrInvalid, key, why, fix)
	}
	switch {
	case key == "":
		return bad("is empty", "name an object")
	case len(key) > 1024:
		return bad("is longer than 1024 bytes", "use a shorter key")
	case strings.ContainsAny(key, "\\\x00"):
		return bad("contains a backslash or NUL", "use '/'-separated printable names")
	case strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/"):
		return bad("starts or ends with '/'", "use a relative key like \"dir/name\"")
	}
	for i, el := range strings.Split(key, "/") {
		switch {
		case el == "" || el == "." || el == "..":
			return bad("has an empty, \".\" or \"..\" element", "use a clean relative key without \"..\"")
		case i == 0 && el == reservedDir:
			return bad("is in the store's reserved directory", "choose another name")
		}
	}
	return nil
}

// ValidatePrefix accepts "" (everything) or a key prefix: the same rules as
// ValidateKey except that a trailing slash is allowed.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateKey(strings.TrimSuffix(prefix, "/"))
}

// reservedDir holds the file backend's temporary files. It is invalid as a
// key's first element on every backend so that all behave alike.
const reservedDir = ".lakefs-tmp"

// Open opens the store named by rawURL:
//
//	file:///abs/dir                          a local directory (the default)
//	s3://bucket/prefix?endpoint=&region=&path-style=true
//	gs://bucket/prefix?endpoint=             Google Cloud Storage
//	az://container/prefix?account=&endpoint= Azure Blob Storage
//	mem://name                               in-process and empty, for unit tests
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%w: store URL %q is not a URL; %s", ErrInvalid, Redact(rawURL), schemesHint)
	}
	// Messages quote the URL without anything that may be a secret.
	shown := Redact(rawURL)
	if where := userinfoIn(u); where != "" {
		return nil, fmt.Errorf("%w: store URL %q carries credentials (user:secret@ %s); remove them and give them through the cloud's credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_KEY) or, under Kubernetes, the volume's secret", ErrInvalid, shown, where)
	}
	switch u.Scheme {
	case "file":
		return openFile(u, shown)
	case "s3":
		return openS3(ctx, u, shown)
	case "gs":
		return openGCS(ctx, u, shown)
	case "az":
		return openAzure(ctx, u, shown)
	case "mem":
		return openMem(u, shown)
	default:
		return nil, fmt.Errorf("%w: store URL %q has unknown scheme %q; %s", ErrInvalid, shown, u.Scheme, schemesHint)
	}
}

// schemesHint lists the store URL forms, for errors about a URL.
const schemesHint = "use file:///abs/dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"

// ErrCredentials classifies missing, unknown or insufficient credentials.
var ErrCredentials = errors.New("store credentials")

// badURL makes the errors of a store URL: ErrInvalid, the URL (redacted)
// and what is wrong with it, then the fix.
func badURL(shown string) func(why, fix string) error {
	return func(why, fix string) error {
		return fmt.Errorf("%w: store URL %q %s; %s", ErrInvalid, shown, why, fix)
	}
}

// bucketURL takes the parts every bucket URL has (s3://, gs://, az://):
// the bucket or container (what), the clean prefix and the query, parsed
// strictly (u.Query() would drop a malformed pair, endpoint= included).
func bucketURL(u *url.URL, bad func(why, fix string) error, what, scheme string) (bucket, prefix string, query url.Values, err error) {
	if u.Host == "" || u.Opaque != "" {
		return "", "", nil, bad("names no "+what, "use "+scheme+"://"+what+"/prefix")
	}
	query, err = url.ParseQuery(u.RawQuery)
	switch {
	case err != nil && strings.Contains(u.RawQuery, ";") && scheme == "az":
		// account=NAME;AccountKey=...: a connection string, key included.
		return "", "", nil, bad("has ';' in its query, so it looks like it holds a connection string", azAccountFix)
	case err != nil && strings.Contains(u.RawQuery, ";"):
		return "", "", nil, bad("has ';' in its query", "separate parameters with '&'")
	case err != nil:
		return "", "", nil, bad("has a malformed query ("+err.Error()+")", "escape '%' as %25 in parameter values")
	}
	for k, vs := range query {
		if len(vs) > 1 { // which one was meant cannot be known
			return "", "", nil, bad(fmt.Sprintf("gives %s= %d times", k, len(vs)), "give each parameter once")
		}
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" && ValidateKey(prefix) != nil {
		return "", "", nil, bad("has an invalid prefix", "use "+scheme+"://"+what+"/clean/prefix without '..' or '//'")
	}
	return u.Host, prefix, query, nil
}

// validEndpoint tells an endpoint= value that is an http(s) URL with a
// host.
func validEndpoint(v string) bool {
	e, err := url.Parse(v)
	return err == nil && (e.Scheme == "http" || e.Scheme == "https") && e.Host != ""
}

// writeStart checks a write of a network backend before any request.
func writeStart(ctx context.Context, scheme, op, key string, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%w: %s %s %s: negative size %d", ErrInvalid, scheme, op, key, size)
	}
	return ctxErr(ctx, op, key)
}

// userinfoIn says where u carries user info ("in the URL", "in
// endpoint="), or "" when it carries none: at the top level, in
// endpoint= (with or without a scheme) or in any query value that is
// itself a URL, such as token=https://key:secret@host.
func userinfoIn(u *url.URL) string {
	if u.User != nil {
		return "in the URL"
	}
	// The raw pairs, not u.Query(): that drops a pair it cannot unescape.
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		uv, err := url.QueryUnescape(v)
		if err != nil {
			uv = v
		}
		if hasUserinfo(uv, k == "endpoint") || hasUserinfo(v, k == "endpoint") {
			return "in " + k + "="
		}
	}
	return ""
}

// hasUserinfo reports whether the authority of v (after scheme://, or from
// the start when bare, up to the first '/', '?' or '#') holds an '@'.
// It does not ask url.Parse: a secret holding '%' breaks the parse, not
// the leak.
func hasUserinfo(v string, bare bool) bool {
	_, rest, ok := strings.Cut(v, "://")
	if !ok {
		if !bare {
			return false
		}
		rest = v
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Contains(rest, "@")
}

// Redact is a store URL fit for logs and messages: user info (also inside
// endpoint=) and the values of query parameters other than the known,
// harmless ones are replaced by "xxxxx", so that a secret put in the URL
// is never printed.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k, vs := range q {
			switch k {
			case "region", "path-style", "part-size":
			case "account":
				for i, v := range vs {
					if checkAzureAccount(v) != nil { // may be a key or a connection string
						vs[i] = "xxxxx"
					}
				}
			case "endpoint":
				for i, v := range vs {
					vs[i] = redactEndpoint(v)
				}
			default:
				q[k] = []string{"xxxxx"}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// redactText is msg with every URL in it fit to print: user info and the
// whole query (a SAS, a signed URL's signature) become "xxxxx". Every
// message built from a request error's text goes through it (errText):
// the SDKs' errors quote the request URL, a SAS included.
func redactText(msg string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, "://")
		if i < 0 {
			break
		}
		start := i
		for start > 0 && schemeChar(msg[start-1]) {
			start--
		}
		end := i + len("://")
		for end < len(msg) && !strings.ContainsRune(" \t\r\n\"'`<>", rune(msg[end])) {
			end++
		}
		b.WriteString(msg[:start])
		b.WriteString(redactURLText(msg[start:end]))
		msg = msg[end:]
	}
	b.WriteString(msg)
	return b.String()
}

func schemeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// redactURLText redacts one URL found in text, without url.Parse: a
// secret holding '%' breaks the parse, not the leak. Anything up to the
// last '@' before the query is taken for user info (a '/' in a password
// would end the authority early).
func redactURLText(u string) string {
	scheme, rest, _ := strings.Cut(u, "://")
	query := ""
	if q := strings.IndexAny(rest, "?#"); q >= 0 {
		rest, query = rest[:q], "?xxxxx"
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = "xxxxx" + rest[at:]
	}
	return scheme + "://" + rest + query
}

// redactEndpoint keeps an endpoint's scheme, host and path, which say
// where the store is, and drops its user info.
func redactEndpoint(v string) string {
	if !hasUserinfo(v, true) {
		return v
	}
	if e, err := url.Parse(v); err == nil && e.User != nil && e.Host != "" {
		e.User = url.User("xxxxx")
		return e.String()
	}
	return "xxxxx"
}

// ReadAll reads a whole object into memory.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return b, nil
}

// PutBytes stores b under key, replacing any object there.
func PutBytes(ctx context.Context, s Store, key string, b []byte) error {
	return s.Put(ctx, key, bytes.NewReader(b), int64(len(b)))
}

// CreateBytes stores b under key only if key holds no object.
func CreateBytes(ctx context.Context, s Store, key string, b []byte) error {
	return s.Create(ctx, key, bytes.NewReader(b), int64(len(b)))
}

// Walker is a Store that lists a whole prefix in one pass more cheaply
// than page by page (the file store reads a directory once, not once per
// page). Walk uses it.
type Walker interface {
	Walk(ctx context.Context, prefix, after string, fn func(Info) error) error
}

// Walk calls fn for every object under prefix after after in key order,
// one page at a time (or in one pass on a Walker), until fn returns an
// error or the listing ends.
func Walk(ctx context.Context, s Store, prefix, after string, fn func(Info) error) error {
	if w, ok := s.(Walker); ok {
		return w.Walk(ctx, prefix, after, fn)
	}
	return walkPages(ctx, s, prefix, after, fn)
}

func walkPages(ctx context.Context, s Store, prefix, after string, fn func(Info) error) error {
	for {
		objs, more, err := s.List(ctx, prefix, after, DefaultListLimit)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := fn(o); err != nil {
				return err
			}
		}
		if !more || len(objs) == 0 {
			return nil
		}
		after = objs[len(objs)-1].Key
	}
}

// ctxErr wraps a done context's error so callers can test errors.Is(err,
// context.Canceled).
// keysName names a batch of keys in one short line: a delete of a
// thousand keys must not print them all in its error.
func keysName(keys []string) string {
	switch len(keys) {
	case 0:
		return "(no keys)"
	case 1:
		return keys[0]
	}
	return fmt.Sprintf("%d keys (%s ...)", len(keys), keys[0])
}

func ctxErr(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return nil
}

// RangeStreamer is implemented by stores that can stream a range rather
// than return it in a new buffer, so that a reader of many blocks fills
// its own reused buffers: each byte touches memory once, with no copy.
// Wrappers (Faulty, test counters) need not implement it: GetRangeStream
// falls back to GetRange.
type RangeStreamer interface {
	// GetRangeStream opens the n bytes at [off, off+n) for reading. A range
	// past the end of the object is ErrRange, from the call or from a Read
	// (never a short stream ending in io.EOF); a missing key is
	// ErrNotFound. The caller closes the reader.
	GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
}

// TailGetter is implemented by stores that return an object's last bytes
// and its size in one request (S3: a suffix range, "bytes=-n"), so a TGB's
// self-description, kept at the end of its object, costs one GET. Wrappers
// should forward it; GetTail falls back to Stat and GetRange (two
// requests) for a store without it.
type TailGetter interface {
	// GetTail returns the last min(n, size) bytes of the object and its
	// size; n must be positive. A missing key is ErrNotFound.
	GetTail(ctx context.Context, key string, n int64) (tail []byte, size int64, err error)
}

// GetTail returns the last min(n, size) bytes of key and its size, through
// s.GetTail when s has it.
func GetTail(ctx context.Context, s Store, key string, n int64) ([]byte, int64, error) {
	if n <= 0 {
		return nil, 0, fmt.Errorf("%w: tail of %s: %d bytes asked; ask for at least one", ErrInvalid, key, n)
	}
	if tg, ok := s.(TailGetter); ok {
		return tg.GetTail(ctx, key, n)
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	k := min(n, info.Size)
	b, err := s.GetRange(ctx, key, info.Size-k, k)
	return b, info.Size, err
}

// Upload is a multipart upload in progress: its parts are stored (and
// billed) but in no listing of objects until it completes or is aborted.
type Upload struct {
	Key       string    `json:"key"`
	ID        string    `json:"upload_id"`
	Initiated time.Time `json:"initiated"`
}

// UploadLister is implemented by stores whose large writes go up as
// multipart uploads (S3), so that gc can abort the ones a killed writer
// left. Wrappers (Faulty, test counters) need not implement it.
type UploadLister interface {
	// ListUploads returns the uploads in progress whose keys start with
	// prefix.
	ListUploads(ctx context.Context, prefix string) ([]Upload, error)
	// AbortUpload aborts one; an upload already gone is not an error.
	AbortUpload(ctx context.Context, key, id string) error
}

// GetRangeStream streams the n bytes at [off, off+n) of key, through
// s.GetRangeStream when s has it, else through GetRange.
func GetRangeStream(ctx context.Context, s Store, key string, off, n int64) (io.ReadCloser, error) {
	if rs, ok := s.(RangeStreamer); ok {
		return rs.GetRangeStream(ctx, key, off, n)
	}
	b, err := s.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// readRange is GetRange of a RangeStreamer: its stream read into one new
// buffer.
func readRange(ctx context.Context, s RangeStreamer, key string, off, n int64) ([]byte, error) {
	rc, err := s.GetRangeStream(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := make([]byte, n)
	if _, err := io.ReadFull(rc, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// rangeStart checks a ranged read of an HTTP backend before its request
// and answers the empty range, which HTTP cannot express (the contract
// still reports a missing object, so it stats). done means rc and err are
// the answer.
func rangeStart(ctx context.Context, s Store, key string, off, n int64) (rc io.ReadCloser, done bool, err error) {
	if err := ValidateKey(key); err != nil {
		return nil, true, err
	}
	if err := checkRange(key, off, n); err != nil {
		return nil, true, err
	}
	if n > 0 {
		return nil, false, nil
	}
	if _, err := s.Stat(ctx, key); err != nil {
		return nil, true, err
	}
	return io.NopCloser(bytes.NewReader(nil)), true, nil
}

// classifier maps a backend's errors to the package's sentinels.
type classifier interface {
	classify(ctx context.Context, op, key string, err error) error
}

// body classifies the errors of a response body's reads as the call's
// own errors are.
type body struct {
	rc      io.ReadCloser
	c       classifier
	ctx     context.Context
	op, key string
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == nil, err == io.EOF:
	case errors.Is(err, io.ErrUnexpectedEOF):
		// The connection closed before the body's length: lost on the
		// way (a reset, a middlebox that dropped it), not a bad object,
		// so callers retry it as they retry a store they cannot reach.
		err = fmt.Errorf("%s %s: the connection was lost mid-body: %w: %w", b.op, b.key, ErrUnreachable, err)
	default:
		err = b.c.classify(b.ctx, b.op, b.key, err)
	}
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }

// exactReader yields exactly n bytes of r: a stream that ends early is
// ErrRange, as GetRange reports a range past the end.
type exactReader struct {
	r       io.ReadCloser
	left    int64
	errLine func(got int64) error
	got     int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	e.got += int64(n)
	if err == io.EOF {
		if e.left > 0 {
			return n, e.errLine(e.got)
		}
		return n, nil
	}
	return n, err
}

func (e *exactReader) Close() error { return e.r.Close() }
