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

// RecordCheckpoint records that training durably checkpointed after step.
// Recording a checkpoint twice is harmless: the second call commits
// nothing. A step that is not committed yet is refused with
// ErrNotCommitted. It returns the state after the checkpoint is recorded.
func RecordCheckpoint(ctx context.Context, l *Log, step int64, log *slog.Logger) (*State, error) {
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	_, err = l.Commit(ctx, st, func(st *State) (*Version, error) {
		if _, found := slices.BinarySearch(st.Checkpoints, step); found {
			return nil, nil
		}
		if len(st.Checkpoints) > 0 && step < st.Checkpoints[0] {
			return nil, nil // older than every retained checkpoint: nothing to add
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
	return st, nil
}
