// Package storetest is the conformance suite every store.Store backend must
// pass: one set of tests, run against mem://, file:// and a real S3 server.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/store"
)

// Run runs the conformance suite. open returns a fresh, empty store for
// each subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"PutGetStat", testPutGetStat},
		{"NotFound", testNotFound},
		{"Ranges", testRanges},
		{"Tail", testTail},
		{"CreateIfAbsent", testCreateIfAbsent},
		{"CreateRace32", testCreateRace},
		{"ListOrderAndPagination", testList},
		{"ListPrefixes", testListPrefixes},
		{"Delete", testDelete},
		{"CancelledContext", testCancelled},
		{"LargeObject", testLarge},
		{"BadKeys", testBadKeys},
		{"Probe", testProbe},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func randBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPut(t *testing.T, s store.Store, key string, b []byte) {
	t.Helper()
	if err := store.PutBytes(t.Context(), s, key, b); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func testPutGetStat(t *testing.T, s store.Store) {
	ctx := t.Context()
	data := randBytes(t, 4097)
	mustPut(t, s, "a/b/c.bin", data)
	got, err := store.ReadAll(ctx, s, "a/b/c.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: err=%v equal=%v", err, bytes.Equal(got, data))
	}
	info, err := s.Stat(ctx, "a/b/c.bin")
	if err != nil || info.Size != int64(len(data)) || info.Key != "a/b/c.bin" {
		t.Fatalf("stat: %+v %v", info, err)
	}
	// Put replaces.
	mustPut(t, s, "a/b/c.bin", []byte("short"))
	if got, _ := store.ReadAll(ctx, s, "a/b/c.bin"); string(got) != "short" {
		t.Fatalf("after overwrite got %q", got)
	}
	// Empty objects are objects.
	mustPut(t, s, "empty", nil)
	if info, err := s.Stat(ctx, "empty"); err != nil || info.Size != 0 {
		t.Fatalf("empty stat: %+v %v", info, err)
	}
	// A reader that yields fewer bytes than declared must not leave an object.
	err = s.Put(ctx, "short", strings.NewReader("abc"), 10)
	if err == nil {
		t.Fatal("put with a short reader succeeded")
	}
	if _, err := s.Stat(ctx, "short"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed put left an object: %v", err)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get missing: %v", err)
	}
	if _, err := s.GetRange(ctx, "nope", 0, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get range missing: %v", err)
	}
	if _, err := s.Stat(ctx, "nope/deeper"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("stat missing: %v", err)
	}
	mustPut(t, s, "dir/x", []byte("x"))
	// A "directory" is not an object.
	if _, err := s.Stat(ctx, "dir"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("stat of a key prefix: %v", err)
	}
}

func testRanges(t *testing.T, s store.Store) {
	ctx := t.Context()
	data := randBytes(t, 1000)
	mustPut(t, s, "r", data)
	cases := []struct {
		off, n int64
		ok     bool
	}{
		{0, 0, true},     // empty
		{1000, 0, true},  // empty at the end
		{0, 1, true},     // first byte
		{999, 1, true},   // last byte
		{0, 1000, true},  // whole
		{100, 250, true}, // middle
		{999, 2, false},  // one past the end
		{1000, 1, false}, // starting at the end
		{5000, 10, false},
	}
	for _, c := range cases {
		got, err := s.GetRange(ctx, "r", c.off, c.n)
		if !c.ok {
			if !errors.Is(err, store.ErrRange) {
				t.Errorf("range [%d,+%d): want ErrRange, got %v (%d bytes)", c.off, c.n, err, len(got))
			}
			continue
		}
		if err != nil || !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Errorf("range [%d,+%d): err=%v len=%d", c.off, c.n, err, len(got))
		}
	}
	// The same ranges streamed (RangeStreamer, or the fallback).
	for _, c := range cases {
		var got []byte
		rc, err := store.GetRangeStream(ctx, s, "r", c.off, c.n)
		if err == nil {
			got, err = io.ReadAll(rc)
			rc.Close()
		}
		if !c.ok {
			if !errors.Is(err, store.ErrRange) {
				t.Errorf("streamed range [%d,+%d): want ErrRange, got %v (%d bytes)", c.off, c.n, err, len(got))
			}
			continue
		}
		if err != nil || !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Errorf("streamed range [%d,+%d): err=%v len=%d", c.off, c.n, err, len(got))
		}
	}
	if _, err := s.GetRange(ctx, "r", -1, 5); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative offset: %v", err)
	}
	mustPut(t, s, "zero", nil)
	if got, err := s.GetRange(ctx, "zero", 0, 0); err != nil || len(got) != 0 {
		t.Errorf("empty range of empty object: %v", err)
	}
	if _, err := s.GetRange(ctx, "zero", 0, 1); !errors.Is(err, store.ErrRange) {
		t.Errorf("range past end of empty object: %v", err)
	}
}

