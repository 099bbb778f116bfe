package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/longtest"
)

// exRecord is one line of examples/train.py's output.
type exRecord struct {
	Rank       *int    `json:"rank"`
	Step       int64   `json:"step"`
	Loss       float64 `json:"loss"`
	IDs        []int64 `json:"ids"`
	T          float64 `json:"t"`
	ResumeFrom *int64  `json:"resume_from"`
}

// exJob is a Python process group (train.py spawns ranks and DataLoader
// workers, so kill -9 goes to the whole group).
type exJob struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (j *exJob) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.Write(p)
}

func (j *exJob) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

func exStart(t testing.TB, name string, args ...string) *exJob {
	t.Helper()
	j := &exJob{done: make(chan struct{})}
	j.cmd = exec.Command(name, args...)
	j.cmd.Stdout, j.cmd.Stderr = j, j
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.done) }()
	t.Cleanup(j.kill)
	return j
}

func (j *exJob) kill() {
	_ = syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
	<-j.done
}

// exStopMount ends a lakefs-mount process with SIGTERM, so it unmounts
// (kill -9 would leave a dead mount the temp dir cleanup cannot remove).
func exStopMount(j *exJob, mnt string) {
	_ = syscall.Kill(j.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
}

func (j *exJob) records(t testing.TB) []exRecord {
	t.Helper()
	var recs []exRecord
	sc := bufio.NewScanner(strings.NewReader(j.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r exRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("train.py line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func exExamples(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "examples")
}

const (
	exRanks   = 4
	exPerRank = 8
	exSteps   = 16
)

// TestExampleTraining runs the examples end to end with real processes and
// a kernel mount: writer.py -> lakefs-produce run -> lakefs-mount --wait
// --checkpoint-dir -> train.py (4-rank DDP). The producer is killed with -9
// mid-run and restarted, and training keeps going; the training job is
// killed after a checkpoint and resumes reading exactly the steps after it,
// each sample once; the loss goes down; gc reclaims behind the checkpoints.
func TestExampleTraining(t *testing.T) {
	longtest.Skip(t, "the example training run end to end")
	mntRequireFUSE(t)
	mntRequirePython(t, "torch")
	produce, _ := prdBins(t)
	mountBin := mntBuildMount(t)
	ex := exExamples(t)
	dir := t.TempDir()
	url := "file://" + filepath.Join(dir, "store")
	staging, mnt, ckpt := filepath.Join(dir, "staging"), filepath.Join(dir, "mnt"), filepath.Join(dir, "ckpt")
	for _, d := range []string{filepath.Join(dir, "store"), staging, mnt, ckpt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prdMust(t, produce, "init", "--store", url, "--ranks", fmt.Sprint(exRanks))
	writer := exStart(t, mntPython, filepath.Join(ex, "writer.py"), "--staging", staging, "--ranks", fmt.Sprint(exRanks),
		"--steps", fmt.Sprint(exSteps), "--per-rank", fmt.Sprint(exPerRank), "--interval", "0.3")
	prdArgs := []string{"--gc-every", "1s", "--gc-grace", "0s"}
	p, err := prdStart(produce, url, staging, "ex-0", prdArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill() })
	mount := exStart(t, mountBin, "--store", url, "--wait", "2m", "--cache-size", "32MiB", "--checkpoint-dir", ckpt, mnt)
	t.Cleanup(func() { exStopMount(mount, mnt) })
	waitFor(t, 30*time.Second, "the mount", func() bool { _, err := os.Stat(filepath.Join(mnt, "head")); return err == nil })

	trainArgs := []string{filepath.Join(ex, "train.py"), "--mount", mnt, "--ranks", fmt.Sprint(exRanks),
		"--steps", fmt.Sprint(exSteps), "--per-rank", fmt.Sprint(exPerRank), "--ckpt-dir", ckpt, "--ckpt-every", "4",
		"--port", fmt.Sprint(29000 + os.Getpid()%1000), "--step-sleep", "0.1"}
	job := exStart(t, mntPython, trainArgs...)
	rank0 := func(j *exJob) []exRecord {
		var out []exRecord
		for _, r := range j.records(t) {
			if r.Rank != nil && *r.Rank == 0 {
				out = append(out, r)
			}
		}
		return out
	}
	// kill -9 the producer once training is under way, restart it.
	waitFor(t, 2*time.Minute, "training to reach step 2", func() bool { return len(rank0(job)) >= 3 })
	p.kill()
	t.Logf("killed the producer (-9) at training step %d", len(rank0(job))-1)
	time.Sleep(time.Second)
	if p, err = prdStart(produce, url, staging, "ex-0", prdArgs...); err != nil {
		t.Fatal(err)
	}
	// kill -9 the training job once it has checkpointed step count 8.
	tracker := filepath.Join(ckpt, "latest_checkpointed_iteration.txt")
	waitFor(t, 2*time.Minute, "checkpoint 8", func() bool {
		b, _ := os.ReadFile(tracker)
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n >= 8
	})
	job.kill()
	first := rank0(job)
	var stall float64
	for i := 1; i < len(first); i++ {
		stall = max(stall, first[i].T-first[i-1].T)
	}
	t.Logf("lakestream: producer killed -9 and restarted; training never stopped, longest stall between steps %.2fs", stall)

	// The same job restarted on half the GPUs: a second node's mount shows
	// the 4-rank stream as 2 ranks (--view-ranks 2), and 2 ranks resume
	// from a copy of the checkpoint. Together they read every sample of
	// every step after it, each once. (Before the 4-rank restart: its
	// later checkpoints let gc reclaim the steps this one reads.)
	half := exHalfResume(t, mountBin, url, ckpt, dir, trainArgs)

	job2 := exStart(t, mntPython, trainArgs...)
	select {
	case <-job2.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the resumed training did not finish; output:\n%s", job2.output())
	}
	if job2.err != nil {
		t.Fatalf("resumed training: %v\n%s", job2.err, job2.output())
	}
	resume, steps, seen := exResumed(job2.records(t))
	if resume < 8 {
		t.Fatalf("resumed from %d, want the checkpoint >= 8", resume)
	}
	for s := resume; s < exSteps; s++ {
		if steps[s] != exRanks {
			t.Errorf("step %d read by %d ranks after resume, want %d", s, steps[s], exRanks)
		}
		for r := int64(0); r < exRanks; r++ {
			for i := int64(0); i < exPerRank; i++ {
				if id := (s*exRanks+r)*exPerRank + i; seen[id] != 1 {
					t.Errorf("sample %d (step %d rank %d) read %d times after resume, want once", id, s, r, seen[id])
				}
			}
		}
	}
	if len(steps) != int(exSteps-resume) {
		t.Errorf("resumed job read steps %v, want exactly %d..%d", steps, resume, exSteps-1)
	}
	t.Logf("exact resume: restarted from checkpoint %d, read steps %d..%d, %d samples each once", resume, resume, exSteps-1, len(seen))
	t.Logf("half-rank resume (--view-ranks 2, 2 ranks): restarted from checkpoint %d, read steps %d..%d, %d samples each once", half, half, exSteps-1, (exSteps-half)*exRanks*exPerRank)

	all := append(first, rank0(job2)...)
	mean := func(rs []exRecord) float64 {
		var s float64
		for _, r := range rs {
			s += r.Loss
		}
		return s / float64(len(rs))
	}
	if lo, hi := mean(all[len(all)-4:]), mean(all[:4]); lo >= hi {
		t.Errorf("the loss did not go down: first 4 steps %.3f, last 4 %.3f", hi, lo)
	} else {
		t.Logf("loss: first 4 steps %.3f -> last 4 steps %.3f", hi, lo)
	}
	<-writer.done
	waitFor(t, time.Minute, "gc to reclaim behind checkpoint 8", func() bool {
		st := prdGetStatus(t, produce, url)
		return st.Live.From != nil && *st.Live.From >= 8
	})
	t.Logf("gc reclaimed the steps behind the checkpoints during the run")
}

// TestExampleColocatedWorkerKill is the baseline: the same training with
// the transform inside colocated DataLoader workers. Killing one worker
// kills the training job.
func TestExampleColocatedWorkerKill(t *testing.T) {
	longtest.Skip(t, "the colocated example with a killed DataLoader worker")
	mntRequirePython(t, "torch")
	pids := t.TempDir()
	job := exStart(t, mntPython, filepath.Join(exExamples(t), "train.py"), "--colocated", "--ranks", fmt.Sprint(exRanks),
		"--steps", "200", "--per-rank", fmt.Sprint(exPerRank), "--pid-dir", pids, "--step-sleep", "0.1",
		"--port", fmt.Sprint(30000+os.Getpid()%1000))
	var worker int
	waitFor(t, 2*time.Minute, "a DataLoader worker", func() bool {
		ents, _ := os.ReadDir(pids)
		for _, e := range ents {
			if _, err := fmt.Sscanf(e.Name(), "worker-0-%d", &worker); err == nil {
				return true
			}
		}
		return false
	})
	waitFor(t, 2*time.Minute, "training to start", func() bool { return len(job.records(t)) >= 3 })
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-job.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("training went on after its DataLoader worker was killed")
	}
	if job.err == nil {
		t.Fatalf("training exited 0 after its DataLoader worker was killed")
	}
	out := job.output()
	if !strings.Contains(out, "DataLoader worker") {
		t.Errorf("expected PyTorch's DataLoader worker error; output:\n%s", out[max(0, len(out)-3000):])
	}
	t.Logf("colocated baseline: kill -9 of one DataLoader worker killed the training job (%v)", job.err)
}

// exHalfResume restarts the training on 2 ranks, from a copy of the
// checkpoint in ckpt, over a --view-ranks 2 mount of the stream, runs it
// to the end and checks that it read every sample of every step after the
// checkpoint exactly once (all 4 original ranks' samples, 2 ranks each
// reading two). It returns the step it resumed from.
func exHalfResume(t *testing.T, mountBin, url, ckpt, dir string, trainArgs []string) int64 {
	t.Helper()
	mnt2, ckpt2 := filepath.Join(dir, "mnt-half"), filepath.Join(dir, "ckpt-half")
	if err := os.MkdirAll(mnt2, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", ckpt, ckpt2).CombinedOutput(); err != nil {
		t.Fatalf("copying the checkpoint: %v %s", err, out)
	}
	m := exStart(t, mountBin, "--store", url, "--wait", "2m", "--cache-size", "32MiB", "--view-ranks", "2", "--node-id", "half", mnt2)
	defer exStopMount(m, mnt2)
	waitFor(t, 30*time.Second, "the half-rank mount", func() bool { _, err := os.Stat(filepath.Join(mnt2, "head")); return err == nil })
	args := slices.Clone(trainArgs)
	for i := range args {
		switch {
		case i > 0 && args[i-1] == "--mount":
			args[i] = mnt2
		case i > 0 && args[i-1] == "--ranks":
			args[i] = "2"
		case i > 0 && args[i-1] == "--ckpt-dir":
			args[i] = ckpt2
		case i > 0 && args[i-1] == "--port":
			args[i] = fmt.Sprint(30000 + os.Getpid()%1000)
		}
	}
	job := exStart(t, mntPython, args...)
	select {
	case <-job.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the half-rank training did not finish; output:\n%s", job.output())
	}
	if job.err != nil {
		t.Fatalf("half-rank training: %v\n%s", job.err, job.output())
	}
	resume, steps, seen := exResumed(job.records(t))
	if resume < 8 {
		t.Fatalf("half-rank job resumed from %d, want the checkpoint >= 8", resume)
	}
	for s := resume; s < exSteps; s++ {
		if steps[s] != 2 {
			t.Errorf("half-rank job: step %d read by %d ranks, want 2", s, steps[s])
		}
		for i := s * exRanks * exPerRank; i < (s+1)*exRanks*exPerRank; i++ {
			if seen[i] != 1 {
				t.Errorf("half-rank job: sample %d (step %d) read %d times, want once", i, s, seen[i])
			}
		}
	}
	if len(seen) != int((exSteps-resume)*exRanks*exPerRank) || len(steps) != int(exSteps-resume) {
		t.Errorf("half-rank job read %d samples over steps %v, want exactly the %d of steps %d..%d", len(seen), steps, (exSteps-resume)*exRanks*exPerRank, resume, exSteps-1)
	}
	return resume
}

// exResumed reads a restarted job's records: the checkpoint it resumed
// from (-1: none said), how many ranks read each step, and how many times
// each sample id was read.
func exResumed(recs []exRecord) (resume int64, steps, seen map[int64]int) {
	resume, steps, seen = -1, map[int64]int{}, map[int64]int{}
	for _, r := range recs {
		if r.ResumeFrom != nil {
			resume = *r.ResumeFrom
		}
		if r.Rank != nil {
			steps[r.Step]++
			for _, id := range r.IDs {
				seen[id]++
			}
		}
	}
	return resume, steps, seen
}
