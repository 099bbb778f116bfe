package mount

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestDefaultNodeIDPerMount: two mounts on one host get different ids by
// default, and a remount at the same place keeps its id.
func TestDefaultNodeIDPerMount(t *testing.T) {
	a, err := defaultNodeID("/mnt/a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := defaultNodeID("/mnt/b")
	a2, _ := defaultNodeID("/mnt/a")
	if a == b || a != a2 || validateNodeID(a) != nil {
		t.Fatalf("ids %q %q %q: want distinct per mount point, stable, valid", a, b, a2)
	}
}

// TestNodeIDInUseRefused: a fresh heartbeat under the id from another live
// process refuses the mount, naming it; a stale one, or one left by a dead
// process of this host, does not.
func TestNodeIDInUseRefused(t *testing.T) {
	s := store.NewMem()
	now := time.Now()
	host, _ := os.Hostname()
	put := func(hb txn.Heartbeat) {
		t.Helper()
		b, _ := json.Marshal(hb)
		if err := store.PutBytes(t.Context(), s, txn.HeartbeatKey(hb.NodeID), b); err != nil {
			t.Fatal(err)
		}
	}
	put(txn.Heartbeat{NodeID: "other-host", Host: "elsewhere", PID: 42, Time: now.Add(-5 * time.Second)})
	put(txn.Heartbeat{NodeID: "stale", Host: "elsewhere", PID: 42, Time: now.Add(-time.Hour)})
	put(txn.Heartbeat{NodeID: "dead", Host: host, PID: 1 << 30, Time: now})
	put(txn.Heartbeat{NodeID: "live-here", Host: host, PID: os.Getppid(), Time: now})
	for id, refused := range map[string]bool{"other-host": true, "live-here": true, "stale": false, "dead": false, "absent": false} {
		err := checkNodeIDFree(t.Context(), s, id, now)
		if got := errors.Is(err, ErrNodeIDInUse) && errors.Is(err, flagval.ErrUsage); got != refused {
			t.Errorf("%s: %v, refused want %v", id, err, refused)
		}
	}
}
