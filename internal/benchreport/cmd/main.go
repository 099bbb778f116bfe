// Command benchreport is `make bench`: it runs the benchmarks and writes
// docs/bench/REPORT.md (see package benchreport).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/internal/benchreport"
	"github.com/lakestream/lakestream/internal/flagval"
)

func main() {
	var o benchreport.Options
	var sections, producers, payloads string
	flag.StringVar(&o.OutDir, "out", "docs/bench", "directory for REPORT.md and the PNGs")
	flag.StringVar(&o.BinDir, "bin", "bin", "directory of lakefs-produce and lakefs-mount")
	flag.IntVar(&o.Repeats, "repeats", 3, "runs of every read point")
	flag.IntVar(&o.IngestRepeats, "ingest-repeats", 2, "runs of every ingest point")
	flag.DurationVar(&o.Duration, "duration", time.Second, "measured window of one ingest run")
	flag.DurationVar(&o.LongRun, "long-run", 20*time.Second, "length of each strategy's run in the DAC-over-time section")
	flag.StringVar(&producers, "producers", "1,4,16,32", "producer counts of the ingest section")
	flag.StringVar(&payloads, "payloads", "64KiB,1MiB,16MiB", "TGB sizes of the ingest section")
	flag.StringVar(&sections, "sections", "", "comma-separated subset of ingest,dac,read,storage,scale (default all)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "benchreport: unexpected argument %q; see -help\n", flag.Arg(0))
		os.Exit(2)
	}
	var err error
	if o.Producers, err = flagval.ParseCounts("-producers", producers, 1, 1<<16); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
		os.Exit(2)
	}
	for _, p := range strings.Split(payloads, ",") {
		n, err := flagval.ParseSize("-payloads", p, 1, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
			os.Exit(2)
		}
		o.Payloads = append(o.Payloads, n)
	}
	if sections != "" {
		o.Sections = strings.Split(sections, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := benchreport.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
		os.Exit(1)
	}
}
