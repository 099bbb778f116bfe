package mount

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/txn"
)

// Checkpoint detection. Trainers record how many steps a checkpoint has
// seen in their own ways; each is read only once the checkpoint is
// complete by that trainer's own rule:
//
//	Megatron     <dir>/latest_checkpointed_iteration.txt   "<N>", naming
//	             <dir>/iter_<N, 7 digits>/ holding mp_rank_*/model_optim_rng.pt
//	             (or, distributed format, .metadata)
//	DeepSpeed    <dir>/latest                              "global_step<N>", naming
//	             <dir>/global_step<N>/ holding *model_states.pt
//	Hugging Face <dir>/checkpoint-<N>/trainer_state.json   (written last)
//	PyTorch DCP  <dir>/<name ending in N>/.metadata        (written last)
//
// A tracker file is only a pointer: one naming a checkpoint that is not
// there (deleted, never finished, a typo) is ignored, or gc would reclaim
// steps the only real checkpoint still needs.
//
// N counts the steps the job had trained on, so the checkpoint covers the
// stream's steps up to first_step+N-1, and that is what is recorded. Read
// the other way (N as the last step included) it would let gc reclaim a
// step the restarted job still needs; read this way, a job that names
// checkpoints by the last step it read only keeps one step more.

// checkpointPolls is how many manifest poll intervals pass between two
// scans of --checkpoint-dir.
const checkpointPolls = 8

// Detected is what one scan of a checkpoint directory found.
type Detected struct {
	N      int64  // the highest step count of a complete checkpoint; 0: none
	Format string // the trainer format it came from
	// Found is every complete checkpoint, highest N first: the highest may
	// name a step that cannot be recorded (a directory with a huge number).
	Found []Found
	// Ignored says why each pointer that names no complete checkpoint was
	// not taken.
	Ignored []string
}

// Found is one complete checkpoint: its step count and trainer format.
type Found struct {
	N      int64
	Format string
}

// DetectCheckpoint returns the complete checkpoints in dir, the highest
// step count N first, and which trainer's format each came from.
func DetectCheckpoint(dir string) (d Detected) {
	defer func() {
		slices.SortStableFunc(d.Found, func(a, b Found) int { return cmp.Compare(b.N, a.N) })
		if len(d.Found) > 0 {
			d.N, d.Format = d.Found[0].N, d.Found[0].Format
		}
	}()
	consider := func(v int64, f string) {
		if v > 0 {
			d.Found = append(d.Found, Found{N: v, Format: f})
		}
	}
	tracker := func(file, format, sub string, v int64, complete func(string) bool) {
		if v <= 0 {
			return
		}
		if complete(filepath.Join(dir, sub)) {
			consider(v, format)
			return
		}
		d.Ignored = append(d.Ignored, fmt.Sprintf("%s names %s, which is missing or incomplete", filepath.Join(dir, file), filepath.Join(dir, sub)))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest_checkpointed_iteration.txt")); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			tracker("latest_checkpointed_iteration.txt", "megatron", fmt.Sprintf("iter_%07d", v), v, megatronComplete)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest")); err == nil {
		tag := strings.TrimSpace(string(b))
		if v, ok := trailingNumber(tag, "global_step"); ok {
			tracker("latest", "deepspeed", tag, v, deepspeedComplete)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return d
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
	return d
}

// megatronComplete: Megatron saves every model-parallel rank's
// mp_rank_*/model_optim_rng.pt (or, distributed, a DCP .metadata) before
// it writes the tracker.
func megatronComplete(iterDir string) bool {
	m, _ := filepath.Glob(filepath.Join(iterDir, "mp_rank_*", "model_optim_rng.pt"))
	return len(m) > 0 || exists(filepath.Join(iterDir, ".metadata"))
}

// deepspeedComplete: DeepSpeed writes `latest` after the tag's
// *model_states.pt files.
func deepspeedComplete(tagDir string) bool {
	m, _ := filepath.Glob(filepath.Join(tagDir, "*model_states.pt"))
	return len(m) > 0
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

// checkCheckpointDir refuses a --checkpoint-dir that is not a directory
// (nothing would ever be recorded, so gc would never free anything) and
// warns about one that does not exist yet (the trainer may create it
// later).
func checkCheckpointDir(dir string, log *slog.Logger) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		log.Warn("--checkpoint-dir does not exist yet; checkpoints are recorded once the trainer creates it and saves one there", "dir", dir)
	case err != nil:
		return flagval.Usagef("--checkpoint-dir %s: %v", dir, err)
	case !fi.IsDir():
		return flagval.Usagef("--checkpoint-dir %s is a file; pass the directory the trainer saves its checkpoints in", dir)
	}
	return nil
}

// watchCheckpoints scans --checkpoint-dir and records each new checkpoint
// in the manifest (recording one twice is harmless, so several nodes may
// watch the same directory).
func (m *mounted) watchCheckpoints(ctx context.Context) {
	dir := m.opts.CheckpointDir
	first := m.txlog.Config.FirstStep
	recorded, pastHead := int64(-1), int64(-1) // pastHead: the last one logged as such
	lastErr, lastIgnored := "", ""
	t := time.NewTicker(max(checkpointPolls*m.opts.PollInterval, 100*time.Millisecond))
	defer t.Stop()
	for {
		d := DetectCheckpoint(dir)
		if ig := strings.Join(d.Ignored, "; "); ig != lastIgnored {
			for _, why := range d.Ignored {
				m.log.Warn("checkpoint pointer ignored; nothing recorded for it", "why", why)
			}
			lastIgnored = ig
		}
		// The highest checkpoint at or below the head: one beyond it (a
		// directory named with a timestamp, a step not committed yet) must
		// not block every later real checkpoint. It is retried each scan.
		head, hasHead := m.view.Load().Head()
		for _, c := range d.Found {
			step := first + c.N - 1
			if step <= recorded {
				break
			}
			if !hasHead || step > head {
				if step != pastHead {
					m.log.Warn("checkpoint not recorded yet: its step is not committed; recording the highest one that is", "step", step, "format", c.Format, "dir", dir)
					pastHead = step
				}
				continue
			}
			if m.replaced.Load() != nil {
				break // the stream at the URL is not this mount's: nothing of its goes there
			}
			_, err := txn.RecordCheckpoint(ctx, m.txlog, step, m.log)
			switch {
			case errors.Is(err, txn.ErrStreamReplaced):
				m.markReplaced(err)
			case err == nil:
				m.log.Info("checkpoint recorded", "step", step, "format", c.Format, "dir", dir)
				recorded, lastErr = step, ""
			case ctx.Err() != nil:
				return
			case err.Error() != lastErr:
				// Retried on the next scan; logged once per distinct error.
				m.log.Warn("recording a checkpoint failed; will retry", "step", step, "format", c.Format, "err", err)
				lastErr = err.Error()
			}
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
