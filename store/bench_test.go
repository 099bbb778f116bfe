package store_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
)

// BenchmarkBackends compares the backends side by side: a small
// create-if-absent (a commit's cost) and a 1 MiB put and ranged get.
//
//	go test -run XXX -bench Backends ./store/
func BenchmarkBackends(b *testing.B) {
	srv := s3test.Start(b)
	opens := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"mem", func(b *testing.B) store.Store { return store.NewMem() }},
		{"file", func(b *testing.B) store.Store {
			s, err := store.NewFile(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"s3", func(b *testing.B) store.Store {
			s, err := store.Open(b.Context(), srv.NewBucketURL(b))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	small := bytes.Repeat([]byte("v"), 2048)
	big := bytes.Repeat([]byte("x"), 1<<20)
	for _, o := range opens {
		b.Run("create-2KiB/"+o.name, func(b *testing.B) {
			s := o.open(b)
			i := 0
			for b.Loop() {
				if err := store.CreateBytes(b.Context(), s, fmt.Sprintf("_log/%020d.json", i), small); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run("put-1MiB/"+o.name, func(b *testing.B) {
			s := o.open(b)
			b.SetBytes(int64(len(big)))
			i := 0
			for b.Loop() {
				if err := store.PutBytes(b.Context(), s, fmt.Sprintf("data/%d", i%64), big); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run("get-range-1MiB/"+o.name, func(b *testing.B) {
			s := o.open(b)
			if err := store.PutBytes(b.Context(), s, "data/x", big); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(big)))
			for b.Loop() {
				if _, err := s.GetRange(b.Context(), "data/x", 0, int64(len(big))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
