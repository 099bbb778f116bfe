// Command lakefs-bench runs Lakestream's benchmarks: commit throughput
// (ingest, with the NATS broker peers), reads through lakefs-mount (read)
// and what a stream costs as it grows (scale). It is a separate binary so
// that lakefs-produce, which ships to production nodes, links neither the
// FUSE mount nor a NATS server; `lakefs-produce bench ...` runs it.
//
// Each subcommand lives in its own file: flags fill an options struct, and
// a plain function does the work.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/bench"
	"github.com/lakestream/lakestream/bench/scale"
	"github.com/lakestream/lakestream/internal/buildinfo"
	"github.com/lakestream/lakestream/internal/cliapp"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	app := &cli.App{
		Name:    "lakefs-bench",
		Usage:   "benchmark Lakestream: ingest, read, scale",
		Version: buildinfo.Version(),
		Description: `EXAMPLES:
   lakefs-bench ingest --store file:///tmp/b --producers 1,4 --payload 1MiB --duration 5s
   lakefs-bench read --store file:///tmp/b --readers 1,4
   lakefs-bench scale --store file:///tmp/b --ranks 64,1024

EXIT STATUS:
   0 success, 1 operational error, 2 usage error`,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			benchIngestCommand(), benchReadCommand(), benchScaleCommand(), benchReportCommand(),
			{
				// bench scale --gc runs gc in a child process of this binary.
				Name:   scale.GCChildArgs[0],
				Hidden: true,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "store", Required: true},
					&cli.DurationFlag{Name: "clock-offset"},
				},
				Action: func(c *cli.Context) error {
					return scale.GCChild(c.Context, c.String("store"), c.Duration("clock-offset"), c.App.Writer)
				},
			},
			{
				// Processes mode re-executes this binary as a worker.
				Name:   bench.DefaultWorkerArgs[0],
				Hidden: true,
				Action: func(c *cli.Context) error {
					return bench.Worker(c.Context, os.Stdin, os.Stdout)
				},
			},
		},
	}
	return cliapp.Run(ctx, app, args, stderr)
}

// storeFlag is --store; a new one per command, as urfave/cli keeps parse
// state in flags.
func storeFlag() cli.Flag {
	return &cli.StringFlag{Name: "store", EnvVars: []string{"LAKEFS_STORE"},
		Usage: "where the benchmark streams go: file:///abs/dir, s3://bucket/prefix?endpoint=...&region=...&path-style=true, gs://bucket/prefix or az://container/prefix?account=..."}
}
