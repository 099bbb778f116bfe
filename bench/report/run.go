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

	"github.com/lakestream/lakestream/bench"
	"github.com/lakestream/lakestream/internal/s3test"
)

// Options configure Run. Zero fields take the defaults named. They are
// saved in rows.json, so a report re-rendered from it says how it was
// measured.
type Options struct {
	OutDir  string `json:"-"` // where REPORT.md, rows.json and the PNGs go (default docs/bench)
	BinDir  string `json:"-"` // lakefs-produce, lakefs-mount and lakefs-bench (default bin)
	Tools   string `json:"-"` // versitygw under Tools/bin (default $LAKEFS_TOOLS, else .tools)
	WorkDir string `json:"-"` // scratch space (default a temp dir, removed after)
	// From re-renders the report from a rows.json instead of measuring.
	From string `json:"-"`
	// DryRun prints the plan and its projected duration, and measures
	// nothing.
	DryRun bool `json:"-"`

	Repeats int // runs of every read point (default 3)
	// Windows: back-to-back measured windows of every ingest point, after
	// an uncounted warm-up (default 3).
	Windows int
	// Window is the shortest measured window of an ingest point (default
	// 5s); points whose commits take longer get longer ones (ingestWindow).
	Window    time.Duration
	Producers []int   // default 1, 4, 16, 32
	Payloads  []int64 // default 64 KiB, 1 MiB, 16 MiB
	Ranks     int     // ranks of the ingest streams (default 4)
	// Stores of the ingest grid (default s3, file, file+50ms).
	Stores []string
	// LongRun is how long each strategy runs in the DAC-over-time section
	// (default 20s, in 1 s windows).
	LongRun time.Duration
	// LatencySteps: steps each consumer-latency run commits (default 60).
	LatencySteps int
	// CostWindow is the measured window of the scale-and-cost run
	// (default 60s).
	CostWindow time.Duration
	// Quick shrinks the scale section's parameters and marks the report
	// as a quick run (make bench-quick), not one to commit.
	Quick bool
	// Sections to run (default all): ingest, dac, latency, read, storage,
	// scale, cost.
	Sections []string
	Log      io.Writer `json:"-"` // progress (default stderr)
}

// allSections are the report's sections in order.
var allSections = []string{"ingest", "dac", "latency", "read", "storage", "scale", "cost"}

func (o *Options) defaults() error {
	o.fill()
	if o.From != "" || o.DryRun {
		return nil
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

// fill sets the defaults of the zero fields.
func (o *Options) fill() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.OutDir, filepath.Join("docs", "bench"))
	def(&o.BinDir, "bin")
	def(&o.Tools, os.Getenv("LAKEFS_TOOLS"))
	def(&o.Tools, ".tools")
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defInt(&o.Repeats, 3)
	defInt(&o.Windows, 3)
	defInt(&o.Ranks, 4)
	defInt(&o.LatencySteps, 60)
	defDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defDur(&o.Window, 5*time.Second)
	defDur(&o.LongRun, 20*time.Second)
	defDur(&o.CostWindow, 60*time.Second)
	if len(o.Producers) == 0 {
		o.Producers = []int{1, 4, 16, 32}
	}
	if len(o.Payloads) == 0 {
		o.Payloads = []int64{64 << 10, 1 << 20, 16 << 20}
	}
	if len(o.Stores) == 0 {
		o.Stores = []string{"s3", "file", "file+50ms"}
	}
	if len(o.Sections) == 0 {
		o.Sections = allSections
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
}

// env is what the sections share.
type env struct {
	o       *Options
	s3      *s3test.Server
	s3Bin   string // versitygw
	work    string
	produce string // path of lakefs-produce
	lbench  string // path of lakefs-bench
	buckets int
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.o.Log, "[%s] "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// newBucket creates a fresh bucket and returns its name.
func (e *env) newBucket(ctx context.Context, what string) (string, error) {
	e.buckets++
	name := fmt.Sprintf("%s-%d", what, e.buckets)
	if err := e.s3.CreateBucket(ctx, name); err != nil {
		return "", fmt.Errorf("bucket %s: %w", name, err)
	}
	return name, nil
}

// errTimedOut marks a command stopped by its time limit: the rows it
// printed before are kept.
var errTimedOut = errors.New("stopped at its time limit")

// bench runs lakefs-bench with args, at most limit, and returns the JSON
// rows it printed, each with the command line that reproduces it and,
// unless the command recorded its own, the load average at its start.
func (e *env) bench(ctx context.Context, limit time.Duration, args ...string) ([]Row, error) {
	load := bench.Load1()
	rows, err := e.exec(ctx, limit, e.lbench, args...)
	line := commandLine(append([]string{"lakefs-bench"}, args...))
	for _, r := range rows {
		r["command"] = line
		if _, ok := r["load1"]; !ok {
			r["load1"] = load
		}
	}
	return rows, err
}

// exec runs bin with args, at most limit, and returns the JSON rows it
// printed.
func (e *env) exec(ctx context.Context, limit time.Duration, bin string, args ...string) ([]Row, error) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, args...)
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
	return rows, fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args[:min(2, len(args))], " "), err, tail(stderr.String(), 400))
}

