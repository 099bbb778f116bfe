package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/lakestream/lakestream/internal/backoff"
)

// DefaultPartSize is the multipart threshold and part size of the S3 backend.
// Objects up to it go in one PutObject; larger ones in parts of this size.
// Each in-flight upload buffers at most one part: the SDK needs a seekable
// body to sign a request over plain HTTP.
const DefaultPartSize = 16 << 20

// minPartSize is S3's lower bound for every part but the last.
const minPartSize = 5 << 20

// deleteBatch is DeleteObjects' limit on keys per request.
const deleteBatch = 1000

type s3Store struct {
	client   *s3.Client
	endpoint string // as given; "" for AWS
	bucket   string
	prefix   string // "" or "some/prefix/" (with the trailing slash)
	partSize int64
	// writeOpts apply to every PutObject and UploadPart: on a loopback http
	// endpoint, UNSIGNED-PAYLOAD (see loopbackHTTP).
	writeOpts []func(*s3.Options)
}

// S3Options configure an S3 store; OpenS3 with the zero value talks to AWS
// through the standard credential and region chain.
type S3Options struct {
	Bucket    string
	Prefix    string
	Endpoint  string // e.g. http://127.0.0.1:9000; empty for AWS
	Region    string // empty: from the environment, else us-east-1
	PathStyle bool
	PartSize  int64 // 0: DefaultPartSize
	// Per-request timeouts; 0: DefaultConnectTimeout,
	// DefaultFirstByteTimeout, DefaultIdleTimeout.
	ConnectTimeout, FirstByteTimeout, IdleTimeout time.Duration
}

// openS3 parses s3://bucket/prefix?endpoint=&region=&path-style=&part-size=.
func openS3(ctx context.Context, u *url.URL, raw string) (Store, error) {
	bad := badURL(raw)
	bucket, prefix, query, err := bucketURL(u, bad, "bucket", "s3")
	if err != nil {
		return nil, err
	}
	o := S3Options{Bucket: bucket, Prefix: prefix}
	for k, vs := range query {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			if !validEndpoint(v) {
				return nil, bad(fmt.Sprintf("has endpoint %q", v), "use endpoint=http://host:port")
			}
			o.Endpoint = v
		case "region":
			o.Region = v
		case "path-style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad(fmt.Sprintf("has path-style=%q", v), "use path-style=true or false")
			}
			o.PathStyle = b
		case "part-size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < minPartSize || n > 5<<30 {
				return nil, bad(fmt.Sprintf("has part-size=%q", v), "use a byte count from 5242880 to 5368709120")
			}
			o.PartSize = n
		default:
			return nil, bad(fmt.Sprintf("has unknown parameter %q", k), "use endpoint=, region=, path-style= or part-size=")
		}
	}
	if err := checkBucketName(o.Bucket); err != nil {
		return nil, bad(err.Error(), "bucket names are 3-63 characters of a-z, 0-9, '.' and '-', beginning and ending with a letter or digit")
	}
	return OpenS3(ctx, o)
}

