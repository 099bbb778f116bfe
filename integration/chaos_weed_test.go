package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/s3test"
)

// chaosWeed is a SeaweedFS `weed server` (master, volume, filer and S3
// gateway in one process) on 127.0.0.1: the soak's second S3
// implementation. scripts/seaweedfs.sh installs it (make soak runs it).
type chaosWeed struct {
	bin, dir, cfg string
	ports         [4]int // master, volume, filer, s3 (each also uses port+10000 for gRPC)
	endpoint      string

	mu  sync.Mutex
	cmd *exec.Cmd // GUARDED_BY(mu); nil while stopped
}

func (*chaosWeed) Name() string { return "seaweedfs" }

// chaosStartWeed starts weed, which the soak requires: missing, it is a
// failure with the install command, never a skip.
func chaosStartWeed(t testing.TB) *chaosWeed {
	t.Helper()
	bin := filepath.Join(os.Getenv("LAKEFS_TOOLS"), "bin", "weed")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("weed"); err != nil {
			t.Fatalf("the soak needs SeaweedFS's weed: run scripts/seaweedfs.sh (make soak does)")
		}
	}
	// The run's processes reach it with the environment's credentials;
	// the versitygw run before it set them only for itself.
	s3test.SetEnv(t, s3test.AccessKey, s3test.SecretKey)
	w := &chaosWeed{bin: bin, dir: t.TempDir(), cfg: filepath.Join(t.TempDir(), "s3.json")}
	cfg := fmt.Sprintf(`{"identities":[{"name":"lakestream","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		s3test.AccessKey, s3test.SecretKey)
	if err := os.WriteFile(w.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range w.ports {
		w.ports[i] = chaosFreePortPair(t)
	}
	w.endpoint = fmt.Sprintf("http://127.0.0.1:%d", w.ports[3])
	if err := w.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(syscall.SIGTERM) })
	return w
}

// chaosFreePortPair finds a free port p whose gRPC twin p+10000 is free too.
func chaosFreePortPair(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+10000 > 65535 {
			continue
		}
		if l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000)); err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no free port pair for weed")
	return 0
}

func (w *chaosWeed) Restart() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		return fmt.Errorf("weed is running")
	}
	cmd := exec.Command(w.bin, "server", "-dir="+w.dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+strconv.Itoa(w.ports[0]), "-volume.port="+strconv.Itoa(w.ports[1]),
		"-filer.port="+strconv.Itoa(w.ports[2]), "-s3", "-s3.port="+strconv.Itoa(w.ports[3]),
		"-s3.config="+w.cfg, "-volume.max=0", "-master.volumeSizeLimitMB=256")
	log, err := os.OpenFile(filepath.Join(w.dir, "weed.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting weed: %w", err)
	}
	w.cmd = cmd
	// Ready when the S3 gateway lists buckets (the filer and a volume must
	// be up behind it).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		if _, err := w.Client().ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("weed S3 gateway on %s not ready in 90s (log: %s)", w.endpoint, filepath.Join(w.dir, "weed.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *chaosWeed) Stop(sig syscall.Signal) {
	w.mu.Lock()
	cmd := w.cmd
	w.cmd = nil
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (w *chaosWeed) Client() *s3.Client {
	return s3test.NewClient(w.endpoint, s3test.AccessKey, s3test.SecretKey)
}

func (w *chaosWeed) NewBucketURL(t testing.TB) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "chaos-" + hex.EncodeToString(rnd[:])
	if _, err := w.Client().CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s on weed: %v", name, err)
	}
	return fmt.Sprintf("s3://%s/stream?endpoint=%s&path-style=true&region=%s", name, w.endpoint, s3test.Region)
}
