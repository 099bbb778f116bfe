package csi

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/mount"
)

// TestUnpublishOnlyWhatItPublished: unpublish touches only targets the
// driver published for that volume. A plain file, a tmpfs with data, the
// shared mount's own directory, another volume's target: OK and nothing
// touched; a relative path: InvalidArgument (issue 32 item 4).
func TestUnpublishOnlyWhatItPublished(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	target := filepath.Join(pods, "pod", "mount")
	tmpfs := filepath.Join(pods, "tmpfs")
	cleanupTargets(t, d.stateDir, target, tmpfs)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(pods, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tmpfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmpfs, "data"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	shared := registryOf(t, d.stateDir)[0].Dir
	for _, c := range []struct{ vol, path string }{
		{"vol", file}, {"vol", tmpfs}, {"vol", shared}, {"other-vol", target},
	} {
		if _, err := d.node.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: c.vol, TargetPath: c.path}); err != nil {
			t.Errorf("unpublish of %s (volume %s), which the driver did not publish for it: %v, want OK", c.path, c.vol, err)
		}
	}
	_, err := d.node.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: "pod/mount"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("unpublish of a relative path: %v, want InvalidArgument", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the file given as a target: %q, %v; want it untouched", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(tmpfs, "data")); err != nil || string(b) != "keep" {
		t.Errorf("the tmpfs given as a target: %q, %v; want it mounted with its data", b, err)
	}
	checkFiles(t, shared, step, files)
	checkFiles(t, target, step, files)
	unpublish(t, d, "vol", target)
	assertAllStopped(t, d.stateDir)
}

// TestPublishRefusedTargets: a symlink target (the bind would hide its
// destination's files) and a file target are refused with InvalidArgument
// before a lakefs-mount is started: none is left running for nobody
// (issue 32 items 5 and 12).
func TestPublishRefusedTargets(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	newStream(t, url)
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	dest := filepath.Join(pods, "dest")
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "own"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link, file := filepath.Join(pods, "link"), filepath.Join(pods, "file")
	if err := os.Symlink(dest, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cleanupTargets(t, d.stateDir, dest, link, file)
	for _, tg := range []string{link, file} {
		_, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", tg, withAttrs(nil, "store", url), nil))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tg) {
			t.Errorf("publish at %s: %v, want InvalidArgument naming it", tg, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "own")); err != nil {
		t.Errorf("the symlink's destination lost its files: %v", err)
	}
	assertAllStopped(t, d.stateDir)
}

// TestSecondDriverRefused: a second driver on the state directory of a
// running one, or on its socket, is refused naming it; the first keeps its
// socket and serves (issue 32 item 6).
func TestSecondDriverRefused(t *testing.T) {
	mountBin, _, _ := bins(t)
	stateDir := t.TempDir()
	d := startDriver(t, stateDir)
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"), StateDir: stateDir}, "in use by another lakefs-csi"},
		{Options{Endpoint: "unix://" + d.sock, StateDir: t.TempDir()}, "served by another process"},
	} {
		c.o.NodeID, c.o.MountBinary = "node-a", mountBin
		c.o.Logger = slog.New(slog.DiscardHandler)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := Run(ctx, c.o)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("a second driver with %+v: %v, want an error saying %q", c.o, err, c.want)
		}
	}
	if _, err := os.Stat(d.sock); err != nil {
		t.Fatalf("the first driver's socket: %v", err)
	}
	if _, err := d.ident.Probe(t.Context(), &csipb.ProbeRequest{}); err != nil {
		t.Fatalf("the first driver after the second was refused: %v", err)
	}
}

