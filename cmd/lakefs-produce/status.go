package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/txn"
)

type statusOptions struct {
	Store       string
	JSON        bool
	ClockOffset time.Duration // hidden; tests
}

func statusCommand() *cli.Command {
	var o statusOptions
	return &cli.Command{
		Name:      "status",
		Usage:     "show head step, version, producers, consumers, checkpoints, live steps, bytes",
		UsageText: "lakefs-produce status --store URL [--json]",
		Flags: []cli.Flag{
			storeFlag(),
			&cli.BoolFlag{Name: "json", Destination: &o.JSON, Usage: "print one JSON object (field names are stable)"},
			clockOffsetFlag(&o.ClockOffset),
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return status(c.Context, o, c.App.Writer)
		},
	}
}

func status(ctx context.Context, o statusOptions, stdout io.Writer) error {
	l, err := openLog(ctx, o.Store)
	if err != nil {
		return stoppedAtStart(ctx, err)
	}
	// Which consumers are live, and whether gc is held, is judged by the
	// store's clock. Measuring it writes (and deletes) one probe object;
	// without write access status goes by this machine's clock and says so.
	l.UseStoreClock(ctx, o.ClockOffset, slog.New(slog.DiscardHandler))
	r, err := txn.StreamStatus(ctx, l)
	if err != nil {
		return err
	}
	if o.JSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	opt := func(p *int64) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprint(*p)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "stream\t%s (%d ranks, first step %d)\n", r.StreamID, r.Ranks, r.FirstStep)
	fmt.Fprintf(w, "head step\t%s\n", opt(r.Head))
	if r.Time == nil {
		fmt.Fprintf(w, "version\tnone (nothing committed yet)\n")
	} else {
		fmt.Fprintf(w, "version\t%d (%s)\n", r.Version, r.Time.Format("2006-01-02 15:04:05Z07:00"))
	}
	live := "none"
	if r.Live.Count > 0 {
		live = fmt.Sprintf("%d..%d (%d steps)", *r.Live.From, *r.Live.To, r.Live.Count)
	}
	fmt.Fprintf(w, "live steps\t%s\n", live)
	fmt.Fprintf(w, "data\t%s\n", humanBytes(r.DataBytes))
	cps := make([]string, len(r.Checkpoints))
	for i, c := range r.Checkpoints {
		cps[i] = fmt.Sprint(c)
	}
	fmt.Fprintf(w, "checkpoints\t%s (retain %d; reclaimable below %s)\n", orNone(strings.Join(cps, " ")), r.RetainCheckpoints, opt(r.ReclaimTarget))
	fmt.Fprintf(w, "pending deletes\t%d objects\n", r.PendingDeletes)
	if len(r.GCHeldBy) > 0 {
		fmt.Fprintf(w, "gc held\tbelow step %d by %s (gc --force reclaims anyway)\n", r.GCHeldBy[0].Step, holders(r.GCHeldBy))
	}
	if r.Lead != nil {
		at := fmt.Sprintf("at step %d", r.Lead.Base)
		for _, c := range r.Consumers {
			if "consumer "+c.Node == r.Lead.Who && c.Step == nil {
				at = "which has read nothing yet"
			}
		}
		fmt.Fprintf(w, "lead\t%d steps ahead of %s %s (producers with --max-lead below that wait)\n", r.Lead.Steps, r.Lead.Who, at)
	}
	if r.ClockUnmeasured != "" {
		fmt.Fprintf(w, "clock\t%s: consumers' liveness below is by this machine's clock; gc reclaims nothing until it is measured\n", r.ClockUnmeasured)
	}
	w.Flush()
	fmt.Fprintln(stdout)
	w = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PRODUCER\tEPOCH\tSEQ\tLAST STEP\tCURSOR")
	for _, p := range r.Producers {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", p.ID, p.Epoch, p.Seq, opt(p.LastStep), orNone(p.Cursor))
	}
	w.Flush()
	if len(r.Consumers) > 0 {
		fmt.Fprintln(stdout)
		w = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "CONSUMER\tSTEP\tLAG\tSEEN")
		for _, c := range r.Consumers {
			seen := c.Time.Format("15:04:05")
			if !c.Live {
				seen += " (stale)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Node, opt(c.Step), opt(c.Lag), seen)
		}
		w.Flush()
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
