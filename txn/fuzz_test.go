package txn_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// FuzzDecodeVersion feeds arbitrary bytes to the version decoder, as if
// they were the object _log/<want>.json. Whatever the input, decoding and
// applying must not panic, and anything a reader accepts must be sane:
//   - a rejected record is ErrCorrupt;
//   - an accepted one re-encodes to bytes that decode to the same record;
//   - its writer is a valid producer id, and each of its packs is the
//     object its producer writes for it (txn.ObjectKey), with its parts
//     inside the object and the files tiling it;
//   - applied to the state before it, it either fails with ErrCorrupt and
//     leaves the state as it was, or yields a state whose steps, seqs and
//     checkpoints are consistent (no producer's seq ever goes back) and
//     that survives a snapshot round trip;
//   - applying never changes the state it was cloned from.
//
// The seeds are every record of a real log (registers, TGBs with nested
// names, empty files, multi-chunk packs and shared files, checkpoints, a
// reclaim, a purge, a config change), valid next versions of each kind,
// garbage, and hostile records no writer makes, which must be refused.
func FuzzDecodeVersion(f *testing.F) {
	fz := newFuzzLog(f)
	for v, b := range fz.records {
		f.Add(b, uint64(v+1))
	}
	next := uint64(len(fz.states)) // the version that follows the head
	for _, b := range fz.nextSeeds(f) {
		f.Add(b, next)
	}
	for _, s := range fuzzGarbage(next) {
		f.Add([]byte(s), next)
	}
	cfg := fz.log.Config

	f.Fuzz(func(t *testing.T, data []byte, want uint64) {
		v, err := txn.DecodeVersion(data, want, &cfg)
		if err != nil {
			if v != nil || !errors.Is(err, txn.ErrCorrupt) {
				t.Fatalf("rejected with (%v, %v), want (nil, ErrCorrupt)", v, err)
			}
			return
		}
		if v.Format != txn.FormatVersion || v.Version != want {
			t.Fatalf("accepted format %d version %d for key version %d", v.Format, v.Version, want)
		}
		if id := v.Writer.Producer; id != "" && !fuzzProducerID.MatchString(id) {
			t.Fatalf("accepted writer %q, not a producer id", id)
		}
		fuzzCheckObjects(t, v.TGBs, cfg.Ranks)

		// Round trip: what a reader accepted, a writer can write back.
		b1 := fuzzJSON(t, v)
		v2, err := txn.DecodeVersion(b1, want, &cfg)
		if err != nil {
			t.Fatalf("re-encoded record rejected: %v\n%s", err, b1)
		}
		if b2 := fuzzJSON(t, v2); !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", b1, b2)
		}

		if want == 0 || want > next {
			return
		}
		base := fz.states[want-1]
		before := fuzzJSON(t, base)
		st := base.Clone()
		err = st.Apply(v)
		if after := fuzzJSON(t, base); !bytes.Equal(before, after) {
			t.Fatalf("applying to a clone changed the original state:\n%s\n%s", before, after)
		}
		if err != nil {
			if !errors.Is(err, txn.ErrCorrupt) {
				t.Fatalf("apply error %v is not ErrCorrupt", err)
			}
			if got := fuzzJSON(t, st); !bytes.Equal(got, before) {
				t.Fatalf("failed apply (%v) changed the state", err)
			}
			return
		}
		fuzzCheckState(t, base, st, v)
		fuzzSnapshotRoundTrip(t, fz.cfgJSON, st)
	})
}

// fuzzLog is a small real log on a mem store and the state after each of
// its versions.
type fuzzLog struct {
	log     *txn.Log
	cfgJSON []byte
	records [][]byte     // records[i] is version i+1 as stored
	states  []*txn.State // states[i] is the state at version i
}

