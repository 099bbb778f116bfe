package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Per-request timeouts of the network backends, S3, GCS and Azure
// (docs/RELIABILITY.md). A server that accepts connections and never answers, or stops in the middle of a
// body, fails the request instead of hanging it. None of them bounds a
// whole transfer: a large body takes as long as its bytes keep moving.
const (
	// DefaultConnectTimeout bounds the TCP connect.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultFirstByteTimeout bounds the wait for the response headers,
	// counted from the end of the request body.
	DefaultFirstByteTimeout = 10 * time.Second
	// DefaultIdleTimeout bounds the time a request body is not taken, or a
	// response body sends nothing.
	DefaultIdleTimeout = 10 * time.Second
)

// timeoutError is a request given up by one of the timeouts above.
type timeoutError struct {
	what string
	d    time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("%s for %s", e.what, e.d)
}

// Timeout lets callers (and the SDK) see it as a network timeout.
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

var _ net.Error = (*timeoutError)(nil)

// buildableClient is the SDK's HTTP client with the connect and first-byte
// timeouts. It stays a *BuildableClient while the configuration loads:
// that is the only type AWS_CA_BUNDLE can be applied to.
func buildableClient(connect, firstByte time.Duration, tr func(*http.Transport)) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = connect }).
		WithTransportOptions(tr, func(t *http.Transport) { t.ResponseHeaderTimeout = firstByte })
}

// idleClient adds the idle timeouts net/http lacks:
// Transport.ResponseHeaderTimeout covers the first byte, but nothing
// covers a body that stalls after it, and a read deadline on the
// connection would also fire during a long upload (the reason the SDK
// exempts S3 from its own read timeout).
type idleClient struct {
	c    aws.HTTPClient
	idle time.Duration
}

// Do sends req under a context of its own, which an idle timer cancels:
// cancelling is the one way to unblock a transport stuck in a read or a
// write of that connection.
func (tc idleClient) Do(req *http.Request) (*http.Response, error) {
	return idleDo(tc.c.Do, tc.idle, req)
}

// idleTransport is idleClient as an http.RoundTripper, the form the GCS
// and Azure SDKs take.
type idleTransport struct {
	rt   http.RoundTripper
	idle time.Duration
}

func (t idleTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return idleDo(t.rt.RoundTrip, t.idle, req)
}

// idleDo sends a copy of req through do, with the idle timers on its
// bodies. The caller's request is not changed (a RoundTripper must not).
func idleDo(do func(*http.Request) (*http.Response, error), idle time.Duration, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	req = req.WithContext(ctx)
	var up *requestBody
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength > 0 {
		// Only with a known length: a body of unknown type and no length
		// would be sent chunked. No GetBody: the transport must not switch
		// to a body this timer does not see (the SDK retries instead).
		up = &requestBody{rc: req.Body, cancel: cancel, idle: idle}
		req.Body, req.GetBody = up, nil
	}
	resp, err := do(req)
	if up != nil {
		up.finish() // the first-byte timeout took over when the body was sent
	}
	if err != nil {
		if cause := context.Cause(ctx); isTimeout(cause) {
			err = cause
		}
		cancel(nil)
		return resp, err
	}
	resp.Body = &responseBody{rc: resp.Body, ctx: ctx, cancel: cancel, idle: idle}
	return resp, nil
}

// Timeouts are a store's per-request timeouts; zero fields take the
// defaults above.
type Timeouts struct {
	Connect, FirstByte, Idle time.Duration
}

// httpClient is the HTTP client of the GCS and Azure backends: the
// connect and first-byte timeouts on the transport, the idle timeouts
// around it, and a connection pool sized for parallel ranged reads.
func httpClient(t Timeouts) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: cmp.Or(t.Connect, DefaultConnectTimeout), KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = cmp.Or(t.FirstByte, DefaultFirstByteTimeout)
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: idleTransport{rt: tr, idle: cmp.Or(t.Idle, DefaultIdleTimeout)}}
}

func isTimeout(err error) bool {
	var te *timeoutError
	return errors.As(err, &te)
}

// responseBody cancels its request when one Read takes longer than idle.
// The timer runs only inside Read, so a caller that is slow between reads
// is never cut off.
type responseBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
}

func (b *responseBody) Read(p []byte) (int, error) {
	if b.timer == nil {
		b.timer = time.AfterFunc(b.idle, func() {
			b.cancel(&timeoutError{what: "the server sent no response body bytes", d: b.idle})
		})
	} else {
		b.timer.Reset(b.idle)
	}
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF {
		if cause := context.Cause(b.ctx); isTimeout(cause) {
			err = cause
		}
	}
	return n, err
}

func (b *responseBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.rc.Close()
	b.cancel(nil) // the response is done: release the request's context
	return err
}

// requestBody cancels its request when the transport takes no bytes of it
// for idle: the timer runs from the return of one Read to the next (the
// transport writes in between), until the response's headers arrive.
type requestBody struct {
	rc     io.ReadCloser
	cancel context.CancelCauseFunc
	idle   time.Duration

	mu    sync.Mutex
	timer *time.Timer // GUARDED_BY(mu)
	done  bool        // GUARDED_BY(mu)
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	if err == nil {
		b.mu.Lock()
		switch {
		case b.done:
		case b.timer == nil:
			b.timer = time.AfterFunc(b.idle, func() {
				b.cancel(&timeoutError{what: "the server took no request body bytes", d: b.idle})
			})
		default:
			b.timer.Reset(b.idle)
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *requestBody) Close() error { return b.rc.Close() }

func (b *requestBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if b.timer != nil {
		b.timer.Stop()
	}
}

// noTimeoutRetry keeps the SDK from retrying a request that timed out: the
// callers (the block cache, the commit loop) retry on their own, and three
// SDK attempts each would multiply how long a hung store holds a reader.
func noTimeoutRetry(err error) aws.Ternary {
	if timedOut(err) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// timedOut tells a request given up by a timeout: ours above, or the
// transport's connect and first-byte ones. No SDK retries it.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
