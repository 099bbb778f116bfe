package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/txn"
)

// Distinctive credentials: any of these strings in an output, a log line,
// a metric or a stored object is a leak.
const (
	secAccess   = "AKIALEAKCANARY7Q3Z"
	secSecret   = "sEcReTcAnArY-9f8e7d6c5b4a-DoNotPrint"
	secWrongKey = "wRoNgCaNaRy-1a2b3c4d-DoNotPrint"
)

// TestSecurityNoCredentialLeak runs every command with credentials from
// the environment, then from a shared credentials file, with a wrong secret,
// and with credentials put in the store URL (refused), and greps every
// output, log line (the mount's at debug level), /metrics of the producer
// and the mount, and every object in the bucket (heartbeats, log,
// snapshots, data) for them. Metrics given only a port listen on
// 127.0.0.1.
func TestSecurityNoCredentialLeak(t *testing.T) {
	mntRequireFUSE(t)
	bin, writer := prdBins(t)
	mountBin := mntBuildMount(t)
	srv := s3test.StartWithCredentials(t, secAccess, secSecret)
	url := srv.NewBucketURL(t)
	root := t.TempDir()
	var outputs []string // everything to grep, with where it came from
	keep := func(where, s string) { outputs = append(outputs, where+"\x00"+s) }
	run := func(where string, env []string, args ...string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), prdCmdTimeout)
		defer cancel()
		cmd, out, errb := prdCommand(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		err := cmd.Run()
		keep(where, out.String()+errb.String())
		if err != nil {
			if cmd.ProcessState == nil {
				t.Fatalf("%s: %v", where, err)
			}
			return cmd.ProcessState.ExitCode()
		}
		return 0
	}
	must := func(where string, env []string, args ...string) {
		t.Helper()
		if code := run(where, env, args...); code != 0 {
			t.Fatalf("%s: exit %d\n%s", where, code, outputs[len(outputs)-1])
		}
	}

	// Credentials from the environment (s3test set them).
	must("init", nil, "init", "--store", url, "--ranks", "2")
	staging := filepath.Join(root, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	prdWrite(t, writer, filepath.Join(root, "m.jsonl"), map[string]string{"p0": staging}, 0, 5)

	// A producer serving metrics on a bare port, scraped while it waits.
	port := freeAddr(t)
	_, p, _ := strings.Cut(port, ":")
	pr, err := prdStart(bin, url, staging, "p0", "--metrics-addr", ":"+p, "--verbose")
	if err != nil {
		t.Fatal(err)
	}
	if !within(time.Minute, func() bool { left, err := prdSealed(staging); return err == nil && len(left) == 0 }) {
		pr.kill()
		t.Fatalf("producer did not commit 5 batches in a minute:\n%s", pr.tail())
	}
	keep("producer /metrics", secScrape(t, "127.0.0.1:"+p))
	secCheckLoopbackOnly(t, p)
	pr.kill()
	keep("producer log", pr.stderr.String())

	// A mount at debug level with metrics on a bare port; read everything.
	mnt := filepath.Join(root, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mport := freeAddr(t)
	_, mp, _ := strings.Cut(mport, ":")
	m := mntStartMount(t, mountBin, "--store", url, "--debug", "--metrics-addr", ":"+mp, "--node-id", "sec-node",
		"--heartbeat-interval", "200ms", mnt)
	mntWaitMounted(t, m, mnt)
	err = filepath.WalkDir(filepath.Join(mnt, "steps"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		_, err = mntReadFile(path)
		return err
	})
	if err != nil {
		t.Fatalf("reading the mount: %v", err)
	}
	time.Sleep(time.Second) // a heartbeat or two after the reads
	keep("mount /metrics", secScrape(t, "127.0.0.1:"+mp))
	secCheckLoopbackOnly(t, mp)

	// The other commands, credentials from a shared credentials file.
	creds := filepath.Join(root, "credentials")
	if err := os.WriteFile(creds, []byte(fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", secAccess, secSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	fileEnv := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SHARED_CREDENTIALS_FILE=" + creds}
	must("status (file)", fileEnv, "status", "--store", url)
	must("status --json (file)", fileEnv, "status", "--store", url, "--json")
	must("checkpoint (file)", fileEnv, "checkpoint", "--store", url, "--step", "1")
	must("gc (file)", fileEnv, "gc", "--store", url, "--grace", "0s")
	must("verify (file)", fileEnv, "verify", "--store", url)

	// A wrong secret fails, without printing either secret.
	wrongEnv := []string{"AWS_SECRET_ACCESS_KEY=" + secWrongKey}
	if code := run("status (wrong secret)", wrongEnv, "status", "--store", url); code == 0 {
		t.Errorf("status with a wrong secret exited 0")
	}
	// Credentials in the URL are refused, and not echoed.
	inURL := strings.Replace(url, "s3://", "s3://"+secAccess+":"+secWrongKey+"@", 1)
	if code := run("status (credentials in URL)", nil, "status", "--store", inURL); code != 2 {
		t.Errorf("status with credentials in the URL: exit %d, want 2 (usage)", code)
	}
	if !strings.Contains(outputs[len(outputs)-1], "carries credentials") {
		t.Errorf("credentials in the URL: want a message saying so, got %q", outputs[len(outputs)-1])
	}
	secretQuery := url + "&secret=" + secWrongKey
	if code := run("status (secret query parameter)", nil, "status", "--store", secretQuery); code != 2 {
		t.Errorf("status with an unknown query parameter: exit %d, want 2", code)
	}
	if code := exec.Command(mountBin, "--store", inURL, filepath.Join(root, "nomnt")).Run(); code == nil {
		t.Errorf("lakefs-mount with credentials in the URL started")
	}
	mout, _ := exec.Command(mountBin, "--store", inURL, mnt).CombinedOutput()
	keep("lakefs-mount (credentials in URL)", string(mout))

	// Every object in the bucket, the live mount's heartbeat included.
	bucket := strings.SplitN(strings.TrimPrefix(url, "s3://"), "/", 2)[0]
	c := srv.Client()
	pg := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	heartbeats := 0
	for pg.HasMorePages() {
		page, err := pg.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if strings.Contains(key, "_consumers/") {
				heartbeats++
			}
			r, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r.Body)
			r.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			keep("object "+key, string(b))
		}
	}
	if heartbeats == 0 {
		t.Errorf("no heartbeat object found under _consumers/: the test checked none")
	}
	// After the scan: a mount that stops cleanly deletes its heartbeat.
	_ = m.cmd.Process.Signal(os.Interrupt)
	m.wait(t, 30*time.Second)
	keep("mount log", m.stderr.String())

	for _, o := range outputs {
		where, text, _ := strings.Cut(o, "\x00")
		for _, secret := range []string{secAccess, secSecret, secWrongKey} {
			if strings.Contains(text, secret) {
				i := strings.Index(text, secret)
				t.Errorf("%s contains the credential %q: ...%s...", where, secret, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	t.Logf("grepped %d outputs, logs, metrics pages and objects (%d heartbeats)", len(outputs), heartbeats)
}

// secScrape is addr's metrics page, which must hold lakefs_ metrics: a
// grep of an empty page for credentials would prove nothing.
func secScrape(t testing.TB, addr string) string {
	t.Helper()
	page := scrape(t, addr)
	if !strings.Contains(page, "lakefs_") {
		t.Errorf("%s/metrics has no lakefs_ metric", addr)
	}
	return page
}

// secCheckLoopbackOnly: a listener given only a port answers on 127.0.0.1
// and not on the machine's other addresses.
func secCheckLoopbackOnly(t testing.TB, port string) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		checked++
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), port), time.Second)
		if err == nil {
			c.Close()
			t.Errorf("metrics given --metrics-addr :%s answer on %s: want 127.0.0.1 only", port, ipn.IP)
		}
	}
	if checked == 0 {
		t.Logf("no non-loopback IPv4 address on this machine: checked that metrics answer on 127.0.0.1 only")
	}
}

