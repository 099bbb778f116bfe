package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
)

// ErrNotCommitted: a checkpoint names a step that is not committed yet.
var ErrNotCommitted = errors.New("step is not committed")

// ErrReclaimed: a checkpoint names a step gc has already reclaimed past: a
// job restarting from it would find the steps after it gone.
var ErrReclaimed = errors.New("step was reclaimed")

// CheckpointOutcome says what RecordCheckpoint did.
type CheckpointOutcome int

const (
	// CheckpointRecorded: a new version records the checkpoint.
	CheckpointRecorded CheckpointOutcome = iota
	// CheckpointAlready: it was recorded before; nothing was written.
	CheckpointAlready
	// CheckpointOlder: it is older than every recorded checkpoint, so it
	// would not change what gc keeps; nothing was written.
	CheckpointOlder
)

// CheckpointResult is the state after RecordCheckpoint and what it did.
type CheckpointResult struct {
	*State
	Outcome CheckpointOutcome
}

// RecordCheckpoint records that training durably checkpointed after step.
// Recording a checkpoint twice is harmless: the second call commits
// nothing. A step that is not committed yet is refused with
// ErrNotCommitted, one gc has reclaimed with ErrReclaimed.
func RecordCheckpoint(ctx context.Context, l *Log, step int64, log *slog.Logger) (*CheckpointResult, error) {
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	res := &CheckpointResult{State: st}
	_, err = l.Commit(ctx, st, func(st *State) (*Version, error) {
		res.Outcome = CheckpointRecorded // this closure may run again on a newer state
		if _, found := slices.BinarySearch(st.Checkpoints, step); found {
			res.Outcome = CheckpointAlready
			return nil, nil
		}
		if step < st.LiveFrom-1 && step >= st.Config.FirstStep { // not step+1: it overflows at MaxInt64
			return nil, fmt.Errorf("%w: checkpoint for step %d, but gc has reclaimed every step below %d, so a restart from it would find steps %d-%d gone; record only checkpoints taken after a live step",
				ErrReclaimed, step, st.LiveFrom, step+1, st.LiveFrom-1)
		}
		if len(st.Checkpoints) > 0 && step < st.Checkpoints[0] {
			res.Outcome = CheckpointOlder
			return nil, nil
		}
		head, ok := st.Head()
		if !ok || step > head || step < st.Config.FirstStep {
			h := "none"
			if ok {
				h = fmt.Sprint(head)
			}
			return nil, fmt.Errorf("%w: checkpoint for step %d, but the head step is %s; record it after the step is committed", ErrNotCommitted, step, h)
		}
		return &Version{Checkpoints: []int64{step}}, nil
	}, log)
	if err != nil {
		return nil, err
	}
	return res, nil
}
