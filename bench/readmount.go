package bench

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/internal/listen"
	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/mount/proc"
)

// The mount's metrics bench read reads (mount/metrics.go).
const (
	metricFetched     = "lakefs_mount_bytes_fetched_total"
	metricServed      = "lakefs_mount_bytes_served_total"
	metricGets        = "lakefs_mount_gets_total"
	metricMemPeak     = "lakefs_mount_memfile_peak_bytes"
	metricOpensPT     = `lakefs_mount_opens_total{path="passthrough"}`
	metricOpensBlocks = `lakefs_mount_opens_total{path="blocks"}`
)

// readMount reads the files through a fresh lakefs-mount child process
// started with the extra flags args, measured as system.
func readMount(ctx context.Context, o *ReadOptions, url string, files [][]benchFile, n int, system string, args ...string) (ReadRow, error) {
	m, err := startMount(ctx, o, url, args)
	if err != nil {
		return ReadRow{}, err
	}
	defer m.stop(o.Logger)
	dropCaches(o.Logger)
	// What the mount did before the readers started (loading the log) is
	// not theirs.
	before, err := m.scrape(ctx)
	if err != nil {
		return ReadRow{}, err
	}
	cpu0, mcpu0, scpu0 := procstat.SelfCPU(), procstat.CPU(m.Pid()), o.serverCPU()
	times, bytes, wall, err := readAll(ctx, files, n, func(ctx context.Context, f benchFile, buf []byte) error {
		if o.Mmap {
			return mapFile(filepath.Join(m.Mountpoint(), f.path), f)
		}
		return readFile(filepath.Join(m.Mountpoint(), f.path), f, buf)
	})
	if err != nil {
		return ReadRow{}, err
	}
	cpu := procstat.SelfCPU() - cpu0 + procstat.CPU(m.Pid()) - mcpu0
	serverCPU := o.serverCPUPerGB(scpu0, bytes)
	after, err := m.scrape(ctx)
	if err != nil {
		return ReadRow{}, err
	}
	r := row(system, n, times, bytes, wall, cpu)
	r.ServerCPUSPerGB = serverCPU
	d := func(name string) int64 { return int64(after[name] - before[name]) }
	r.FetchedBytes, r.ServedBytes, r.Gets = d(metricFetched), d(metricServed), d(metricGets)
	r.Path = servedBy(d(metricOpensPT), d(metricOpensBlocks))
	r.RSSMiB = round(procstat.PeakRSS(m.Pid()), 1)
	r.StagedPeakMiB = round(after[metricMemPeak]/(1<<20), 1)
	return r, nil
}

// servedBy names the path the mount's opens took.
func servedBy(passthrough, blocks int64) string {
	switch {
	case passthrough > 0 && blocks > 0:
		return "mixed"
	case passthrough > 0:
		return "passthrough"
	case blocks > 0:
		return "blocks"
	}
	return ""
}

// mountProc is one lakefs-mount child process, served and ready.
type mountProc struct {
	*proc.Proc
	metrics string
}

// startMount starts lakefs-mount with o.MountArgs and args on a fresh
// directory and waits until it serves the view.
func startMount(ctx context.Context, o *ReadOptions, url string, extra []string) (*mountProc, error) {
	dir, err := os.MkdirTemp("", "lakefs-bench-read-")
	if err != nil {
		return nil, err
	}
	// The counters come from the mount's metrics: on the address the
	// caller gave (e.g. to profile with --pprof), else on a free port.
	var addr string
	for i, a := range o.MountArgs {
		if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
			addr = v
		} else if a == "--metrics-addr" && i+1 < len(o.MountArgs) {
			addr = o.MountArgs[i+1]
		}
	}
	args := []string{"--store", url, "--node-id", "bench-read"}
	if addr == "" {
		if addr, err = listen.FreeAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--metrics-addr", addr)
	}
	args = append(append(append(args, o.MountArgs...), extra...), dir)
	p, err := proc.Start(ctx, proc.Config{Bin: o.MountBin, Args: args})
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &mountProc{Proc: p, metrics: "http://" + addr + "/metrics"}, nil
}

// scrape reads the mount's metrics: each sample's value by its name with
// its labels as the page prints them.
func (m *mountProc) scrape(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping the mount's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping the mount's metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scraping the mount's metrics: %w", err)
	}
	return out, nil
}

func (m *mountProc) stop(logger *slog.Logger) {
	if err := m.Stop(); err != nil {
		logger.Warn("bench read: lakefs-mount did not stop cleanly", "dir", m.Mountpoint(), "err", err)
	}
	os.Remove(m.Mountpoint())
}

// mapFile maps the file shared and read-only, as numpy.load(path,
// mmap_mode="r") does, and checks its CRC32C over the mapping: a passthrough
// file's pages are the memory file's, so nothing is copied.
func mapFile(path string, f benchFile) error {
	fd, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fd.Close()
	if f.size == 0 {
		return nil
	}
	b, err := unix.Mmap(int(fd.Fd()), 0, int(f.size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping %s: %w", path, err)
	}
	defer unix.Munmap(b)
	if crc := crc32.Checksum(b, castagnoli); crc != f.crc {
		return fmt.Errorf("%s: CRC32C %08x through a mapping, want %08x", path, crc, f.crc)
	}
	return nil
}
