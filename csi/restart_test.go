package csi

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/mount/proc"
)

// TestRestartAdopts: a driver stopped and started again on the same state
// directory adopts the live shared mount (the pods' targets never stop
// reading; a new publish joins the same process), and cleans a mount
// directory no registry entry names (a crash between mount and record).
func TestRestartAdopts(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	stateDir := t.TempDir()
	pods := t.TempDir()
	t1, t2 := filepath.Join(pods, "1"), filepath.Join(pods, "2")
	cleanupTargets(t, stateDir, t1, t2)
	attrs := withAttrs(nil, "store", url)

	d := startDriver(t, stateDir)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", t1, attrs, nil)); err != nil {
		t.Fatal(err)
	}
	before := mountProcs(t, stateDir)
	d.stop()
	checkFiles(t, t1, step, files) // served while no driver runs
	orphan := leaveOrphanMount(t, stateDir, url)

	d = startDriver(t, stateDir)
	if s, _ := mount.StateOf(t.Context(), orphan); s != mount.NotMounted {
		t.Fatalf("the unrecorded mount %s is still mounted after the restart", orphan)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the unrecorded mount directory %s is still there: %v", orphan, err)
	}
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", t2, attrs, nil)); err != nil {
		t.Fatal(err)
	}
	if after := mountProcs(t, stateDir); !slices.Equal(before, after) {
		t.Fatalf("lakefs-mount processes %v after the restart, want the adopted %v alone", after, before)
	}
	checkFiles(t, t1, step, files)
	checkFiles(t, t2, step, files)
	unpublish(t, d, "vol", t1)
	unpublish(t, d, "vol", t2)
	assertAllStopped(t, stateDir)
}

// leaveOrphanMount mounts a stream under stateDir/mounts/ without a
// registry entry and kills its process: the leftover of a driver that died
// between starting a mount and recording it.
func leaveOrphanMount(t *testing.T, stateDir, url string) string {
	t.Helper()
	mountBin, _, _ := bins(t)
	dir := filepath.Join(stateDir, "mounts", "orphan")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(t.Context(), proc.Config{Bin: mountBin, Args: []string{"--store", url, "--node-id", "orphan", dir}})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	t.Cleanup(func() { _ = mount.Unmount(dir) })
	return dir
}

// TestDriverKilled: kill -9 of the driver process does not take the pods'
// mounts down (lakefs-mount runs in its own process group); a mount whose
// process died while no driver ran is cleaned by the next driver, and
// unpublish of its target succeeds; the adopted one keeps serving until
// its last unpublish.
func TestDriverKilled(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	stateDir := t.TempDir()
	pods := t.TempDir()
	ta, tb := filepath.Join(pods, "a"), filepath.Join(pods, "b")
	cleanupTargets(t, stateDir, ta, tb)

	node, kill := startDriverProcess(t, stateDir)
	for tg, attrs := range map[string]map[string]string{
		ta: withAttrs(nil, "store", url),
		tb: withAttrs(nil, "store", url, "ranks", "0"), // another view: another shared mount
	} {
		if _, err := node.NodePublishVolume(t.Context(), publishReq("vol-"+filepath.Base(tg), tg, attrs, nil)); err != nil {
			t.Fatal(err)
		}
	}
	kill()
	checkFiles(t, ta, step, files)
	// b's process dies while no driver runs.
	var dirB string
	for _, m := range registryOf(t, stateDir) {
		if slices.Contains(m.Targets, tb) {
			dirB = m.Dir
			if err := signalAndWait(t.Context(), m.Proc, syscall.SIGKILL, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}

	node, _ = startDriverProcess(t, stateDir)
	if s, err := mount.StateOf(t.Context(), dirB); s != mount.NotMounted || err != nil {
		t.Fatalf("the dead shared mount %s after the restart: state %d, %v; want it unmounted", dirB, s, err)
	}
	checkFiles(t, ta, step, files)
	for _, tg := range []string{ta, tb} {
		if _, err := node.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol-" + filepath.Base(tg), TargetPath: tg}); err != nil {
			t.Fatalf("unpublish %s: %v", tg, err)
		}
	}
	assertAllStopped(t, stateDir)
}

// startDriverProcess runs lakefs-csi as a process; kill SIGKILLs it.
func startDriverProcess(t *testing.T, stateDir string) (node csipb.NodeClient, kill func()) {
	t.Helper()
	_, _, csiBin := bins(t)
	node, _, kill = startDriverBinary(t, csiBin, stateDir)
	return node, kill
}

// startDriverBinary runs the lakefs-csi binary csiBin as a process; kill
// SIGKILLs it.
func startDriverBinary(t *testing.T, csiBin, stateDir string) (node csipb.NodeClient, ident csipb.IdentityClient, kill func()) {
	t.Helper()
	mountBin, _, _ := bins(t)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	cmd := exec.Command(csiBin, "--endpoint", "unix://"+sock, "--node-id", "node-b", "--state-dir", stateDir, "--mount-binary", mountBin)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	kill = func() {
		_ = cmd.Process.Signal(unix.SIGKILL)
		<-exited
	}
	t.Cleanup(kill)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ident = csipb.NewIdentityClient(conn)
	if _, err := ident.Probe(ctx, &csipb.ProbeRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("probe of lakefs-csi: %v", err)
	}
	return csipb.NewNodeClient(conn), ident, kill
}

// TestMountCgroup: with --mount-cgroup, each shared lakefs-mount runs in a
// cgroup of its own under the given cgroup v2 directory (outside the
// driver container's, which the runtime kills on restart), and the last
// unpublish removes that cgroup.
func TestMountCgroup(t *testing.T) {
	requireFUSE(t)
	root := cgroup2Root(t)
	parent := filepath.Join(root, fmt.Sprintf("lakestream-csi-test-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.Remove(parent) })
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	d := startDriver(t, t.TempDir(), func(o *Options) { o.MountCgroup = parent })
	target := filepath.Join(t.TempDir(), "mount")
	cleanupTargets(t, d.stateDir, target)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, target, step, files)
	ms := registryOf(t, d.stateDir)
	if len(ms) != 1 {
		t.Fatalf("registry: %+v, want one mount", ms)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ms[0].Proc.PID))
	if err != nil {
		t.Fatal(err)
	}
	want := "0::/" + filepath.Base(parent) + "/mount-" + ms[0].Key + "\n"
	if !strings.Contains(string(b), want) {
		t.Fatalf("lakefs-mount's cgroups:\n%s\nwant the line %q", b, want)
	}
	unpublish(t, d, "vol", target)
	assertAllStopped(t, d.stateDir)
	if _, err := os.Stat(filepath.Join(parent, "mount-"+ms[0].Key)); !os.IsNotExist(err) {
		t.Fatalf("the mount's cgroup after its last unpublish: %v, want it removed", err)
	}
}

// cgroup2Root finds the cgroup v2 hierarchy: /sys/fs/cgroup on a unified
// host, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p
		}
	}
	t.Fatal("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	return ""
}
