package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/lakestream/lakestream/cache"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

func TestParseStep(t *testing.T) {
	for name, want := range map[string]int64{"0": 0, "7": 7, "10": 10, "9223372036854775807": 1<<63 - 1} {
		if n, ok := parseStep(name); !ok || n != want {
			t.Errorf("parseStep(%q) = %d, %v", name, n, ok)
		}
	}
	for _, name := range []string{"", "00", "01", "-1", "+1", "1a", "1.0", " 1", "9223372036854775808", "99999999999999999999"} {
		if n, ok := parseStep(name); ok {
			t.Errorf("parseStep(%q) = %d, accepted", name, n)
		}
	}
}

// fakePacks serves packs from memory and counts what is asked for.
type fakePacks struct {
	ranks  []*txn.Pack
	shared *txn.Pack
	asked  map[int]int
}

func (f *fakePacks) Pack(_ context.Context, _ *txn.TGB, r int) (*txn.Pack, error) {
	f.asked[r]++
	if r < 0 {
		return f.shared, nil
	}
	return f.ranks[r], nil
}

func TestStepTree(t *testing.T) {
	ctx := t.Context()
	pack := func(names ...string) *txn.Pack {
		p := &txn.Pack{}
		for _, n := range names {
			p.Files = append(p.Files, txn.File{Name: n, Size: 1})
		}
		return p
	}
	src := &fakePacks{ranks: make([]*txn.Pack, 12), shared: pack("z.json", "a/b.txt"), asked: map[int]int{}}
	for r := range src.ranks {
		src.ranks[r] = pack("x/2.bin", "x/10.bin", "b.bin", "a.bin")
	}
	tgb := &txn.TGB{Step: 7}
	root, err := stepTree(ctx, src, tgb, layout{ranks: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"rank-0", "rank-1", "rank-2", "rank-3", "rank-4", "rank-5", "rank-6", "rank-7", "rank-8", "rank-9", "rank-10", "rank-11", "a", "z.json"}
	if names, _ := root.list(); !slices.Equal(names, want) {
		t.Errorf("step lists %v, want %v", names, want)
	}
	// Listing the step fetched the shared files only: no rank is fetched
	// before a reader looks into it.
	if len(src.asked) != 1 || src.asked[-1] != 1 {
		t.Fatalf("listing a step fetched %v, want only the shared files", src.asked)
	}
	r3, err := root.lookup("rank-3").lazy.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r3.names, []string{"a.bin", "b.bin", "x"}) || !slices.Equal(r3.kids["x"].dir.names, []string{"10.bin", "2.bin"}) {
		t.Errorf("rank-3 lists %v, x lists %v", r3.names, r3.kids["x"].dir.names)
	}
	if _, err := root.lookup("rank-3").lazy.get(ctx); err != nil || src.asked[3] != 1 || len(src.asked) != 2 {
		t.Fatalf("after listing rank-3 twice: fetched %v (err %v), want rank 3 once", src.asked, err)
	}
	filtered, err := stepTree(ctx, src, tgb, layout{ranks: 12, shown: map[int]bool{3: true, 10: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if names, _ := filtered.list(); !slices.Equal(names, []string{"rank-3", "rank-10", "a", "z.json"}) || filtered.lookup("rank-4") != nil {
		t.Errorf("with ranks 3,10 the step lists %v", names)
	}
	for _, bad := range []string{"rank-12", "rank-03", "rank--1", "rank-", "rank-1x"} {
		if root.lookup(bad) != nil {
			t.Errorf("%s found in a 12-rank step", bad)
		}
	}
	// A view of 3 ranks over 12: rank-1 holds original ranks 4-7, each a
	// directory named after it, fetched only when looked into.
	view, err := stepTree(ctx, src, tgb, layout{ranks: 12, view: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if names, _ := view.list(); !slices.Equal(names, []string{"rank-0", "rank-1", "rank-2", "a", "z.json"}) {
		t.Errorf("view of 3 lists %v", names)
	}
	v1, err := view.lookup("rank-1").lazy.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v1.names, []string{"rank-4", "rank-5", "rank-6", "rank-7"}) || src.asked[5] != 0 {
		t.Fatalf("view rank-1 lists %v (fetched %v)", v1.names, src.asked)
	}
	o5, err := v1.kids["rank-5"].lazy.get(ctx)
	if err != nil || !slices.Equal(o5.names, []string{"a.bin", "b.bin", "x"}) || o5.kids["a.bin"].rank != 5 {
		t.Fatalf("view rank-1/rank-5 lists %v (err %v)", o5.names, err)
	}
}

func TestToErrno(t *testing.T) {
	r := New(Options{View: NewView(&Snapshot{}), Logger: slog.New(slog.DiscardHandler)})
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{fmt.Errorf("step 4: %w", errNotCommitted), syscall.ENOENT},
		// A pack deleted under the view: never ENOENT, which readdir()
		// takes for an empty directory (issue 32 item 7).
		{fmt.Errorf("read x: %w", store.ErrNotFound), syscall.ESTALE},
		// An unreachable or hung store is EIO, whatever is inside: not
		// ECONNREFUSED, not ETIMEDOUT.
		{fmt.Errorf("get: %w: %w", store.ErrUnreachable, &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), syscall.EIO},
		{fmt.Errorf("get: %w: %w", store.ErrUnreachable, context.DeadlineExceeded), syscall.EIO},
		{fmt.Errorf("waiting: %w", context.Canceled), syscall.EINTR},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), syscall.ETIMEDOUT},
		{fmt.Errorf("%w: pack block 3", cache.ErrChecksum), syscall.EIO},
		{fmt.Errorf("op: %w", syscall.EROFS), syscall.EROFS},
		{errors.New("connection reset"), syscall.EIO},
		{io.ErrUnexpectedEOF, syscall.EIO},
	} {
		if got := r.toErrno("op", "path", c.err); got != c.want {
			t.Errorf("toErrno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func snap(liveFrom int64, n int) *Snapshot {
	s := &Snapshot{LiveFrom: liveFrom}
	for i := range n {
		s.Steps = append(s.Steps, &txn.TGB{Step: liveFrom + int64(i)})
	}
	return s
}

// TestWaitStep: a lookup of a future step waits for the publish that
// brings it; one of a reclaimed step fails at once; the wait ends at its
// limit or when the request is interrupted.
func TestWaitStep(t *testing.T) {
	v := NewView(snap(0, 3))
	ctx := context.Background()
	if tgb, err := v.WaitStep(ctx, 2, 0); err != nil || tgb.Step != 2 {
		t.Fatalf("live step: %v, %v", tgb, err)
	}
	if _, err := v.WaitStep(ctx, 3, 0); !errors.Is(err, errNoEntry) {
		t.Fatalf("future step without waiting: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		tgb, err := v.WaitStep(ctx, 4, time.Minute)
		if err == nil && tgb.Step != 4 {
			err = fmt.Errorf("got step %d", tgb.Step)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	v.Publish(snap(0, 4)) // step 3: not yet
	select {
	case err := <-got:
		t.Fatalf("returned before step 4 was published: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	v.Publish(snap(1, 4)) // steps 1..4
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := v.WaitStep(ctx, 0, time.Minute); !errors.Is(err, errNoEntry) || time.Since(start) > time.Second {
		t.Fatalf("reclaimed step: %v after %s", err, time.Since(start))
	}
	if _, err := v.WaitStep(ctx, 9, 50*time.Millisecond); !errors.Is(err, errNoEntry) {
		t.Fatalf("after the wait limit: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := v.WaitStep(cctx, 10, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted wait: %v", err)
	}
}

// TestWaitStepOneDeadlinePerOperation: the lookups one operation makes of a
// future step (ls: stat, then lstat) share one deadline: the second fails
// when the first does, instead of waiting --wait again.
func TestWaitStepOneDeadlinePerOperation(t *testing.T) {
	v := NewView(&Snapshot{Steps: nil})
	const d = 300 * time.Millisecond
	start := time.Now()
	_, err1 := v.WaitStep(t.Context(), 5, d)
	_, err2 := v.WaitStep(t.Context(), 5, d)
	if !errors.Is(err1, errNoEntry) || !errors.Is(err2, errNoEntry) || !strings.Contains(err2.Error(), "one deadline") {
		t.Fatalf("lookups: %v; %v", err1, err2)
	}
	if took := time.Since(start); took >= 2*d {
		t.Fatalf("two lookups of one step waited %s, want one --wait of %s", took, d)
	}
}

// TestWaitStepRetryWaitsAgain: once a lookup's wait for a step has timed
// out, another process's lookup of it right after waits --wait of its own
// and sees the step when it comes (issue 22). Before, every lookup within
// a second of the timeout failed at once: the deadline was shared by all
// processes for a second after it passed.
func TestWaitStepRetryWaitsAgain(t *testing.T) {
	v := NewView(snap(0, 3))
	caller := func(pid uint32) context.Context {
		return &fuse.Context{Caller: fuse.Caller{Pid: pid}, Cancel: t.Context().Done()}
	}
	if _, err := v.WaitStep(caller(100), 3, 20*time.Millisecond); !errors.Is(err, errNoEntry) {
		t.Fatalf("the first wait: %v; want it to time out", err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := v.WaitStep(caller(101), 3, time.Minute)
		got <- err
	}()
	for !v.Waiting() {
		select {
		case err := <-got:
			t.Fatalf("a retry right after a timed-out wait returned at once: %v", err)
		default:
			runtime.Gosched()
		}
	}
	v.Publish(snap(0, 4))
	if err := <-got; err != nil {
		t.Fatalf("the retry did not see the step committed while it waited: %v", err)
	}
}