func newFuzzLog(f *testing.F) *fuzzLog {
	ctx := f.Context()
	s := store.NewMem()
	// FirstStep 10 and two ranks so steps and ranks are not both indexes;
	// the smallest chunk size so a few KiB make several chunks.
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 2, FirstStep: 10, ChunkSize: 4096, SnapshotEvery: 5})
	if err != nil {
		f.Fatal(err)
	}
	produce := func(id string, batches ...txn.Batch) {
		txntest.Produce(f, l, txn.ProducerOptions{ID: id, Solo: true}, batches...)
	}
	bytesOf := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	// Steps 10 and 11 are reclaimed below (one object each: a purge of
	// one leaves the other pending); step 12 stays live as the rich
	// example.
	produce("p",
		txn.Batch{Name: "b000000", Ranks: [][]txn.FileSource{
			{txn.BytesFile("w", bytesOf(2, 3))}, {txn.BytesFile("w", bytesOf(2, 4))},
		}},
		txn.Batch{Name: "b000001", Ranks: [][]txn.FileSource{
			{txn.BytesFile("x", bytesOf(1, 4))}, {txn.BytesFile("y/z", bytesOf(5000, 5))},
		}},
		txn.Batch{Name: "b000002", Cursor: "c2", Ranks: [][]txn.FileSource{
			{txn.BytesFile("a.bin", bytesOf(9000, 1)), txn.BytesFile("dir/sub/b.txt", bytesOf(10, 2)), txn.BytesFile("empty", nil)},
			{txn.BytesFile("a.bin", bytesOf(4096, 3))},
		}, Shared: []txn.FileSource{txn.BytesFile("meta.json", []byte(`{"step":"shared"}`))}},
		txn.Batch{Cursor: "c3", Ranks: [][]txn.FileSource{
			{txn.BytesFile("x", bytesOf(7, 6))}, {txn.BytesFile("x", bytesOf(7, 7))},
		}},
	)
	produce("p", txn.Batch{Name: "b000004", Cursor: "c4", Ranks: [][]txn.FileSource{
		{txn.BytesFile("x", bytesOf(3, 8))}, {txn.BytesFile("x", bytesOf(3, 9))},
	}})
	produce("q",
		txn.Batch{Name: "q1", Ranks: [][]txn.FileSource{{txn.BytesFile("x", bytesOf(2, 10))}, {txn.BytesFile("x", bytesOf(2, 11))}}},
		txn.Batch{Name: "q2", Ranks: [][]txn.FileSource{{txn.BytesFile("x", bytesOf(2, 12))}, {txn.BytesFile("x", bytesOf(2, 13))}}},
	)
	st, err := l.Load(ctx)
	if err != nil {
		f.Fatal(err)
	}
	admin := func(v *txn.Version) {
		if _, err := l.Commit(ctx, st, func(*txn.State) (*txn.Version, error) { return v, nil }, slog.New(slog.DiscardHandler)); err != nil {
			f.Fatal(err)
		}
	}
	admin(&txn.Version{Checkpoints: []int64{12}})
	admin(&txn.Version{Checkpoints: []int64{13}})
	admin(&txn.Version{Reclaim: &txn.Reclaim{Below: 12}})
	admin(&txn.Version{Purged: st.Pending[0].Keys[:1]})
	admin(&txn.Version{Config: &txn.ConfigChange{RetainCheckpoints: 3}})

	fz := &fuzzLog{log: l, states: []*txn.State{txn.NewState(l.Config)}}
	if fz.cfgJSON, err = store.ReadAll(ctx, s, txn.StreamKey); err != nil {
		f.Fatal(err)
	}
	for v := uint64(1); v <= st.Version; v++ {
		b, err := store.ReadAll(ctx, s, txn.VersionKey(v))
		if err != nil {
			f.Fatal(err)
		}
		ver, err := txn.DecodeVersion(b, v, &l.Config)
		if err != nil {
			f.Fatal(err)
		}
		next := fz.states[v-1].Clone()
		if err := next.Apply(ver); err != nil {
			f.Fatal(err)
		}
		fz.records = append(fz.records, b)
		fz.states = append(fz.states, next)
	}
	return fz
}

