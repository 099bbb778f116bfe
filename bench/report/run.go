package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/internal/s3test"
)

// Options configure Run. Zero fields take the defaults named.
type Options struct {
	OutDir  string // where REPORT.md and the PNGs go (default docs/bench)
	BinDir  string // lakefs-produce, lakefs-mount and lakefs-bench (default bin)
	Tools   string // versitygw under Tools/bin (default $LAKEFS_TOOLS, else .tools)
	WorkDir string // scratch space (default a temp dir, removed after)

	Repeats int // runs of every read point (default 3)
	// IngestRepeats: runs of every ingest point (default 2; the grid is
	// large for a 20-minute budget).
	IngestRepeats int
	Duration      time.Duration // measured window of an ingest run (default 1s)
	Producers     []int         // default 1, 4, 16, 32
	Payloads      []int64       // default 64 KiB, 1 MiB, 16 MiB
	Ranks         int           // ranks of the ingest streams (default 4)
	// LongRun is how long each strategy runs in the DAC-over-time section
	// (default 20s, in 1 s windows).
	LongRun time.Duration
	// Sections to run (default all): ingest, dac, read, storage, scale.
	Sections []string
	Log      io.Writer // progress (default stderr)
}

func (o *Options) defaults() error {
	if o.OutDir == "" {
		o.OutDir = filepath.Join("docs", "bench")
	}
	if o.BinDir == "" {
		o.BinDir = "bin"
	}
	if o.Tools == "" {
		o.Tools = os.Getenv("LAKEFS_TOOLS")
	}
	if o.Tools == "" {
		o.Tools = ".tools"
	}
	if o.Repeats == 0 {
		o.Repeats = 3
	}
	if o.IngestRepeats == 0 {
		o.IngestRepeats = 2
	}
	if o.Duration == 0 {
		o.Duration = time.Second
	}
	if len(o.Producers) == 0 {
		o.Producers = []int{1, 4, 16, 32}
	}
	if len(o.Payloads) == 0 {
		o.Payloads = []int64{64 << 10, 1 << 20, 16 << 20}
	}
	if o.Ranks == 0 {
		o.Ranks = 4
	}
	if o.LongRun == 0 {
		o.LongRun = 20 * time.Second
	}
	if len(o.Sections) == 0 {
		o.Sections = []string{"ingest", "dac", "read", "storage", "scale"}
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	for _, b := range []string{"lakefs-produce", "lakefs-mount", "lakefs-bench"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("lakefs-bench report: %s not found in %s; run make build first", b, o.BinDir)
		}
	}
	if _, err := os.Stat(filepath.Join(o.Tools, "bin", "versitygw")); err != nil {
		return fmt.Errorf("lakefs-bench report: versitygw not found under %s/bin; run make tools first", o.Tools)
	}
	return nil
}

// env is what the sections share.
type env struct {
	o       *Options
	s3      *s3test.Server
	work    string
	produce string // path of lakefs-produce
	buckets int
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.o.Log, "[%s] "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// newBucket creates a fresh bucket and returns its name.
func (e *env) newBucket(ctx context.Context, what string) (string, error) {
	e.buckets++
	name := fmt.Sprintf("%s-%d", what, e.buckets)
	return name, e.s3.CreateBucket(ctx, name)
}

// errTimedOut marks a command stopped by its time limit: the rows it
// printed before are kept.
var errTimedOut = errors.New("stopped at its time limit")

// bench runs lakefs-produce with args, at most limit, and returns the
// JSON rows it printed.
func (e *env) bench(ctx context.Context, limit time.Duration, args ...string) ([]Row, error) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(cctx, e.produce, args...)
	cmd.Env = e.s3.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	rows, _ := ParseRows(stdout.Bytes())
	switch {
	case err == nil:
		return rows, nil
	case ctx.Err() != nil:
		return rows, ctx.Err()
	case cctx.Err() != nil:
		return rows, errTimedOut
	}
	return rows, fmt.Errorf("lakefs-produce %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, tail(stderr.String(), 400))
}

// has reports whether this build's lakefs-produce has `bench <sub>`.
func (e *env) has(ctx context.Context, sub string) bool {
	out, _ := exec.CommandContext(ctx, e.produce, "bench", sub, "--help").CombinedOutput()
	return bytes.Contains(out, []byte("--json"))
}

// Run runs the sections and writes the report.
func Run(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	began := time.Now()
	work := o.WorkDir
	if work == "" {
		d, err := os.MkdirTemp("", "lakestream-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		work = d
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	produce, err := filepath.Abs(filepath.Join(o.BinDir, "lakefs-produce"))
	if err != nil {
		return err
	}
	s3dir := filepath.Join(work, "s3")
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		return err
	}
	srv, err := startS3(filepath.Join(o.Tools, "bin", "versitygw"), s3dir)
	if err != nil {
		return err
	}
	defer srv.Stop(syscall.SIGTERM)
	e := &env{o: &o, s3: srv, work: work, produce: produce}
	rep := &Report{Env: describeMachine(ctx, produce, filepath.Join(o.Tools, "bin", "versitygw")), Date: began.UTC()}

	for _, sec := range o.Sections {
		t0 := time.Now()
		e.logf("section %s", sec)
		var err error
		switch sec {
		case "ingest":
			err = e.ingest(ctx, rep)
		case "dac":
			err = e.dacOverTime(ctx, rep)
		case "read":
			err = e.read(ctx, rep)
		case "storage":
			err = e.storage(ctx, rep)
		case "scale":
			err = e.scale(ctx, rep)
		default:
			err = fmt.Errorf("unknown section %q (have ingest, dac, read, storage, scale)", sec)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			// A failing section is reported, not fatal: the others still
			// say something.
			rep.Notes = append(rep.Notes, fmt.Sprintf("Section %s failed: %v", sec, err))
			e.logf("section %s failed: %v", sec, err)
		}
		rep.Elapsed = append(rep.Elapsed, fmt.Sprintf("%s %s", sec, time.Since(t0).Round(time.Second)))
		e.logf("section %s done in %s", sec, time.Since(t0).Round(time.Second))
	}
	rep.Total = time.Since(began).Round(time.Second)
	if err := rep.Write(o.OutDir); err != nil {
		return err
	}
	e.logf("wrote %s in %s", filepath.Join(o.OutDir, "REPORT.md"), rep.Total)
	return nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return strings.ReplaceAll(s, "\n", " / ")
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// startS3 starts the report's versitygw (bin) with its data under dir and
// its log beside dir: a line per upload that a finished run cuts short
// stays out of the progress output.
func startS3(bin, dir string) (*s3test.Server, error) {
	lf, err := os.Create(filepath.Join(filepath.Dir(dir), "versitygw.log"))
	if err != nil {
		return nil, err
	}
	// The server holds its own copy of the descriptor.
	defer lf.Close()
	return s3test.Launch(s3test.LaunchOptions{Bin: bin, Dir: dir,
		AccessKey: "lakestream-bench", SecretKey: "lakestream-bench-secret", Log: lf})
}
