package report

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/internal/s3test"
)

// ReadPeerOptions configure ReadPeers.
type ReadPeerOptions struct {
	Server   *s3test.Server
	Bucket   string
	Ranks    int   // rank directories (default 4)
	Files    int   // files per rank (default 16)
	FileSize int64 // bytes per file (default 4 MiB)
	Repeats  int   // passes per system and reader count (default 3)
	Systems  []string
	Log      io.Writer
}

// The read peers: the same bytes as plain objects, read by the store
// client (direct, the limit) and through two FUSE file systems users pick
// for S3.
const (
	PeerDirect = "direct-s3"
	PeerS3fs   = "s3fs"
	PeerRclone = "rclone"
)

// castagnoli: the peers' files are checked with CRC32C, as Lakestream's are.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ReadPeers uploads Ranks x Files objects of FileSize random bytes and
// reads them back the way `bench read` does (open, read to EOF in 1 MiB
// reads, check the CRC, page cache dropped before each pass): one reader
// over rank 0 in order, and one reader per rank in parallel. Rows have the
// fields of `bench read --json`; fetched_bytes is 0 (not counted) for the
// peers.
func ReadPeers(ctx context.Context, o ReadPeerOptions) ([]Row, error) {
	if o.Ranks == 0 {
		o.Ranks = 4
	}
	if o.Files == 0 {
		o.Files = 16
	}
	if o.FileSize == 0 {
		o.FileSize = 4 << 20
	}
	if o.Repeats == 0 {
		o.Repeats = 3
	}
	if len(o.Systems) == 0 {
		o.Systems = []string{PeerDirect, PeerS3fs, PeerRclone}
	}
	cl := o.Server.Client()
	sums := map[string]uint32{}
	buf := make([]byte, o.FileSize)
	for r := range o.Ranks {
		for i := range o.Files {
			_, _ = rand.Read(buf)
			key := fmt.Sprintf("rank-%d/file-%03d.bin", r, i)
			if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(o.Bucket), Key: aws.String(key), Body: bytes.NewReader(buf)}); err != nil {
				return nil, fmt.Errorf("uploading %s: %w", key, err)
			}
			sums[key] = crc32.Checksum(buf, castagnoli)
		}
	}
	var rows []Row
	var errs []error
	failed := map[string]bool{}
	for rep := range o.Repeats {
		for _, sys := range o.Systems {
			for _, readers := range []int{1, o.Ranks} {
				if failed[sys] {
					continue // one failure of a peer is reported, not repeated
				}
				row, err := readPass(ctx, o, sys, readers, sums)
				if err != nil {
					if ctx.Err() != nil {
						return rows, ctx.Err()
					}
					failed[sys] = true
					errs = append(errs, fmt.Errorf("%s, %d readers, pass %d: %w", sys, readers, rep+1, err))
					continue
				}
				fmt.Fprintf(o.Log, "  read %s readers=%d: %.0f MB/s\n", sys, readers, row.Num("mb_per_s"))
				rows = append(rows, row)
			}
		}
	}
	return rows, errors.Join(errs...)
}

// reader opens one file of the data set.
type reader func(ctx context.Context, key string) (io.ReadCloser, error)

// readPass mounts sys (unless direct), reads and unmounts.
func readPass(ctx context.Context, o ReadPeerOptions, sys string, readers int, sums map[string]uint32) (Row, error) {
	var open reader
	var proc *os.Process
	switch sys {
	case PeerDirect:
		cl := o.Server.Client()
		open = func(ctx context.Context, key string) (io.ReadCloser, error) {
			out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(o.Bucket), Key: aws.String(key)})
			if err != nil {
				return nil, err
			}
			return out.Body, nil
		}
	case PeerS3fs, PeerRclone:
		m, err := mountPeer(ctx, o, sys)
		if err != nil {
			return nil, err
		}
		defer m.unmount()
		proc = m.cmd.Process
		open = func(_ context.Context, key string) (io.ReadCloser, error) {
			return os.Open(filepath.Join(m.dir, key))
		}
	default:
		return nil, fmt.Errorf("unknown read peer %q", sys)
	}
	// Without root the pass reads what the kernel kept; the report says
	// how it was run.
	_ = procstat.DropCaches()
	cpu0 := cpuTime(proc)
	start := time.Now()
	var mu sync.Mutex
	var lat []float64
	var served int64
	var firstErr error
	var wg sync.WaitGroup
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for i := range o.Files {
				key := fmt.Sprintf("rank-%d/file-%03d.bin", r, i)
				t0 := time.Now()
				n, sum, err := readAll(ctx, open, key, buf)
				if err == nil && sum != sums[key] {
					err = fmt.Errorf("%s: CRC32C %08x, want %08x", key, sum, sums[key])
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				served += n
				lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return nil, firstErr
	}
	row := Row{
		"system": sys, "readers": float64(readers), "mb_per_s": float64(served) / 1e6 / secs,
		"p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
		"fetched_bytes": 0.0, "served_bytes": float64(served), "file_bytes": float64(o.FileSize),
	}
	if proc != nil {
		row["rss_mib"] = procstat.PeakRSS(proc.Pid)
		row["cpu_s_per_gb"] = (cpuTime(proc) - cpu0).Seconds() / (float64(served) / 1e9)
	}
	return row, nil
}