// testTail: the last bytes and the size in one call, whatever n is
// against the size; every backend implements TailGetter (one request).
func testTail(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, ok := s.(store.TailGetter); !ok {
		t.Errorf("%T does not implement store.TailGetter: a TGB's self-description would cost two requests", s)
	}
	data := randBytes(t, 1000)
	mustPut(t, s, "t", data)
	for _, n := range []int64{1, 24, 999, 1000, 1001, 1 << 20} {
		got, size, err := store.GetTail(ctx, s, "t", n)
		if want := data[1000-min(n, 1000):]; err != nil || size != 1000 || !bytes.Equal(got, want) {
			t.Errorf("tail %d: err=%v size=%d len=%d, want size 1000 and the last %d bytes", n, err, size, len(got), len(want))
		}
	}
	mustPut(t, s, "zero", nil)
	if got, size, err := store.GetTail(ctx, s, "zero", 16); err != nil || size != 0 || len(got) != 0 {
		t.Errorf("tail of an empty object: err=%v size=%d len=%d", err, size, len(got))
	}
	if _, _, err := store.GetTail(ctx, s, "missing", 16); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("tail of a missing key: want ErrNotFound, got %v", err)
	}
	if _, _, err := store.GetTail(ctx, s, "t", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("tail of 0 bytes: want ErrInvalid, got %v", err)
	}
}

func testCreateIfAbsent(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := store.CreateBytes(ctx, s, "log/1", []byte("first")); err != nil {
		t.Fatal(err)
	}
	err := store.CreateBytes(ctx, s, "log/1", []byte("second"))
	if !errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: want ErrExists, got %v", err)
	}
	if got, _ := store.ReadAll(ctx, s, "log/1"); string(got) != "first" {
		t.Fatalf("losing create changed the object: %q", got)
	}
	// Create over an object written by Put loses too.
	mustPut(t, s, "log/2", []byte("put"))
	if err := store.CreateBytes(ctx, s, "log/2", []byte("x")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create over put: %v", err)
	}
}

func testCreateRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	const racers, rounds = 32, 5
	for round := range rounds {
		key := fmt.Sprintf("race/%d", round)
		var wins, exists atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Appendf(nil, "racer-%02d", i)
				<-start
				for {
					err := store.CreateBytes(ctx, s, key, body)
					switch {
					case err == nil:
						wins.Add(1)
						winner.Store(string(body))
					case errors.Is(err, store.ErrExists):
						exists.Add(1)
					case errors.Is(err, store.ErrConflict):
						continue // lost, retry: the next try must see the winner
					default:
						errs <- err
					}
					return
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: unexpected error: %v", round, err)
		}
		if wins.Load() != 1 || exists.Load() != racers-1 {
			t.Fatalf("round %d: %d winners, %d ErrExists; want 1 and %d", round, wins.Load(), exists.Load(), racers-1)
		}
		got, err := store.ReadAll(ctx, s, key)
		if err != nil || string(got) != winner.Load().(string) {
			t.Fatalf("round %d: stored %q (err %v), winner wrote %q", round, got, err, winner.Load())
		}
	}
}

