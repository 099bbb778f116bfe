package mount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets of the mount's user input: --ranks, sizes (--cache-size,
// --read-ahead) and the checkpoint files of each trainer layout. Each must
// refuse bad input with an error, never panic or allocate without bound.

func FuzzParseRanks(f *testing.F) {
	for _, s := range []string{"0-3,8", "0", " 1 , 2-2 ", "", "-", "3-1", "0-65536", "0-65536,0-65536", "9223372036854775807", "1--2", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ranks, err := ParseRanks(s)
		if err != nil {
			if ranks != nil || !strings.Contains(err.Error(), "--ranks") {
				t.Fatalf("ParseRanks(%q): %v with %d ranks; want nil and a message naming --ranks", s, err, len(ranks))
			}
			return
		}
		if len(ranks) == 0 || len(ranks) > 1<<20 {
			t.Fatalf("ParseRanks(%q): %d ranks", s, len(ranks))
		}
		for i, r := range ranks {
			if r < 0 || (i > 0 && r <= ranks[i-1]) {
				t.Fatalf("ParseRanks(%q) = %v: not sorted, distinct, non-negative", s, ranks)
			}
		}
		again, err := ParseRanks(FormatRanks(ranks))
		if err != nil || len(again) != len(ranks) {
			t.Fatalf("ParseRanks(FormatRanks(%v)) = %v, %v", ranks, again, err)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"2GiB", "256MiB", "1073741824", "0", "-1", "1e30", "1.5 GB", "", "18446744073709551616", "NaNKiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize("--cache-size", s)
		if err != nil {
			if !strings.Contains(err.Error(), "--cache-size") {
				t.Fatalf("ParseSize(%q): %v does not name the flag", s, err)
			}
			return
		}
		if n <= 0 || n > 1<<50 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

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
