package report

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPinSelf: the read section's pinning confines every thread of this
// process and the children it starts to the client's CPUs, and puts the
// old mask back.
func TestPinSelf(t *testing.T) {
	split, ok := splitCPUs()
	if !ok {
		t.Skip("one CPU: nothing to split")
	}
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	restore, err := pinSelf(split.clientSet)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err == nil && got != split.clientSet {
			t.Errorf("thread %d runs on %v, want the client's CPUs %s", tid, got, split.client)
		}
	}
	out, err := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(strings.TrimPrefix(string(out), "Cpus_allowed_list:")); cpuSet(t, got) != split.clientSet {
		t.Errorf("a child started while pinned runs on CPUs %q, want %s", got, split.client)
	}
	restore()
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("after restore: %v, want %v", after, before)
	}
}

// cpuSet parses a kernel CPU list ("1", "0-3,8").
func cpuSet(t *testing.T, list string) unix.CPUSet {
	var set unix.CPUSet
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("CPU list %q: %v", list, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("CPU list %q: %v", list, err)
			}
		}
		for c := a; c <= b; c++ {
			set.Set(c)
		}
	}
	return set
}
