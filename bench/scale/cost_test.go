package scale

import (
	"math"
	"net/http"
	"testing"

	"github.com/lakestream/lakestream/txn"
)

// TestClassify: the proxy files each request under its area of the
// stream and its operation, in path style and virtual-host style, with
// LISTs under their prefix's area and data GETs with their key and first
// byte.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, url, rng string
		want             reqKind
		key              string
		off              int64
	}{
		{"GET", "http://h/bkt/run/_log/00000000000000000007.json", "", reqKind{"log", "get"}, "", 0},
		{"GET", "http://h/bkt?list-type=2&prefix=run%2F_log%2F&start-after=x", "", reqKind{"log", "list"}, "", 0},
		{"PUT", "http://h/bkt/run/_consumers/n1.json", "", reqKind{"heartbeat", "put"}, "", 0},
		{"HEAD", "http://h/bkt/run/_stream.json", "", reqKind{"stream", "head"}, "", 0},
		{"GET", "http://h/bkt/run/data/p/1/2/tgb.pack", "bytes=4096-8191", reqKind{"data", "get"}, "data/p/1/2/tgb.pack", 4096},
		{"GET", "http://bkt.h/run/data/p/1/2/tgb.pack", "", reqKind{"data", "get"}, "data/p/1/2/tgb.pack", 0},
		{"PUT", "http://h/bkt/run/data/p/1/3/tgb.pack", "", reqKind{"data", "put"}, "", 0},
		{"DELETE", "http://h/bkt/run/_consumers/n1.json", "", reqKind{"heartbeat", "delete"}, "", 0},
	} {
		r, err := http.NewRequest(c.method, c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.rng != "" {
			r.Header.Set("Range", c.rng)
		}
		k, key := classify(r)
		if k != c.want || (k.area == "data" && k.op == "get" && (key != c.key || rangeStart(c.rng) != c.off)) {
			t.Errorf("%s %s: %v %q (from %d), want %v %q (from %d)", c.method, c.url, k, key, rangeStart(c.rng), c.want, c.key, c.off)
		}
	}
}

// TestSplitObjGets: a GET starting at or after the object's data end is
// an index GET; one before it, or of an object the state does not know,
// a data GET.
func TestSplitObjGets(t *testing.T) {
	st := &txn.State{Steps: []*txn.TGB{{Step: 0, Object: &txn.Object{Key: "data/p/1/1/tgb.pack", Data: 1000}}}}
	gets := []objGet{{"data/p/1/1/tgb.pack", 0}, {"data/p/1/1/tgb.pack", 999}, {"data/p/1/1/tgb.pack", 1000}, {"data/p/1/1/tgb.pack", 5000}, {"data/p/1/9/tgb.pack", 5000}}
	if index, data := splitObjGets(gets, st); index != 2 || data != 3 {
		t.Fatalf("%d index and %d data GETs, want 2 and 3", index, data)
	}
}

// TestCostPrice: a node at the floor's requests (one log GET, one index
// GET, one data GET per step, no heartbeat) and a producer at two PUTs a
// step cost exactly the floor, $163.60 for 128 nodes; a heartbeat a
// minute adds $10.67; the split adds up.
func TestCostPrice(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 0.01 }
	if f := costFloor(128); !near(f, 163.60) {
		t.Fatalf("floor for 128 nodes: %.2f, want 163.60", f)
	}
	r := CostRow{DeployNodes: 128, LogGets: 1, IndexGets: 1, DataGets: 1, ProducerPuts: 2}
	r.price()
	if !near(r.Cost.Total, r.Floor) || !near(r.Ratio, 1) {
		t.Fatalf("the floor's requests cost %.2f (%.2fx), want %.2f", r.Cost.Total, r.Ratio, r.Floor)
	}
	r.HeartbeatPuts, r.DataGets = 1, 8
	r.price()
	if !near(r.Cost.Heartbeat, 10.67) || !near(r.Cost.Data, 8*51.2) {
		t.Fatalf("heartbeat %.2f, data %.2f; want 10.67 and %.2f", r.Cost.Heartbeat, r.Cost.Data, 8*51.2)
	}
	c := r.Cost
	if sum := c.Producer + c.Log + c.Index + c.Data + c.Heartbeat + c.Other; !near(sum, c.Total) {
		t.Fatalf("split sums to %.2f, total %.2f", sum, c.Total)
	}
	if !near(r.OneDataGet.Total, r.Floor+10.67) {
		t.Fatalf("with one data GET: %.2f, want %.2f", r.OneDataGet.Total, r.Floor+10.67)
	}
}