// TestShareKeyPerConsumer: volumes of equal attributes share a mount (and
// its one heartbeat) only within one consumer: the volume id, or the
// consumer attribute (issue 32 item 9).
func TestShareKeyPerConsumer(t *testing.T) {
	url := "file://" + t.TempDir()
	key := func(volID string, kv ...string) volume {
		t.Helper()
		v, err := volumeOf(volID, withAttrs(nil, append([]string{"store", url}, kv...)...), nil, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, a2, b := key("vol-a"), key("vol-a"), key("vol-b")
	if a.Key != a2.Key {
		t.Errorf("one volume's publishes get keys %s and %s, want one shared mount", a.Key, a2.Key)
	}
	if a.Key == b.Key || a.Options.NodeID == b.Options.NodeID {
		t.Errorf("two volumes (two jobs) share key %s and node id %s: one heartbeat would hide the slower job", a.Key, a.Options.NodeID)
	}
	if j1, j2 := key("inline-1", "consumer", "job-7"), key("inline-2", "consumer", "job-7"); j1.Key != j2.Key {
		t.Errorf("two volumes of consumer job-7 get keys %s and %s, want one shared mount", j1.Key, j2.Key)
	}
}

// TestChildEnvSecretAlone: with a volume secret, lakefs-mount's AWS
// variables are the secret's alone (no session token, profile or role of
// the driver's own mixed in); without one, the driver's pass through
// (issue 32 item 3).
func TestChildEnvSecretAlone(t *testing.T) {
	for k, v := range map[string]string{"AWS_SESSION_TOKEN": "driver-token", "AWS_PROFILE": "driver", "AWS_ROLE_ARN": "arn:aws:iam::1:role/driver",
		"AWS_ACCESS_KEY_ID": "driver-id", "AWS_CA_BUNDLE": "/etc/ca.pem"} {
		t.Setenv(k, v)
	}
	secret := []string{"AWS_ACCESS_KEY_ID=vol-id", "AWS_SECRET_ACCESS_KEY=vol-secret"}
	var aws []string
	for _, kv := range childEnv(secret) {
		if strings.HasPrefix(kv, "AWS_") {
			aws = append(aws, kv)
		}
	}
	slices.Sort(aws)
	want := []string{"AWS_ACCESS_KEY_ID=vol-id", "AWS_CA_BUNDLE=/etc/ca.pem", "AWS_SECRET_ACCESS_KEY=vol-secret"}
	if !slices.Equal(aws, want) {
		t.Errorf("AWS environment with a secret: %v, want %v", aws, want)
	}
	if env := childEnv(nil); !slices.Contains(env, "AWS_SESSION_TOKEN=driver-token") {
		t.Errorf("without a secret the driver's own credentials do not pass: %v", env)
	}
	// An Azure secret replaces the driver's Azure identity and leaves its
	// AWS one (another cloud's) alone.
	t.Setenv("AZURE_CLIENT_ID", "driver-client")
	t.Setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/driver-token")
	env := childEnv([]string{"AZURE_STORAGE_KEY=vol-key"})
	if slices.Contains(env, "AZURE_CLIENT_ID=driver-client") || slices.Contains(env, "AZURE_FEDERATED_TOKEN_FILE=/var/run/driver-token") ||
		!slices.Contains(env, "AZURE_STORAGE_KEY=vol-key") || !slices.Contains(env, "AWS_SESSION_TOKEN=driver-token") {
		t.Errorf("environment with an Azure secret: %v; want the secret's AZURE_ variables alone and the AWS ones kept", env)
	}
	if _, err := credentialEnv(map[string]string{"AZURE_CLIENT_SECRET": "s", "AZURE_CLIENT_ID": "c"}); err == nil || !strings.Contains(err.Error(), "AZURE_TENANT_ID") {
		t.Errorf("a client secret without a tenant: %v; want an error naming AZURE_TENANT_ID", err)
	}
}

// TestStoreNotInArgv: lakefs-mount gets the store URL in its environment,
// not its command line, which any user reads in ps (issue 32 item 2).
func TestStoreNotInArgv(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	url := "file://" + dir
	newStream(t, url)
	d := startDriver(t, t.TempDir())
	target := filepath.Join(t.TempDir(), "mount")
	cleanupTargets(t, d.stateDir, target)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatal(err)
	}
	pids := mountProcs(t, d.stateDir)
	if len(pids) != 1 {
		t.Fatalf("lakefs-mount processes: %v, want 1", pids)
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pids[0]), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), dir) || strings.Contains(string(b), "store") {
		t.Errorf("lakefs-mount's argv carries the store: %q", strings.ReplaceAll(string(b), "\x00", " "))
	}
	unpublish(t, d, "vol", target)
	assertAllStopped(t, d.stateDir)
}