// nextSeeds are valid records of every kind for the version after the head.
func (fz *fuzzLog) nextSeeds(f *testing.F) [][]byte {
	head := fz.states[len(fz.states)-1]
	next := head.Version + 1
	q := head.Producers["q"]
	// tgbLike copies a live step (real packs), renamed to q's next seqs.
	tgbLike := func(src *txn.TGB, step int64, seq uint64) *txn.TGB {
		var t txn.TGB
		if err := json.Unmarshal(fuzzJSON(f, src), &t); err != nil {
			f.Fatal(err)
		}
		t.Step, t.Producer, t.Epoch, t.Seq, t.Batch = step, "q", q.Epoch, seq, fmt.Sprintf("q%d", seq)
		t.Object.Key = txn.ObjectKey("q", q.Epoch, seq)
		return &t
	}
	n := head.NextStep()
	rich := head.Steps[0] // multi-chunk, nested names, empty file, shared
	vs := []*txn.Version{
		{TGBs: []*txn.TGB{tgbLike(rich, n, q.Seq+1)}, Producer: &txn.ProducerUpdate{Seq: q.Seq + 1, Cursor: "qc"}},
		{TGBs: []*txn.TGB{tgbLike(rich, n, q.Seq+1), tgbLike(head.Steps[1], n+1, q.Seq+2)}, Producer: &txn.ProducerUpdate{Seq: q.Seq + 2}},
		{TGBs: []*txn.TGB{tgbLike(head.Steps[1], n, q.Seq+1)}, Producer: &txn.ProducerUpdate{Seq: q.Seq + 1}, Checkpoints: []int64{n}},
		{Writer: txn.Writer{Producer: "r", Epoch: 1}, Register: &txn.Register{Instance: "0123456789abcdef"}},
		{Writer: txn.Writer{Producer: "q", Epoch: q.Epoch + 1}, Register: &txn.Register{Instance: "fedcba9876543210"}},
		{Checkpoints: []int64{n - 1}},
		{Reclaim: &txn.Reclaim{Below: head.LiveFrom + 2}},
		{Reclaim: &txn.Reclaim{Below: n}},
		{Purged: head.Pending[0].Keys},
		{Config: &txn.ConfigChange{RetainCheckpoints: 1}},
		{},
	}
	// Hostile records that a writer never makes.
	stolen := tgbLike(rich, n, q.Seq+1)
	stolen.Object.Key = head.Steps[1].Object.Key // another live step's object
	badKey := tgbLike(rich, n, q.Seq+1)
	badKey.Object.Key = "data//x"
	restart := tgbLike(head.Steps[1], n, 1)
	restart.Epoch = q.Epoch + 1
	restart.Object.Key = txn.ObjectKey("q", q.Epoch+1, 1)
	vs = append(vs,
		&txn.Version{TGBs: []*txn.TGB{stolen}, Producer: &txn.ProducerUpdate{Seq: q.Seq + 1}},
		&txn.Version{TGBs: []*txn.TGB{badKey}, Producer: &txn.ProducerUpdate{Seq: q.Seq + 1}},
		// A register that also restarts the producer's seqs at 1.
		&txn.Version{Writer: txn.Writer{Producer: "q", Epoch: q.Epoch + 1}, Register: &txn.Register{Instance: "1"}, TGBs: []*txn.TGB{restart}, Producer: &txn.ProducerUpdate{Seq: 1}},
		&txn.Version{Writer: txn.Writer{Producer: "../a"}, Register: &txn.Register{Instance: "1"}},
	)
	var out [][]byte
	for i, v := range vs {
		v.Format, v.Version, v.Time, v.Txn = txn.FormatVersion, next, head.Time, fmt.Sprintf("seed%d", i)
		if len(v.TGBs) > 0 && v.Writer.Producer == "" {
			v.Writer = txn.Writer{Producer: "q", Epoch: q.Epoch}
		}
		out = append(out, fuzzJSON(f, v))
	}
	return out
}

