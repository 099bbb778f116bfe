package scale

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// countingProxy forwards to an S3 endpoint and counts the requests by
// area of the stream (log, heartbeat, data, stream, other) and operation
// (get, head, list, put, delete), so that one proxy per role (producer,
// each mount build) splits a run's requests by who made them and why. It
// also records each ranged GET of a data object (key, first byte), so
// that index GETs can be told from data GETs once the objects' layouts
// are known (costRun.split).
type countingProxy struct {
	srv  *http.Server
	addr string

	// sent counts the response bodies passed back: what the clients
	// behind it downloaded.
	sent atomic.Int64

	mu      sync.Mutex
	counts  map[reqKind]int64 // GUARDED_BY(mu)
	objGets []objGet          // GUARDED_BY(mu)
}

// countingWriter counts what a response writes.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// Unwrap lets the reverse proxy's http.ResponseController flush.
func (w countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// reqKind is one (area, op) pair.
type reqKind struct{ area, op string }

// objGet is one GET of a data object: its key (from the stream's root)
// and the first byte asked for (0 without a Range header).
type objGet struct {
	key string
	off int64
}

func startProxy(target *url.URL) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{addr: ln.Addr().String(), counts: map[reqKind]int64{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	// Requests cancelled when a run ends are not errors of the run.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.record(r)
		rp.ServeHTTP(countingWriter{w, &p.sent}, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *countingProxy) record(r *http.Request) {
	k, key := classify(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[k]++
	if k == (reqKind{"data", "get"}) {
		p.objGets = append(p.objGets, objGet{key: key, off: rangeStart(r.Header.Get("Range"))})
	}
}

// classify names a request's area and operation, and for data objects
// the key from "data/" on. LIST is a GET with a prefix parameter; its area
// is its prefix's.
func classify(r *http.Request) (reqKind, string) {
	q := r.URL.Query()
	path := r.URL.Path
	var op string
	switch r.Method {
	case http.MethodGet:
		op = "get"
		if q.Has("list-type") || q.Has("prefix") {
			op, path = "list", q.Get("prefix")
		}
	case http.MethodHead:
		op = "head"
	case http.MethodPut, http.MethodPost:
		op = "put"
	case http.MethodDelete:
		op = "delete"
	default:
		op = "other"
	}
	switch {
	case strings.Contains(path, "_log/"):
		return reqKind{"log", op}, ""
	case strings.Contains(path, "_consumers/"):
		return reqKind{"heartbeat", op}, ""
	case strings.HasSuffix(path, "_stream.json"):
		return reqKind{"stream", op}, ""
	case strings.Contains(path, "data/"):
		return reqKind{"data", op}, path[strings.Index(path, "data/"):]
	}
	return reqKind{"other", op}, ""
}

// rangeStart is the first byte of a "bytes=a-b" Range header (0 if none).
func rangeStart(h string) int64 {
	a, _, ok := strings.Cut(strings.TrimPrefix(h, "bytes="), "-")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(a, 10, 64)
	return n
}

// totals is all requests and the GET-method ones (GET, HEAD, LIST).
func (p *countingProxy) totals() (reqs, gets int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, n := range p.counts {
		reqs += n
		if k.op == "get" || k.op == "head" || k.op == "list" {
			gets += n
		}
	}
	return reqs, gets
}

// take returns what was counted since the last take and starts over.
func (p *countingProxy) take() (map[reqKind]int64, []objGet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, g := p.counts, p.objGets
	p.counts, p.objGets = map[reqKind]int64{}, nil
	return c, g
}

// viaProxy rewrites an s3:// URL's endpoint to a new counting proxy's
// (nil for a store it cannot proxy: file://, or s3:// without endpoint=).
func viaProxy(storeURL string) (string, *countingProxy, error) {
	u, err := url.Parse(storeURL)
	if err != nil || u.Scheme != "s3" {
		return storeURL, nil, err
	}
	q := u.Query()
	ep := q.Get("endpoint")
	if ep == "" {
		return storeURL, nil, nil
	}
	target, err := url.Parse(ep)
	if err != nil {
		return "", nil, err
	}
	p, err := startProxy(target)
	if err != nil {
		return "", nil, err
	}
	q.Set("endpoint", "http://"+p.addr)
	u.RawQuery = q.Encode()
	return u.String(), p, nil
}
