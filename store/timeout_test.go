package store_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
)

// hangingListener accepts connections and never answers (a SIGSTOPped
// server, or a proxy that lost its upstream).
func hangingListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// s3Stub is an S3 server that answers the bucket check and serves one
// object's GETs and PUTs through the given handlers.
func s3Stub(t *testing.T, get, put http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
			w.Header().Set("Content-Type", "application/xml")
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name><KeyCount>0</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>`)
		case r.Method == http.MethodGet:
			get(w, r)
		case r.Method == http.MethodPut:
			put(w, r)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	}))
	// Handlers that hang end with the client's connection.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
	return srv.URL
}

// payload is n bytes that show a shift or a gap.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 / 5)
	}
	return b
}

// TestS3Timeouts: a server that accepts and never answers, or stops in
// the middle of a body (either way), fails the request within about one
// timeout, classified ErrUnreachable; a multi-MiB body that keeps moving
// is never cut off, however long it takes in all (issue 32 item 11).
func TestS3Timeouts(t *testing.T) {
	const short = 300 * time.Millisecond
	opts := func(endpoint string) store.S3Options {
		return store.S3Options{Bucket: "bkt", Endpoint: endpoint, Region: "us-east-1", PathStyle: true, PartSize: 64 << 20,
			ConnectTimeout: short, FirstByteTimeout: short, IdleTimeout: short}
	}
	within := func(t *testing.T, what string, limit time.Duration, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		if d := time.Since(start); d > limit {
			t.Fatalf("%s took %s (err %v); want at most %s", what, d.Round(time.Millisecond), err, limit)
		}
		return err
	}

	t.Run("no answer, defaults", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "ak")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
		url := "s3://bkt/p?region=us-east-1&endpoint=" + hangingListener(t)
		err := within(t, "opening a store that never answers", store.DefaultFirstByteTimeout+5*time.Second, func() error {
			_, err := store.Open(t.Context(), url)
			return err
		})
		if !errors.Is(err, store.ErrUnreachable) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%v; want one line classified ErrUnreachable", err)
		}
		t.Log(err)
	})

	const size = 4 << 20
	body, bigBody := payload(size), payload(32<<20)
	stall := make(chan struct{})
	get := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("Content-Range", "bytes 0-"+strconv.Itoa(size-1)+"/"+strconv.Itoa(size))
		w.WriteHeader(http.StatusPartialContent)
		slow := r.URL.Path == "/bkt/slow"
		for off := 0; off < size; off += 64 << 10 {
			if !slow && off >= size/2 {
				select { // half the body, then nothing
				case <-stall:
				case <-r.Context().Done():
				}
				return
			}
			w.Write(body[off : off+64<<10])
			w.(http.Flusher).Flush()
			if slow {
				time.Sleep(75 * time.Millisecond) // 64 pieces: some 4.8 s in all
			}
		}
	}
	put := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bkt/stalled" {
			select { // never takes the body
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		// A steady reader: 256 KiB every 35 ms, some 4.5 s in all.
		var got bytes.Buffer
		for {
			n, err := got.ReadFrom(io.LimitReader(r.Body, 256<<10))
			if n == 0 || err != nil {
				break
			}
			time.Sleep(35 * time.Millisecond)
		}
		if !bytes.Equal(got.Bytes(), bigBody) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("ETag", `"x"`)
	}
	endpoint := s3Stub(t, get, put)
	t.Cleanup(func() { close(stall) }) // before the stub's cleanup waits for its handlers
	s, err := store.OpenS3(t.Context(), opts(endpoint))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("body stops", func(t *testing.T) {
		err := within(t, "a GET whose body stops", 5*short, func() error {
			_, err := s.GetRange(t.Context(), "stalled", 0, size)
			return err
		})
		if !errors.Is(err, store.ErrUnreachable) || !strings.Contains(err.Error(), "no response body bytes") {
			t.Fatalf("%v; want ErrUnreachable saying the body stopped", err)
		}
	})
	t.Run("upload not taken", func(t *testing.T) {
		big := payload(32 << 20) // more than loopback's socket buffers
		err := within(t, "a PUT the server does not read", 5*short+time.Second /* Expect: 100-continue */, func() error {
			return s.Put(t.Context(), "stalled", bytes.NewReader(big), int64(len(big)))
		})
		if !errors.Is(err, store.ErrUnreachable) || !strings.Contains(err.Error(), "no request body bytes") {
			t.Fatalf("%v; want ErrUnreachable saying the upload stopped", err)
		}
	})
	t.Run("slow but moving", func(t *testing.T) {
		// Four seconds of idle: the kernel wakes a blocked writer only
		// once half its socket buffer drained (up to 2 MiB here, about
		// 0.3 s at the stub's pace), and a machine busy with other test
		// packages has stalled the stub for 2 s. The first byte comes
		// when the server has read what the socket buffers held at the
		// end of the body.
		o := opts(endpoint)
		o.IdleTimeout, o.FirstByteTimeout = 4*time.Second, 10*time.Second
		s, err := store.OpenS3(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what string
			do   func() error
		}{
			{"a slow GET of 4 MiB", func() error {
				got, err := s.GetRange(t.Context(), "slow", 0, size)
				if err == nil && !bytes.Equal(got, body) {
					err = errors.New("wrong bytes")
				}
				return err
			}},
			{"a slow PUT of 32 MiB", func() error {
				return s.Put(t.Context(), "slow", bytes.NewReader(bigBody), int64(len(bigBody)))
			}},
		} {
			start := time.Now()
			if err := c.do(); err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
			d := time.Since(start)
			t.Logf("%s: %s", c.what, d.Round(time.Millisecond))
			if d < o.IdleTimeout {
				t.Errorf("%s took only %s: it does not show that a long transfer survives", c.what, d)
			}
		}
	})
}
