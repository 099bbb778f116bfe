package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// mntPython is Debian's interpreter, which sees python3-torch; the python3
// on PATH may be another one.
const mntPython = "/usr/bin/python3"

func mntRequirePython(t testing.TB, modules ...string) {
	t.Helper()
	args := []string{"-c", "import " + strings.Join(append([]string{"json"}, modules...), ", ")}
	out, err := exec.Command(mntPython, args...).CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s cannot import %v (%v: %s); install them with: apt-get install -y python3-torch", mntPython, modules, err, bytes.TrimSpace(out))
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// mntFileRecord is one line of the Python scripts' output.
type mntFileRecord struct {
	Step   int64  `json:"step"`
	Path   string `json:"path"`
	Size   int    `json:"size"`
	MD5    string `json:"md5"`
	Memmap bool   `json:"memmap"`
}

// mntExpectedRecords is what reading rank's files of steps [first,
// first+count) must give, in the scripts' order (step, then path).
func mntExpectedRecords(t testing.TB, p *mntProducer, first, count int64, rank int) []mntFileRecord {
	t.Helper()
	var recs []mntFileRecord
	for s := first; s < first+count; s++ {
		p.mu.Lock()
		batch := p.steps[s]
		files := p.specs[batch].files[rank]
		p.mu.Unlock()
		if batch == "" {
			t.Fatalf("step %d was not produced", s)
		}
		for name, size := range files {
			sum := md5.Sum(mntContent(batch, rank, name, size))
			recs = append(recs, mntFileRecord{Step: s, Path: name, Size: size, MD5: hex.EncodeToString(sum[:])})
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Step != recs[j].Step {
			return recs[i].Step < recs[j].Step
		}
		return recs[i].Path < recs[j].Path
	})
	return recs
}

func mntParseRecords(t testing.TB, out []byte) (files, memmaps []mntFileRecord, workers int) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			mntFileRecord
			Workers int `json:"workers"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		switch {
		case r.Workers > 0:
			workers = r.Workers
		case r.Memmap:
			memmaps = append(memmaps, r.mntFileRecord)
		default:
			files = append(files, r.mntFileRecord)
		}
	}
	return files, memmaps, workers
}

// TestMountPythonReader: a plain Python script, opening
// steps/{step}/rank-{r}/... in order with no polling code, reads 200 steps
// while they are being produced (the mount's --wait makes it wait for
// each), and gets exactly the produced bytes. Then ls, find, cat, md5sum
// and du behave on the same mount.
func TestMountPythonReader(t *testing.T) {
	mntRequireFUSE(t)
	mntRequirePython(t, "hashlib", "os")
	const steps, rank = 200, 1
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 16 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 24<<10, 7)
	mnt, info := mntMountInProcess(t, mount.Options{Store: url, Wait: time.Minute, PrefetchSteps: 2, PollInterval: 10 * time.Millisecond})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mntPython, "testdata/mount_reader.py", mnt, "0", strconv.Itoa(steps), strconv.Itoa(rank))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Produce in bursts, so that the reader both waits for steps and finds
	// some already there.
	for i := 0; i < steps; i += 10 {
		var waits []func() (int64, error)
		for k := i; k < i+10; k++ {
			w, err := p.append(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, w)
		}
		for _, w := range waits {
			if _, err := w(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reader: %v\n%s", err, stderr.String())
	}
	got, _, _ := mntParseRecords(t, stdout.Bytes())
	want := mntExpectedRecords(t, p, 0, steps, rank)
	if !slices.Equal(got, want) {
		t.Fatalf("the reader got %d records, want %d; first difference: %s", len(got), len(want), mntFirstDiff(got, want))
	}
	st := info.Stats()
	t.Logf("read %d files of %d steps; cache: %d hits, %d misses, %d bytes fetched for %d served",
		len(got), steps, st.Hits, st.Misses, st.BytesFetched, st.BytesServed)

	t.Run("shell tools", func(t *testing.T) {
		sh := func(args ...string) string {
			t.Helper()
			// The shell changes into the mount after exec: a chdir into a
			// mount this process serves, between fork and exec, can
			// deadlock (go-fuse's package doc, "Deadlocks" 1a).
			cmd := exec.Command("sh", append([]string{"-c", `cd "$0" && exec "$@"`, mnt}, args...)...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			return string(out)
		}
		var nums []string
		for s := range steps {
			nums = append(nums, strconv.Itoa(s))
		}
		if got := sh("ls", "-U", "steps"); got != strings.Join(nums, "\n")+"\n" {
			t.Errorf("ls -U steps is not 0..199 in numeric order: %.80q...", got)
		}
		if got := sh("cat", "head"); got != "199\n" {
			t.Errorf("cat head = %q", got)
		}
		spec := p.specsOf(7)
		batch := p.steps[7]
		var files []string
		var total, blocks int
		for r, fs := range spec {
			for name, size := range fs {
				path := "steps/7/" + name
				if r >= 0 {
					path = fmt.Sprintf("steps/7/rank-%d/%s", r, name)
				}
				files = append(files, path)
				total += size
				blocks += (size + 511) / 512 * 512
				if got := sh("cat", path); got != string(mntContent(batch, r, name, size)) {
					t.Errorf("cat %s differs from the produced bytes", path)
				}
				sum := md5.Sum(mntContent(batch, r, name, size))
				if got := sh("md5sum", path); got != hex.EncodeToString(sum[:])+"  "+path+"\n" {
					t.Errorf("md5sum %s = %q", path, got)
				}
			}
		}
		sort.Strings(files)
		found := strings.Fields(sh("find", "steps/7", "-type", "f"))
		sort.Strings(found)
		if !slices.Equal(found, files) {
			t.Errorf("find steps/7 -type f = %v, want %v", found, files)
		}
		if got := sh("du", "-sb", "steps/7"); got != fmt.Sprintf("%d\tsteps/7\n", total) {
			t.Errorf("du -sb steps/7 = %q, want %d bytes", got, total)
		}
		if got := sh("du", "-s", "--block-size=1", "steps/7"); got != fmt.Sprintf("%d\tsteps/7\n", blocks) {
			t.Errorf("du -s steps/7 = %q, want %d bytes of blocks", got, blocks)
		}
		if got := sh("ls", "-l", "steps/7/rank-0/sample-00.bin"); !strings.HasPrefix(got, "-r--r--r-- 1 root root "+strconv.Itoa(spec[0]["sample-00.bin"])+" ") {
			t.Errorf("ls -l = %q", got)
		}
	})
}

func mntFirstDiff(got, want []mntFileRecord) string {
	for i := range max(len(got), len(want)) {
		var g, w mntFileRecord
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("record %d: got %+v, want %+v", i, g, w)
		}
	}
	return "none"
}

// TestMountPyTorch: PyTorch's DataLoader with 4 forked workers reads a
// map-style dataset of step files over the mount, and np.memmap maps step
// files; both get exactly the produced bytes. On every store kind.
func TestMountPyTorch(t *testing.T) {
	mntRequireFUSE(t)
	mntRequirePython(t, "torch", "numpy")
	for _, b := range mntBackends(t) {
		t.Run(b.name, func(t *testing.T) { mntPyTorch(t, b.url(t)) })
	}
}

func mntPyTorch(t *testing.T, url string) {
	const steps, rank = 20, 0
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 300<<10, 3)
	p.addN(t, steps)
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, PrefetchSteps: 2})
	waitFor(t, 5*time.Second, "all steps", func() bool {
		_, err := os.Stat(filepath.Join(mnt, "steps", strconv.Itoa(steps-1)))
		return err == nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mntPython, "testdata/mount_torch.py", mnt, "0", strconv.Itoa(steps), strconv.Itoa(rank), "4")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mount_torch.py: %v\n%s", err, stderr.String())
	}
	files, memmaps, workers := mntParseRecords(t, out)
	want := mntExpectedRecords(t, p, 0, steps, rank)
	if !slices.Equal(files, want) {
		t.Fatalf("DataLoader got %d records, want %d; first difference: %s", len(files), len(want), mntFirstDiff(files, want))
	}
	if workers != 4 {
		t.Errorf("items came from %d worker processes, want 4", workers)
	}
	var wantMM []mntFileRecord
	for _, r := range want {
		if r.Path == "sample-00.bin" {
			r.Memmap = true
			wantMM = append(wantMM, r)
		}
	}
	if !slices.Equal(memmaps, wantMM) {
		t.Fatalf("np.memmap got %v, want %v", memmaps, wantMM)
	}
}
