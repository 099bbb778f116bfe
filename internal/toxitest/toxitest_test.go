package toxitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestLinkFaults checks each fault does to a real HTTP exchange through
// the link what its name says, and that Heal undoes it.
func TestLinkFaults(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	l := Start(t).Link(t, "node", strings.TrimPrefix(srv.URL, "http://"))
	get := func(timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+l.Addr+"/", nil)
		// A fresh connection each time (a fault applies to open ones
		// too, but this checks what a new request meets), kept alive as
		// an SDK's are: a server that closes after answering would make
		// a half-open link look closed.
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, err := get(10 * time.Second); err != nil || n != len(body) {
		t.Fatalf("healthy link: %d bytes, %v", n, err)
	}

	must(l.Partition())
	if _, err := get(time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("partitioned: %v, want the request to hang until its deadline", err)
	}
	must(l.HalfOpen())
	if _, err := get(time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("half-open: %v, want the request to hang until its deadline", err)
	}
	must(l.CutAfter(64 << 10))
	if n, err := get(10 * time.Second); err == nil || n >= len(body) {
		t.Errorf("cut after 64 KiB: %d bytes, %v; want a short body and an error", n, err)
	}
	must(l.Refuse())
	if _, err := get(10 * time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		var op *net.OpError
		if !errors.As(err, &op) {
			t.Errorf("refused: %v, want connection refused", err)
		}
	}
	must(l.Slow(4<<20, 20*time.Millisecond, 10*time.Millisecond))
	if n, err := get(20 * time.Second); err != nil || n != len(body) {
		t.Errorf("slow link: %d bytes, %v; a slow but moving body must arrive whole", n, err)
	}
	must(l.Heal())
	if n, err := get(10 * time.Second); err != nil || n != len(body) {
		t.Errorf("healed: %d bytes, %v", n, err)
	}
}

// TestChangeNeverPerfect checks a link changed from one fault to another
// is never perfect in between: a stream held back by a slow link must
// not rush through while it goes dark (the store's idle-timeout test read
// a whole body there).
func TestChangeNeverPerfect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := make([]byte, 64<<10)
		for range 4096 { // 256 MiB at most
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	l := Start(t).Link(t, "node", ln.Addr().String())
	if err := l.Slow(1<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(time.Second)
	before := got.Load()
	if err := l.Partition(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	// A slow link's pipe holds a chunk or two; a perfect one moves
	// megabytes in the milliseconds a change takes.
	if through := got.Load() - before; through > 1<<20 {
		t.Errorf("%d bytes went through while the link went from slow to dark; want at most 1 MiB", through)
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
}

func TestVia(t *testing.T) {
	l := &Link{Addr: "127.0.0.1:9"}
	for in, want := range map[string]string{
		"s3://b/p?endpoint=http://127.0.0.1:7000":                  "s3://b/p?endpoint=http%3A%2F%2F127.0.0.1%3A9",
		"az://c/p?account=dev&endpoint=http://127.0.0.1:10000/dev": "az://c/p?account=dev&endpoint=http%3A%2F%2F127.0.0.1%3A9%2Fdev",
		"gs://b/p?endpoint=http%3A%2F%2F127.0.0.1%3A4443&x=1":      "gs://b/p?endpoint=http%3A%2F%2F127.0.0.1%3A9&x=1",
	} {
		if got, err := l.Via(in); err != nil || got != want {
			t.Errorf("Via(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := l.Via("file:///tmp/x"); err == nil {
		t.Error("Via of a URL without endpoint= succeeded")
	}
}
