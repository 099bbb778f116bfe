package txn_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// logReads counts GETs of the log's objects (_log/).
type logReads struct {
	store.Store
	n atomic.Int64
}

func (c *logReads) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.HasPrefix(key, txn.LogPrefix) {
		c.n.Add(1)
	}
	return c.Store.Get(ctx, key)
}

// TestLoneProducerLeads: a producer committing alone, one TGB at a time,
// stays the preferred committer: it creates each version at once and
// never reads the log to wait for a version someone else might create.
// (A committer that went idle once used to turn follower of itself,
// poll for the version it would then create after a help deadline, and
// learn that idle time as the log's interval: its 50th commit took 25 s.)
func TestLoneProducerLeads(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	base := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	counted := &logReads{Store: mem}
	l := &txn.Log{Store: counted, Config: base.Config}
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "alone", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	before := counted.n.Load()
	for seq := uint64(1); seq <= 60; seq++ {
		txnCommit(t, p, batchFor("alone", seq, 1))
	}
	if reads := counted.n.Load() - before; reads > 0 {
		t.Fatalf("a lone producer read the log %d times in 60 commits: it waited for versions it then created itself", reads)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
