package txn

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
)

func TestScratchCombine(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	ctx := context.Background()
	mem := store.NewMem()
	f := store.NewFaulty(mem, 1)
	f.Set(store.Fault{Latency: 50 * time.Millisecond})
	l, _ := Create(ctx, mem, CreateOptions{Ranks: 4})
	l2 := &Log{Store: f, Config: l.Config}
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	stop := time.Now().Add(6 * time.Second)
	data := make([]byte, 256<<10)
	for i := range 16 {
		wg.Go(func() {
			p, err := OpenProducer(ctx, l2, ProducerOptions{ID: fmt.Sprintf("p%02d", i), Logger: lg, Observe: func(cs CommitStats) {
				mu.Lock()
				for _, u := range cs.Uploaded {
					lat = append(lat, cs.Committed.Sub(u))
				}
				mu.Unlock()
			}})
			if err != nil {
				t.Error(err)
				return
			}
			for time.Now().Before(stop) {
				var rk [][]FileSource
				for range 4 {
					rk = append(rk, []FileSource{BytesFile("x", data)})
				}
				if _, err := p.Append(ctx, Batch{Ranks: rk}); err != nil {
					t.Error(err)
					return
				}
			}
			p.Close(ctx)
		})
	}
	wg.Wait()
	st, _ := l.Load(ctx)
	fmt.Printf("versions %d steps %d; puts %d creates %d gets %d getrange %d\n", st.Version, st.NextStep(), f.Calls(OpPutX()), f.Calls(store.OpCreate), f.Calls(store.OpGet), f.Calls(store.OpGetRange))
	mu.Lock()
	slicesSort(lat)
	fmt.Printf("learn latency p50 %v p99 %v max %v\n", lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	mu.Unlock()
}

func OpPutX() store.Op { return store.OpPut }
func slicesSort(d []time.Duration) {
	for i := range d {
		for j := i + 1; j < len(d); j++ {
			if d[j] < d[i] {
				d[i], d[j] = d[j], d[i]
			}
		}
	}
}
