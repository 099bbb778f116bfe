// Command lakefs-mount mounts a stream's read-only view on a training node.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/internal/buildinfo"
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

A store that fails for a while (refused or reset connections, timeouts,
5xx, throttling) is waited out: a read that needs it retries for up to 30s
before it fails with EIO. With --metrics-addr, /health answers 503 naming
the kinds of store calls failing (index, block, log, heartbeat), as does
the gauge lakefs_mount_degraded{source}.

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

A supervisor passes --ready-fd N (a pipe it opened as file descriptor N)
and waits for the line written there once the view is served; the pipe
closing without a line means lakefs-mount failed (its stderr says why).

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
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run parses the command line and runs the mount; it returns the exit
// status.
func run(args []string, stdout, stderr io.Writer) int {
	actionRan := false
	app := &cli.App{
		Name:            "lakefs-mount",
		Usage:           "mount a Lakestream stream read-only (FUSE)",
		UsageText:       "lakefs-mount --store URL [options] MOUNTPOINT",
		Version:         buildinfo.Version(),
		Description:     description,
		Flags:           flags(),
		HideHelpCommand: true,
		Writer:          stdout,
		ErrWriter:       stderr,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return err
		},
		Action: func(cc *cli.Context) error {
			actionRan = true
			o, abort, err := parseOptions(cc, stderr)
			if err != nil || abort {
				return err
			}
			return serve(cc.Context, o)
		},
	}
	err := app.RunContext(context.Background(), args)
	switch {
	case err == nil:
		return 0
	case !actionRan || errors.Is(err, flagval.ErrUsage):
		fmt.Fprintln(stderr, "lakefs-mount:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "lakefs-mount:", err)
		return 1
	}
}

// flags are mount's option table as urfave flags, plus --abort.
func flags() []cli.Flag {
	var fl []cli.Flag
	for _, op := range mount.OptionTable() {
		var envs []string
		if op.Env != "" {
			envs = []string{op.Env}
		}
		if op.Bool {
			fl = append(fl, &cli.BoolFlag{Name: op.Name, EnvVars: envs, Usage: op.Usage, Hidden: op.Hidden})
			continue
		}
		fl = append(fl, &cli.StringFlag{Name: op.Name, EnvVars: envs, Value: op.Default, Usage: op.Usage, Hidden: op.Hidden})
	}
	return append(fl,
		&cli.StringFlag{Name: "ready-fd",
			Usage: "write one line to this file descriptor once the view is served (mounted, first state loaded; an empty stream too), then close it"},
		&cli.BoolFlag{Name: "abort",
			Usage: "free MOUNTPOINT of a hung or dead lakefs-mount (abort its FUSE connection, detach it), then exit"})
}

// readyFD returns the Ready callback of --ready-fd fd.
func readyFD(fd int) (func(mount.Info), error) {
	var st unix.Stat_t
	if fd < 0 || unix.Fstat(fd, &st) != nil {
		return nil, flagval.Usagef("--ready-fd %d is not an open file descriptor; pass the number of one the parent opened for writing (e.g. 3)", fd)
	}
	f := os.NewFile(uintptr(fd), "ready-fd")
	return func(mount.Info) {
		// A supervisor that stopped listening must not stop the mount.
		_, _ = f.WriteString("ready\n")
		_ = f.Close()
	}, nil
}

// parseOptions fills mount.Options from the flags; with --abort it frees
// the mount point instead and reports abort.
func parseOptions(cc *cli.Context, stderr io.Writer) (o mount.Options, abort bool, err error) {
	if cc.NArg() != 1 {
		return o, false, flagval.Usagef("want exactly one argument, the mount point, got %d; run lakefs-mount --help", cc.NArg())
	}
	o.Mountpoint = cc.Args().First()
	if cc.Bool("abort") {
		return o, true, mount.Abort(o.Mountpoint)
	}
	for _, op := range mount.OptionTable() {
		v := cc.String(op.Name)
		if op.Bool {
			v = strconv.FormatBool(cc.Bool(op.Name))
		}
		if err := op.Set(&o, v); err != nil {
			return o, false, err
		}
	}
	if cc.IsSet("ready-fd") {
		fd, err := flagval.ParseInt[int](cc.String("ready-fd"))
		if err != nil {
			return o, false, flagval.Usagef("--ready-fd %w", err)
		}
		if o.Ready, err = readyFD(fd); err != nil {
			return o, false, err
		}
	}
	level := slog.LevelInfo
	if o.Debug {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return o, false, nil
}

// serve runs the mount until SIGINT or SIGTERM.
func serve(ctx context.Context, o mount.Options) error {
	// Keep the heap near the cache budget: blocks are allocated and
	// dropped all the time, and by default the heap may grow to twice
	// what is live.
	if debug.SetMemoryLimit(-1) == math.MaxInt64 {
		debug.SetMemoryLimit(o.CacheSize + 96<<20)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := mount.Run(ctx, o)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// A signal while the mount waited for the store at start: a
		// clean stop, as at any other time (exit 0, as the help says).
		return nil
	}
	return err
}
