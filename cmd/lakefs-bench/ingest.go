package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/bench"
	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
)

type benchIngestOptions struct {
	Store, Producers, Payloads, Strategies string
	Ranks                                  int
	Duration, StoreLatency, Warmup         time.Duration
	Windows                                int
	JSON, Processes, Keep                  bool
	Versions                               uint64
}

func benchIngestCommand() *cli.Command {
	var o benchIngestOptions
	return &cli.Command{
		Name:  "ingest",
		Usage: "measure commit throughput and latency per strategy, producer count and payload",
		UsageText: "lakefs-bench ingest --store URL --producers 1,2,4,8,16,32 --payload 64KiB,1MiB,16MiB " +
			"--duration D --strategy dac,naive,raw-put,plain-put [--json]",
		Description: `Runs producers (goroutines, or OS processes with --processes) that append
TGBs of the given payload as fast as they can, each combination on a fresh
stream under the store URL, and prints one row per combination: TGBs/s,
MB/s, commit attempts per commit, TGBs per commit, the p50/p99 latency
from "data durable" to "step visible" and (E2E) from "upload started" to
"step visible". raw-put writes the same bytes with the store's Puts and no
commits: the store's limit; plain-put writes them without our store layer
(one SDK PutObject per part on s3://, a write and fsync per file on
file://). --store-latency adds a delay to every store call, so a local
store behaves like a remote one. --warmup runs each point unmeasured
first; --windows K measures K back-to-back windows per point, a row each,
with in_flight (TGBs uploaded but not yet visible at the window's end) and
load1 (the 1-minute load average when the point started). --versions N runs until the log has N
versions and prints a row per --duration window.`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.StringFlag{Name: "producers", Value: "1,4,16", Destination: &o.Producers, Usage: "producer counts"},
			&cli.StringFlag{Name: "payload", Value: "1MiB", Destination: &o.Payloads, Usage: "bytes per TGB, split across ranks"},
			&cli.IntFlag{Name: "ranks", Value: 2, Destination: &o.Ranks, Usage: "ranks of each benchmark stream"},
			&cli.DurationFlag{Name: "duration", Value: 5 * time.Second, Destination: &o.Duration, Usage: "measured time per row (per window with --versions)"},
			&cli.StringFlag{Name: "strategy", Value: "dac,naive,raw-put,plain-put", Destination: &o.Strategies, Usage: "strategies: dac (the combining commit, what run does), naive (one TGB per version, own TGBs only), raw-put, plain-put, and the broker peers nats, nats-fsync"},
			&cli.DurationFlag{Name: "warmup", Destination: &o.Warmup, Usage: "unmeasured time before each point's first window"},
			&cli.IntFlag{Name: "windows", Value: 1, Destination: &o.Windows, Usage: "back-to-back measured windows per point, a row each"},
			&cli.DurationFlag{Name: "store-latency", Destination: &o.StoreLatency, Usage: "added to every store call"},
			&cli.BoolFlag{Name: "json", Destination: &o.JSON, Usage: "one JSON object per row"},
			&cli.BoolFlag{Name: "processes", Destination: &o.Processes, Usage: "run each producer as its own OS process"},
			&cli.Uint64Flag{Name: "versions", Destination: &o.Versions, Usage: "long-run mode: run until the log has this many versions"},
			&cli.BoolFlag{Name: "keep", Destination: &o.Keep, Usage: "keep each run's stream in the store"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return benchIngest(c.Context, o, c.App.Writer)
		},
	}
}

func benchIngest(ctx context.Context, o benchIngestOptions, stdout io.Writer) error {
	if o.Store == "" {
		return flagval.Usagef("no store: pass --store URL or set LAKEFS_STORE")
	}
	io := bench.IngestOptions{
		StoreURL: o.Store, Ranks: o.Ranks, Duration: o.Duration, StoreLatency: o.StoreLatency,
		Warmup: o.Warmup, Windows: o.Windows, JSON: o.JSON, Processes: o.Processes, Versions: o.Versions, Keep: o.Keep,
		Strategies: splitList(o.Strategies),
	}
	var err error
	if io.Producers, err = flagval.ParseCounts("--producers", o.Producers, 1, 1<<16); err != nil {
		return err
	}
	for _, p := range splitList(o.Payloads) {
		n, err := flagval.ParseSize("--payload", p, 1, 0)
		if err != nil {
			return flagval.Usage(err)
		}
		io.Payloads = append(io.Payloads, n)
	}
	return bench.Ingest(ctx, io, stdout)
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