func readAll(ctx context.Context, open reader, key string, buf []byte) (int64, uint32, error) {
	rc, err := open(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	defer rc.Close()
	var n int64
	var sum uint32
	for {
		k, err := rc.Read(buf)
		n += int64(k)
		sum = crc32.Update(sum, castagnoli, buf[:k])
		if errors.Is(err, io.EOF) {
			return n, sum, nil
		}
		if err != nil {
			return n, sum, fmt.Errorf("reading %s: %w", key, err)
		}
	}
}

// peerMount is a running s3fs or rclone mount.
type peerMount struct {
	dir string
	cmd *exec.Cmd
}

// mountPeer starts sys in the foreground on a fresh directory and waits
// until the mount is up.
func mountPeer(ctx context.Context, o ReadPeerOptions, sys string) (*peerMount, error) {
	dir, err := os.MkdirTemp("", "lakestream-peer-")
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	switch sys {
	case PeerS3fs:
		pw := filepath.Join(os.TempDir(), "lakestream-s3fs-passwd")
		if err := os.WriteFile(pw, []byte(o.Server.AccessKey+":"+o.Server.SecretKey+"\n"), 0o600); err != nil {
			return nil, err
		}
		cmd = exec.CommandContext(ctx, "s3fs", o.Bucket, dir, "-f",
			"-o", "url="+o.Server.Endpoint, "-o", "use_path_request_style",
			"-o", "passwd_file="+pw, "-o", "endpoint="+s3test.Region, "-o", "ro")
	case PeerRclone:
		cmd = exec.CommandContext(ctx, "rclone", "mount", "peer:"+o.Bucket, dir, "--read-only", "--vfs-cache-mode", "off")
		// rclone 1.60 cannot apply AWS_CA_BUNDLE to its transport and
		// refuses to start with it; the server is plain http on loopback.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "AWS_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env,
			"RCLONE_CONFIG_PEER_TYPE=s3", "RCLONE_CONFIG_PEER_PROVIDER=Other",
			"RCLONE_CONFIG_PEER_ACCESS_KEY_ID="+o.Server.AccessKey,
			"RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY="+o.Server.SecretKey,
			"RCLONE_CONFIG_PEER_ENDPOINT="+o.Server.Endpoint,
			"RCLONE_CONFIG_PEER_REGION="+s3test.Region)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (Debian package %s): %w", sys, sys, err)
	}
	m := &peerMount{dir: dir, cmd: cmd}
	probe := filepath.Join(dir, "rank-0", "file-000.bin")
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(probe); err == nil {
			return m, nil
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			m.unmount()
			return nil, fmt.Errorf("%s did not show %s within 30s: %s", sys, probe, tail(stderr.String(), 300))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *peerMount) unmount() {
	_ = syscall.Unmount(m.dir, 0)
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Unmount(m.dir, syscall.MNT_DETACH)
		_ = m.cmd.Process.Kill()
		<-done
	}
	_ = os.Remove(m.dir)
}

// cpuTime is the CPU time of the peer's mount process p (nil: this
// process, which reads straight from S3).
func cpuTime(p *os.Process) time.Duration {
	if p == nil {
		return procstat.SelfCPU()
	}
	return procstat.CPU(p.Pid)
}
