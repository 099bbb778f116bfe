package txn

import (
	"context"
	"testing"

	"github.com/lakestream/lakestream/store"
)

// FuzzHeartbeat: a heartbeat object holding anything is read without a
// panic; one that does not decode (or names no node) is skipped, since a
// consumer must never stop a producer.
func FuzzHeartbeat(f *testing.F) {
	f.Add([]byte(`{"node_id":"n1","step":12,"time":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"node_id":"","step":-1}`))
	f.Add([]byte(`{"head":null,"ranks":[0,1,-5]}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte("\xff\x00{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		s, err := store.Open(ctx, "mem://fuzz-heartbeat")
		if err != nil {
			t.Fatal(err)
		}
		if err := store.PutBytes(ctx, s, HeartbeatKey("n"), b); err != nil {
			t.Fatal(err)
		}
		hs, err := Consumers(ctx, s)
		if err != nil {
			t.Fatalf("Consumers: %v", err)
		}
		for _, h := range hs {
			if h.NodeID == "" {
				t.Fatalf("a heartbeat without a node id was kept: %+v", h)
			}
		}
	})
}
