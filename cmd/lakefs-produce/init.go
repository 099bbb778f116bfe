package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

type initOptions struct {
	Store             string
	Ranks             int
	FirstStep         int64
	ChunkSize         string
	SnapshotEvery     uint64
	RetainCheckpoints int
}

func initCommand() *cli.Command {
	o := initOptions{SnapshotEvery: txn.DefaultSnapshotEvery, RetainCheckpoints: txn.DefaultRetainCheckpoints}
	return &cli.Command{
		Name:      "init",
		Usage:     "create a stream with a fixed number of ranks",
		UsageText: "lakefs-produce init --store URL --ranks R [--first-step N]",
		Flags: []cli.Flag{
			storeFlag(),
			&cli.GenericFlag{Name: "ranks", Value: &flagval.Int[int]{P: &o.Ranks}, Usage: "data-parallel ranks R (required)"},
			&cli.GenericFlag{Name: "first-step", Value: &flagval.Int[int64]{P: &o.FirstStep}, Usage: "number of the first step"},
			&cli.StringFlag{Name: "chunk-size", Value: flagval.FormatSize(txn.DefaultChunkSize), Destination: &o.ChunkSize,
				Usage: "bytes per CRC32C chunk in packs, " + flagval.FormatSize(txn.MinChunkSize) + " to " + flagval.FormatSize(txn.MaxChunkSize)},
			&cli.GenericFlag{Name: "snapshot-every", Value: &flagval.Int[uint64]{P: &o.SnapshotEvery}, Usage: "write a state snapshot every N versions"},
			&cli.GenericFlag{Name: "retain-checkpoints", Value: &flagval.Int[int]{P: &o.RetainCheckpoints},
				Usage: "checkpoints whose following steps are kept; steps up to the oldest of them are reclaimed"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			if !c.IsSet("ranks") {
				return flagval.Usagef("--ranks is required: the stream's data-parallel ranks, 1 to %d", txn.MaxRanks)
			}
			o.Store = c.String("store")
			return initStream(c.Context, o, c.App.Writer)
		},
	}
}

func initStream(ctx context.Context, o initOptions, stdout io.Writer) error {
	if err := flagval.CheckCount("--ranks", int64(o.Ranks), 1, txn.MaxRanks); err != nil {
		return err
	}
	chunk, err := flagval.ParseSize("--chunk-size", o.ChunkSize, txn.MinChunkSize, txn.MaxChunkSize)
	if err != nil {
		return err
	}
	if err := flagval.CheckCount("--first-step", o.FirstStep, 0, txn.MaxStep); err != nil {
		return err
	}
	if o.RetainCheckpoints < 1 {
		return flagval.Usagef("--retain-checkpoints must be at least 1 (got %d)", o.RetainCheckpoints)
	}
	if o.SnapshotEvery < 1 {
		// txn.Create would take 0 for its default, 100.
		return flagval.Usagef("--snapshot-every must be at least 1 (got %d)", o.SnapshotEvery)
	}
	s, err := openStore(ctx, o.Store)
	if err != nil {
		return err
	}
	if err := txn.CheckPlacement(ctx, o.Store, s); err != nil {
		if errors.Is(err, txn.ErrNested) {
			return flagval.Usage(err)
		}
		return err
	}
	l, err := txn.Create(ctx, s, txn.CreateOptions{
		Ranks: o.Ranks, FirstStep: o.FirstStep, ChunkSize: chunk,
		SnapshotEvery: o.SnapshotEvery, RetainCheckpoints: o.RetainCheckpoints,
	})
	if errors.Is(err, store.ErrNoAtomicCreate) {
		return fmt.Errorf("refusing store %s: %w", store.Redact(o.Store), err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created stream %s: %d ranks, first step %d\n", l.Config.StreamID, l.Config.Ranks, l.Config.FirstStep)
	return nil
}