// commandLine quotes args for a shell where they need it.
func commandLine(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.ContainsAny(a, "?&*$ ;|<>'\"") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// has reports whether this build's lakefs-bench has <sub> with flag.
func (e *env) has(ctx context.Context, sub, flag string) bool {
	out, _ := exec.CommandContext(ctx, e.lbench, sub, "--help").CombinedOutput()
	return bytes.Contains(out, []byte(flag))
}

// Run measures the sections (or, with o.From, reads their rows) and
// writes rows.json, REPORT.md and the plots.
func Run(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if o.DryRun {
		printPlan(&o)
		return nil
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return fmt.Errorf("report directory: %w", err)
	}
	var f *RunFile
	var err error
	if o.From != "" {
		if f, err = LoadRunFile(o.From); err != nil {
			return err
		}
		f.Options.OutDir, f.Options.Log = o.OutDir, o.Log
	} else if f, err = measure(ctx, &o); err != nil {
		return err
	}
	if abs, _ := filepath.Abs(o.From); abs != mustAbs(filepath.Join(o.OutDir, RowsFile)) {
		if err := saveRun(f, o.OutDir); err != nil {
			return err
		}
	}
	rep := Render(f)
	if err := rep.Write(o.OutDir); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	// An incomplete report is still written (it says what failed), but
	// not silently.
	if err := rep.Check(f.Options.Sections); err != nil {
		fmt.Fprintf(o.Log, "the report is incomplete:\n%v\n", err)
	}
	fmt.Fprintf(o.Log, "wrote %s (projected %s, took %s)\n", filepath.Join(o.OutDir, "REPORT.md"), f.Projected, f.Total)
	return nil
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// measure runs the sections and returns their rows; a failing section is
// a note, not fatal: the others still say something.
func measure(ctx context.Context, o *Options) (*RunFile, error) {
	began := time.Now()
	work := o.WorkDir
	if work == "" {
		d, err := os.MkdirTemp("", "lakestream-bench-")
		if err != nil {
			return nil, fmt.Errorf("scratch directory: %w", err)
		}
		defer os.RemoveAll(d)
		work = d
	}
	e := &env{o: o, work: work}
	var err error
	if e.produce, err = filepath.Abs(filepath.Join(o.BinDir, "lakefs-produce")); err != nil {
		return nil, fmt.Errorf("lakefs-produce: %w", err)
	}
	e.lbench = filepath.Join(filepath.Dir(e.produce), "lakefs-bench")
	s3dir := filepath.Join(work, "s3")
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		return nil, fmt.Errorf("versitygw directory: %w", err)
	}
	e.s3Bin = filepath.Join(o.Tools, "bin", "versitygw")
	if e.s3, err = startS3(e.s3Bin, s3dir, ""); err != nil {
		return nil, err
	}
	defer e.s3.Stop(syscall.SIGTERM)
	f := &RunFile{Options: *o, Date: began.UTC(), Projected: Projection(o),
		// nats-server is linked into lakefs-bench, not lakefs-produce.
		Machine: describeMachine(ctx, e.lbench, filepath.Join(o.Tools, "bin", "versitygw"))}
	e.logf("projected duration of the whole run: %s (%s)", f.Projected, strings.Join(o.Sections, ", "))
	for _, sec := range o.Sections {
		t0 := time.Now()
		e.logf("section %s (projected %s)", sec, sectionCost(o, sec))
		rows, err := e.measureSection(ctx, sec)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			rows = append(rows, Row{"note": fmt.Sprintf("section %s failed: %v", sec, err)})
			e.logf("section %s failed: %v", sec, err)
		}
		for _, r := range rows {
			r["section"] = sec
		}
		f.Rows = append(f.Rows, rows...)
		took := time.Since(t0).Round(time.Second)
		f.Elapsed = append(f.Elapsed, fmt.Sprintf("%s %s (projected %s)", sec, took, sectionCost(o, sec)))
		e.logf("section %s done in %s", sec, took)
	}
	f.Total = time.Since(began).Round(time.Second)
	e.logf("run took %s; projected %s", f.Total, f.Projected)
	return f, nil
}

// measureSection runs one section's benchmarks.
func (e *env) measureSection(ctx context.Context, sec string) ([]Row, error) {
	switch sec {
	case "ingest":
		return e.measureIngest(ctx)
	case "dac":
		return e.measureDAC(ctx)
	case "latency":
		return e.measureLatency(ctx)
	case "read":
		return e.measureRead(ctx)
	case "storage":
		return e.measureStorage(ctx)
	case "scale":
		return e.measureScale(ctx)
	case "cost":
		return e.measureCost(ctx)
	}
	return nil, fmt.Errorf("unknown section %q (have %s)", sec, strings.Join(allSections, ", "))
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

// startS3 starts the report's versitygw (bin) with its data under dir,
// on cpus if set (a taskset list), and its log beside dir: a line per
// upload that a finished run cuts short stays out of the progress output.
func startS3(bin, dir, cpus string) (*s3test.Server, error) {
	lf, err := os.Create(dir + ".log")
	if err != nil {
		return nil, err
	}
	// The server holds its own copy of the descriptor.
	defer lf.Close()
	return s3test.Launch(s3test.LaunchOptions{Bin: bin, Dir: dir,
		AccessKey: "lakestream-bench", SecretKey: "lakestream-bench-secret", Log: lf, CPUs: cpus})
}