func testList(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 1234
	var want []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		// Mix depths so directory-backed stores must order across levels.
		key := fmt.Sprintf("l/%05d", i)
		if i%10 == 0 {
			key = fmt.Sprintf("l/%05d-x/y", i)
		}
		want = append(want, key)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			mustPut(t, s, key, []byte(key))
		}()
	}
	wg.Wait()
	slices.Sort(want)

	var got []string
	after := ""
	pages := 0
	for {
		objs, more, err := s.List(ctx, "l/", after, 500)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(objs) > 500 {
			t.Fatalf("page of %d > limit 500", len(objs))
		}
		for _, o := range objs {
			got = append(got, o.Key)
			if o.Size != int64(len(o.Key)) {
				t.Fatalf("%s: size %d", o.Key, o.Size)
			}
		}
		if !more {
			break
		}
		after = objs[len(objs)-1].Key
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged listing differs: got %d keys, want %d (first diff near %v)", len(got), len(want), firstDiff(got, want))
	}
	if pages < 3 {
		t.Fatalf("%d keys in %d pages of 500", n, pages)
	}
	// Default page: at most 1000, with more set.
	objs, more, err := s.List(ctx, "l/", "", 0)
	if err != nil || len(objs) != store.DefaultListLimit || !more {
		t.Fatalf("default page: %d keys more=%v err=%v", len(objs), more, err)
	}
	// Walk sees everything in order.
	var walked []string
	if err := store.Walk(ctx, s, "l/", "", func(o store.Info) error { walked = append(walked, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(walked, want) {
		t.Fatalf("walk differs at %v", firstDiff(walked, want))
	}
	testWalkAfter(t, s, want)
	// Starting after a key in the middle, and after a key that does not exist.
	objs, _, err = s.List(ctx, "l/", want[600], 3)
	if err != nil || len(objs) != 3 || objs[0].Key != want[601] {
		t.Fatalf("list after %s: %v %v", want[600], objs, err)
	}
	objs, _, err = s.List(ctx, "l/", "l/00600~", 1)
	if err != nil || len(objs) != 1 || objs[0].Key <= "l/00600~" {
		t.Fatalf("list after a missing key: %v %v", objs, err)
	}
}

// testWalkAfter walks the keys of testList after one, sizes included,
// and stops when fn says so (file:// walks in one pass, not page by page).
func testWalkAfter(t *testing.T, s store.Store, want []string) {
	var walked []string
	stop := errors.New("stop")
	err := store.Walk(t.Context(), s, "l/", want[600], func(o store.Info) error {
		if o.Size != int64(len(o.Key)) {
			t.Fatalf("walk: %s: size %d", o.Key, o.Size)
		}
		if walked = append(walked, o.Key); len(walked) == 100 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(walked, want[601:701]) {
		t.Fatalf("walk after %s: %d keys, err %v; want 100 from %s and fn's error", want[600], len(walked), err, want[601])
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("index %d: %q vs %q", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(a), len(b))
}

func testListPrefixes(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, k := range []string{"p/a", "p/a-b", "p/a0", "p/ab/c", "p/b", "pq", "q/a"} {
		mustPut(t, s, k, []byte("x"))
	}
	list := func(prefix, after string) []string {
		t.Helper()
		var keys []string
		if err := store.Walk(ctx, s, prefix, after, func(o store.Info) error { keys = append(keys, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	for _, c := range []struct {
		prefix, after string
		want          []string
	}{
		{"p/", "", []string{"p/a", "p/a-b", "p/a0", "p/ab/c", "p/b"}},
		{"p/a", "", []string{"p/a", "p/a-b", "p/a0", "p/ab/c"}},
		{"p", "", []string{"p/a", "p/a-b", "p/a0", "p/ab/c", "p/b", "pq"}},
		{"p/", "p/a-b", []string{"p/a0", "p/ab/c", "p/b"}},
		{"p/", "p/ab", []string{"p/ab/c", "p/b"}},
		{"", "p/b", []string{"pq", "q/a"}},
		{"nothing/", "", nil},
	} {
		if got := list(c.prefix, c.after); !slices.Equal(got, c.want) {
			t.Errorf("list(%q, after %q) = %q, want %q", c.prefix, c.after, got, c.want)
		}
	}
}

func testDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	var keys []string
	for i := range 1500 {
		keys = append(keys, fmt.Sprintf("d/%04d", i))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); defer func() { <-sem }(); mustPut(t, s, k, nil) }()
	}
	wg.Wait()
	mustPut(t, s, "keep", []byte("k"))
	// Batch delete, including a key that does not exist.
	if err := s.Delete(ctx, append(keys, "d/missing")...); err != nil {
		t.Fatal(err)
	}
	objs, _, err := s.List(ctx, "d/", "", 0)
	if err != nil || len(objs) != 0 {
		t.Fatalf("after delete: %d left, %v", len(objs), err)
	}
	if err := s.Delete(ctx, "d/0001"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if _, err := s.Stat(ctx, "keep"); err != nil {
		t.Fatalf("delete removed an unrelated key: %v", err)
	}
	// A key can be written again after delete.
	mustPut(t, s, "d/0001", []byte("again"))
}

func testCancelled(t *testing.T, s store.Store) {
	mustPut(t, s, "c", []byte("x"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v", op, err)
		}
	}
	_, err := s.Get(ctx, "c")
	check("get", err)
	_, err = s.GetRange(ctx, "c", 0, 1)
	check("get range", err)
	_, err = s.Stat(ctx, "c")
	check("stat", err)
	check("put", store.PutBytes(ctx, s, "c2", []byte("y")))
	check("create", store.CreateBytes(ctx, s, "c3", []byte("y")))
	_, _, err = s.List(ctx, "", "", 0)
	check("list", err)
	check("delete", s.Delete(ctx, "c"))
	if _, err := s.Stat(t.Context(), "c3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a cancelled create left an object: %v", err)
	}
}

func testLarge(t *testing.T, s store.Store) {
	ctx := t.Context()
	data := randBytes(t, 40<<20+123)
	if err := s.Put(ctx, "big/put", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "big/create", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "big/create", bytes.NewReader(data), int64(len(data))); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second large create: %v", err)
	}
	for _, k := range []string{"big/put", "big/create"} {
		rc, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: large object differs (err %v, %d bytes)", k, err, len(got))
		}
		tail, err := s.GetRange(ctx, k, int64(len(data))-5000, 5000)
		if err != nil || !bytes.Equal(tail, data[len(data)-5000:]) {
			t.Fatalf("%s: tail range differs: %v", k, err)
		}
	}
}

func testBadKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, k := range []string{"", "/abs", "a/../b", "..", "../escape", "a//b", "./a", "a/", "a\\b", ".lakefs-tmp/x", strings.Repeat("k", 1025)} {
		err := store.PutBytes(ctx, s, k, []byte("x"))
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("put %q: want ErrInvalid, got %v", k, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "key") {
			t.Errorf("put %q: error should be one line naming the key: %q", k, msg)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("stat %q: want ErrInvalid, got %v", k, err)
		}
	}
	if _, _, err := s.List(ctx, "../", "", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("list ../: %v", err)
	}
	if err := s.Delete(ctx, "a/../../x"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("delete a/../../x: %v", err)
	}
}

func testProbe(t *testing.T, s store.Store) {
	if err := store.Probe(t.Context(), s); err != nil {
		t.Fatalf("probe on a conforming store: %v", err)
	}
	objs, _, err := s.List(t.Context(), "_probe/", "", 0)
	if err != nil || len(objs) != 0 {
		t.Fatalf("probe left objects: %v %v", objs, err)
	}
}
