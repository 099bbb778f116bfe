package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/txn"
)

type checkpointOptions struct {
	Store       string
	Step        int64
	ClockOffset time.Duration // hidden; tests
}

func checkpointCommand() *cli.Command {
	o := checkpointOptions{Step: -1}
	return &cli.Command{
		Name:      "checkpoint",
		Usage:     "record that training durably checkpointed after step S",
		UsageText: "lakefs-produce checkpoint --store URL --step S",
		Description: `Reclamation (gc) deletes a step's data only once enough newer checkpoints
are recorded. Recording a checkpoint twice is harmless, and one older than
every recorded checkpoint changes nothing: both say so and write nothing.
A step that is not committed yet, or one gc has reclaimed past, is refused
(exit 1).`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.GenericFlag{Name: "step", Value: &flagval.Int[int64]{P: &o.Step}, Usage: "the checkpointed step (required)"},
			clockOffsetFlag(&o.ClockOffset),
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			if c.IsSet("step") && o.Step < 0 {
				return flagval.Usagef("--step %d: steps are numbered from 0; pass a committed step", o.Step)
			}
			return checkpoint(c.Context, o, c.App.Writer)
		},
	}
}

func checkpoint(ctx context.Context, o checkpointOptions, stdout io.Writer) error {
	if o.Step < 0 {
		return flagval.Usagef("--step S is required (a committed step number)")
	}
	l, err := openLog(ctx, o.Store)
	if err != nil {
		return err
	}
	l.UseStoreClock(ctx, o.ClockOffset, slog.New(slog.DiscardHandler)) // the record's time is the store's
	res, err := txn.RecordCheckpoint(ctx, l, o.Step, nil)
	if err != nil {
		return err
	}
	switch res.Outcome {
	case txn.CheckpointAlready:
		fmt.Fprintf(stdout, "checkpoint at step %d was already recorded; nothing written (version %d)\n", o.Step, res.Version)
	case txn.CheckpointOlder:
		fmt.Fprintf(stdout, "checkpoint at step %d not recorded: it is older than every recorded checkpoint (oldest %d), so it would not change what gc keeps; nothing written\n",
			o.Step, res.Checkpoints[0])
	default:
		fmt.Fprintf(stdout, "checkpoint at step %d recorded (version %d)\n", o.Step, res.Version)
	}
	return nil
}
