package csi

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lakestream/lakestream/mount"
)

// testBins are the commands the tests run, built once per test binary.
var testBins struct {
	once                sync.Once
	mount, produce, csi string
	err                 error
}

// bins builds lakefs-mount, lakefs-produce and lakefs-csi into a directory
// named after this process; directories of finished runs are removed.
func bins(t testing.TB) (mount, produce, csiBin string) {
	t.Helper()
	testBins.once.Do(func() {
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), "lakestream-csi-bin-*"))
		for _, d := range old {
			pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "lakestream-csi-bin-"))
			if err == nil && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				_ = os.RemoveAll(d)
			}
		}
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("lakestream-csi-bin-%d", os.Getpid()))
		_, file, _, _ := runtime.Caller(0)
		for _, name := range []string{"lakefs-mount", "lakefs-produce", "lakefs-csi"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/lakestream/lakestream/cmd/"+name)
			cmd.Dir = filepath.Dir(file)
			if out, err := cmd.CombinedOutput(); err != nil {
				testBins.err = fmt.Errorf("go build %s: %w\n%s", name, err, out)
				return
			}
		}
		testBins.mount = filepath.Join(dir, "lakefs-mount")
		testBins.produce = filepath.Join(dir, "lakefs-produce")
		testBins.csi = filepath.Join(dir, "lakefs-csi")
	})
	if testBins.err != nil {
		t.Fatal(testBins.err)
	}
	return testBins.mount, testBins.produce, testBins.csi
}

// requireFUSE fails (never skips) without root and /dev/fuse: the real
// mount tests are the point of this package's tests.
func requireFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests mount FUSE filesystems and bind mounts: run them as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse: %v", err)
	}
}

// newStream creates a 2-rank stream at url with one committed step and
// returns its files (path under steps/<n>/ -> content). env is the
// producer's extra environment (credentials).
func newStream(t *testing.T, url string, env ...string) (step string, files map[string][]byte) {
	t.Helper()
	_, produce, _ := bins(t)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(produce, args...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("lakefs-produce %s: %v\n%s", args[0], err, out)
		}
	}
	run("init", "--store", url, "--ranks", "2")
	staging := t.TempDir()
	files = map[string][]byte{
		"rank-0/a.bin":     randomBytes(t, 300<<10),
		"rank-0/sub/b.bin": randomBytes(t, 5000),
		"rank-1/c.bin":     randomBytes(t, 1<<20+17),
		"meta.json":        []byte(`{"step":0}`),
	}
	for name, b := range files {
		p := filepath.Join(staging, "batch-0", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, "batch-0", "_SEALED"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run("run", "--store", url, "--staging", staging, "--producer-id", "p0", "--once", "--progress", "log")
	return "0", files
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkFiles reads every file of step through the mount at dir and
// compares it with want.
func checkFiles(t *testing.T, dir, step string, want map[string][]byte) {
	t.Helper()
	got := map[string][]byte{}
	root := filepath.Join(dir, "steps", step)
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		got[rel] = b
		return err
	})
	if err != nil {
		t.Fatalf("reading step %s through %s: %v", step, dir, err)
	}
	if len(got) != len(want) {
		t.Fatalf("step %s through %s has %d files, want %d", step, dir, len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Fatalf("%s/steps/%s/%s: %d bytes differ from the %d written", dir, step, name, len(got[name]), len(b))
		}
	}
}

// syncBuffer is a log sink tests can read while the driver writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // GUARDED_BY(mu)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testDriver is a driver served in-process on a real unix socket.
type testDriver struct {
	node     csipb.NodeClient
	ident    csipb.IdentityClient
	sock     string
	stateDir string
	log      *syncBuffer
	stop     func()
}

// startDriver serves a driver with stateDir on a fresh socket until stop
// (or the test's end); opts adjust its options.
func startDriver(t *testing.T, stateDir string, opts ...func(*Options)) *testDriver {
	t.Helper()
	mountBin, _, _ := bins(t)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := Options{Endpoint: "unix://" + sock, NodeID: "node-a", StateDir: stateDir, MountBinary: mountBin,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	for _, f := range opts {
		f(&o)
	}
	go func() { done <- Run(ctx, o) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			conn.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("driver: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	d := &testDriver{node: csipb.NewNodeClient(conn), ident: csipb.NewIdentityClient(conn), sock: sock, stateDir: stateDir, log: logs, stop: stop}
	if _, err := d.ident.Probe(ctx, &csipb.ProbeRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("probe: %v", err)
	}
	return d
}

// mountCap is a filesystem volume capability.
func mountCap() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
	}
}

func publishReq(volID, target string, attrs, secrets map[string]string) *csipb.NodePublishVolumeRequest {
	return &csipb.NodePublishVolumeRequest{VolumeId: volID, TargetPath: target, VolumeCapability: mountCap(),
		VolumeContext: attrs, Secrets: secrets, Readonly: true}
}

// cleanupTargets unmounts what a failed test left at targets, and stops
// the shared mounts under stateDir, so that one failure does not leak
// mounts into the next test.
func cleanupTargets(t *testing.T, stateDir string, targets ...string) {
	t.Cleanup(func() {
		for _, tg := range targets {
			_ = mount.Unmount(tg)
		}
		reg, err := openRegistry(stateDir)
		if err != nil {
			return
		}
		for _, m := range reg.all() {
			_ = newExecMounter("", "").stop(context.Background(), m.Proc, m.Dir)
		}
	})
}

// mountProcs returns the pids of lakefs-mount processes serving a
// directory under stateDir.
func mountProcs(t *testing.T, stateDir string) []int {
	t.Helper()
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if strings.HasSuffix(args[0], "lakefs-mount") && strings.Contains(string(b), filepath.Join(stateDir, "mounts")) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if _, ok := startTime(pid); ok {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
