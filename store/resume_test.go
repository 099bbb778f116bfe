package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

// cutReader yields data[off:] but fails with err after n bytes.
type cutReader struct {
	data []byte
	n    int
	err  error
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, c.err
	}
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data, c.n = c.data[k:], c.n-k
	return k, nil
}

func (c *cutReader) Close() error { return nil }

// TestResumeBodyRules: a lost connection is resumed at the next byte
// while each connection gains ground; a connection that delivered
// nothing, a timeout, or a failed new request end the read with the
// lost connection's error.
func TestResumeBodyRules(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	lost := fmt.Errorf("the connection was lost mid-body: %w: %w", ErrUnreachable, io.ErrUnexpectedEOF)
	timeout := fmt.Errorf("%w: %w", ErrUnreachable, &timeoutError{what: "stalled", d: 1})
	open := func(cut int, err error, opens *int) func(off, n int64) (io.ReadCloser, error) {
		return func(off, n int64) (io.ReadCloser, error) {
			*opens++
			end := int64(len(data))
			if n >= 0 {
				end = off + n
			}
			return &cutReader{data: data[off:end], n: cut, err: err}, nil
		}
	}
	ctx := context.Background()

	var opens int
	first, _ := open(3000, lost, &opens)(100, -1)
	got, err := io.ReadAll(resumable(ctx, first, "etag", 100, -1, open(3000, lost, &opens)))
	if err != nil || !bytes.Equal(got, data[100:]) || opens != 4 {
		t.Fatalf("cut every 3000 bytes: %d bytes, %d requests, err %v; want all %d in 4", len(got), opens, err, len(data)-100)
	}

	opens = 0
	first, _ = open(3000, lost, &opens)(100, 5000)
	got, err = io.ReadAll(resumable(ctx, first, "etag", 100, 5000, open(3000, lost, &opens)))
	if err != nil || !bytes.Equal(got, data[100:5100]) || opens != 2 {
		t.Fatalf("range, cut every 3000 bytes: %d bytes, %d requests, err %v; want 5000 in 2", len(got), opens, err)
	}

	for name, c := range map[string]struct {
		cut, then int
		err       error
	}{
		"no progress": {3000, 0, lost},
		"timeout":     {3000, 3000, timeout},
	} {
		opens = 0
		first, _ := open(c.cut, c.err, &opens)(0, -1)
		got, err := io.ReadAll(resumable(ctx, first, "etag", 0, -1, open(c.then, c.err, &opens)))
		if !errors.Is(err, c.err) || int64(len(got)) > int64(c.cut+c.then) || !bytes.Equal(got, data[:len(got)]) {
			t.Errorf("%s: %d bytes, err %v; want %v", name, len(got), err, c.err)
		}
	}

	refused := func(off, n int64) (io.ReadCloser, error) { return nil, fmt.Errorf("az get k: %w", ErrExists) }
	first, _ = open(3000, lost, &opens)(0, -1)
	got, err = io.ReadAll(resumable(ctx, first, "etag", 0, -1, refused))
	if !errors.Is(err, lost) || len(got) != 3000 {
		t.Fatalf("replaced before the resume: %d bytes, err %v; want 3000 and the lost connection's error", len(got), err)
	}
	if rc := resumable(ctx, first, "", 0, -1, refused); rc != first {
		t.Fatal("a body with no ETag is resumed; its version cannot be pinned")
	}
}
