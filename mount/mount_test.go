package mount

import (
	"errors"
	"os"
	"path/filepath"
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
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, content := range c.files {
				write(t, filepath.Join(dir, p), content)
			}
			n, format, ok := DetectCheckpoint(dir)
			if n != c.n || format != c.format || ok != (c.n > 0) {
				t.Errorf("DetectCheckpoint = %d, %q, %v; want %d, %q", n, format, ok, c.n, c.format)
			}
		})
	}
	if _, _, ok := DetectCheckpoint(filepath.Join(t.TempDir(), "absent")); ok {
		t.Error("a missing directory has a checkpoint")
	}
}
