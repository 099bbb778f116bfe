// Command lakefs-mount mounts a stream's read-only view on a training node.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/mount"
)

const description = `Mounts the stream at MOUNTPOINT, read-only:

   MOUNTPOINT/steps/<n>/rank-<r>/<files>   a step appears only once committed, whole
   MOUNTPOINT/steps/<n>/<step-level files>
   MOUNTPOINT/head                         the highest committed step

Every byte read is verified against the CRC32C recorded at production; a
mismatch is an I/O error (EIO), never wrong data. Opening a file of rank r
in step n prefetches rank r's steps n..n+P into memory: a rank nobody opens
is never fetched, whatever --ranks shows.

With --view-ranks R2 (R2 divides the stream's R) the stream shows R2 ranks:
rank-r holds the files of original ranks r*(R/R2)..(r+1)*(R/R2)-1, each in
a directory named after it (steps/<n>/rank-<r>/rank-<original>/<files>), so
a job restarted on fewer GPUs reads the same global batches.

It stays in the foreground and unmounts on SIGINT or SIGTERM. A mount point
left stale by a killed lakefs-mount ("transport endpoint is not connected")
is unmounted and reused; one with a live mount is refused.

A hung mount (its process stopped or stuck; readers blocked in it) is freed
with lakefs-mount --abort MOUNTPOINT: readers get an error (ENOTCONN) at
once, the mount is detached, and the next lakefs-mount on MOUNTPOINT starts
clean. Kill the hung process yourself (kill -9).

EXAMPLES:
   lakefs-mount --store file:///data/stream /mnt/stream
   lakefs-mount --abort /mnt/stream      # free a hung mount
   lakefs-mount --store 's3://bucket/stream?endpoint=http://10.0.0.5:9000' \
       --ranks 0-3 --cache-size 8GiB --prefetch-steps 4 --wait 10m /mnt/stream
   lakefs-mount --store file:///data/stream --view-ranks 4 /mnt/stream   # 8-rank stream on 4 GPUs
   python train.py   # opens /mnt/stream/steps/{step}/rank-{rank}/...

EXIT STATUS:
   0  unmounted cleanly after SIGINT/SIGTERM
   1  operational error (store unreachable, mount point in use, ...)
   2  usage error (bad flag or argument)`

func main() {
	os.Exit(run(os.Args))
}

