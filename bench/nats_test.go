package bench

import (
	"bytes"
	"testing"
	"time"
)

// The broker peers run the same job as the commit strategies and report
// in the same rows: one TGB per acked set of rank messages, with its
// latency from first publish to last ack. The window is long enough for
// both producers to be acked on a loaded 2-core machine (300 ms was not).
func TestNATSPeers(t *testing.T) {
	var out bytes.Buffer
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "mem://nats-unused", Strategies: []string{NATS, NATSFsync},
		Producers: []int{2}, Payloads: []int64{64 << 10}, Ranks: 4,
		Duration: 2 * time.Second, JSON: true, Logger: quiet,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := parseRows(t, out.Bytes())
	if len(rows) != 2 || rows[0].Strategy != NATS || rows[1].Strategy != NATSFsync {
		t.Fatalf("rows %+v, want one nats and one nats-fsync row", rows)
	}
	for _, r := range rows {
		if r.TGBs <= 0 || r.TGBsPerS <= 0 || r.P99Ms <= 0 || r.CommittingProducers != 2 || r.TGBsPerCommit != 1 {
			t.Errorf("%+v: want acked TGBs from both producers with a latency", r)
		}
	}
}

func TestNATSPeersRefuseProcesses(t *testing.T) {
	err := Ingest(t.Context(), IngestOptions{
		StoreURL: "file://" + t.TempDir(), Strategies: []string{NATS}, Producers: []int{1},
		Duration: 100 * time.Millisecond, Processes: true, Logger: quiet,
	}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("nats with --processes ran; want a clear refusal")
	}
}