// fuzzGarbage are malformed or hostile records for version next.
func fuzzGarbage(next uint64) []string {
	hdr := fmt.Sprintf(`"format":2,"version":%d,"time":"2025-01-01T00:00:00Z","txn":"x"`, next)
	tgb := func(object string) string {
		return "{" + hdr + `,"writer":{"producer":"q","epoch":1},"producer":{"seq":3},"tgbs":[{"step":16,"producer":"q","epoch":1,"seq":3,"time":"2025-01-01T00:00:00Z","object":` + object + `}]}`
	}
	return []string{
		"",
		"null",
		"{}",
		"[]",
		`"version"`,
		"{" + hdr + "}",
		"{" + hdr + "}{}",
		"{" + hdr + "}\n\n",
		"\xef\xbb\xbf{" + hdr + "}",
		"{" + hdr,
		`{"format":1,"version":1}`,
		`{"format":2e400,"version":1}`,
		`{"format":2,"version":-1}`,
		`{"FORMAT":1,"Version":` + fmt.Sprint(next) + `}`,
		"{" + hdr + `,"tgbs":[null],"writer":{"producer":"q","epoch":1},"producer":{"seq":1}}`,
		"{" + hdr + `,"tgbs":[{}],"writer":{"producer":"q","epoch":1},"producer":{"seq":0}}`,
		"{" + hdr + `,"register":{"instance":""},"writer":{"producer":"q"}}`,
		"{" + hdr + `,"checkpoints":[-1,9223372036854775807]}`,
		"{" + hdr + `,"reclaim":{"below":-9223372036854775808}}`,
		"{" + hdr + `,"purged":["data/../x",""]}`,
		"{" + hdr + `,"config":{"retain_checkpoints":-1}}`,
		"{" + hdr + `,"writer":{"producer":"\xff\xfe"},"register":{"instance":"\u0000"}}`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		// A producer state update with no TGBs: from an administrative
		// writer (no producer to update) and from a registered producer
		// (rewinding its seq, so its next TGB would reuse committed pack
		// keys).
		"{" + hdr + `,"producer":{"seq":5}}`,
		"{" + hdr + `,"writer":{"producer":"q","epoch":1},"producer":{"seq":0}}`,
		// Object parts out of order, overflowing, or a table too large to
		// be one (a reader would allocate it).
		tgb(`{"key":"data/q/1/3/tgb.pack","size":100,"data":50,"table":40,"table_crc":0}`),
		tgb(`{"key":"data/q/1/3/tgb.pack","size":-1,"data":-9223372036854775808,"table":0,"table_crc":0}`),
		tgb(`{"key":"data/q/1/3/tgb.pack","size":9223372036854775807,"data":0,"table":1,"table_crc":0}`),
		tgb(`{"key":"data/q/1/3/tgb.pack","size":1073741824,"data":0,"table":0,"table_crc":0}`),
		tgb(`{"key":"data/q/1/3/../../x","size":10,"data":0,"table":5,"table_crc":0}`),
		tgb(`null`),
	}
}

// fuzzCheckObjects re-checks, independently of the decoder, what readers
// rely on: each TGB's object is the one its producer writes for it (gc
// deletes it on reclaim, orphan collection parses it), and its parts are in
// order with a table a reader can afford to fetch.
func fuzzCheckObjects(t testing.TB, tgbs []*txn.TGB, ranks int) {
	t.Helper()
	for _, tg := range tgbs {
		o := tg.Object
		if o == nil {
			t.Fatalf("step %d: accepted a TGB without an object", tg.Step)
		}
		if want := txn.ObjectKey(tg.Producer, tg.Epoch, tg.Seq); o.Key != want {
			t.Fatalf("step %d: accepted object key %q for %s", tg.Step, o.Key, want)
		}
		if err := store.ValidateKey(o.Key); err != nil {
			t.Fatalf("step %d: accepted %v", tg.Step, err)
		}
		if o.Data < 0 || o.Table < o.Data || o.Size <= o.Table || o.Size-o.Table > int64(ranks+1)*1024 {
			t.Fatalf("step %d: accepted object %+v", tg.Step, o)
		}
	}
}