// TestSecurityAllowOther: without --allow-other another user is denied the
// mount (even reading head); with it, the same user reads it. The mount is
// root's, the other user is nobody (runuser).
func TestSecurityAllowOther(t *testing.T) {
	mntRequireFUSE(t)
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Fatalf("runuser (util-linux) is needed to act as another user: %v", err)
	}
	mountBin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	p := mntNewProducer(t, newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 0, SnapshotEvery: 10}), "p", 4096, 1)
	p.addN(t, 2)
	// nobody must be able to reach the mount point itself.
	dir, err := os.MkdirTemp("", "lakestream-allow-other-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(mnt string) (string, error) {
		out, err := exec.Command("runuser", "-u", "nobody", "--", "cat", filepath.Join(mnt, "head")).CombinedOutput()
		return string(out), err
	}
	for _, allow := range []bool{false, true} {
		mnt := filepath.Join(dir, fmt.Sprintf("mnt-%v", allow))
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"--store", url, mnt}
		if allow {
			args = append([]string{"--allow-other"}, args...)
		}
		m := mntStartMount(t, mountBin, args...)
		mntWaitMounted(t, m, mnt)
		out, err := asNobody(mnt)
		switch {
		case !allow && (err == nil || !strings.Contains(out, "Permission denied")):
			t.Errorf("without --allow-other, nobody read the mount (err %v): %s", err, out)
		case allow && (err != nil || strings.TrimSpace(out) != "1"):
			t.Errorf("with --allow-other, nobody could not read head (want 1): %v: %s", err, out)
		}
		_ = m.cmd.Process.Signal(os.Interrupt)
		if code := m.wait(t, 30*time.Second); code != 0 {
			t.Errorf("lakefs-mount exit %d:\n%s", code, m.stderr)
		}
	}
}
