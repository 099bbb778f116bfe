package sim

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "replay this one seed (a failure prints it), printing every event with -v")
	seedsFlag  = flag.Int("seeds", 0, "run this many fresh seeds and print the table (0: as many as -budget allows)")
	budgetFlag = flag.Duration("budget", 2*time.Minute, "how long to run fresh seeds when -seeds is 0 (under -short, unless given: 30s)")
	firstFlag  = flag.Uint64("first", 0, "the first fresh seed (0: drawn from the time); the others follow it")
	stopFlag   = flag.Bool("stop", false, "stop at the first failure and say how long it took to find")
)

// regressions are seeds that found a defect on main, replayed on every
// run (docs/RELIABILITY.md, Simulation, lists what each found).
var regressions = []uint64{451, 1004352, 1007544, 1004731}

// simBudget is -budget; under -short (make test) 30 s unless -budget was
// given: make test-all and CI run the two minutes.
func simBudget() time.Duration {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "budget" })
	if testing.Short() && !given {
		return 30 * time.Second
	}
	return *budgetFlag
}

// TestSim runs fresh seeds for -budget (or -seeds of them), each a whole
// world in virtual time, and fails with the seed, the world and its last
// events when one breaks an invariant. -seed N replays one.
func TestSim(t *testing.T) {
	if *seedFlag != 0 {
		runSeed(t, *seedFlag, testing.Verbose())
		return
	}
	first := *firstFlag
	if first == 0 {
		first = uint64(time.Now().UnixNano())&(1<<40-1) | 1
	}
	began := time.Now()
	budget := began.Add(simBudget())
	var next atomic.Int64
	var halt atomic.Bool
	var mu sync.Mutex
	var tab table
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if halt.Load() || (*seedsFlag > 0 && i >= int64(*seedsFlag)) || (*seedsFlag == 0 && time.Now().After(budget)) {
					return
				}
				res := runSeed(t, first+uint64(i), false)
				mu.Lock()
				tab.add(res)
				if res.Failure != "" && tab.failures == 1 {
					fmt.Fprintf(os.Stdout, "first failure: seed %d, after %s and %d seeds\n", res.Seed, time.Since(began).Round(time.Second), tab.seeds)
				}
				mu.Unlock()
				if res.Failure != "" && *stopFlag {
					halt.Store(true)
				}
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(os.Stdout, "seeds %d..%d\n%s", first, first+uint64(tab.seeds)-1, tab.String())
}

// TestSimRegressions replays every seed that once found a defect.
func TestSimRegressions(t *testing.T) {
	for _, seed := range regressions {
		runSeed(t, seed, false)
	}
}

func runSeed(t *testing.T, seed uint64, verbose bool) Result {
	var res Result
	t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
		tmp := t.TempDir()
		synctest.Test(t, func(t *testing.T) {
			res = Run(seed, tmp, verbose)
		})
		if res.Failure != "" {
			t.Errorf("seed %d: %s\nreplay: go test ./sim -run 'TestSim$' -seed %d -v\nworld: %s\nlast events:\n  %s",
				seed, res.Failure, seed, res.World, strings.Join(res.Events, "\n  "))
		}
	})
	return res
}

// table sums runs for `make sim`.
type table struct {
	seeds, failures                   int
	simulated                         time.Duration
	versions, tgbs, reclaims, deleted int64
	reads, bytesRead, checks          int64
	faults                            map[string]int64
	failed                            []uint64
}

func (t *table) add(r Result) {
	if t.faults == nil {
		t.faults = map[string]int64{}
	}
	t.seeds++
	t.simulated += r.Simulated
	t.versions += r.Versions
	t.tgbs += r.TGBs
	t.reclaims += r.Reclaims
	t.deleted += r.Deleted
	t.reads += r.Reads
	t.bytesRead += r.BytesRead
	t.checks += r.Checks
	for k, v := range r.Faults {
		t.faults[k] += v
	}
	if r.Failure != "" {
		t.failures++
		t.failed = append(t.failed, r.Seed)
	}
}

func (t *table) String() string {
	var b strings.Builder
	row := func(k string, v any) { fmt.Fprintf(&b, "| %-34s | %14v |\n", k, v) }
	fmt.Fprintf(&b, "| %-34s | %14s |\n|%s|%s|\n", "", "total", strings.Repeat("-", 36), strings.Repeat("-", 16))
	row("seeds", t.seeds)
	row("simulated hours", fmt.Sprintf("%.1f", t.simulated.Hours()))
	row("versions committed", t.versions)
	row("steps committed", t.tgbs)
	row("reclamations", t.reclaims)
	row("data objects deleted", t.deleted)
	row("rank reads checked byte for byte", t.reads)
	row("bytes read and compared (MiB)", fmt.Sprintf("%.1f", float64(t.bytesRead)/(1<<20)))
	for _, k := range slices.Sorted(maps.Keys(t.faults)) {
		row("faults: "+k, t.faults[k])
	}
	row("invariants checked", t.checks)
	row("failures", t.failures)
	if len(t.failed) > 0 {
		fmt.Fprintf(&b, "failed seeds: %v\n", t.failed)
	}
	return b.String()
}