// run parses the command line and runs the mount; it returns the exit
// status.
func run(args []string) int {
	var o mount.Options
	var ranks, cacheSize, readAhead string
	var debugFUSE, abort bool
	actionRan := false
	app := &cli.App{
		Name:        "lakefs-mount",
		Usage:       "mount a Lakestream stream read-only (FUSE)",
		UsageText:   "lakefs-mount --store URL [options] MOUNTPOINT",
		Description: description,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "store", EnvVars: []string{"LAKEFS_STORE"}, Destination: &o.Store,
				Usage: "stream URL: file:///abs/dir or s3://bucket/prefix?endpoint=...&region=..."},
			&cli.StringFlag{Name: "ranks", Destination: &ranks, Usage: "ranks this node shows, e.g. 0-3,8 (default: all; only what readers open is fetched)"},
			&cli.IntFlag{Name: "view-ranks", Destination: &o.ViewRanks,
				Usage: "show the stream as R2 ranks (R2 divides R): rank-r holds original ranks r*(R/R2)..(r+1)*(R/R2)-1 as rank-<original>/ directories"},
			&cli.StringFlag{Name: "cache-size", Value: "2GiB", Destination: &cacheSize,
				Usage: "memory for cached and prefetched blocks; the process uses about this plus 128MiB"},
			&cli.IntFlag{Name: "prefetch-steps", Value: mount.DefaultPrefetchSteps, Destination: &o.PrefetchSteps,
				Usage: "P: opening a file of step n prefetches steps n..n+P (0: off)"},
			&cli.DurationFlag{Name: "wait", Destination: &o.Wait,
				Usage: "how long opening a step that is not committed yet waits for it (0: fail at once with ENOENT)"},
			&cli.StringFlag{Name: "checkpoint-dir", Destination: &o.CheckpointDir,
				Usage: "watch this directory for training checkpoints and record them in the manifest"},
			&cli.StringFlag{Name: "metrics-addr", Destination: &o.MetricsAddr, Usage: "serve Prometheus metrics at HOST:PORT/metrics (:PORT binds 127.0.0.1)"},
			&cli.DurationFlag{Name: "poll-interval", Value: mount.DefaultPollInterval, Destination: &o.PollInterval,
				Usage: "how often to check the manifest log for new steps while a reader waits for one or reads near the head"},
			&cli.DurationFlag{Name: "idle-poll-interval", Value: mount.DefaultIdlePollInterval, Destination: &o.IdlePollInterval,
				Usage: "how often to check it otherwise (idle or lagging readers)"},
			&cli.StringFlag{Name: "node-id", Destination: &o.NodeID, Usage: "this mount's name in _consumers/<node-id>.json (default: host name plus a hash of the mount point); a second live mount with the same id is refused"},
			&cli.DurationFlag{Name: "heartbeat-interval", Value: mount.DefaultHeartbeatInterval, Destination: &o.HeartbeatInterval,
				Usage: "how often to write the heartbeat"},
			&cli.StringFlag{Name: "read-ahead", Value: "4MiB", Destination: &readAhead, Usage: "kernel read-ahead of the mount"},
			&cli.IntFlag{Name: "fetchers", Value: 16, Destination: &o.Fetchers, Usage: "concurrent prefetch GETs"},
			&cli.DurationFlag{Name: "store-latency", Destination: &o.StoreLatency, Hidden: true,
				Usage: "add this latency to every data GET (benchmarks: simulate a remote store)"},
			&cli.BoolFlag{Name: "allow-other", Destination: &o.AllowOther, Usage: "let users other than the mounting one read (default: only the mounting user)"},
			&cli.BoolFlag{Name: "abort", Destination: &abort,
				Usage: "free MOUNTPOINT of a hung or dead lakefs-mount (abort its FUSE connection, detach it), then exit"},
			&cli.BoolFlag{Name: "pprof", Destination: &o.Profiling, Usage: "serve Go's pprof profiles at --metrics-addr/debug/pprof/"},
			&cli.BoolFlag{Name: "debug", Destination: &debugFUSE, Usage: "log debug messages and every FUSE request"},
		},
		HideHelpCommand: true,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return err
		},
		Action: func(cc *cli.Context) error {
			actionRan = true
			if cc.NArg() != 1 {
				return flagval.Usagef("want exactly one argument, the mount point, got %d; run lakefs-mount --help", cc.NArg())
			}
			o.Mountpoint = cc.Args().First()
			if abort {
				return mount.Abort(o.Mountpoint)
			}
			var err error
			if ranks != "" {
				if o.Ranks, err = flagval.ParseRanks(ranks); err != nil {
					return err
				}
			}
			if o.CacheSize, err = flagval.ParseSize("--cache-size", cacheSize, mount.MinCacheSize, 0); err != nil {
				return err
			}
			if o.ReadAhead, err = flagval.ParseSize("--read-ahead", readAhead, mount.MinReadAhead, mount.MaxReadAhead); err != nil {
				return err
			}
			level := slog.LevelInfo
			if debugFUSE {
				level = slog.LevelDebug
			}
			o.Debug = debugFUSE
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			// Keep the heap near the cache budget: blocks are allocated and
			// dropped all the time, and by default the heap may grow to twice
			// what is live.
			if debug.SetMemoryLimit(-1) == math.MaxInt64 {
				debug.SetMemoryLimit(o.CacheSize + 96<<20)
			}
			ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return mount.Run(ctx, o)
		},
	}
	err := app.RunContext(context.Background(), args)
	switch {
	case err == nil:
		return 0
	case !actionRan || errors.Is(err, flagval.ErrUsage):
		fmt.Fprintln(os.Stderr, "lakefs-mount:", err)
		return 2
	default:
		fmt.Fprintln(os.Stderr, "lakefs-mount:", err)
		return 1
	}
}
