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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/bench"
	"github.com/lakestream/lakestream/internal/buildinfo"
	"github.com/lakestream/lakestream/internal/flagval"
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
			benchIngestCommand(), benchReadCommand(), benchScaleCommand(),
			{
				// Processes mode re-executes this binary as a worker.
				Name:   bench.DefaultWorkerArgs[0],
				Hidden: true,
				Action: func(c *cli.Context) error {
					return bench.Worker(c.Context, os.Stdin, os.Stdout)
				},
			},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return flagval.Usage(err) },
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(stderr, "lakefs-bench: unknown command %q; run lakefs-bench --help\n", name)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // we map errors to exit codes below
	}
	for _, c := range app.Commands {
		c.OnUsageError = app.OnUsageError // not inherited by subcommands
	}
	err := app.RunContext(ctx, args)
	if err == nil {
		if len(args) > 1 && app.Command(args[1]) == nil && args[1][0] != '-' {
			return 2 // CommandNotFound already said why
		}
		return 0
	}
	fmt.Fprintln(stderr, "lakefs-bench:", strings.ReplaceAll(err.Error(), "\n", " "))
	if errors.Is(err, flagval.ErrUsage) {
		return 2
	}
	return 1
}

// storeFlag is --store; a new one per command, as urfave/cli keeps parse
// state in flags.
func storeFlag() cli.Flag {
	return &cli.StringFlag{Name: "store", EnvVars: []string{"LAKEFS_STORE"},
		Usage: "where the benchmark streams go: file:///abs/dir or s3://bucket/prefix?endpoint=...&region=...&path-style=true"}
}

// noArgs refuses stray positional arguments.
func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return flagval.Usagef("unexpected argument %q; all options are flags (see %s --help)", c.Args().First(), c.Command.FullName())
	}
	return nil
}