// TestHungMountDoesNotFreezeDriver: with a shared lakefs-mount stopped
// (SIGSTOP: its mount hangs), a restarted driver still comes up within
// the bound of a stat, serves the node's other volumes, and a publish of
// the hung volume restarts its mount; unpublish of its old target works
// (issue 32 item 10).
func TestHungMountDoesNotFreezeDriver(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	stateDir := t.TempDir()
	pods := t.TempDir()
	t1, t2, t3 := filepath.Join(pods, "1"), filepath.Join(pods, "2"), filepath.Join(pods, "3")
	cleanupTargets(t, stateDir, t1, t2, t3)
	d := startDriver(t, stateDir)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("hung", t1, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatal(err)
	}
	d.stop()
	pids := mountProcs(t, stateDir)
	if len(pids) != 1 {
		t.Fatalf("lakefs-mount processes: %v, want 1", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pids[0], syscall.SIGKILL) })

	start := time.Now()
	d = startDriver(t, stateDir)
	if took := time.Since(start); took > 3*mount.StatTimeout {
		t.Errorf("the driver took %s to come up beside a hung mount", took)
	}
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("other", t2, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatalf("publish of another volume beside a hung mount: %v", err)
	}
	checkFiles(t, t2, step, files)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := d.node.NodePublishVolume(ctx, publishReq("hung", t3, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatalf("publish of the hung volume: %v", err)
	}
	checkFiles(t, t3, step, files)
	for _, c := range []struct{ vol, target string }{{"hung", t1}, {"hung", t3}, {"other", t2}} {
		if _, err := d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: c.vol, TargetPath: c.target}); err != nil {
			t.Fatalf("unpublish %s: %v", c.target, err)
		}
	}
	assertAllStopped(t, stateDir)
}

// fakeMounter starts nothing: the shared mount's directory is a plain
// directory, or, with loseDir, is gone after start so that the bind that
// follows fails (a window a real mount cannot be forced into).
type fakeMounter struct {
	loseDir bool

	mu      sync.Mutex
	starts  int      // GUARDED_BY(mu)
	stopped []procID // GUARDED_BY(mu): the processes stop was given
}

func (f *fakeMounter) start(_ context.Context, _ volume, dir, _ string) (procID, error) {
	f.mu.Lock()
	f.starts++
	f.mu.Unlock()
	if f.loseDir {
		if err := os.Remove(dir); err != nil {
			return procID{}, err
		}
	}
	start, _ := startTime(os.Getpid())
	return procID{PID: os.Getpid(), Start: start}, nil
}

func (f *fakeMounter) stop(_ context.Context, p procID, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p != (procID{}) {
		f.stopped = append(f.stopped, p)
	}
	return nil
}

// TestFailedBindStopsMount: a bind that fails after the shared mount
// started stops that mount and leaves no registry entry: no orphan mount
// heartbeats for nobody (issue 32 item 12).
func TestFailedBindStopsMount(t *testing.T) {
	requireFUSE(t)
	stateDir := t.TempDir()
	f := &fakeMounter{loseDir: true}
	d, err := newDriver(t.Context(), Options{NodeID: "node-a", StateDir: stateDir, Logger: slog.New(slog.DiscardHandler)}, f)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "mount")
	_, err = d.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", "file://"+t.TempDir()), nil))
	if status.Code(err) != codes.Internal {
		t.Fatalf("publish with a failing bind: %v, want Internal", err)
	}
	if f.starts != 1 || len(f.stopped) != 1 || f.stopped[0].PID != os.Getpid() {
		t.Errorf("after the failed bind: %d starts, stopped %v; want the started mount stopped", f.starts, f.stopped)
	}
	if ms := registryOf(t, stateDir); len(ms) != 0 {
		t.Errorf("registry after the failed publish: %+v, want empty", ms)
	}
}

// TestPublishOverUnrecordedDeadBind: a target holding a dead bind the
// registry does not name (what a crash between bind and record left
// before targets were recorded first) is published again: the dead bind
// is unmounted, not an EEXIST on every retry (issue 32 item 12).
func TestPublishOverUnrecordedDeadBind(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	stateDir := t.TempDir()
	target := filepath.Join(t.TempDir(), "mount")
	cleanupTargets(t, stateDir, target)
	d := startDriver(t, stateDir)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatal(err)
	}
	d.stop()
	killMounts(t, stateDir)
	if err := os.Remove(filepath.Join(stateDir, "registry.json")); err != nil {
		t.Fatal(err)
	}
	if s, _ := mount.StateOf(t.Context(), target); s != mount.Dead {
		t.Fatalf("target after its mount was killed: %s, want dead", s)
	}
	d = startDriver(t, stateDir)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatalf("publish over an unrecorded dead bind: %v", err)
	}
	checkFiles(t, target, step, files)
	unpublish(t, d, "vol", target)
	assertAllStopped(t, stateDir)
}

