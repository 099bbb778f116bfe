package store_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/store"
)

// TestReadsReuseOneConnection: one reader's reads, one after another, go
// over one kept-alive connection on every backend. A rank's reader sends
// a GET per file; a connection per GET would pay a connect and TCP slow
// start each time (measured on versitygw without keep-alive: the mount at
// one reader read 0.8x and spent 1.4x the CPU per GB). A range read
// exactly to its length, with no read that returns EOF after it (as the
// mount's fill reads), must still give its connection back.
func TestReadsReuseOneConnection(t *testing.T) {
	for _, tc := range networkBackends() {
		t.Run(tc.name, func(t *testing.T) {
			var p *proxy
			s := tc.openVia(t, func(up string) string {
				p = countingProxy(t, up)
				return p.addr
			})
			ctx := t.Context()
			data := make([]byte, 4<<20)
			_, _ = rand.Read(data)
			if err := store.PutBytes(ctx, s, "pack", data); err != nil {
				t.Fatal(err)
			}
			before := p.accepted.Load()
			const piece = 1 << 20
			for i := range 8 {
				off := int64(i%4) * piece
				rc, err := store.GetRangeStream(ctx, s, "pack", off, piece)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, piece)
				if i%2 == 0 {
					_, err = io.ReadFull(rc, got) // exactly its length
				} else {
					got, err = io.ReadAll(rc) // to EOF
				}
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data[off:off+piece]) {
					t.Fatalf("range %d: wrong bytes", off)
				}
				if _, err := store.ReadAll(ctx, s, "pack"); err != nil {
					t.Fatal(err)
				}
				if _, _, err := store.GetTail(ctx, s, "pack", 4096); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Stat(ctx, "pack"); err != nil {
					t.Fatal(err)
				}
			}
			if n := p.accepted.Load() - before; n > 1 {
				t.Errorf("32 requests one after another opened %d connections; want them all on one", n)
			}
		})
	}
}

// proxy forwards TCP connections to an upstream and counts them.
type proxy struct {
	addr     string
	accepted atomic.Int64
}

func countingProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String()}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
			}
			wg.Go(func() { pipe(u, c) })
			wg.Go(func() { pipe(c, u) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}
