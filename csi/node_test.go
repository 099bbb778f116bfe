package csi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lakestream/lakestream/internal/aztest"
	"github.com/lakestream/lakestream/internal/gcstest"
	"github.com/lakestream/lakestream/internal/s3test"

	"github.com/lakestream/lakestream/mount"
)

// The ephemeral-volume attributes the kubelet adds; the driver must ignore them.
var kubeAttrs = map[string]string{
	"csi.storage.k8s.io/ephemeral":     "true",
	"csi.storage.k8s.io/pod.name":      "trainer-0",
	"csi.storage.k8s.io/pod.namespace": "ml",
}

func withAttrs(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range kubeAttrs {
		m[k] = v
	}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestPublishShared: two pods of one volume (one consumer) share one
// lakefs-mount, each sees every file of a committed step byte for byte
// through its read-only bind mount (writes get EROFS), publish is
// idempotent, and unpublishing one leaves the other reading; the last
// unpublish stops the mount. Run on a file:// store, on fake-gcs-server,
// and on versitygw and Azurite, whose credentials come only from the
// volume's secret (never in a log,
// argv or a file of the state directory).
func TestPublishShared(t *testing.T) {
	requireFUSE(t)
	t.Run("file", func(t *testing.T) {
		url := "file://" + t.TempDir()
		step, files := newStream(t, url)
		testPublishShared(t, map[string]string{"store": url}, nil, step, files)
	})
	t.Run("s3", func(t *testing.T) {
		const access, secret = "csi-test-access", "csi-test-secret-9f3a7c"
		srv := s3test.StartWithCredentials(t, access, secret)
		// The driver (and so its lakefs-mounts) has no credentials of its own.
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		url := srv.NewBucketURL(t)
		step, files := newStream(t, url, "AWS_ACCESS_KEY_ID="+access, "AWS_SECRET_ACCESS_KEY="+secret)
		secrets := map[string]string{"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret}
		d := testPublishShared(t, map[string]string{"store": url}, secrets, step, files)
		assertNoSecret(t, d, secret)
	})
	t.Run("gs", func(t *testing.T) {
		url := gcstest.Start(t).NewBucketURL(t) // the emulator takes no credentials
		step, files := newStream(t, url)
		testPublishShared(t, map[string]string{"store": url}, nil, step, files)
	})
	t.Run("az", func(t *testing.T) {
		url := aztest.Start(t).NewBucketURL(t)
		t.Setenv("AZURE_STORAGE_KEY", "") // the key comes from the volume's secret alone
		step, files := newStream(t, url, "AZURE_STORAGE_KEY="+aztest.Key)
		d := testPublishShared(t, map[string]string{"store": url}, map[string]string{"AZURE_STORAGE_KEY": aztest.Key}, step, files)
		assertNoSecret(t, d, aztest.Key)
	})
}

func testPublishShared(t *testing.T, attrs, secrets map[string]string, step string, files map[string][]byte) *testDriver {
	ctx := t.Context()
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	t1 := filepath.Join(pods, "pod-1", "volumes", "stream", "mount")
	t2 := filepath.Join(pods, "pod-2", "volumes", "stream", "mount")
	cleanupTargets(t, d.stateDir, t1, t2)
	for _, r := range []*csipb.NodePublishVolumeRequest{
		publishReq("vol", t1, withAttrs(attrs), secrets),
		publishReq("vol", t2, withAttrs(attrs), secrets),
		publishReq("vol", t1, withAttrs(attrs), secrets), // again: idempotent
	} {
		if _, err := d.node.NodePublishVolume(ctx, r); err != nil {
			t.Fatalf("publish %s: %v", r.TargetPath, err)
		}
	}
	checkFiles(t, t1, step, files)
	checkFiles(t, t2, step, files)
	assertReadOnly(t, t1, step)
	for _, tg := range []string{t1, t2} {
		if opts := mountOptions(t, tg); !slices.Contains(opts, "ro") {
			t.Fatalf("the bind mount at %s has options %v, want ro", tg, opts)
		}
	}
	if pids := mountProcs(t, d.stateDir); len(pids) != 1 {
		t.Fatalf("%d lakefs-mount processes serve the two targets, want 1 shared: %v", len(pids), pids)
	}
	if ms := registryOf(t, d.stateDir); len(ms) != 1 || len(ms[0].Targets) != 2 {
		t.Fatalf("registry: %+v, want one mount with two targets", ms)
	}

	unpublish(t, d, "vol", t1)
	if _, err := os.Stat(t1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target %s after unpublish: %v, want it removed", t1, err)
	}
	checkFiles(t, t2, step, files)
	if pids := mountProcs(t, d.stateDir); len(pids) != 1 {
		t.Fatalf("after one unpublish %d lakefs-mount processes, want the shared one still: %v", len(pids), pids)
	}
	unpublish(t, d, "vol", t2)
	unpublish(t, d, "vol", t2) // a target already gone
	assertAllStopped(t, d.stateDir)
	return d
}

// mountOptions returns the per-mount options of the topmost mount at path
// (/proc/self/mountinfo field 6).
func mountOptions(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var opts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == path {
			opts = strings.Split(f[5], ",")
		}
	}
	return opts
}

// assertReadOnly checks that every kind of write through the view gets EROFS.
func assertReadOnly(t *testing.T, dir, step string) {
	t.Helper()
	writes := map[string]func() error{
		"create": func() error { return os.WriteFile(filepath.Join(dir, "new.bin"), []byte("x"), 0o644) },
		"mkdir":  func() error { return os.Mkdir(filepath.Join(dir, "steps", step, "d"), 0o755) },
		"open for write": func() error {
			f, err := os.OpenFile(filepath.Join(dir, "steps", step, "meta.json"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			return err
		},
		"remove": func() error { return os.Remove(filepath.Join(dir, "steps", step, "meta.json")) },
	}
	for name, w := range writes {
		if err := w(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s through %s: %v, want EROFS", name, dir, err)
		}
	}
}

func unpublish(t *testing.T, d *testDriver, volID, target string) {
	t.Helper()
	if _, err := d.node.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target}); err != nil {
		t.Fatalf("unpublish %s: %v", target, err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target %s after unpublish: %v, want it removed", target, err)
	}
}

func registryOf(t *testing.T, stateDir string) []sharedMount {
	t.Helper()
	r, err := openRegistry(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return r.all()
}

// assertAllStopped: no lakefs-mount, no registry entry, no mount directory.
func assertAllStopped(t *testing.T, stateDir string) {
	t.Helper()
	if pids := mountProcs(t, stateDir); len(pids) != 0 {
		t.Fatalf("lakefs-mount processes still run after the last unpublish: %v", pids)
	}
	if ms := registryOf(t, stateDir); len(ms) != 0 {
		t.Fatalf("registry still has %+v after the last unpublish", ms)
	}
	if es, _ := os.ReadDir(filepath.Join(stateDir, "mounts")); len(es) != 0 {
		t.Fatalf("mount directories left: %v", es)
	}
}

// assertNoSecret: the secret appears in no driver log line, no file under
// the state directory (registry, mount logs) and no process's argv.
func assertNoSecret(t *testing.T, d *testDriver, secret string) {
	t.Helper()
	if strings.Contains(d.log.String(), secret) {
		t.Errorf("the secret appears in the driver's log")
	}
	_ = filepath.WalkDir(d.stateDir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
				t.Errorf("the secret appears in %s", p)
			}
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), secret) && !strings.Contains(strings.Split(string(b), "\x00")[0], "versitygw") {
			t.Errorf("the secret appears in the argv of %s", p)
		}
	}
}

