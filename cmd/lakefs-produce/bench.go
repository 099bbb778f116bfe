package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/urfave/cli/v2"
)

// benchCommand keeps `lakefs-produce bench ...` working: the benchmarks
// live in lakefs-bench (they link the FUSE mount and a NATS server, which a
// production node does not need), run with the same arguments.
func benchCommand(stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:            "bench",
		Usage:           "run lakefs-bench (the benchmarks: ingest, read, scale) with these arguments",
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			return runBench(c.Context, c.Args().Slice(), stdout, stderr)
		},
	}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	bin := findBench()
	if bin == "" {
		return fmt.Errorf("the benchmarks moved to lakefs-bench, which is not next to this binary or on PATH; build it (make build) and run: lakefs-bench %s",
			strings.Join(args, " "))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return cliapp.ExitCode(ee.ExitCode()) // the child already said why
	}
	return err
}

// findBench returns lakefs-bench next to this executable or on PATH, or "".
func findBench() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "lakefs-bench")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("lakefs-bench"); err == nil {
		return p
	}
	return ""
}
