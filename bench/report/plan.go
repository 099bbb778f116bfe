package report

import (
	"fmt"
	"time"
)

// The cost model that projects a run's duration before it starts. Its
// constants are what the parts took on a 2-core VM; the report prints
// the projection beside the actual duration so they can be corrected.

// cost is the projected time of one ingest invocation: per strategy a
// stream set up and registered, the warm-up, the windows, and the drain
// and clean-up of what is in flight (about one round of TGBs).
func (r ingestRun) cost(o *Options) time.Duration {
	strategies := 4
	setup := 2 * time.Second
	if r.store == "nats" {
		strategies, setup = 2, time.Second
	}
	round := time.Duration(float64(r.payload*int64(r.producers)) / storeBandwidth(r.store) * float64(time.Second))
	per := setup + warmup(r.window) + time.Duration(o.Windows)*r.window + min(r.window, 2*round)
	return time.Duration(strategies) * per
}

// sectionCost is the projected time of one section.
func sectionCost(o *Options, sec string) time.Duration {
	return sectionCostRaw(o, sec).Round(time.Second)
}

func sectionCostRaw(o *Options, sec string) time.Duration {
	switch sec {
	case "ingest":
		var d time.Duration
		for _, r := range ingestRuns(o) {
			d += r.cost(o)
		}
		return d
	case "dac":
		return 2 * (o.LongRun + 8*time.Second)
	case "latency":
		// Per system and reader count: the steps at latencyInterval, and
		// a mount or a broker started.
		return 2 * time.Duration(len(latencyReaders)) * (time.Duration(o.LatencySteps)*latencyInterval + 5*time.Second)
	case "read":
		// bench read builds its stream once per repeat; the peers mount
		// s3fs and rclone.
		return time.Duration(o.Repeats) * 40 * time.Second
	case "storage":
		return 15 * time.Second
	case "scale":
		if o.Quick {
			return 40 * time.Second
		}
		return 3 * time.Minute
	case "cost":
		// Stream creation, settling and the mounts' start, then the window.
		return o.CostWindow + 50*time.Second
	}
	return 0
}

// Projection is the projected duration of the whole run.
func Projection(o *Options) time.Duration {
	var d time.Duration
	for _, sec := range o.Sections {
		d += sectionCost(o, sec)
	}
	return d.Round(time.Second)
}

// printPlan prints every ingest point's window and projected time, each
// section's projection and the total.
func printPlan(o *Options) {
	for _, r := range ingestRuns(o) {
		fmt.Fprintf(o.Log, "ingest %-9s %-6s x %2d producers: warm-up %s, %d x %s windows, projected %s\n",
			r.store, Bytes(float64(r.payload)), r.producers, warmup(r.window), o.Windows, r.window, r.cost(o).Round(time.Second))
	}
	for _, sec := range o.Sections {
		fmt.Fprintf(o.Log, "section %-8s projected %s\n", sec, sectionCost(o, sec))
	}
	fmt.Fprintf(o.Log, "projected duration of the whole run: %s\n", Projection(o))
}
