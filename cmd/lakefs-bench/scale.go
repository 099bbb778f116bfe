package main

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/bench/scale"
	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/txn"
)

type benchScaleOptions struct {
	Store, Ranks, Mounts, MountBin   string
	Files, FileSize, Steps, Versions int
	ReadRanks                        int
	Window                           time.Duration
	JSON, Keep, GC                   bool
	PadParallel                      int

	Cost                 bool
	CompareMountBin      string
	CostNodes, CostRanks int
}

func benchScaleCommand() *cli.Command {
	var o benchScaleOptions
	return &cli.Command{
		Name:      "scale",
		Usage:     "measure what a stream costs as ranks, files and nodes grow",
		UsageText: "lakefs-bench scale --store URL [--ranks 64,1024 --files 16 --steps 100 --versions 10000 --mounts 10 --window 20s --json]",
		Description: `Builds a stream of R ranks x F files x N steps with the real producer under a
fresh prefix of the store, pads its log to V versions there (written in
parallel; how long building took is printed apart), and prints, per rank
count: bytes of a step's version record and its log bytes per step with
its share of the snapshots, object and index bytes, store writes per
step, Open+Load time and requests, a new lakefs-mount's time to show the
head, ls of a rank directory, find of one rank over every step, the
mount's peak RSS after reading every file of --read-ranks ranks, status
and verify (of the live steps) with their requests, a restarted
producer's time to register and to its first commit, and a node showing
ranks 0-7: its time to the head and its peak RSS once every file of its
ranks was listed (metadata only). With --gc, last, one gc in a child
process as if two hours later (every padding version reclaimable): its
time, LIST pages, listings of the whole log, delete calls and peak RSS.
Then, per --mounts K, the store requests per second
per mount of K idle lakefs-mount processes and of K whose readers follow
the head while a producer commits a step a second (counted by a proxy in
front of an s3:// endpoint; not counted on file://), and how soon a waiting
reader sees each new step. Needs lakefs-mount next to this executable or
on PATH, root and /dev/fuse.

With --cost it measures instead what a million steps cost in S3 requests
(docs/bench/COST.md): a producer commits a step a second while --nodes
mounts, each showing --node-ranks adjacent ranks, follow the head and read
every file of their ranks of each step; a counting proxy per role (the
producer, these mounts, and with --compare-mount-bin another build's
mounts side by side) splits the requests into log polls, index GETs, data
GETs and heartbeats, per node per step, and prices them for 128 nodes at
one step a second beside the floor. It needs an s3:// store with
endpoint=.

Examples:
  lakefs-bench scale --store 's3://bkt/scale?endpoint=http://127.0.0.1:7070' --ranks 1024 --mounts 10,100
  lakefs-bench scale --cost --store 's3://bkt/cost?endpoint=http://127.0.0.1:7070' --ranks 1024 --files 1 \
    --window 120s --compare-mount-bin /tmp/main-bin/lakefs-mount`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.StringFlag{Name: "ranks", Value: "64,1024", Destination: &o.Ranks, Usage: "rank counts R"},
			&cli.IntFlag{Name: "files", Value: 16, Destination: &o.Files, Usage: "files per rank per step F"},
			&cli.IntFlag{Name: "file-size", Value: 64, Destination: &o.FileSize, Usage: "bytes per file"},
			&cli.IntFlag{Name: "steps", Value: 100, Destination: &o.Steps, Usage: "live steps N"},
			&cli.IntFlag{Name: "versions", Value: 10000, Destination: &o.Versions, Usage: "log length V"},
			&cli.IntFlag{Name: "read-ranks", Value: 1, Destination: &o.ReadRanks, Usage: "ranks one node reads (every file, every step) before its RSS is taken"},
			&cli.StringFlag{Name: "mounts", Value: "10", Destination: &o.Mounts, Usage: "node counts K for the request-rate rows (\"\" for none)"},
			&cli.DurationFlag{Name: "window", Value: 20 * time.Second, Destination: &o.Window, Usage: "measured time of each request-rate row"},
			&cli.StringFlag{Name: "mount-bin", Destination: &o.MountBin, Usage: "lakefs-mount executable (default: next to this one, else on PATH)"},
			&cli.BoolFlag{Name: "json", Destination: &o.JSON, Usage: "one JSON object per row"},
			&cli.BoolFlag{Name: "keep", Destination: &o.Keep, Usage: "keep the streams in the store"},
			&cli.BoolFlag{Name: "gc", Destination: &o.GC, Usage: "last, run gc once in a child process as if two hours later (every padding version reclaimable): time, requests, peak RSS"},
			&cli.IntFlag{Name: "pad-parallel", Value: 32, Destination: &o.PadParallel, Usage: "log writes in flight while padding the log to --versions"},
			&cli.BoolFlag{Name: "cost", Destination: &o.Cost, Usage: "measure requests per node per step and their cost (docs/bench/COST.md)"},
			&cli.StringFlag{Name: "compare-mount-bin", Destination: &o.CompareMountBin, Usage: "with --cost: another build's lakefs-mount, run side by side"},
			&cli.IntFlag{Name: "nodes", Value: 8, Destination: &o.CostNodes, Usage: "with --cost: mounts per build"},
			&cli.IntFlag{Name: "node-ranks", Value: 8, Destination: &o.CostRanks, Usage: "with --cost: adjacent ranks each mount shows and reads"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return benchScale(c.Context, o, c.App.Writer)
		},
	}
}

func benchScale(ctx context.Context, o benchScaleOptions, stdout io.Writer) error {
	if o.Store == "" {
		return flagval.Usagef("no store: pass --store URL or set LAKEFS_STORE")
	}
	so := scale.Options{
		StoreURL: o.Store, Files: o.Files, ReadRanks: o.ReadRanks, FileSize: o.FileSize, Steps: o.Steps, Versions: o.Versions,
		Window: o.Window, MountBin: o.MountBin, JSON: o.JSON, Keep: o.Keep, Mounts: []int{}, GC: o.GC, PadParallel: o.PadParallel,
		Cost: o.Cost, CompareMountBin: o.CompareMountBin, CostNodes: o.CostNodes, CostRanks: o.CostRanks,
	}
	if o.PadParallel < 1 {
		return flagval.Usagef("--pad-parallel %d: want at least 1", o.PadParallel)
	}
	if o.CostNodes < 1 || o.CostRanks < 1 {
		return flagval.Usagef("--nodes %d, --node-ranks %d: want at least 1 each", o.CostNodes, o.CostRanks)
	}
	var err error
	if so.Ranks, err = flagval.ParseCounts("--ranks", o.Ranks, 1, txn.MaxRanks); err != nil {
		return err
	}
	for _, k := range splitList(o.Mounts) {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return flagval.Usagef("--mounts %q: want a comma-separated list of positive counts, e.g. 10,100", o.Mounts)
		}
		so.Mounts = append(so.Mounts, n)
	}
	return scale.Run(ctx, so, stdout)
}