// OpenS3 connects to a bucket and checks that it exists, so that a typo in
// the URL fails at start with a clear error rather than on the first commit.
func OpenS3(ctx context.Context, o S3Options) (Store, error) {
	var loadOpts []func(*config.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	// Raise the idle pool so parallel ranged GETs reuse connections instead
	// of churning them.
	loadOpts = append(loadOpts, config.WithHTTPClient(buildableClient(
		cmp.Or(o.ConnectTimeout, DefaultConnectTimeout), cmp.Or(o.FirstByteTimeout, DefaultFirstByteTimeout),
		func(t *http.Transport) {
			t.MaxIdleConns = 256
			t.MaxIdleConnsPerHost = 64
		})))
	// The SDK's own log lines (an IMDS warning when no credentials are
	// found) would be a second, confusing report of what we say below.
	loadOpts = append(loadOpts, config.WithLogger(logging.Nop{}))
	name, version := agent()
	loadOpts = append(loadOpts, config.WithAppID(name+"/"+version))
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: loading AWS configuration: %w", o.Bucket, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cfg.HTTPClient = idleClient{c: cfg.HTTPClient, idle: cmp.Or(o.IdleTimeout, DefaultIdleTimeout)}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("s3 store %s: %w", o.Bucket, ctx.Err())
		}
		return nil, fmt.Errorf("%w: no AWS credentials found for s3 bucket %q; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE with a credentials file)",
			ErrCredentials, o.Bucket)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		// The app id comes out as "app/lakefs-mount-v1" ('/' is not
		// allowed in it); this adds the plain "lakefs-mount/v1" token.
		so.APIOptions = append(so.APIOptions, awsmiddleware.AddUserAgentKeyValue(name, version))
		// Default checksums break multipart completes on some S3-compatible
		// servers; our own CRC32C in the manifest verifies the bytes.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		so.DisableLogOutputChecksumValidationSkipped = true
		so.Retryer = retry.NewStandard(func(ro *retry.StandardOptions) {
			ro.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(noTimeoutRetry)}, ro.Retryables...)
		})
	})
	s := &s3Store{client: client, endpoint: o.Endpoint, bucket: o.Bucket, partSize: o.PartSize}
	if loopbackHTTP(o.Endpoint) {
		s.writeOpts = []func(*s3.Options){func(so *s3.Options) {
			so.APIOptions = append(so.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
		}}
	}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	if o.Prefix != "" {
		s.prefix = strings.Trim(o.Prefix, "/") + "/"
	}
	// A GET, not HeadBucket: a HEAD error has no body, so a wrong key, a
	// wrong secret and a missing bucket all look alike (versitygw answers
	// a bare 404 to all of them). One level under the store's prefix
	// (Delimiter): a server that lists from a directory tree (versitygw)
	// otherwise reads the first directory it descends into whole, the
	// log's million versions included: 1.7 s of every mount's start.
	_, err = client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(o.Bucket), Prefix: aws.String(s.prefix),
		Delimiter: aws.String("/"), MaxKeys: aws.Int32(1)})
	if err != nil {
		return nil, openError(ctx, o, s, err)
	}
	return s, nil
}

// openError says what the bucket check's failure means and what to do.
func openError(ctx context.Context, o S3Options, s *s3Store, err error) error {
	at := endpointName(o.Endpoint)
	// Without endpoint= the request went to AWS: a bucket on another
	// server then looks missing, denied or unknown.
	hint := ""
	if o.Endpoint == "" {
		hint = " (the store URL has no endpoint=, so this went to AWS; for another S3 server add endpoint=http://host:port)"
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("s3 store %s: %w", o.Bucket, ctx.Err())
	case isCode(err, 0, "NoSuchBucket"):
		return fmt.Errorf("%w: s3 bucket %q does not exist at %s; create it (aws s3 mb s3://%s) or fix the store URL%s",
			ErrNotFound, o.Bucket, at, o.Bucket, hint)
	case isCode(err, 0, "InvalidAccessKeyId", "XAdminUserNotFound"): // the latter: versitygw
		return fmt.Errorf("%w: %s does not know the access key in AWS_ACCESS_KEY_ID (or your AWS profile); fix the access key%s",
			ErrCredentials, at, hint)
	case isCode(err, 0, "SignatureDoesNotMatch"):
		return fmt.Errorf("%w: %s rejected the request signature: the secret key (AWS_SECRET_ACCESS_KEY) does not match the access key; fix the secret key%s",
			ErrCredentials, at, hint)
	case isCode(err, 403, "AccessDenied"):
		return fmt.Errorf("%w: access to s3 bucket %q at %s denied for these credentials; grant them s3:ListBucket, GetObject, PutObject and DeleteObject on it%s",
			ErrCredentials, o.Bucket, at, hint)
	}
	if why, ok := misconfigured(err, "AWS_CA_BUNDLE"); ok {
		return fmt.Errorf("%w: the S3 endpoint %s: %s", ErrInvalid, at, why)
	}
	if localLimit(err) {
		return fmt.Errorf("s3 store: checking bucket %q at %s: %w", o.Bucket, at, s.flatten(err))
	}
	if why, ok := unreachable(err); ok {
		if o.Endpoint == "" {
			return fmt.Errorf("%w: cannot reach AWS S3 for bucket %q (%s); the store URL has no endpoint=: for another S3 server add endpoint=http://host:port, else check the network and region=",
				ErrUnreachable, o.Bucket, why)
		}
		return fmt.Errorf("%w: cannot reach the S3 endpoint %s (%s); check that the server is running there and that endpoint= in the store URL has the right scheme, host and port",
			ErrUnreachable, at, why)
	}
	return fmt.Errorf("s3 store: checking bucket %q at %s: %w", o.Bucket, at, s.flatten(err))
}

