package procstat

import (
	"os"
	"os/exec"
	"testing"
)

// TestCPUCountsAChildsWork checks that CPU reads a live process's ticks
// from /proc/<pid>/stat: a child that has spun through 200000 shell
// iterations (far more than one 10 ms tick of CPU) and then waits on its
// stdin shows some CPU time.
func TestCPUCountsAChildsWork(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done; read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	if got := CPU(cmd.Process.Pid); got <= 0 {
		t.Fatalf("CPU(child after 200000 shell iterations) = %v, want > 0", got)
	}
}

func TestUnknownPidIsZero(t *testing.T) {
	if got := CPU(-1); got != 0 {
		t.Fatalf("CPU(-1) = %v, want 0", got)
	}
	if got := PeakRSS(-1); got != 0 {
		t.Fatalf("PeakRSS(-1) = %v, want 0", got)
	}
}

// TestPeakRSSSeesTouchedMemory checks the VmHWM parse: after touching
// 64 MiB this process's peak is at least that.
func TestPeakRSSSeesTouchedMemory(t *testing.T) {
	b := make([]byte, 64<<20)
	for i := range b {
		if i%4096 == 0 {
			b[i] = 1
		}
	}
	if got := PeakRSS(os.Getpid()); got < 64 {
		t.Fatalf("PeakRSS(self) = %.1f MiB after touching 64 MiB, want >= 64", got)
	}
	_ = b[len(b)-1]
}

func TestSelfCPU(t *testing.T) {
	if SelfCPU() <= 0 {
		t.Fatal("SelfCPU() = 0 for a running test")
	}
}
