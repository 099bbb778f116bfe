package txn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// TestVerifyNamesRank: a corrupted byte is reported with the rank and the
// file it belongs to (issue 22). Chunk numbers count from the start of a
// rank's region, so without the rank, rank 0's chunk 0 and rank 1's chunk
// 0 read the same.
func TestVerifyNamesRank(t *testing.T) {
	ctx := t.Context()
	s, err := store.Open(ctx, "mem://verify-rank")
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	same := bytes.Repeat([]byte("x"), 1000)
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txn.Batch{Name: "b", Cursor: "b",
		Ranks: [][]txn.FileSource{{txn.BytesFile("a.bin", same)}, {txn.BytesFile("a.bin", same)}}})
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tgb, _ := st.Step(0)
	ranks, _, err := l.Packs(ctx, tgb)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := store.ReadAll(ctx, s, tgb.Object.Key)
	if err != nil {
		t.Fatal(err)
	}
	obj[ranks[1].Off+10] ^= 0xff
	if err := store.PutBytes(ctx, s, tgb.Object.Key, obj); err != nil {
		t.Fatal(err)
	}
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) == 0 {
		t.Fatal("verify found nothing wrong with a corrupted byte")
	}
	t.Log(rep.Problems)
	for _, p := range rep.Problems {
		if !strings.Contains(p.What, "rank 1") || strings.Contains(p.What, "rank 0") || !strings.Contains(p.What, "a.bin") {
			t.Errorf("problem %q does not name rank 1 and the file a.bin", p.String())
		}
	}
}

// TestVerifyChecksSelfDescription: a committed object whose
// self-description was damaged (what a committer reads to include it, and
// what a restarted producer reads to recognise its own upload) is a
// problem for verify, naming the object, though readers never need it.
func TestVerifyChecksSelfDescription(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txn.Batch{Name: "batch-1", Cursor: "batch-1",
		Ranks: [][]txn.FileSource{{txn.BytesFile("a.bin", []byte("hello"))}}})
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tgb, _ := st.Step(0)
	if rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 1}); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify of an intact stream: %v %v", err, rep.Problems)
	}
	obj, err := store.ReadAll(ctx, s, tgb.Object.Key)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(obj[tgb.Object.Footer:], []byte("batch-1"))
	if i < 0 {
		t.Fatalf("no batch name in the self-description: %q", obj[tgb.Object.Footer:])
	}
	obj[tgb.Object.Footer+int64(i)] = 'B'
	if err := store.PutBytes(ctx, s, tgb.Object.Key, obj); err != nil {
		t.Fatal(err)
	}
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Object != tgb.Object.Key || !strings.Contains(rep.Problems[0].What, "self-description") {
		t.Fatalf("problems %v: want one naming %s's self-description", rep.Problems, tgb.Object.Key)
	}
}

// TestVerifyNamesEveryCorruptChunk (issue 47 item 6): two files of one
// rank corrupted, in different chunks, are two problems naming each file
// (a read through the mount gets EIO for both); before, verify stopped at
// the first chunk of each rank.
func TestVerifyNamesEveryCorruptChunk(t *testing.T) {
	ctx := t.Context()
	s, err := store.Open(ctx, "mem://verify-every")
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 4 << 10
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 1, ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("y"), 2*chunk)
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txn.Batch{Name: "b", Cursor: "b",
		Ranks: [][]txn.FileSource{{txn.BytesFile("first.bin", body), txn.BytesFile("second.bin", body)}}})
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tgb, _ := st.Step(0)
	ranks, _, err := l.Packs(ctx, tgb)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := store.ReadAll(ctx, s, tgb.Object.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ranks[0].Files {
		obj[ranks[0].Off+f.Off+10] ^= 0xff
	}
	if err := store.PutBytes(ctx, s, tgb.Object.Key, obj); err != nil {
		t.Fatal(err)
	}
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, p := range rep.Problems {
		for _, f := range []string{"first.bin", "second.bin"} {
			if strings.Contains(p.What, f) {
				named[f] = true
			}
		}
	}
	if len(rep.Problems) != 2 || !named["first.bin"] || !named["second.bin"] {
		t.Fatalf("verify of two corrupted files found %d problems %v; want two, naming first.bin and second.bin", len(rep.Problems), rep.Problems)
	}
}