// fuzzCheckState checks the state a successful Apply of v to base produced.
func fuzzCheckState(t *testing.T, base, st *txn.State, v *txn.Version) {
	t.Helper()
	if st.Version != v.Version || st.LiveFrom < base.LiveFrom || st.LiveFrom < st.Config.FirstStep {
		t.Fatalf("state version %d live from %d after applying version %d to live-from %d", st.Version, st.LiveFrom, v.Version, base.LiveFrom)
	}
	if st.NextStep() != base.NextStep()+int64(len(v.TGBs)) {
		t.Fatalf("next step %d, want %d + %d TGBs", st.NextStep(), base.NextStep(), len(v.TGBs))
	}
	lastSeq := map[string]uint64{}
	for i, tg := range st.Steps {
		if tg.Step != st.LiveFrom+int64(i) {
			t.Fatalf("step %d at index %d of a window from %d", tg.Step, i, st.LiveFrom)
		}
		if st.Producers[tg.Producer] == nil {
			t.Fatalf("step %d by unknown producer %q", tg.Step, tg.Producer)
		}
		if tg.Seq <= lastSeq[tg.Producer] && lastSeq[tg.Producer] != 0 {
			t.Fatalf("step %d: producer %s seq %d after seq %d", tg.Step, tg.Producer, tg.Seq, lastSeq[tg.Producer])
		}
		lastSeq[tg.Producer] = tg.Seq
	}
	fuzzCheckObjects(t, st.Steps, st.Config.Ranks)
	for id, p := range st.Producers {
		// A producer's seq never goes back: its next TGB's pack keys
		// (data/<id>/<epoch>/<seq+1>/...) must be new.
		if bp := base.Producers[id]; bp != nil && (p.Seq < bp.Seq || p.Epoch < bp.Epoch) {
			t.Fatalf("producer %s went from epoch %d seq %d to epoch %d seq %d", id, bp.Epoch, bp.Seq, p.Epoch, p.Seq)
		}
		if p.Seq < lastSeq[id] {
			t.Fatalf("producer %s at seq %d has a live step with seq %d", id, p.Seq, lastSeq[id])
		}
	}
	for i := 1; i < len(st.Checkpoints); i++ {
		if st.Checkpoints[i] <= st.Checkpoints[i-1] {
			t.Fatalf("checkpoints %v not strictly ascending", st.Checkpoints)
		}
	}
}

// fuzzSnapshotRoundTrip writes st as a snapshot of a fresh stream with the
// same _stream.json and loads it back: a state a reader reached must be
// one it can snapshot and read again.
func fuzzSnapshotRoundTrip(t *testing.T, cfgJSON []byte, st *txn.State) {
	t.Helper()
	ctx := t.Context()
	s := store.NewMem()
	if err := store.PutBytes(ctx, s, txn.StreamKey, cfgJSON); err != nil {
		t.Fatal(err)
	}
	l, err := txn.Open(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WriteSnapshot(ctx, st); err != nil {
		t.Fatal(err)
	}
	got, err := l.Load(ctx)
	if err != nil {
		t.Fatalf("snapshot of an applied state does not load: %v", err)
	}
	if a, b := fuzzJSON(t, st), fuzzJSON(t, got); !bytes.Equal(a, b) {
		t.Fatalf("snapshot round trip changed the state:\n%s\n%s", a, b)
	}
}

// fuzzProducerID is what OpenProducer accepts as an id.
var fuzzProducerID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func fuzzJSON(t testing.TB, x any) []byte {
	t.Helper()
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatalf("encoding %T: %v", x, err)
	}
	return b
}
