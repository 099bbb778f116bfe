package cliapp

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/flagval"
)

// Every command maps errors to exit statuses the same way: 0 success, 2
// usage (bad flag, unknown subcommand, flagval.ErrUsage, a stray
// argument), 1 anything else, an ExitCode as it is; each error is one line
// naming the command.
func TestRunExitStatus(t *testing.T) {
	newApp := func(err error) *cli.App {
		return &cli.App{Name: "tool", Commands: []*cli.Command{{
			Name:  "do",
			Flags: []cli.Flag{&cli.IntFlag{Name: "n"}},
			Action: func(c *cli.Context) error {
				if err := NoArgs(c); err != nil {
					return err
				}
				return err
			},
		}}}
	}
	for _, tc := range []struct {
		name string
		err  error
		args []string
		code int
		say  string
	}{
		{"success", nil, []string{"do"}, 0, ""},
		{"operational", errors.New("store down\nretry later"), []string{"do"}, 1, "tool: store down retry later\n"},
		{"usage", flagval.Usagef("--n 0 is out of range"), []string{"do"}, 2, "tool: --n 0 is out of range\n"},
		{"bad flag", nil, []string{"do", "--n", "x"}, 2, "tool: "},
		{"stray argument", nil, []string{"do", "extra"}, 2, `unexpected argument "extra"`},
		{"unknown command", nil, []string{"nope"}, 2, `tool: unknown command "nope"`},
		{"child status", ExitCode(3), []string{"do"}, 3, ""},
	} {
		var stderr bytes.Buffer
		code := Run(t.Context(), newApp(tc.err), append([]string{"tool"}, tc.args...), &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.say) || (tc.say == "" && stderr.Len() > 0) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, stderr.String(), tc.code, tc.say)
		}
		if strings.Count(strings.TrimSuffix(stderr.String(), "\n"), "\n") > 0 {
			t.Errorf("%s: stderr is not one line: %q", tc.name, stderr.String())
		}
	}
}