// TestMountCgroupV1Refused: a --mount-cgroup outside a cgroup v2
// hierarchy (a cgroup v1 node) is a usage error at start, not a failure
// of every publish (issue 32 item 14).
func TestMountCgroupV1Refused(t *testing.T) {
	mountBin, _, csiBin := bins(t)
	dir := filepath.Join(t.TempDir(), "lakestream")
	err := Run(t.Context(), Options{Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"), NodeID: "n", StateDir: t.TempDir(),
		MountBinary: mountBin, MountCgroup: dir, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, flagval.ErrUsage) || !strings.Contains(err.Error(), "cgroup v2") {
		t.Fatalf("Run with --mount-cgroup on a non-cgroup2 directory: %v, want a usage error naming cgroup v2", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the cgroup directory was created: %v", err)
	}
	cmd := exec.Command(csiBin, "--node-id", "n", "--state-dir", t.TempDir(), "--endpoint", "unix://"+filepath.Join(t.TempDir(), "s.sock"), "--mount-cgroup", dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "cgroup v2") {
		t.Errorf("lakefs-csi --mount-cgroup %s: %v, %q; want exit 2 naming cgroup v2", dir, err, out)
	}
}

// TestPluginVersionFromBuild: the version the image build passes (the
// Dockerfile's -X flag) is what GetPluginInfo and --version report, not a
// constant (issue 32 item 17).
func TestPluginVersionFromBuild(t *testing.T) {
	requireFUSE(t)
	b, err := os.ReadFile(filepath.Join(deployDir(t), "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-X (\S+)=\$\{VERSION\}`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Dockerfile passes no -X ...=${VERSION} to go build")
	}
	const version = "v9.8.7-test"
	bin := filepath.Join(t.TempDir(), "lakefs-csi")
	build := exec.Command("go", "build", "-ldflags", "-X "+string(m[1])+"="+version, "-o", bin, "github.com/lakestream/lakestream/cmd/lakefs-csi")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) || strings.Contains(string(out), "make build") {
		t.Errorf("lakefs-csi --version: %q, %v; want %s", out, err, version)
	}
	_, ident, _ := startDriverBinary(t, bin, t.TempDir())
	info, err := ident.GetPluginInfo(t.Context(), &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetVendorVersion() != version {
		t.Errorf("GetPluginInfo: %v, %v; want vendor version %s", info, err, version)
	}
}

// TestNoSecretLeaks: a volume's secret and credentials put in a store URL
// (user:secret@, or inside endpoint=) appear in no gRPC error (the
// kubelet's events), driver log line, file of the state directory
// (registry, mount logs) or process's argv, through successful and failed
// publishes on a real S3 server (issue 32).
func TestNoSecretLeaks(t *testing.T) {
	requireFUSE(t)
	const access, secret = "csi-leak-access", "csi-leak-secret-5e1d9b"
	srv := s3test.StartWithCredentials(t, access, secret)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	url := srv.NewBucketURL(t)
	step, files := newStream(t, url, "AWS_ACCESS_KEY_ID="+access, "AWS_SECRET_ACCESS_KEY="+secret)
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	target := filepath.Join(pods, "ok")
	cleanupTargets(t, d.stateDir, target)
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret}
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), secrets)); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, target, step, files)
	bucketURL, _ := strings.CutPrefix(url, "s3://")
	var errs []string
	for _, c := range []struct {
		attrs   map[string]string
		secrets map[string]string
	}{
		{withAttrs(nil, "store", "s3://"+access+":"+secret+"@"+bucketURL), secrets},
		// With the secret too: a mount that starts would log its URL.
		{withAttrs(nil, "store", strings.Replace(url, "endpoint=http://", "endpoint=http://"+access+":"+secret+"@", 1)), secrets},
		{withAttrs(nil, "store", url, "ranks", "9"), secrets},
		{withAttrs(nil, "store", url), map[string]string{"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": "wrong-" + secret}},
		{withAttrs(nil, "store", url), map[string]string{"AWS_SECRET_ACCESS_KEY": secret}},
	} {
		_, err := d.node.NodePublishVolume(t.Context(), publishReq("vol-bad", filepath.Join(pods, "bad"), c.attrs, c.secrets))
		if err == nil {
			t.Errorf("publish with %v succeeded, want an error", c.attrs)
			continue
		}
		errs = append(errs, status.Convert(err).Message())
	}
	for _, e := range errs {
		if strings.Contains(e, secret) {
			t.Errorf("a gRPC error shows the secret: %s", e)
		}
	}
	assertNoSecret(t, d, secret)
	unpublish(t, d, "vol", target)
	assertAllStopped(t, d.stateDir)
}