// checkBucketName applies S3's bucket naming rules, so a bad name is
// reported as such before any request (servers answer it with a bare 400).
func checkBucketName(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("names bucket %q of %d characters", b, len(b))
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (c == '.' || c == '-') && i > 0 && i < len(b)-1
		if !ok {
			return fmt.Errorf("names bucket %q, which has %q at position %d", b, c, i)
		}
	}
	if strings.Contains(b, "..") || net.ParseIP(b) != nil {
		return fmt.Errorf("names bucket %q (no \"..\", not an IP address)", b)
	}
	return nil
}

// loopbackHTTP tells an http:// endpoint on this machine. Its uploads send
// UNSIGNED-PAYLOAD instead of the body's SHA-256 in the SigV4 signature:
// the hash was a seventh of the client's CPU at 16 producers, and what it
// guards, the body between client and server, never leaves the kernel on
// loopback (headers, key and length stay signed; our CRC32Cs in the manifest
// still verify the data on read). Any other endpoint, https or remote, keeps
// signing the payload.
func loopbackHTTP(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

func endpointName(e string) string {
	if e == "" {
		return "AWS"
	}
	return redactEndpoint(e)
}

func (s *s3Store) key(k string) string { return s.prefix + k }

// isCode reports whether err is an S3 error with one of the given codes or
// the given HTTP status (HEAD responses carry no code, only a status).
func isCode(err error, status int, codes ...string) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		for _, c := range codes {
			if ae.ErrorCode() == c {
				return true
			}
		}
	}
	var re *awshttp.ResponseError
	return status != 0 && errors.As(err, &re) && re.HTTPStatusCode() == status
}

// flatten keeps the SDK's error chain but gives it one line: the SDK's
// messages embed request IDs and retry details that are noise to operators.
func (s *s3Store) flatten(err error) error {
	if terr := transportError(endpointName(s.endpoint), "AWS_CA_BUNDLE", err); terr != nil {
		return terr
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		msg := ae.ErrorCode()
		if m := ae.ErrorMessage(); m != "" && m != msg {
			msg += ": " + redactText(m)
		}
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			msg += fmt.Sprintf(" (HTTP %d)", re.HTTPStatusCode())
		}
		switch {
		case isCode(err, http.StatusNotImplemented, "NotImplemented"):
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		case unavailable(err):
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return shortError{msg: msg, err: err}
	}
	if unavailable(err) {
		return shortError{msg: ErrUnavailable.Error() + ": " + errText(err), err: fmt.Errorf("%w: %w", ErrUnavailable, err)}
	}
	return shortError{msg: errText(err), err: err}
}

// unavailable tells an answer that says "not now": a 5xx status or one of
// S3's throttling codes (after the SDK's own retries gave up).
func unavailable(err error) bool {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 && re.HTTPStatusCode() != http.StatusNotImplemented {
		return true
	}
	return isCode(err, 0, "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException", "RequestLimitExceeded")
}

// shortError says msg but still wraps the SDK's error for errors.Is/As:
// the SDK's text carries RequestID/HostID trailers no operator needs.
type shortError struct {
	msg string
	err error
}

func (e shortError) Error() string { return e.msg }
func (e shortError) Unwrap() error { return e.err }

// classify maps an S3 error to the package's sentinels. Cancellation wins:
// the SDK wraps it in its own operation error.
func (s *s3Store) classify(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("s3 %s %s: %w", op, key, cerr)
	}
	var sentinel error
	switch {
	case isCode(err, 404, "NoSuchKey", "NotFound"):
		sentinel = ErrNotFound
	case isCode(err, 412, "PreconditionFailed"):
		sentinel = ErrExists
	case isCode(err, 0, "ConditionalRequestConflict"):
		// A concurrent conditional write was in flight: the outcome of ours
		// is "lost, retry", not "exists".
		sentinel = ErrConflict
	case isCode(err, 416, "InvalidRange"):
		sentinel = ErrRange
	case isCode(err, 0, "NoSuchBucket"):
		return fmt.Errorf("s3 %s %s: bucket %q is gone: %w", op, key, s.bucket, ErrNotFound)
	}
	if sentinel != nil {
		return fmt.Errorf("s3 %s %s: %w", op, key, sentinel)
	}
	return fmt.Errorf("s3 %s %s: %w", op, key, s.flatten(err))
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	return s.getObject(ctx, "get", key, 0, -1)
}