// TestCheckpointInFirstTGBsVersion (issue 43 item 16): a version that adds
// a stream's first TGBs may carry a checkpoint of one of them, as
// docs/FORMAT.md says ("<= the head including this version's TGBs");
// the reader refused it.
func TestCheckpointInFirstTGBsVersion(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 1, FirstStep: 7})
	if err != nil {
		t.Fatal(err)
	}
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txn.Batch{Name: "b", Cursor: "b",
		Ranks: [][]txn.FileSource{{txn.BytesFile("a.bin", []byte("x"))}}})
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := txn.VersionKey(st.Version)
	raw, err := store.ReadAll(ctx, s, key)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if _, ok := v["tgbs"]; !ok {
		t.Fatalf("version %d holds no TGBs: %s", st.Version, raw)
	}
	v["checkpoints"] = []int64{7}
	raw, _ = json.Marshal(v)
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := store.PutBytes(ctx, s, key, raw); err != nil {
		t.Fatal(err)
	}
	got, err := l.Load(ctx)
	if err != nil {
		t.Fatalf("a checkpoint of the first step in the version that adds it: %v", err)
	}
	if len(got.Checkpoints) != 1 || got.Checkpoints[0] != 7 {
		t.Fatalf("checkpoints %v; want [7]", got.Checkpoints)
	}
}

// TestVerifyStoreOutageIsNotAProblem: a store that fails a data object's
// reads with a 503 makes verify fail with that error (store.Transient),
// not report sound objects as unreadable problems (the simulation found
// verify naming every pack it read during an outage); a missing object is
// still a problem.
func TestVerifyStoreOutageIsNotAProblem(t *testing.T) {
	ctx := t.Context()
	s := &failingData{Store: store.NewMem()}
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txn.Batch{Name: fmt.Sprint(i),
			Ranks: [][]txn.FileSource{{txn.BytesFile("a", []byte("aa"))}, {txn.BytesFile("b", []byte("bb"))}}})
	}
	for _, op := range []string{"stat", "get"} {
		s.failing.Store(op)
		rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 2})
		if !store.Transient(err) || rep != nil {
			t.Fatalf("verify with every data %s failing: %+v, %v; want the store's error and no report", op, rep, err)
		}
	}
	s.failing.Store("")
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tgb, _ := st.Step(1)
	if err := s.Delete(ctx, tgb.Object.Key); err != nil {
		t.Fatal(err)
	}
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 2})
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Object != tgb.Object.Key {
		t.Fatalf("verify with step 1's object deleted: %+v, %v; want one problem naming it", rep, err)
	}
}

// failingData answers 503 to Stat ("stat") or to reads ("get") of data
// objects, as failing says.
type failingData struct {
	store.Store
	failing atomic.Value // string
}

func (s *failingData) fail(op, key string) error {
	if f, _ := s.failing.Load().(string); f == op && strings.HasPrefix(key, txn.DataPrefix) {
		return fmt.Errorf("%s %s: 503 Service Unavailable: %w", op, key, store.ErrUnavailable)
	}
	return nil
}

func (s *failingData) Stat(ctx context.Context, key string) (store.Info, error) {
	if err := s.fail("stat", key); err != nil {
		return store.Info{}, err
	}
	return s.Store.Stat(ctx, key)
}

func (s *failingData) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := s.fail("get", key); err != nil {
		return nil, err
	}
	return s.Store.GetRange(ctx, key, off, n)
}

func (s *failingData) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.fail("get", key); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, key)
}
