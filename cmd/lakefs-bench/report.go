package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/bench/report"
	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
)

// benchReportCommand is `make bench`: it runs the other subcommands and
// their peers and writes the report.
func benchReportCommand() *cli.Command {
	var o report.Options
	var sections, producers, payloads string
	return &cli.Command{
		Name:      "report",
		Usage:     "run the benchmarks and their peers, write REPORT.md and its plots (make bench)",
		UsageText: "lakefs-bench report [--out docs/bench] [--bin bin] [--sections ingest,read,...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "docs/bench", Destination: &o.OutDir, Usage: "directory for REPORT.md and the PNGs"},
			&cli.StringFlag{Name: "bin", Value: "bin", Destination: &o.BinDir, Usage: "directory of lakefs-produce, lakefs-mount and lakefs-bench"},
			&cli.IntFlag{Name: "repeats", Value: 3, Destination: &o.Repeats, Usage: "runs of every read point"},
			&cli.IntFlag{Name: "ingest-repeats", Value: 2, Destination: &o.IngestRepeats, Usage: "runs of every ingest point"},
			&cli.DurationFlag{Name: "duration", Value: time.Second, Destination: &o.Duration, Usage: "measured window of one ingest run"},
			&cli.DurationFlag{Name: "long-run", Value: 20 * time.Second, Destination: &o.LongRun, Usage: "length of each strategy's run in the DAC-over-time section"},
			&cli.StringFlag{Name: "producers", Value: "1,4,16,32", Destination: &producers, Usage: "producer counts of the ingest section"},
			&cli.StringFlag{Name: "payloads", Value: "64KiB,1MiB,16MiB", Destination: &payloads, Usage: "TGB sizes of the ingest section"},
			&cli.StringFlag{Name: "sections", Destination: &sections, Usage: "comma-separated subset of ingest,dac,read,storage,scale (default all)"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			var err error
			if o.Producers, err = flagval.ParseCounts("--producers", producers, 1, 1<<16); err != nil {
				return err
			}
			for _, p := range strings.Split(payloads, ",") {
				n, err := flagval.ParseSize("--payloads", p, 1, 0)
				if err != nil {
					return err
				}
				o.Payloads = append(o.Payloads, n)
			}
			if sections != "" {
				o.Sections = strings.Split(sections, ",")
			}
			return report.Run(c.Context, o)
		},
	}
}