// getObject opens the n bytes of key at off (n < 0: all of the object),
// resumed at the last byte received when a connection is lost
// (resumeBody).
func (s *s3Store) getObject(ctx context.Context, op, key string, off, n int64) (io.ReadCloser, error) {
	var etag *string
	open := func(off, n int64) (io.ReadCloser, error) {
		in := &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(key)), IfMatch: etag}
		switch {
		case n > 0:
			in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		case off > 0:
			in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
		}
		out, err := s.client.GetObject(ctx, in)
		if err != nil {
			return nil, s.classify(ctx, op, key, err)
		}
		etag = out.ETag
		return &body{c: s, ctx: ctx, op: op, key: key, rc: out.Body}, nil
	}
	first, err := open(off, n)
	if err != nil {
		return nil, err
	}
	return resumable(ctx, first, aws.ToString(etag), off, n, open), nil
}

func (s *s3Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return readRange(ctx, s, key, off, n)
}

// GetRangeStream implements RangeStreamer: the response body, read into
// the caller's buffers.
func (s *s3Store) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if rc, done, err := rangeStart(ctx, s, key, off, n); done {
		return rc, err
	}
	rc, err := s.getObject(ctx, "get range", key, off, n)
	if err != nil {
		return nil, err
	}
	// S3 answers a range that runs past the end with the bytes that exist:
	// a short stream means the caller asked past the end.
	return &exactReader{r: rc, left: n, errLine: func(got int64) error {
		return fmt.Errorf("s3 get range %s [%d,%d): object ends after %d bytes: %w", key, off, off+n, off+got, ErrRange)
	}}, nil
}

// GetTail implements TailGetter with one suffix-range GET; the size
// comes from its Content-Range.
func (s *s3Store) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	if err := ValidateKey(key); err != nil {
		return nil, 0, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &s.bucket,
		Key:    aws.String(s.key(key)),
		Range:  aws.String(fmt.Sprintf("bytes=-%d", n)),
	})
	if err != nil {
		err = s.classify(ctx, "get tail", key, err)
		if errors.Is(err, ErrRange) {
			// An empty object has no suffix to return (416).
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
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(&body{c: s, ctx: ctx, op: "get tail", key: key, rc: out.Body}, n+1))
	if err != nil {
		return nil, 0, err
	}
	size := int64(len(b)) // a server that ignored the range sent it all
	if cr := aws.ToString(out.ContentRange); cr != "" {
		_, total, ok := strings.Cut(cr, "/")
		if size, err = strconv.ParseInt(total, 10, 64); !ok || err != nil {
			return nil, 0, fmt.Errorf("s3 get tail %s: unreadable Content-Range %q", key, cr)
		}
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	if int64(len(b)) != min(n, size) {
		return nil, 0, fmt.Errorf("s3 get tail %s: %d bytes for the last %d of %d: %w", key, len(b), n, size, ErrRange)
	}
	return b, size, nil
}

func (s *s3Store) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(key))})
	if err != nil {
		return Info{}, s.classify(ctx, "stat", key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put", key, r, size, false)
}

func (s *s3Store) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "create", key, r, size, true)
}

func (s *s3Store) write(ctx context.Context, op, key string, r io.Reader, size int64, exclusive bool) error {
	if err := writeStart(ctx, "s3", op, key, size); err != nil {
		return err
	}
	if size > s.partSize {
		return s.writeMultipart(ctx, op, key, r, size, exclusive)
	}
	data, err := readExactly(r, size)
	if err != nil {
		return fmt.Errorf("s3 %s %s: %w", op, key, err)
	}
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           aws.String(s.key(key)),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(size),
	}
	if exclusive {
		in.IfNoneMatch = aws.String("*")
	}
	if _, err := s.client.PutObject(ctx, in, s.writeOpts...); err != nil {
		return s.classify(ctx, op, key, err)
	}
	return nil
}

// drainTimeout bounds how long a cancelled multipart upload waits for its
// request in flight and then for its abort: a stopping process waits at
// most about twice this.
const drainTimeout = 5 * time.Second

