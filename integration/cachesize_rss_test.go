package integration

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/txn"
)

// TestMountRSSFollowsCachedNotCacheSize (issue 47 item 2): a mount's
// memory at start does not grow with --cache-size (48 MB at 2GiB, 207 MB
// at 1TiB, and 1PiB died of out-of-memory): it is printed for 2GiB, 1TiB
// (when the machine has it) and the largest size accepted here, this
// machine's memory, and the largest may take at most 16 MiB more than
// 2GiB. 1PiB is refused as a usage error naming the range (exit 2).
func TestMountRSSFollowsCachedNotCacheSize(t *testing.T) {
	longtest.Skip(t, "the mount's RSS measured over a cache filled and dropped")
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	newStream(t, url, txn.CreateOptions{Ranks: 1})
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	largest := int64(si.Totalram) * int64(si.Unit) &^ (1<<20 - 1) // as lakefs-mount rounds it
	sizes := []int64{2 << 30}
	if largest > 1<<40 {
		sizes = append(sizes, 1<<40)
	}
	sizes = append(sizes, largest)
	rss := map[int64]int64{}
	for _, size := range sizes {
		m := ptStart(t, bin, url, "--cache-size", flagval.FormatSize(size))
		time.Sleep(500 * time.Millisecond) // past the start's own allocations
		rss[size] = mntProcStatus(t, m.cmd.Process.Pid, "VmRSS")
		t.Logf("--cache-size %-9s RSS at start %6.1f MiB", flagval.FormatSize(size), float64(rss[size])/(1<<20))
		_ = m.cmd.Process.Signal(os.Interrupt)
		if code := m.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("lakefs-mount --cache-size %s exited %d:\n%s", flagval.FormatSize(size), code, m.stderr)
		}
	}
	if grow := rss[largest] - rss[2<<30]; grow > 16<<20 {
		t.Fatalf("RSS at start grew %.1f MiB from --cache-size 2GiB to %s: memory follows the setting, not what is cached",
			float64(grow)/(1<<20), flagval.FormatSize(largest))
	}
	out, err := exec.Command(bin, "--store", url, "--cache-size", "1PiB", t.TempDir()).CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "--cache-size 1PiB is out of range") {
		t.Fatalf("--cache-size 1PiB: exit %d, %s; want a usage error naming the range", code, out)
	}
}

// exitCode is a finished command's exit status (0 for a nil error).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
