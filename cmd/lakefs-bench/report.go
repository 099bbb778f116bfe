package main

import (
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
	var sections, producers, payloads, stores string
	return &cli.Command{
		Name:      "report",
		Usage:     "run the benchmarks and their peers, write REPORT.md, rows.json and the plots (make bench)",
		UsageText: "lakefs-bench report [--out docs/bench] [--bin bin] [--sections ingest,latency,...] [--from rows.json]",
		Description: `Prints the projected duration of the run before it starts (a per-point
cost model) and the actual one at the end. Every measured row is saved as
rows.json beside REPORT.md; --from rows.json renders the report again from
such a file without measuring.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "docs/bench", Destination: &o.OutDir, Usage: "directory for REPORT.md, rows.json and the PNGs"},
			&cli.StringFlag{Name: "bin", Value: "bin", Destination: &o.BinDir, Usage: "directory of lakefs-produce, lakefs-mount and lakefs-bench"},
			&cli.StringFlag{Name: "from", Destination: &o.From, Usage: "render from this rows.json instead of measuring"},
			&cli.IntFlag{Name: "repeats", Value: 3, Destination: &o.Repeats, Usage: "runs of every read point"},
			&cli.IntFlag{Name: "windows", Value: 3, Destination: &o.Windows, Usage: "measured windows of every ingest point, after a warm-up"},
			&cli.DurationFlag{Name: "window", Value: 5 * time.Second, Destination: &o.Window, Usage: "shortest ingest window (points with slow commits get longer ones)"},
			&cli.DurationFlag{Name: "long-run", Value: 20 * time.Second, Destination: &o.LongRun, Usage: "length of each strategy's run in the DAC-over-time section"},
			&cli.IntFlag{Name: "latency-steps", Value: 60, Destination: &o.LatencySteps, Usage: "steps of each consumer-latency run"},
			&cli.DurationFlag{Name: "cost-window", Value: 60 * time.Second, Destination: &o.CostWindow, Usage: "measured window of the scale-and-cost run"},
			&cli.StringFlag{Name: "producers", Value: "1,4,16,32", Destination: &producers, Usage: "producer counts of the ingest section"},
			&cli.StringFlag{Name: "payloads", Value: "64KiB,1MiB,16MiB", Destination: &payloads, Usage: "TGB sizes of the ingest section"},
			&cli.StringFlag{Name: "stores", Value: "s3,file,file+50ms", Destination: &stores, Usage: "stores of the ingest section: s3 (versitygw), file, file+50ms (--store-latency 50ms)"},
			&cli.BoolFlag{Name: "dry-run", Destination: &o.DryRun, Usage: "print the plan and its projected duration, measure nothing"},
			&cli.BoolFlag{Name: "quick", Destination: &o.Quick, Usage: "a quick run (make bench-quick): smaller scale parameters, the report says it is one"},
			&cli.StringFlag{Name: "sections", Destination: &sections, Usage: "comma-separated subset of ingest,dac,latency,read,storage,scale,cost (default all)"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			var err error
			if o.Producers, err = flagval.ParseCounts("--producers", producers, 1, 1<<16); err != nil {
				return err
			}
			for _, p := range splitList(payloads) {
				n, err := flagval.ParseSize("--payloads", p, 1, 0)
				if err != nil {
					return flagval.Usage(err)
				}
				o.Payloads = append(o.Payloads, n)
			}
			for _, s := range splitList(stores) {
				if s != "s3" && s != "file" && s != "file+50ms" {
					return flagval.Usagef("--stores: unknown store %q; use s3, file, file+50ms", s)
				}
				o.Stores = append(o.Stores, s)
			}
			o.Sections = splitList(sections)
			if o.Windows < 1 || o.Repeats < 1 || o.Window <= 0 {
				return flagval.Usagef("--windows and --repeats must be at least 1 and --window positive")
			}
			return report.Run(c.Context, o)
		},
	}
}
