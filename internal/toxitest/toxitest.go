// Package toxitest puts a faulty network between a test's processes and
// its store server: one Toxiproxy server (a separate process, so the
// proxying is neither slowed by the race detector nor stopped with the
// test's goroutines) and one proxy ("link") per process, so that a
// partition or a slow link hits one node and not the others. This kernel
// has no netem qdisc, so faults are made at the TCP proxy: latency with
// jitter, bandwidth, blackholes that keep the connection open, resets,
// bodies cut after N bytes, refused connections.
//
// Under CI (CI set in the environment) a missing toxiproxy-server is a
// test failure; elsewhere the test is skipped with the install command.
package toxitest

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/lakestream/lakestream/internal/testproc"
)

// InstallHint is how to get the server binary.
const InstallHint = "make tools (or: GOBIN=$PWD/.tools/toxiproxy go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 && mv .tools/toxiproxy/server .tools/bin/toxiproxy-server)"

// Server is a running toxiproxy-server and its API client.
type Server struct {
	*testproc.Proc
	client *toxiproxy.Client
}

// Binary finds toxiproxy-server: $TOXIPROXY_SERVER, $LAKEFS_TOOLS/bin, the
// repository's .tools/bin, then PATH.
func Binary() (string, error) { return testproc.Find("TOXIPROXY_SERVER", "bin/toxiproxy-server") }

// Start starts a server, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("toxiproxy-server not found under CI: %v; install it with %s", err, InstallHint)
		}
		t.Skipf("toxiproxy-server not found (%v); install it with %s", err, InstallHint)
	}
	p, err := testproc.Launch(testproc.Options{Name: "toxiproxy-server", Bin: bin, Log: quiet{},
		Args: func(addr string) []string {
			host, port, _ := strings.Cut(addr, ":")
			return []string{"-host", host, "-port", port}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGKILL) })
	return &Server{Proc: p, client: toxiproxy.NewClient(p.Addr)}
}

// quiet drops the server's per-connection log lines.
type quiet struct{}

func (quiet) Write(b []byte) (int, error) { return len(b), nil }

// Link is one process's network path to the store: a proxy on its own
// 127.0.0.1 port. Its methods replace whatever fault was on before.
type Link struct {
	Name string
	Addr string // the proxy's listen address
	p    *toxiproxy.Proxy

	mu     sync.Mutex
	toxics []string // GUARDED_BY(mu): the current fault's toxics
	made   int      // GUARDED_BY(mu): toxics ever added, for unique names
}

// Link makes a proxy named name to upstream (host:port) on a free port.
func (s *Server) Link(t testing.TB, name, upstream string) *Link {
	t.Helper()
	p, err := s.client.CreateProxy(name, "127.0.0.1:0", upstream)
	if err != nil {
		t.Fatalf("toxiproxy: creating link %s: %v", name, err)
	}
	return &Link{Name: name, Addr: p.Listen, p: p}
}

