package mount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets of the mount's user input: the checkpoint files of each
// trainer layout must be refused with an error, never panic.

// FuzzDetectCheckpoint writes fuzzed Megatron and DeepSpeed tracker files
// and a fuzzed directory name (Hugging Face or PyTorch DCP layout) and
// checks that a checkpoint is found only when one parses to a positive
// step.
func FuzzDetectCheckpoint(f *testing.F) {
	f.Add("1200\n", "global_step1200", "checkpoint-1200", true)
	f.Add("  7 ", "global_step", "0", false)
	f.Add("-5", "global_step-3", "checkpoint--1", true)
	f.Add("99999999999999999999", "global_step99999999999999999999", "18446744073709551615", false)
	f.Add("\x00", "step", "..", true)
	f.Fuzz(func(t *testing.T, megatron, deepspeed, dirName string, hf bool) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "latest_checkpointed_iteration.txt"), []byte(megatron), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "latest"), []byte(deepspeed), 0o644); err != nil {
			t.Fatal(err)
		}
		if dirName != "" && !strings.ContainsAny(dirName, "/\x00") && dirName != "." && dirName != ".." && len(dirName) < 200 {
			sub := filepath.Join(dir, dirName)
			if err := os.Mkdir(sub, 0o755); err == nil {
				marker := ".metadata"
				if hf {
					marker = "trainer_state.json"
				}
				if err := os.WriteFile(filepath.Join(sub, marker), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		d := DetectCheckpoint(dir)
		if d.N < 0 || (d.N > 0) != (d.Format != "") {
			t.Fatalf("DetectCheckpoint: %d, %q", d.N, d.Format)
		}
	})
}
