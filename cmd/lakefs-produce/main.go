// Command lakefs-produce creates streams, seals staging batches into steps
// and administers a stream: status, verify, checkpoint, gc. `bench` runs
// lakefs-bench, a separate binary.
//
// Each subcommand lives in its own file: flags fill an options struct, and
// a plain function (which tests call) does the work.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/buildinfo"
	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	app := &cli.App{
		Name:    "lakefs-produce",
		Usage:   "create a Lakestream stream and commit staged training batches to it",
		Version: buildinfo.Version(),
		Description: `Every command takes --store URL (or LAKEFS_STORE):
   file:///abs/dir
   s3://bucket/prefix?endpoint=http://host:port&region=us-east-1&path-style=true
      credentials from the standard AWS chain (environment, shared config)
   gs://bucket/prefix
      Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS);
      STORAGE_EMULATOR_HOST or endpoint= for an emulator
   az://container/prefix?account=NAME
      AZURE_STORAGE_KEY, a SAS in AZURE_STORAGE_SAS_TOKEN, else
      DefaultAzureCredential; endpoint= for Azurite

EXAMPLES:
   lakefs-produce init --store file:///data/stream --ranks 8
   lakefs-produce run --store file:///data/stream --staging /data/staging --producer-id prep-0
   lakefs-produce status --store file:///data/stream --json
   lakefs-produce checkpoint --store file:///data/stream --step 700
   lakefs-produce gc --store file:///data/stream --dry-run

EXIT STATUS:
   0 success, 1 operational error, 2 usage error`,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			initCommand(), runCommand(), statusCommand(), verifyCommand(),
			checkpointCommand(), gcCommand(), benchCommand(stdout, stderr),
		},
	}
	return cliapp.Run(ctx, app, args, stderr)
}

// storeFlag is --store; a new one per command, as urfave/cli keeps parse
// state in flags.
func storeFlag() cli.Flag {
	return &cli.StringFlag{Name: "store", EnvVars: []string{"LAKEFS_STORE"},
		Usage: "stream URL: file:///abs/dir, s3://bucket/prefix?endpoint=...&region=...&path-style=true, gs://bucket/prefix or az://container/prefix?account=..."}
}

// clockOffsetFlag is the hidden --clock-offset: it moves this process's
// clock (tests: a machine whose clock is wrong). Decisions by time read
// the store's clock (txn.Log.UseStoreClock), whose measured offset
// cancels it.
func clockOffsetFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "clock-offset", Destination: dest, Hidden: true,
		Usage: "shift this process's clock by this much, e.g. 10m or -10m (tests)"}
}

// openStore opens --store; a bad URL is a usage error.
func openStore(ctx context.Context, url string) (store.Store, error) {
	if url == "" {
		return nil, flagval.Usagef("no store: pass --store URL or set LAKEFS_STORE")
	}
	if strings.HasPrefix(url, "mem:") {
		return nil, flagval.Usagef("--store %s: a mem:// store lives only as long as one process and is for tests; use file:///abs/dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix", url)
	}
	s, err := store.Open(ctx, url)
	if errors.Is(err, store.ErrInvalid) {
		return nil, flagval.Usage(err)
	}
	return s, err
}

// openLog opens the stream at url.
// stoppedAtStart is nil for an error that a signal (ctx ended) caused while
// a command waited for the store at start: a clean stop, exit 0, as
// `run` stops; any other error as it is. Only for commands whose stop
// loses nothing (status, gc before it decided anything): an interrupted
// verify or checkpoint must not read as a success.
func stoppedAtStart(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func openLog(ctx context.Context, url string) (*txn.Log, error) {
	s, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	return txn.Open(ctx, s)
}

func newLogger(stderr io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}
