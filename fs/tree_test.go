package fs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLazyTreeWaitGivesUp: a lookup waiting for another's build of the same
// listing (which may wait out a store outage) returns at once when its
// context ends; the build goes on and its listing serves the next lookup.
func TestLazyTreeWaitGivesUp(t *testing.T) {
	release := make(chan struct{})
	want := &tree{names: []string{"a"}}
	l := newLazy(func(context.Context) (*tree, error) {
		<-release
		return want, nil
	}, nil)
	first := make(chan error, 1)
	go func() {
		_, err := l.get(context.Background())
		first <- err
	}()
	for len(l.mu) == 0 { // the first lookup builds
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a lookup that gave up while another built: %v, want its context's error", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a lookup that gave up after 100ms returned after %s", d)
	}
	l.evict() // a build in progress is never evicted
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got, err := l.get(context.Background()); err != nil || got != want {
		t.Fatalf("after the build: %v, %v", got, err)
	}
}
