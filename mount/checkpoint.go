package mount

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lakestream/lakestream/txn"
)

// Checkpoint detection. Trainers record how many steps a checkpoint has
// seen in their own ways; each is read only once the checkpoint is
// complete:
//
//	Megatron     <dir>/latest_checkpointed_iteration.txt   "<N>"
//	DeepSpeed    <dir>/latest                              "global_step<N>"
//	Hugging Face <dir>/checkpoint-<N>/trainer_state.json   (written last)
//	PyTorch DCP  <dir>/<name ending in N>/.metadata        (written last)
//
// N counts the steps the job had trained on, so the checkpoint covers the
// stream's steps up to first_step+N-1, and that is what is recorded. Read
// the other way (N as the last step included) it would let gc reclaim a
// step the restarted job still needs; read this way, a job that names
// checkpoints by the last step it read only keeps one step more.

// checkpointPolls is how many manifest poll intervals pass between two
// scans of --checkpoint-dir.
const checkpointPolls = 8

// DetectCheckpoint returns the highest step count N of a complete
// checkpoint in dir, and which trainer's format it came from.
func DetectCheckpoint(dir string) (n int64, format string, ok bool) {
	consider := func(v int64, f string) {
		if v > 0 && (!ok || v > n) {
			n, format, ok = v, f, true
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest_checkpointed_iteration.txt")); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			consider(v, "megatron")
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest")); err == nil {
		if v, ok := trailingNumber(strings.TrimSpace(string(b)), "global_step"); ok {
			consider(v, "deepspeed")
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return n, format, ok
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if v, isHF := trailingNumber(e.Name(), "checkpoint-"); isHF && exists(filepath.Join(sub, "trainer_state.json")) {
			consider(v, "huggingface")
			continue
		}
		if v, num := trailingNumber(e.Name(), ""); num && exists(filepath.Join(sub, ".metadata")) {
			consider(v, "pytorch-dcp")
		}
	}
	return n, format, ok
}

// trailingNumber parses the decimal number that ends name; with a
// non-empty prefix, name must be exactly prefix+number.
func trailingNumber(name, prefix string) (int64, bool) {
	if prefix != "" {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return 0, false
		}
		name = rest
	}
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) || (prefix != "" && i != 0) {
		return 0, false
	}
	v, err := strconv.ParseInt(name[i:], 10, 64)
	return v, err == nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// watchCheckpoints scans --checkpoint-dir and records each new checkpoint
// in the manifest (recording one twice is harmless, so several nodes may
// watch the same directory).
func (m *mounted) watchCheckpoints(ctx context.Context) {
	dir := m.opts.CheckpointDir
	first := m.txlog.Config.FirstStep
	recorded := int64(-1)
	lastErr := ""
	t := time.NewTicker(max(checkpointPolls*m.opts.PollInterval, 100*time.Millisecond))
	defer t.Stop()
	for {
		if n, format, ok := DetectCheckpoint(dir); ok && first+n-1 > recorded {
			step := first + n - 1
			_, err := txn.RecordCheckpoint(ctx, m.txlog, step, m.log)
			switch {
			case err == nil:
				m.log.Info("checkpoint recorded", "step", step, "format", format, "dir", dir)
				recorded, lastErr = step, ""
			case ctx.Err() != nil:
				return
			case err.Error() != lastErr:
				// Retried on the next scan (ErrNotCommitted: the step is not
				// visible yet); logged once per distinct error.
				m.log.Warn("recording a checkpoint failed; will retry", "step", step, "format", format, "err", err)
				lastErr = err.Error()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
