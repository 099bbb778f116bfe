package mount

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/internal/flagval"
)

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/mnt/a\040b\011c\134d`); got != "/mnt/a b\tc\\d" {
		t.Errorf("got %q", got)
	}
}

func TestValidateNodeID(t *testing.T) {
	for _, id := range []string{"n1", "node-1.example_2"} {
		if err := validateNodeID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a/b", "a b", string(make([]byte, 129))} {
		if err := validateNodeID(id); !errors.Is(err, flagval.ErrUsage) {
			t.Errorf("%q: %v, want a usage error", id, err)
		}
	}
}

func TestDetectCheckpoint(t *testing.T) {
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		files  map[string]string
		n      int64
		format string
	}{
		{"empty", nil, 0, ""},
		{"megatron", map[string]string{"latest_checkpointed_iteration.txt": "1200\n", "iter_0001200/mp_rank_00/model_optim_rng.pt": "x"}, 1200, "megatron"},
		{"megatron release", map[string]string{"latest_checkpointed_iteration.txt": "release\n"}, 0, ""},
		{"deepspeed", map[string]string{"latest": "global_step300", "global_step300/mp_rank_00_model_states.pt": "x"}, 300, "deepspeed"},
		{"huggingface", map[string]string{"checkpoint-500/trainer_state.json": "{}", "checkpoint-1000/trainer_state.json": "{}", "checkpoint-1500/model.safetensors": "partial"}, 1000, "huggingface"},
		{"dcp", map[string]string{"step_40/.metadata": "x", "step_80/__0_0.distcp": "partial", "step_20/.metadata": "x"}, 40, "pytorch-dcp"},
		{"dcp without number", map[string]string{"final/.metadata": "x"}, 0, ""},
		// Issue 22.3: a tracker is a pointer; one naming a checkpoint that
		// is not there (or not finished) records nothing.
		{"megatron tracker to a missing iter dir", map[string]string{"latest_checkpointed_iteration.txt": "28\n", "iter_0000010/mp_rank_00/model_optim_rng.pt": "x"}, 0, ""},
		{"megatron iter dir still being written", map[string]string{"latest_checkpointed_iteration.txt": "28\n", "iter_0000028/mp_rank_00/distrib_optim.pt": "x"}, 0, ""},
		{"megatron distributed", map[string]string{"latest_checkpointed_iteration.txt": "28\n", "iter_0000028/.metadata": "x"}, 28, "megatron"},
		{"deepspeed latest to a missing tag", map[string]string{"latest": "global_step28", "global_step10/mp_rank_00_model_states.pt": "x"}, 0, ""},
		{"deepspeed empty tag dir", map[string]string{"latest": "global_step28", "global_step28/zero_pp_rank_0_mp_rank_00_optim_states.pt": "x"}, 0, ""},
		{"deepspeed zero", map[string]string{"latest": "global_step28", "global_step28/zero_pp_rank_0_mp_rank_00_model_states.pt": "x"}, 28, "deepspeed"},
		{"missing tracker target, complete hf", map[string]string{"latest": "global_step90", "checkpoint-40/trainer_state.json": "{}"}, 40, "huggingface"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, content := range c.files {
				write(t, filepath.Join(dir, p), content)
			}
			d := DetectCheckpoint(dir)
			if d.N != c.n || d.Format != c.format {
				t.Errorf("DetectCheckpoint = %d, %q; want %d, %q", d.N, d.Format, c.n, c.format)
			}
			// A tracker that named nothing complete is reported, with the
			// directory it named.
			if strings.Contains(c.name, "missing") || strings.Contains(c.name, "still") || strings.Contains(c.name, "empty tag") {
				if len(d.Ignored) != 1 || !strings.Contains(d.Ignored[0], "missing or incomplete") {
					t.Errorf("ignored pointers: %q; want the one naming the missing checkpoint", d.Ignored)
				}
			}
		})
	}
	if d := DetectCheckpoint(filepath.Join(t.TempDir(), "absent")); d.N != 0 {
		t.Error("a missing directory has a checkpoint")
	}
}

// TestCheckpointDirMistakes: a --checkpoint-dir that is a file is a usage
// error before anything is mounted; one that does not exist yet starts
// with a warning line (issue 22.9). Before, both started silently and
// never recorded anything, so gc never freed anything.
func TestCheckpointDirMistakes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ckpt")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Run(t.Context(), Options{Store: "file://" + t.TempDir(), Mountpoint: t.TempDir(), CheckpointDir: file, NodeID: "n"})
	if !errors.Is(err, flagval.ErrUsage) || !strings.Contains(err.Error(), "--checkpoint-dir "+file+" is a file") {
		t.Fatalf("Run with a file as --checkpoint-dir = %v; want a usage error naming it", err)
	}
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	missing := filepath.Join(t.TempDir(), "later")
	if err := checkCheckpointDir(missing, log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "--checkpoint-dir does not exist yet") || !strings.Contains(logged.String(), missing) {
		t.Fatalf("a missing --checkpoint-dir logged %q; want a warning naming it", logged.String())
	}
}
