package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/txn"
)

type gcOptions struct {
	Store  string
	DryRun bool
	Grace  time.Duration
	JSON   bool
	Force  bool
	// ConsumerTimeout: a heartbeat older than this no longer holds
	// reclamation (hidden; tests shorten it). ClockOffset moves this
	// process's clock (hidden; tests).
	ConsumerTimeout time.Duration
	ClockOffset     time.Duration
}

func gcCommand() *cli.Command {
	var o gcOptions
	return &cli.Command{
		Name:      "gc",
		Usage:     "reclaim what checkpoints allow and sweep orphans",
		UsageText: "lakefs-produce gc --store URL [--dry-run] [--grace 10m]",
		Description: `Commits a reclamation record below the oldest retained checkpoint (those
steps leave every view), deletes reclaimed data older than the grace period,
log versions and snapshots no reader needs, and orphans (data no version
references) older than the grace period. On S3 it also aborts multipart
uploads under the stream's data/ begun longer ago than the grace period
(a producer killed mid-upload leaves their parts, billed but in no
listing). Safe to run while producers and mounts run, and from several
places at once.

A mount whose heartbeat is fresh holds reclamation back: gc reclaims only
below the step it reads, and names it; --force reclaims anyway.`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.BoolFlag{Name: "dry-run", Destination: &o.DryRun, Usage: "list what would be deleted; change nothing"},
			&cli.DurationFlag{Name: "grace", Value: txn.DefaultGrace, Destination: &o.Grace, Usage: "age before reclaimed data and orphans are deleted"},
			&cli.BoolFlag{Name: "json", Destination: &o.JSON, Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "force", Destination: &o.Force, Usage: "reclaim even steps that live mounts are reading"},
			&cli.DurationFlag{Name: "consumer-timeout", Value: txn.ConsumerTimeout, Destination: &o.ConsumerTimeout, Hidden: true,
				Usage: "a mount whose heartbeat is older than this no longer holds reclamation back"},
			clockOffsetFlag(&o.ClockOffset),
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return gc(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

func gc(ctx context.Context, o gcOptions, stdout, stderr io.Writer) error {
	if o.Grace < 0 {
		return flagval.Usagef("--grace must not be negative (got %s)", o.Grace)
	}
	l, err := openLog(ctx, o.Store)
	if err != nil {
		return stoppedAtStart(ctx, err)
	}
	// Every age gc judges (heartbeats, the grace period, the log
	// retention) is by the store's clock; txn.GC refuses to run by an
	// unmeasured one, and its error is the one line said. A probe write
	// slower than the bound may be a moment's: try twice more.
	clock := l.UseStoreClock(ctx, o.ClockOffset, slog.New(slog.DiscardHandler))
	for i := 0; i < 2 && clock.Unmeasured() != nil && ctx.Err() == nil; i++ {
		_ = clock.Measure(ctx) // its failure is ClockErr's
	}
	// The report below says everything; gc's own log lines would be a
	// second, unstructured copy of it.
	prog := newTaskProgress(stderr, "gc:")
	rep, err := txn.GC(ctx, l, txn.GCOptions{Grace: o.Grace, DryRun: o.DryRun, Force: o.Force, Now: clock.Now, Logger: slog.New(slog.DiscardHandler),
		ConsumerTimeout: o.ConsumerTimeout, Progress: prog.phase})
	prog.finish()
	if err != nil && rep != nil && ctx.Err() != nil {
		return gcInterrupted(rep, o.Grace)
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	if rep.Busy != nil {
		fmt.Fprintf(stdout, "another gc is running (%s, since %s); it does what this one would: nothing done\n", rep.Busy.Holder, rep.Busy.Since.UTC().Format(time.RFC3339))
		return nil
	}
	verb := "deleted"
	if o.DryRun {
		verb = "would delete"
	}
	if len(rep.HeldBy) > 0 {
		if rep.Forced {
			fmt.Fprintf(stdout, "forced: reclaiming below step %d although %s still read there\n", *rep.AllowedBelow, holders(rep.HeldBy))
		} else {
			fmt.Fprintf(stdout, "held back: checkpoints allow reclaiming below step %d, but %s still read there; reclaiming only below step %d (--force reclaims anyway)\n",
				*rep.AllowedBelow, holders(rep.HeldBy), rep.HeldBy[0].Step)
		}
	}
	if rep.ReclaimedSteps > 0 {
		v := "reclaimed"
		if o.DryRun {
			v = "would reclaim"
		}
		fmt.Fprintf(stdout, "%s %d steps (below step %d)\n", v, rep.ReclaimedSteps, rep.ReclaimedBelow)
	}
	for _, set := range []struct {
		what string
		keys []string
	}{{"reclaimed data", rep.DataDeleted}, {"log object", rep.LogDeleted}, {"orphan", rep.Orphans}, {"probe leftover", rep.Probes}} {
		for _, k := range set.keys {
			fmt.Fprintf(stdout, "%s %s: %s\n", verb, set.what, k)
		}
	}
	if more := rep.LogDeletedCount - len(rep.LogDeleted); more > 0 {
		fmt.Fprintf(stdout, "%s %d more log objects\n", verb, more)
	}
	for _, root := range rep.ForeignStreams {
		fmt.Fprintf(stdout, "left alone: another stream at %s (its %s); gc never deletes inside it\n", root, txn.StreamKey)
	}
	abort := "aborted"
	if o.DryRun {
		abort = "would abort"
	}
	for _, u := range rep.UploadsAborted {
		fmt.Fprintf(stdout, "%s stale multipart upload: %s (begun %s)\n", abort, u.Key, u.Initiated.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(stdout, "%s %d objects, %d bytes of data\n", verb, len(rep.DataDeleted)+rep.LogDeletedCount+len(rep.Orphans)+len(rep.Probes), rep.Bytes)
	return nil
}

// holders names the consumers holding gc back: "consumer a at step 5, ...".
func holders(hs []txn.ConsumerHold) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("consumer %s at step %d", h.Node, h.Step)
	}
	return strings.Join(parts, ", ")
}

// gcInterrupted is the one line of a gc stopped by a signal after its
// reclamation was decided: what is committed, how many deletes were cut
// short, and that a rerun finishes them (never the keys themselves).
func gcInterrupted(rep *txn.GCReport, grace time.Duration) error {
	done := "nothing committed"
	if rep.ReclaimedSteps > 0 {
		done = fmt.Sprintf("the reclamation of %d steps below step %d is committed (version %d)", rep.ReclaimedSteps, rep.ReclaimedBelow, rep.Version)
	}
	return fmt.Errorf("gc interrupted: %s; %d deletes were cut short (%d old log objects deleted before); run gc again to delete what is left (reclaimed data and orphans older than --grace %s, old log objects)",
		done, rep.NotDeleted, rep.LogDeletedCount, grace)
}
