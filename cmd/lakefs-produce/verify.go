package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/txn"
)

type verifyOptions struct {
	Store    string
	Parallel int
	JSON     bool
}

// maxParallel bounds --parallel: far above what one store connection pool
// serves well.
const maxParallel = 1024

// errProblems: verify found problems (exit 1).
var errProblems = errors.New("verify found problems")

func verifyCommand() *cli.Command {
	o := verifyOptions{Parallel: 8}
	return &cli.Command{
		Name:      "verify",
		Usage:     "check the log, every live object's size and every CRC32C",
		UsageText: "lakefs-produce verify --store URL",
		Description: `Reads the whole live state (validating every log record), then every live
pack: that it exists, has its recorded size, and that each chunk's and each
file's CRC32C matches the manifest. Exits non-zero naming each problem.
A run longer than two seconds shows its progress on stderr.`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.GenericFlag{Name: "parallel", Value: &flagval.Int[int]{P: &o.Parallel}, Usage: "objects read at once"},
			&cli.BoolFlag{Name: "json", Destination: &o.JSON, Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return verify(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

func verify(ctx context.Context, o verifyOptions, stdout, stderr io.Writer) error {
	if err := flagval.CheckCount("--parallel", int64(o.Parallel), 1, maxParallel); err != nil {
		return err
	}
	l, err := openLog(ctx, o.Store)
	if err != nil {
		return err
	}
	prog := newTaskProgress(stderr, "verify: objects checked")
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: o.Parallel, Progress: prog.update})
	prog.finish()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if o.JSON {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintln(stdout, "PROBLEM", p)
		}
		fmt.Fprintf(stdout, "version %d: %d live steps, %d objects, %d bytes checked, %d problems\n",
			rep.Version, rep.Steps, rep.Objects, rep.Bytes, len(rep.Problems))
	}
	if n := len(rep.Problems); n > 0 {
		return fmt.Errorf("%w: %d (first: %s)", errProblems, n, rep.Problems[0])
	}
	return nil
}
