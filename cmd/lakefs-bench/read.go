package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/bench"
	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/txn"
)

type benchReadOptions struct {
	Store, Size, Readers, MountBin, Systems string
	Steps, Ranks, Runs, FilesPerRank        int
	ServerPID                               int
	MountArgs                               cli.StringSlice
	JSON, Keep, Follow, Mmap                bool
	Interval                                time.Duration
	FollowSystems                           string
}

func benchReadCommand() *cli.Command {
	var o benchReadOptions
	return &cli.Command{
		Name:      "read",
		Usage:     "measure a kernel mount against reading the same bytes straight from the store",
		UsageText: "lakefs-bench read --store URL [--steps 100 --ranks 4 --files-per-rank 1 --size 4MiB --readers 1,4 --runs 1 --systems ... --json]",
		Description: `Commits --steps TGBs of --ranks x --files-per-rank files of --size random
bytes to a fresh stream under the store URL (and stores each file again as
an object of its own under plain/), then for each --readers count N reads
ranks 0..N-1 (one reader per rank, its steps in order, every file to EOF
with 1 MiB reads and its CRC32C checked) once per system, the page cache
dropped before each:
  direct        the store client, one ranged GET per file (the limit)
  plain-get     one plain SDK GetObject per file's own object (file://: a
                plain file read), nothing of Lakestream in the path
  mount-blocks  a lakefs-mount child process with --passthrough off
  mount         a lakefs-mount child process with its default flags
Prints one row per (system, readers): the path the mount served opens by
(passthrough, blocks or mixed), MB/s, files/s, p50/p95 ms per file, bytes
fetched from the store and served to readers, GETs sent to the store, the
mount's peak RSS and peak bytes in memory files (staged), and CPU seconds
per GB (reader plus mount process; with --server-pid, the store server's
too); each mount row is followed by its
ratios to direct and plain-get (JSON: vs_direct, vs_plain_get). With
--runs K every system runs K times, interleaved, and the run with the
median MB/s is printed. Needs lakefs-mount next to this executable or on
PATH, root and /dev/fuse.

With --follow it measures consumer latency instead: a producer commits a
step of --ranks x one --size file every --interval (below the store's
limit) for --steps steps while N readers, one per rank, wait for each next
step and read their rank's file: through lakefs-mount --wait (mount), or
as a NATS JetStream pull consumer per rank fetching the same parts as they
are acked (nats). One row per (system, readers): p50, p99 and max ms from
the step becoming visible (commit returned, or every part acked) to the
reader having read all of its rank's bytes.

Examples:
  lakefs-bench read --follow --store 's3://bkt/f?endpoint=http://127.0.0.1:7070' --steps 60 --size 1MiB --readers 1,4
  lakefs-bench read --store 's3://bkt/bench?endpoint=http://127.0.0.1:7070' --readers 1,4 --runs 3
  lakefs-bench read --store file:///tmp/b --files-per-rank 256 --size 100KiB --steps 10`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.IntFlag{Name: "steps", Value: 100, Destination: &o.Steps, Usage: "steps committed"},
			&cli.IntFlag{Name: "ranks", Value: 4, Destination: &o.Ranks, Usage: "ranks of the stream"},
			&cli.IntFlag{Name: "files-per-rank", Value: 1, Destination: &o.FilesPerRank, Usage: "files of each rank per step"},
			&cli.StringFlag{Name: "size", Value: "4MiB", Destination: &o.Size, Usage: "bytes of each file"},
			&cli.StringFlag{Name: "readers", Value: "1,4", Destination: &o.Readers, Usage: "reader counts (one rank each, <= --ranks)"},
			&cli.IntFlag{Name: "runs", Value: 1, Destination: &o.Runs, Usage: "runs per row; the median by MB/s is printed"},
			&cli.StringFlag{Name: "systems", Value: strings.Join(bench.ReadSystems(), ","), Destination: &o.Systems, Usage: "rows to measure, comma-separated"},
			&cli.StringFlag{Name: "mount-bin", Destination: &o.MountBin, Usage: "lakefs-mount executable (default: next to this one, else on PATH)"},
			&cli.StringSliceFlag{Name: "mount-arg", Destination: &o.MountArgs, Usage: "extra lakefs-mount flag (repeatable), e.g. --mount-arg=--ranks=0"},
			&cli.BoolFlag{Name: "mmap", Destination: &o.Mmap, Usage: "mount rows map each file (as numpy's mmap_mode does) instead of reading it"},
			&cli.IntFlag{Name: "server-pid", Destination: &o.ServerPID, Usage: "the store server's process: rows add its CPU per GB served"},
			&cli.BoolFlag{Name: "json", Destination: &o.JSON, Usage: "one JSON object per row"},
			&cli.BoolFlag{Name: "keep", Destination: &o.Keep, Usage: "keep the stream in the store"},
			&cli.BoolFlag{Name: "follow", Destination: &o.Follow, Usage: "measure consumer latency at the head instead (see above)"},
			&cli.DurationFlag{Name: "interval", Value: 250 * time.Millisecond, Destination: &o.Interval, Usage: "with --follow: time between commits"},
			&cli.StringFlag{Name: "follow-systems", Value: "mount,nats", Destination: &o.FollowSystems, Usage: "with --follow: mount, nats"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return benchRead(c.Context, o, c.App.Writer)
		},
	}
}

func benchRead(ctx context.Context, o benchReadOptions, stdout io.Writer) error {
	if o.Store == "" {
		return flagval.Usagef("no store: pass --store URL or set LAKEFS_STORE")
	}
	size, err := flagval.ParseSize("--size", o.Size, 1, 0)
	if err != nil {
		return flagval.Usage(err)
	}
	ro := bench.ReadOptions{
		StoreURL: o.Store, Steps: o.Steps, Ranks: o.Ranks, FilesPerRank: o.FilesPerRank, Size: size, Runs: o.Runs,
		MountBin: o.MountBin, MountArgs: o.MountArgs.Value(), JSON: o.JSON, Keep: o.Keep,
		ServerPID: o.ServerPID, Mmap: o.Mmap,
	}
	if ro.Readers, err = flagval.ParseCounts("--readers", o.Readers, 1, txn.MaxRanks); err != nil {
		return err
	}
	if o.Steps < 1 || o.Ranks < 1 || o.Runs < 1 || o.FilesPerRank < 1 {
		return flagval.Usagef("--steps, --ranks, --files-per-rank and --runs must be at least 1")
	}
	for _, sys := range strings.Split(o.Systems, ",") {
		if sys = strings.TrimSpace(sys); sys == "" {
			continue
		}
		if !slices.Contains(bench.ReadSystems(), sys) {
			return flagval.Usagef("--systems: unknown system %q; use %s", sys, strings.Join(bench.ReadSystems(), ","))
		}
		ro.Systems = append(ro.Systems, sys)
	}
	if o.Follow {
		if o.Interval <= 0 {
			return flagval.Usagef("--interval must be positive")
		}
		return bench.Follow(ctx, ro, o.Interval, splitList(o.FollowSystems), stdout)
	}
	return bench.Read(ctx, ro, stdout)
}
