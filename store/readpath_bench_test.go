package store_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
)

// BenchmarkReadPath takes a 4 MiB read apart against versitygw on
// 127.0.0.1, one layer at a time: the plain SDK GetObject of a 4 MiB
// object (what users compare a data plane with), the same SDK's ranged
// GET of 4 MiB out of a step-sized object (17 MiB: 4 ranks of 4 MiB and a
// table; uploaded in one PUT and in parts, as a producer uploads it), and
// the store client's Get and GetRangeStream of the same. Each read lands
// in one 1 MiB buffer with its CRC32C taken, as `lakefs-bench read`'s
// readers do; x4 runs four readers at once. cpu-s/GB is this process's
// CPU (the client's) per GB read, server-cpu-s/GB versitygw's (read
// from /proc in 10 ms ticks: 500 reads keep that under 3%). On a quiet
// machine:
//
//	go test -run XXX -bench ReadPath -benchtime 500x ./store/
func BenchmarkReadPath(b *testing.B) {
	srv := s3test.Start(b)
	bucket, prefix := srv.NewBucket(b), "stream/"
	st, err := store.Open(b.Context(), srv.URL(bucket, prefix)+"&part-size=5242880")
	if err != nil {
		b.Fatal(err)
	}
	cl := srv.Client()
	const size = 4 << 20
	step := make([]byte, 17<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(step)
	if _, err := cl.PutObject(b.Context(), &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + "whole"),
		Body: bytes.NewReader(step[:size])}); err != nil {
		b.Fatal(err)
	}
	if _, err := cl.PutObject(b.Context(), &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + "step"),
		Body: bytes.NewReader(step)}); err != nil {
		b.Fatal(err)
	}
	if err := store.PutBytes(b.Context(), st, "step-parts", step); err != nil { // 5 MiB parts
		b.Fatal(err)
	}
	want := make([]uint32, 4)
	for r := range want {
		want[r] = crc32.Checksum(step[r*size:(r+1)*size], castagnoli)
	}

	sdk := func(key string, ranged bool) func(ctx context.Context, r int) (io.ReadCloser, error) {
		return func(ctx context.Context, r int) (io.ReadCloser, error) {
			in := &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(prefix + key)}
			if ranged {
				in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", r*size, (r+1)*size-1))
			}
			out, err := cl.GetObject(ctx, in)
			if err != nil {
				return nil, err
			}
			return out.Body, nil
		}
	}
	readers := []struct {
		name   string
		ranked bool // reads rank r's 4 MiB; else the first 4 MiB
		open   func(ctx context.Context, r int) (io.ReadCloser, error)
	}{
		{"sdk-get-whole", false, sdk("whole", false)},
		{"sdk-range-one-put", true, sdk("step", true)},
		{"sdk-range-parts", true, sdk("step-parts", true)},
		{"store-get-whole", false, func(ctx context.Context, _ int) (io.ReadCloser, error) { return st.Get(ctx, "whole") }},
		{"store-range-parts", true, func(ctx context.Context, r int) (io.ReadCloser, error) {
			return store.GetRangeStream(ctx, st, "step-parts", int64(r*size), size)
		}},
	}
	for _, n := range []int{1, 4} {
		for _, rd := range readers {
			b.Run(fmt.Sprintf("%s/x%d", rd.name, n), func(b *testing.B) {
				b.SetBytes(size * int64(n))
				cpu0, srv0 := procstat.SelfCPU(), procstat.CPU(srv.Pid())
				for b.Loop() {
					errs := make(chan error, n)
					for i := range n {
						go func() {
							r := i % 4
							if !rd.ranked {
								r = 0
							}
							errs <- readCheck(b.Context(), rd.open, r, want[r])
						}()
					}
					for range n {
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
				}
				gb := float64(b.N) * float64(size*n) / 1e9
				b.ReportMetric((procstat.SelfCPU()-cpu0).Seconds()/gb, "cpu-s/GB")
				b.ReportMetric((procstat.CPU(srv.Pid())-srv0).Seconds()/gb, "server-cpu-s/GB")
			})
		}
	}
}

// readCheck reads rank r's bytes through open into a 1 MiB buffer,
// taking the CRC32C of each read.
func readCheck(ctx context.Context, open func(context.Context, int) (io.ReadCloser, error), r int, want uint32) error {
	rc, err := open(ctx, r)
	if err != nil {
		return err
	}
	defer rc.Close()
	buf := make([]byte, 1<<20)
	var crc uint32
	for {
		k, err := rc.Read(buf)
		crc = crc32.Update(crc, castagnoli, buf[:k])
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if crc != want {
		return fmt.Errorf("rank %d: CRC32C %08x, want %08x", r, crc, want)
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
