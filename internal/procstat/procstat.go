// Package procstat reads what the benchmarks report about a process from
// Linux's /proc: its CPU time and its peak resident memory, and empties the
// page cache between passes. A value that cannot be read is 0: a benchmark
// row then shows no number rather than failing the run.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ticksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100
// on every Linux architecture Go supports.
const ticksPerSecond = 100

// CPU is the user + system CPU time pid has used, 0 if unknown.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the parenthesised command name (which may hold
	// spaces and parentheses): utime and stime are the 12th and 13th.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+k) * time.Second / ticksPerSecond
}

// SelfCPU is the user + system CPU time this process has used, at a finer
// grain than CPU(os.Getpid()).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakRSS is pid's peak resident memory (VmHWM) in MiB, 0 if unknown.
func PeakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// DropCaches writes back and empties the page cache, so that the next pass
// reads from the store rather than from memory. It needs root.
func DropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return fmt.Errorf("dropping the page cache: %w", err)
	}
	return nil
}
