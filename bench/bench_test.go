package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
)

// workerEnv makes the test binary a bench worker process (TestProcesses).
const workerEnv = "LAKESTREAM_BENCH_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := Worker(context.Background(), os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var quiet = slog.New(slog.DiscardHandler)

// parseRows decodes JSON lines, checking every contract field is present.
func parseRows(t *testing.T, out []byte) []Row {
	t.Helper()
	var rows []Row
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for _, k := range []string{"strategy", "producers", "payload_bytes", "tgbs_per_s", "mb_per_s",
			"attempts_per_commit", "tgbs_per_commit", "p50_ms", "p99_ms", "e2e_p50_ms", "e2e_p99_ms",
			"puts_per_tgb", "gets_per_tgb", "heads_per_tgb", "lists_per_tgb", "deletes_per_tgb",
			"versions_per_s", "tgbs_per_version", "first_commit_max_ms"} {
			if _, ok := fields[k]; !ok {
				t.Fatalf("line %q has no %q", line, k)
			}
		}
		var r Row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

func checkSane(t *testing.T, r Row) {
	t.Helper()
	if r.TGBsPerS <= 0 || r.MBPerS <= 0 || r.TGBs <= 0 {
		t.Errorf("%+v: nothing was written", r)
	}
	if baseline(r.Strategy) {
		if r.Commits != 0 || r.AttemptsPerCommit != 0 || r.E2EP99Ms != 0 {
			t.Errorf("%+v: a baseline reports commits", r)
		}
		// raw-put writes one object per rank (and some for TGBs in flight
		// at the window's end); plain-put bypasses the store.
		if r.Strategy == RawPut && (r.PutsPerTGB < float64(r.Ranks) || r.PutsPerTGB > 1.5*float64(r.Ranks)) {
			t.Errorf("%+v: raw-put made %v PUTs per TGB, want one per rank", r, r.PutsPerTGB)
		}
		return
	}
	// Every TGB is one create of its object, plus its share of versions.
	if r.PutsPerTGB < 1 || r.VersionsPerS <= 0 || r.TGBsPerVersion != r.TGBsPerCommit || r.FirstCommitMaxMs <= 0 {
		t.Errorf("%+v: request counts, versions per second or first commit missing", r)
	}
	if r.Commits <= 0 || r.AttemptsPerCommit < 1 || r.TGBsPerCommit < 1 {
		t.Errorf("%+v: want commits, >= 1 attempt and >= 1 TGB per commit", r)
	}
	// p50 may round to 0 on mem://, where a commit takes microseconds.
	if r.P50Ms < 0 || r.P99Ms <= 0 || r.P99Ms < r.P50Ms {
		t.Errorf("%+v: latency percentiles", r)
	}
	// Upload start -> visible contains durable -> visible.
	if r.E2EP99Ms <= 0 || r.E2EP99Ms < r.E2EP50Ms || r.E2EP50Ms < r.P50Ms || r.E2EP99Ms < r.P99Ms {
		t.Errorf("%+v: e2e latency percentiles", r)
	}
	if r.TGBsPerCommit > float64(r.TGBs) || float64(r.Commits) > float64(r.TGBs) {
		t.Errorf("%+v: more commits than TGBs", r)
	}
}

func TestIngestMem(t *testing.T) {
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "mem://bench", Producers: []int{2}, Payloads: []int64{4096}, Duration: 500 * time.Millisecond,
		Strategies: []string{"dac", "naive", RawPut, PlainPut}, Drain: 200 * time.Millisecond,
		JSON: true, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseRows(t, out.Bytes())
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), out.String())
	}
	for i, want := range []string{"dac", "naive", RawPut, PlainPut} {
		r := rows[i]
		if r.Strategy != want || r.Producers != 2 || r.PayloadBytes != 4096 || r.Ranks != 2 {
			t.Errorf("row %d: %+v", i, r)
		}
		checkSane(t, r)
		if want == "naive" && r.TGBsPerCommit != 1 {
			t.Errorf("naive: %v TGBs per commit", r.TGBsPerCommit)
		}
	}
}

// TestIngestWarmupWindows: a point with a warm-up and three windows
// prints three rows, numbered, back to back, each with in_flight and
// load1; the NATS peer measures the same windows.
func TestIngestWarmupWindows(t *testing.T) {
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "mem://bench", Producers: []int{2}, Payloads: []int64{4096}, Duration: 300 * time.Millisecond,
		Warmup: 200 * time.Millisecond, Windows: 3, Strategies: []string{"dac", NATS}, Drain: 200 * time.Millisecond,
		JSON: true, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		for _, k := range []string{`"in_flight":`, `"load1":`} {
			if !strings.Contains(line, k) {
				t.Errorf("row lacks %s: %s", k, line)
			}
		}
	}
	rows := parseRows(t, out.Bytes())
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 3 per strategy:\n%s", len(rows), out.String())
	}
	for i, r := range rows {
		if want := i%3 + 1; r.Window != want || r.Seconds != 0.3 {
			t.Errorf("row %d: window %d of %vs, want window %d of 0.3s", i, r.Window, r.Seconds, want)
		}
		if r.TGBs == 0 {
			t.Errorf("row %d (%s): no TGBs in a window after the warm-up", i, r.Strategy)
		}
		if r.Strategy == NATS && r.InFlight != 2 {
			t.Errorf("nats row %d: in_flight %d, want one per producer", i, r.InFlight)
		}
	}
}

