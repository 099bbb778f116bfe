// Package cliapp runs a urfave/cli App the way every Lakestream command
// with subcommands does: errors are one line on stderr prefixed with the
// command's name, usage errors (flagval.ErrUsage, bad flags, an unknown
// subcommand) exit 2, anything else 1, and an ExitCode passes a status
// through that was already reported.
package cliapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/flagval"
)

// ExitCode is an exit status to return as it is, without printing: a
// child process's status, for one (lakefs-produce bench runs lakefs-bench
// and has nothing to add to what it printed).
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Run runs app with args and returns the exit status. It sets the app's
// and every subcommand's usage-error handling (urfave/cli does not
// inherit OnUsageError), so callers leave those fields unset.
func Run(ctx context.Context, app *cli.App, args []string, stderr io.Writer) int {
	app.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return flagval.Usage(err) }
	app.CommandNotFound = func(_ *cli.Context, name string) {
		fmt.Fprintf(stderr, "%s: unknown command %q; run %s --help\n", app.Name, name, app.Name)
	}
	app.ExitErrHandler = func(*cli.Context, error) {} // mapped to exit codes below
	for _, c := range app.Commands {
		c.OnUsageError = app.OnUsageError
	}
	err := app.RunContext(ctx, args)
	if err == nil {
		if len(args) > 1 && app.Command(args[1]) == nil && !strings.HasPrefix(args[1], "-") {
			return 2 // CommandNotFound already said why
		}
		return 0
	}
	var code ExitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(stderr, app.Name+":", strings.ReplaceAll(err.Error(), "\n", " "))
	if errors.Is(err, flagval.ErrUsage) {
		return 2
	}
	return 1
}

// NoArgs refuses stray positional arguments: every option is a flag.
func NoArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return flagval.Usagef("unexpected argument %q; all options are flags (see %s %s --help)", c.Args().First(), c.App.Name, c.Command.FullName())
	}
	return nil
}