// writeMultipart uploads parts one at a time, reusing one buffer, and makes
// the object appear at CompleteMultipartUpload, which carries the
// create-if-absent condition. A failed or cancelled upload is aborted so
// that no parts are left billing in the bucket.
//
// Cancelling ctx stops the upload between requests, but the request in
// flight runs to its end (for at most drainTimeout): a part cut off after
// its body was sent can still be stored by the server after the abort,
// outside any upload that a listing shows (seen on versitygw).
func (s *s3Store) writeMultipart(ctx context.Context, op, key string, r io.Reader, size int64, exclusive bool) (err error) {
	full := aws.String(s.key(key))
	rctx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(drainTimeout, cancelRequests) })
	defer stop()
	mp, err := s.client.CreateMultipartUpload(rctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: full})
	if err != nil {
		return s.classify(ctx, op, key, err)
	}
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
		defer cancel()
		s.abort(actx, full, mp.UploadId)
	}()

	buf := make([]byte, s.partSize)
	var parts []types.CompletedPart
	for num, left := int32(1), size; left > 0; num++ {
		if err := ctxErr(ctx, op, key); err != nil {
			return err
		}
		n := min(left, s.partSize)
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return fmt.Errorf("s3 %s %s: reading part %d of input: %w", op, key, num, err)
		}
		left -= n
		if left == 0 {
			if err := expectEOF(r, size); err != nil {
				return fmt.Errorf("s3 %s %s: %w", op, key, err)
			}
		}
		out, err := s.client.UploadPart(rctx, &s3.UploadPartInput{
			Bucket:        &s.bucket,
			Key:           full,
			UploadId:      mp.UploadId,
			PartNumber:    aws.Int32(num),
			Body:          bytes.NewReader(buf[:n]),
			ContentLength: aws.Int64(n),
		}, s.writeOpts...)
		if err != nil {
			return s.classify(ctx, op, key, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
	}
	if err := ctxErr(ctx, op, key); err != nil {
		return err // aborted rather than left as an orphan for gc
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             full,
		UploadId:        mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if exclusive {
		in.IfNoneMatch = aws.String("*")
	}
	if _, err := s.client.CompleteMultipartUpload(rctx, in); err != nil {
		return s.classify(ctx, op, key, err)
	}
	return nil
}

// abort aborts an upload until ListParts confirms it is gone, or ctx
// ends: a part whose request was still being handled when an abort went
// out can land after it. What is left when ctx ends is gc's to abort.
func (s *s3Store) abort(ctx context.Context, key, id *string) {
	for {
		_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: key, UploadId: id})
		if err == nil || isCode(err, 404, "NoSuchUpload") {
			out, err := s.client.ListParts(ctx, &s3.ListPartsInput{Bucket: &s.bucket, Key: key, UploadId: id})
			if isCode(err, 404, "NoSuchUpload") || err == nil && len(out.Parts) == 0 {
				return
			}
		}
		if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return
		}
	}
}

// ListUploads implements UploadLister.
func (s *s3Store) ListUploads(ctx context.Context, prefix string) ([]Upload, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: aws.String(s.key(prefix))}
	var ups []Upload
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, s.classify(ctx, "list uploads", prefix, err)
		}
		for _, u := range out.Uploads {
			ups = append(ups, Upload{Key: strings.TrimPrefix(aws.ToString(u.Key), s.prefix), ID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(out.IsTruncated) || out.NextKeyMarker == nil {
			return ups, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// AbortUpload implements UploadLister.
func (s *s3Store) AbortUpload(ctx context.Context, key, id string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: aws.String(s.key(key)), UploadId: aws.String(id)})
	if err != nil && !isCode(err, 404, "NoSuchUpload") {
		return s.classify(ctx, "abort upload", key, err)
	}
	return nil
}

func (s *s3Store) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	in := &s3.ListObjectsV2Input{
		Bucket:  &s.bucket,
		Prefix:  aws.String(s.key(prefix)),
		MaxKeys: aws.Int32(int32(limit)),
	}
	if after != "" {
		in.StartAfter = aws.String(s.key(after))
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, false, s.classify(ctx, "list", prefix, err)
	}
	objs := make([]Info, 0, len(out.Contents))
	for _, o := range out.Contents {
		k := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
		if k <= after || strings.HasSuffix(k, "/") {
			continue // directory markers some servers report
		}
		objs = append(objs, Info{Key: k, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
	}
	return objs, aws.ToBool(out.IsTruncated), nil
}

func (s *s3Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	if err := ctxErr(ctx, "delete", keysName(keys)); err != nil {
		return err
	}
	for start := 0; start < len(keys); start += deleteBatch {
		batch := keys[start:min(start+deleteBatch, len(keys))]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.key(k))}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return s.classify(ctx, "delete", batch[0], err)
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			return fmt.Errorf("s3 delete %s: %s: %s", strings.TrimPrefix(aws.ToString(e.Key), s.prefix), aws.ToString(e.Code), aws.ToString(e.Message))
		}
	}
	return nil
}
