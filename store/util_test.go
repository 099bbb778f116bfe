package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lakestream/lakestream/store"
)

func TestSubURL(t *testing.T) {
	for base, want := range map[string]string{
		"file:///data/streams":  "file:///data/streams/run-1",
		"file:///data/streams/": "file:///data/streams/run-1",
		"s3://bucket":           "s3://bucket/run-1",
		"s3://bucket/a/b/":      "s3://bucket/a/b/run-1",
		"s3://bucket/a?endpoint=http://127.0.0.1:9000&path-style=true": "s3://bucket/a/run-1?endpoint=http://127.0.0.1:9000&path-style=true",
	} {
		got, err := store.SubURL(base, "run-1")
		if err != nil || got != want {
			t.Errorf("SubURL(%q, run-1) = %q, %v; want %q", base, got, err, want)
		}
	}
	if got, err := store.SubURL("file:///tmp/x", "runs/a"); err != nil || got != "file:///tmp/x/runs/a" {
		t.Errorf("SubURL(file:///tmp/x, runs/a) = %q, %v", got, err)
	}
	for _, base := range []string{"mem://x", "http://host/x", "%zz"} {
		if _, err := store.SubURL(base, "run-1"); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SubURL(%q) = %v, want ErrInvalid", base, err)
		}
	}
}

// TestDeleteAllPages checks that DeleteAll empties a store holding more
// objects than one List page returns.
func TestDeleteAllPages(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	for i := range store.DefaultListLimit + 7 {
		if err := store.PutBytes(ctx, s, fmt.Sprintf("k/%05d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.DeleteAll(ctx, s); err != nil {
		t.Fatal(err)
	}
	if objs, _, err := s.List(ctx, "", "", 1); err != nil || len(objs) != 0 {
		t.Fatalf("after DeleteAll: %v, %v; want nothing", objs, err)
	}
}
