package txn_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestFormat2StreamKeepsWorking: a stream written by the format 2 build
// (testdata/format2: producers alpha and beta, steps 10-15, a checkpoint
// at 12, snapshots every 4 versions) is read whole by this build, and a
// producer of this build commits to it in format 2 (records with the
// writer's producer state, objects without a self-description), so the
// older build's mounts keep reading it.
func TestFormat2StreamKeepsWorking(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/format2")); err != nil {
		t.Fatal(err)
	}
	s, err := store.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Open(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head, _ := st.Head(); st.LiveFrom != 10 || head != 15 || len(st.Checkpoints) != 1 || st.Checkpoints[0] != 12 {
		t.Fatalf("format 2 state: live from %d, head %d, checkpoints %v; want 10, 15, [12]", st.LiveFrom, head, st.Checkpoints)
	}
	for _, tgb := range st.Steps {
		ranks, shared, err := l.Packs(ctx, tgb)
		if err != nil {
			t.Fatalf("step %d: %v", tgb.Step, err)
		}
		for r, p := range ranks {
			data, err := s.GetRange(ctx, p.Key, p.Off, p.Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := txn.VerifyPack(p, data, l.Config.ChunkSize); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%s rank %d\n", tgb.Batch, r); !bytes.HasPrefix(data, []byte(want)) {
				t.Fatalf("step %d rank %d: %q, want it to start with %q", tgb.Step, r, data, want)
			}
		}
		if shared == nil || len(shared.Files) != 1 {
			t.Fatalf("step %d: shared files %+v", tgb.Step, shared)
		}
	}
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 4})
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify: %v %v", err, rep)
	}

	// Two producers of this build commit more, at once.
	done := make(chan error, 2)
	for _, id := range []string{"alpha", "gamma"} {
		go func() { done <- runFormat2Producer(t, l, id) }()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	st, err = l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head, _ := st.Head(); head != 15+6 || st.Producers["alpha"].Seq != 6 || st.Producers["gamma"].Seq != 3 {
		t.Fatalf("after 2 producers x 3 TGBs: head %d, alpha %+v, gamma %+v", head, st.Producers["alpha"], st.Producers["gamma"])
	}
	for _, tgb := range st.Steps[6:] {
		if tgb.Object.Footer != 0 {
			t.Errorf("step %d: a self-description in a format 2 object", tgb.Step)
		}
	}
	// Every record this build wrote is format 2, the writer's own TGBs
	// with its producer state.
	logs, err := filepath.Glob(filepath.Join(dir, "_log", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(`{"format":2,`)) {
			t.Errorf("%s: %.60s, want a format 2 record", filepath.Base(f), b)
		}
		if bytes.Contains(b, []byte(`"tgbs"`)) && !bytes.Contains(b, []byte(`"producer":{"seq"`)) {
			t.Errorf("%s: TGBs without the writer's producer state (what format 2 readers require)", filepath.Base(f))
		}
	}
	cfg, err := os.ReadFile(filepath.Join(dir, txn.StreamKey))
	if err != nil || !strings.HasPrefix(string(cfg), `{"format":2,`) || strings.Contains(string(cfg), "writer_version") {
		t.Fatalf("_stream.json changed: %s %v", cfg, err)
	}
	rep, err = txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 4})
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify after producing: %v %v", err, rep)
	}
}

func runFormat2Producer(t *testing.T, l *txn.Log, id string) error {
	p, err := txn.OpenProducer(t.Context(), l, txn.ProducerOptions{ID: id, Logger: quietLogger()})
	if err != nil {
		return err
	}
	for i := range 3 {
		name := fmt.Sprintf("%s-new%d", id, i)
		b := txn.Batch{Name: name, Cursor: name, Ranks: [][]txn.FileSource{
			{txn.BytesFile("x.txt", []byte(name+" rank 0\n"))},
			{txn.BytesFile("x.txt", []byte(name+" rank 1\n"))},
		}, Shared: []txn.FileSource{txn.BytesFile("meta.json", []byte("{}"))}}
		if _, err := p.Append(t.Context(), b); err != nil {
			return err
		}
	}
	return p.Close(t.Context())
}