// TestIngestFileTable: the file store with latency, the table output, and
// the run's directory removed afterwards.
func TestIngestFileTable(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "file://" + dir, Producers: []int{1, 3}, Payloads: []int64{10_000}, Ranks: 3,
		Duration: 300 * time.Millisecond, Strategies: []string{"dac"}, StoreLatency: 2 * time.Millisecond, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "STRATEGY") || !strings.Contains(lines[0], "P99_MS") {
		t.Fatalf("table:\n%s", out.String())
	}
	// Aligned: every line is equally long and the headers line up with the values.
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) || !strings.Contains(l, "dac") || !strings.Contains(l, "10000B") {
			t.Errorf("row %q under header %q", l, lines[0])
		}
	}
	t.Logf("\n%s", out.String())
	left, err := filepath.Glob(filepath.Join(dir, "bench-*", "*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v %v", left, err)
	}
}

// TestIngestLongRun: rows per window until the log reaches the version
// count, with checkpoints and gc in between.
func TestIngestLongRun(t *testing.T) {
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "mem://long", Producers: []int{2}, Payloads: []int64{1000}, Duration: 100 * time.Millisecond,
		StoreLatency: 2 * time.Millisecond, Strategies: []string{"naive", RawPut}, Versions: 150, JSON: true, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseRows(t, out.Bytes())
	if len(rows) < 2 {
		t.Fatalf("%d rows, want several windows:\n%s", len(rows), out.String())
	}
	for i, r := range rows {
		if r.Strategy != "naive" || r.Window != i+1 {
			t.Errorf("row %d: %+v", i, r)
		}
		if i > 0 && r.Version < rows[i-1].Version {
			t.Errorf("row %d: version %d after %d", i, r.Version, rows[i-1].Version)
		}
	}
	if last := rows[len(rows)-1]; last.Version < 150 {
		t.Errorf("stopped at version %d, want >= 150", last.Version)
	}
	checkSane(t, rows[0])
}

// TestProcesses: producers as separate processes (this test binary,
// re-executed as a worker), on a file store they all open.
func TestProcesses(t *testing.T) {
	t.Setenv(workerEnv, "1")
	dir := t.TempDir()
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "file://" + dir, Producers: []int{2}, Payloads: []int64{8192}, Duration: 500 * time.Millisecond,
		Strategies: []string{"dac", RawPut, PlainPut}, JSON: true, Processes: true, WorkerCommand: []string{os.Args[0]}, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseRows(t, out.Bytes())
	if len(rows) != 3 {
		t.Fatalf("%d rows:\n%s", len(rows), out.String())
	}
	for _, r := range rows {
		if !r.Processes {
			t.Errorf("%+v: not marked as processes", r)
		}
		checkSane(t, r)
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []IngestOptions{
		{},
		{StoreURL: "mem://x", Strategies: []string{"aimd"}},
		{StoreURL: "mem://x", Strategies: []string{"fixed"}},
		{StoreURL: "mem://x", Strategies: []string{"dac:max=1s"}},
		{StoreURL: "mem://x", Producers: []int{0}},
		{StoreURL: "mem://x", Payloads: []int64{1}, Ranks: 2},
		{StoreURL: "mem://x", Processes: true},
		{StoreURL: "ftp://x/y", Strategies: []string{"dac"}},
	} {
		o.Logger = quiet
		o.Duration = time.Millisecond
		if err := Ingest(t.Context(), o, &bytes.Buffer{}); err == nil {
			t.Errorf("options %+v: no error", o)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100..1
	}
	if p := percentile(xs, 50); p != 50 {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(xs, 99); p != 99 {
		t.Errorf("p99 %v", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("empty p99 %v", p)
	}
	if p := percentile([]float64{7}, 99); p != 7 {
		t.Errorf("one-sample p99 %v", p)
	}
}

// TestIngestS3: on versitygw, plain-put writes through its own SDK client
// (the objects land under the run's prefix and are cleaned up with it), and
// dac reports e2e latency above its durable -> visible latency.
func TestIngestS3(t *testing.T) {
	srv := s3test.Start(t)
	base := srv.NewBucketURL(t)
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: base, Producers: []int{2}, Payloads: []int64{64 << 10}, Ranks: 2, Duration: 500 * time.Millisecond,
		Strategies: []string{"dac", RawPut, PlainPut}, JSON: true, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseRows(t, out.Bytes())
	if len(rows) != 3 {
		t.Fatalf("%d rows:\n%s", len(rows), out.String())
	}
	for _, r := range rows {
		checkSane(t, r)
	}
	s, err := store.Open(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	if left, _, err := s.List(t.Context(), "", "", 10); err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v %v", left, err)
	}
	t.Logf("\n%s", out.String())
}

// BenchmarkIngestS3Profile runs one 10 s dac row of 16 producers x 1 MiB
// TGBs on versitygw, for profiles of the commit path:
//
//	go test -run x -bench IngestS3Profile -benchtime 1x -cpuprofile cpu.out \
//	    -blockprofile block.out -mutexprofile mutex.out ./bench/
func BenchmarkIngestS3Profile(b *testing.B) {
	srv := s3test.Start(b)
	base := srv.NewBucketURL(b)
	for b.Loop() {
		var out bytes.Buffer
		err := Ingest(b.Context(), IngestOptions{
			StoreURL: base, Producers: []int{16}, Payloads: []int64{1 << 20}, Ranks: 4, Duration: 10 * time.Second,
			Strategies: []string{"dac"}, JSON: true, Logger: quiet,
		}, &out)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s", out.String())
	}
}