// TestPublishErrors: what the driver cannot honour or the volume gets
// wrong fails with InvalidArgument naming it, before anything is started
// (a bad attribute, an unknown one, a missing store, a secret missing a
// key, credentials in the store URL, a write access mode, readonly=false,
// a mount flag, a file:// store that is relative, missing or a file,
// mem://) or, for what needs the stream (ranks it does not have, a
// view-ranks that does not divide them, an unknown S3 query parameter),
// from lakefs-mount's usage error; never with a secret's value; nothing is
// left mounted or running (issue 32 items 2 and 16).
func TestPublishErrors(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	newStream(t, url)
	d := startDriver(t, t.TempDir())
	target := filepath.Join(t.TempDir(), "mount")
	cleanupTargets(t, d.stateDir, target)
	const secretValue = "AKIA-very-secret-id"
	aFile := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writer := func(mode csipb.VolumeCapability_AccessMode_Mode) func(*csipb.NodePublishVolumeRequest) {
		return func(r *csipb.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessMode.Mode = mode
			delete(r.VolumeContext, kubeAttrPrefix+"ephemeral") // a PersistentVolume's mode
		}
	}
	cases := []struct {
		attrs   map[string]string
		secrets map[string]string
		edit    func(*csipb.NodePublishVolumeRequest)
		want    string
	}{
		{attrs: withAttrs(nil, "store", url, "cache-size", "lots"), want: "cache-size"},
		{attrs: withAttrs(nil, "store", url, "prefetch-steps", "-1"), want: "prefetch-steps"},
		{attrs: withAttrs(nil, "store", url, "no-such-option", "1"), want: "no-such-option"},
		{attrs: withAttrs(nil, "cache-size", "1GiB"), want: `"store" is missing`},
		{attrs: withAttrs(nil, "Store", url), want: `unknown volume attribute "Store"`},
		{attrs: withAttrs(nil, "store", url, "node-id", "x"), want: "node-id"},
		{attrs: withAttrs(nil, "store", url), secrets: map[string]string{"AWS_ACCESS_KEY_ID": secretValue}, want: "AWS_SECRET_ACCESS_KEY"},
		{attrs: withAttrs(nil, "store", url), secrets: map[string]string{"password": secretValue}, want: "password"},
		{attrs: withAttrs(nil, "store", "s3://AKIAX:"+secretValue+"@bucket/p?endpoint=http://127.0.0.1:1"), want: "credentials"},
		{attrs: withAttrs(nil, "store", "s3://bucket/p?endpoint=http://AKIAX:"+secretValue+"@127.0.0.1:1&region=us-east-1"), want: "credentials"},
		{attrs: withAttrs(nil, "store", "s3://bucket/p?endpoint=http://AKIAX:a/"+secretValue+"@127.0.0.1:1"), want: "credentials"},
		{attrs: withAttrs(nil, "store", "file://relative/dir"), want: "absolute"},
		{attrs: withAttrs(nil, "store", "file:///nonexistent/stream"), want: "/nonexistent/stream"},
		{attrs: withAttrs(nil, "store", "file://"+aFile), want: "not a directory"},
		{attrs: withAttrs(nil, "store", "mem://x"), want: "mem://"},
		{attrs: withAttrs(nil, "store", url, "ranks", "5"), want: "rank 5"},
		{attrs: withAttrs(nil, "store", url, "view-ranks", "3"), want: "--view-ranks 3"},
		{attrs: withAttrs(nil, "store", "s3://bucket/p?endpoint=http://127.0.0.1:1&colour=blue"), want: "colour"},
		{attrs: withAttrs(nil, "store", url), edit: func(r *csipb.NodePublishVolumeRequest) { r.Readonly = false }, want: "readOnly: true"},
		{attrs: withAttrs(nil, "store", url), edit: writer(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), want: "SINGLE_NODE_WRITER"},
		{attrs: withAttrs(nil, "store", url), edit: writer(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), want: "MULTI_NODE_MULTI_WRITER"},
		{attrs: withAttrs(nil, "store", url), edit: func(r *csipb.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"rw"}
		}, want: `"rw"`},
	}
	for _, c := range cases {
		r := publishReq("vol", target, c.attrs, c.secrets)
		if c.edit != nil {
			c.edit(r)
		}
		_, err := d.node.NodePublishVolume(t.Context(), r)
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), c.want) {
			t.Errorf("publish with %v: %v, want InvalidArgument naming %s", c.attrs, err, c.want)
		}
		if strings.Contains(st.Message(), secretValue) {
			t.Errorf("the error shows the secret's value: %s", st.Message())
		}
		if c.want == `unknown volume attribute "Store"` && strings.Contains(st.Message(), "node-id") {
			t.Errorf("the list of known attributes names one the driver refuses: %s", st.Message())
		}
	}
	// The kubelet's fixed mode for inline volumes is fine when read-only.
	r := publishReq("vol", target, withAttrs(nil, "store", url), nil)
	r.VolumeCapability.AccessMode.Mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	r.VolumeContext[kubeAttrPrefix+"ephemeral"] = "true"
	if _, err := d.node.NodePublishVolume(t.Context(), r); err != nil {
		t.Errorf("publish of an inline volume (SINGLE_NODE_WRITER, readonly): %v", err)
	}
	unpublish(t, d, "vol", target)
	// A directory with no stream in it: the error quotes lakefs-mount's log.
	empty := "file://" + t.TempDir()
	_, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", empty), nil))
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "no stream") {
		t.Errorf("publish of a directory without a stream: %v, want Internal quoting lakefs-mount's error", err)
	}
	if s, _ := mount.StateOf(t.Context(), target); s != mount.NotMounted {
		t.Errorf("target is mounted after failed publishes")
	}
	assertAllStopped(t, d.stateDir)
	if strings.Contains(d.log.String(), secretValue) {
		t.Errorf("the secret appears in the driver's log")
	}
}