// add puts one toxic on the link in stream ("upstream": to the store,
// "downstream": to the client) and returns its name.
func (l *Link) add(typ, stream string, attrs toxiproxy.Attributes) (string, error) {
	l.made++
	name := fmt.Sprintf("%s_%s_%d", typ, stream, l.made)
	var err error
	for range 5 {
		// The server's API gives up (an HTML timeout page) when a link's
		// pipes are slow to take the new toxic, as when its client has
		// stopped reading; the toxic may be on anyway.
		if _, err = l.p.AddToxic(name, typ, stream, 1, attrs); err == nil || l.has(name) {
			return name, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "", fmt.Errorf("toxiproxy: %s on link %s: %w", typ, l.Name, err)
}

// has says whether the link has the toxic name.
func (l *Link) has(name string) bool {
	ts, err := l.p.Toxics()
	if err != nil {
		return false
	}
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}

// set replaces the link's fault with toxics, each (type, stream, attrs).
// The new toxics go on before the old come off, so a link changed from
// slow to dark is never perfect in between (a body the slow link held
// back would rush through). A blackhole does not read what reaches it,
// and Toxiproxy drains a toxic it removes into the next one, so the old
// toxics stay on under a blackhole (nothing flows past it anyway) and
// come off with it.
func (l *Link) set(toxics ...toxic) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.toxics
	blackhole := false
	for _, tx := range toxics {
		name, err := l.add(tx.typ, tx.stream, tx.attrs)
		if err != nil {
			return err
		}
		l.toxics = append(l.toxics, name)
		blackhole = blackhole || tx.typ == "timeout" && tx.attrs["timeout"] == 0
	}
	if !blackhole {
		l.toxics = l.toxics[len(old):]
		if err := l.remove(old); err != nil {
			return err
		}
	}
	return l.enable()
}

type toxic struct {
	typ, stream string
	attrs       toxiproxy.Attributes
}

// remove takes the toxics names off the link, the last added first: each
// drains into what was added after it, which is gone or reads.
func (l *Link) remove(names []string) error {
	for _, n := range slices.Backward(names) {
		var err error
		for range 5 {
			if err = l.p.RemoveToxic(n); err == nil || !l.has(n) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil && l.has(n) {
			return fmt.Errorf("toxiproxy: removing %s from link %s: %w", n, l.Name, err)
		}
	}
	return nil
}

// enable lets connections through a link that Refuse disabled.
func (l *Link) enable() error {
	if l.p.Enabled {
		return nil
	}
	if err := l.p.Enable(); err != nil {
		return fmt.Errorf("toxiproxy: enabling link %s: %w", l.Name, err)
	}
	return nil
}

// clear removes the current toxics and enables the link.
func (l *Link) clear() error {
	old := l.toxics
	l.toxics = nil
	if err := l.remove(old); err != nil {
		return err
	}
	return l.enable()
}

// Heal ends the link's fault: the network is perfect again.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clear()
}

// Partition blackholes the link: every byte either way is dropped and
// every connection, new or open, stays open (a partition as TCP sees it:
// no RST, no FIN, nothing).
func (l *Link) Partition() error {
	return l.set(toxic{"timeout", "upstream", toxiproxy.Attributes{"timeout": 0}},
		toxic{"timeout", "downstream", toxiproxy.Attributes{"timeout": 0}})
}

// HalfOpen lets requests reach the store but drops every answer, the
// connections held open: writes the store applies while their client
// never learns it (a NAT or load balancer that lost the connection's
// state on the way back).
func (l *Link) HalfOpen() error {
	return l.set(toxic{"timeout", "downstream", toxiproxy.Attributes{"timeout": 0}})
}

// Slow makes the link slow: bytesPerSec each way, and latency with
// jitter (uniform within ±jitter) on every chunk to the client.
func (l *Link) Slow(bytesPerSec int64, latency, jitter time.Duration) error {
	kb := max(1, bytesPerSec/1000)
	return l.set(
		toxic{"latency", "downstream", toxiproxy.Attributes{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}},
		toxic{"bandwidth", "downstream", toxiproxy.Attributes{"rate": kb}},
		toxic{"bandwidth", "upstream", toxiproxy.Attributes{"rate": kb}})
}

// CutAfter closes each connection after n bytes to the client: bodies cut
// mid-stream.
func (l *Link) CutAfter(n int64) error {
	return l.set(toxic{"limit_data", "downstream", toxiproxy.Attributes{"bytes": n}})
}

// Reset resets every connection (TCP RST) after after.
func (l *Link) Reset(after time.Duration) error {
	return l.set(toxic{"reset_peer", "upstream", toxiproxy.Attributes{"timeout": after.Milliseconds()}})
}

// Refuse disables the link: connections are refused, open ones closed.
func (l *Link) Refuse() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Disabled first: the old fault stays on until nothing flows.
	if err := l.p.Disable(); err != nil {
		return fmt.Errorf("toxiproxy: disabling link %s: %w", l.Name, err)
	}
	old := l.toxics
	l.toxics = nil
	return l.remove(old)
}

// Storm puts everything on the link at once: latency with jitter, a
// bandwidth limit, the stream cut into small slices, and connections
// reset now and then.
func (l *Link) Storm(bytesPerSec int64, latency, jitter time.Duration) error {
	kb := max(1, bytesPerSec/1000)
	return l.set(
		toxic{"latency", "downstream", toxiproxy.Attributes{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}},
		toxic{"bandwidth", "downstream", toxiproxy.Attributes{"rate": kb}},
		toxic{"slicer", "downstream", toxiproxy.Attributes{"average_size": 1500, "size_variation": 1000, "delay": 200}},
		toxic{"slow_close", "downstream", toxiproxy.Attributes{"delay": 2000}},
		toxic{"reset_peer", "upstream", toxiproxy.Attributes{"timeout": 3000}})
}

// Via returns storeURL with its endpoint= pointed at the link, so that a
// process given it reaches the store through the link. storeURL must name
// its server by endpoint= (s3://, gs:// and az:// test URLs do).
func (l *Link) Via(storeURL string) (string, error) { return Route(storeURL, l.Addr) }

// Route is storeURL with its endpoint= sent to addr (host:port), its
// scheme and path kept: how a test puts a proxy of its own in front of a
// store.
func Route(storeURL, addr string) (string, error) {
	base, query, ok := strings.Cut(storeURL, "?")
	if !ok {
		return "", fmt.Errorf("toxitest: %s has no endpoint= to route", storeURL)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("toxitest: %s: %w", storeURL, err)
	}
	ep, err := url.Parse(q.Get("endpoint"))
	if err != nil || ep.Host == "" {
		return "", fmt.Errorf("toxitest: %s has no endpoint= to route", storeURL)
	}
	ep.Host = addr
	q.Set("endpoint", ep.String())
	return base + "?" + q.Encode(), nil
}

// Upstream is the host:port of storeURL's endpoint=.
func Upstream(storeURL string) (string, error) {
	_, query, _ := strings.Cut(storeURL, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", err
	}
	ep, err := url.Parse(q.Get("endpoint"))
	if err != nil || ep.Host == "" {
		return "", fmt.Errorf("toxitest: %s has no endpoint=", storeURL)
	}
	return ep.Host, nil
}