// TestUnpublishAfterMountKilled: after kill -9 of the shared lakefs-mount
// (targets say "transport endpoint is not connected"), unpublish still
// succeeds, a new publish starts a fresh mount that reads, and the last
// unpublish leaves nothing.
func TestUnpublishAfterMountKilled(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	t1, t2, t3 := filepath.Join(pods, "1"), filepath.Join(pods, "2"), filepath.Join(pods, "3")
	cleanupTargets(t, d.stateDir, t1, t2, t3)
	attrs := withAttrs(nil, "store", url)
	for _, tg := range []string{t1, t2} {
		if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", tg, attrs, nil)); err != nil {
			t.Fatal(err)
		}
	}
	killMounts(t, d.stateDir)
	if _, err := os.Stat(filepath.Join(t1, "head")); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat through a target of a killed mount: %v, want ENOTCONN", err)
	}
	unpublish(t, d, "vol", t1)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", t3, attrs, nil)); err != nil {
		t.Fatalf("publish after the shared mount died: %v", err)
	}
	checkFiles(t, t3, step, files)
	unpublish(t, d, "vol", t2)
	unpublish(t, d, "vol", t3)
	assertAllStopped(t, d.stateDir)
}

// killMounts kills -9 every lakefs-mount serving under stateDir.
func killMounts(t *testing.T, stateDir string) {
	t.Helper()
	pids := mountProcs(t, stateDir)
	if len(pids) == 0 {
		t.Fatal("no lakefs-mount to kill")
	}
	for _, pid := range pids {
		start, _ := startTime(pid)
		if err := signalAndWait(t.Context(), procID{PID: pid, Start: start}, syscall.SIGKILL, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentPublish: publishes of one volume at many targets at once
// share one lakefs-mount; concurrent unpublishes stop it once (-race).
func TestConcurrentPublish(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	const n = 6
	var targets []string
	for i := range n {
		targets = append(targets, filepath.Join(pods, fmt.Sprint(i), "mount"))
	}
	cleanupTargets(t, d.stateDir, targets...)
	attrs := withAttrs(nil, "store", url)
	parallel(t, targets, func(tg string) error {
		_, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", tg, attrs, nil))
		return err
	})
	if pids := mountProcs(t, d.stateDir); len(pids) != 1 {
		t.Fatalf("%d lakefs-mount processes after %d concurrent publishes, want 1: %v", len(pids), n, pids)
	}
	checkFiles(t, targets[n-1], step, files)
	parallel(t, targets, func(tg string) error {
		_, err := d.node.NodeUnpublishVolume(context.Background(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: tg})
		return err
	})
	assertAllStopped(t, d.stateDir)
}

func parallel(t *testing.T, targets []string, f func(string) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, tg := range targets {
		wg.Go(func() { errs[i] = f(tg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestNonRootReads: a process of another, unprivileged user (a non-root
// pod) reads a committed file through its target: the shared mount is
// allow_other and the view world-readable.
func TestNonRootReads(t *testing.T) {
	requireFUSE(t)
	url := "file://" + t.TempDir()
	step, files := newStream(t, url)
	d := startDriver(t, t.TempDir())
	pods := t.TempDir()
	// The test's temporary directories are 0700: let uid 1000 walk to the target.
	for _, dir := range []string{filepath.Dir(pods), pods} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(pods, "pod", "mount")
	cleanupTargets(t, d.stateDir, target)
	if _, err := d.node.NodePublishVolume(t.Context(), publishReq("vol", target, withAttrs(nil, "store", url), nil)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cat", filepath.Join(target, "steps", step, "rank-1", "c.bin"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("uid 1000 reading through %s: %v", target, err)
	}
	if !bytes.Equal(out, files["rank-1/c.bin"]) {
		t.Fatalf("uid 1000 read %d bytes that differ from the %d written", len(out), len(files["rank-1/c.bin"]))
	}
	unpublish(t, d, "vol", target)
	assertAllStopped(t, d.stateDir)
}
