package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/bench"
)

// measureRead runs section 3: `bench read` (when this build has it) and
// the read peers on the same versitygw, pinned (pinRead) where the
// machine has CPUs to split.
func (e *env) measureRead(ctx context.Context) (rows []Row, err error) {
	if split, ok := splitCPUs(); ok {
		restore, err := e.pinRead(split)
		if err != nil {
			return nil, err
		}
		defer restore()
		rows = append(rows, Row{"note": "Pinned: " + split.String() + " (a versitygw of its own for this section)."})
	}
	got, notes, err := e.readMountRows(ctx)
	rows = append(rows, got...)
	if err != nil {
		return rows, err
	}
	for _, n := range notes {
		rows = append(rows, Row{"note": n})
	}
	bucket, err := e.newBucket(ctx, "peers")
	if err != nil {
		return rows, err
	}
	e.logf("read peers")
	load := bench.Load1()
	peers, err := ReadPeers(ctx, ReadPeerOptions{Server: e.s3, Bucket: bucket, Repeats: e.o.Repeats, Log: e.o.Log})
	for _, p := range peers {
		p["load1"] = load
	}
	rows = append(rows, peers...)
	if err != nil {
		rows = append(rows, Row{"note": fmt.Sprintf("read peers: %v", err)})
	}
	return rows, nil
}

// pinRead starts the read section's own versitygw on the server's CPUs
// and confines this process (and the bench, mounts and peers it starts)
// to the others; restore undoes both.
func (e *env) pinRead(split cpuSplit) (restore func(), err error) {
	dir := filepath.Join(e.work, "s3-read")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("versitygw directory: %w", err)
	}
	srv, err := startS3(e.s3Bin, dir, split.server)
	if err != nil {
		return nil, err
	}
	unpin, err := pinSelf(split.clientSet)
	if err != nil {
		srv.Stop(syscall.SIGTERM)
		return nil, err
	}
	shared := e.s3
	e.s3 = srv
	return func() {
		e.s3 = shared
		unpin()
		srv.Stop(syscall.SIGTERM)
	}, nil
}

// renderRead writes section 3 and its headlines.
func (e *env) renderRead(rep *Report, rows []Row, notes []string) {
	g := GroupRows(rows, "system", "readers")
	e.readSection(rep, g, rows, notes)
	for _, readers := range []float64{1, 4} {
		readHeadline(rep, g, readers)
	}
}

// readMountRows runs bench read (lakefs-mount and direct store reads) up
// to o.Repeats times, fewer if one run takes so long that the rest would
// break the report's time budget.
func (e *env) readMountRows(ctx context.Context) ([]Row, []string, error) {
	o := e.o
	if !e.has(ctx, "read", "--json") {
		return nil, []string{"`lakefs-bench read` does not exist in this build, so the lakefs-mount and direct rows of `bench read` are missing; the report picks them up once it lands."}, nil
	}
	var rows []Row
	var notes []string
	for i := range o.Repeats {
		bucket, err := e.newBucket(ctx, "read")
		if err != nil {
			return nil, nil, err
		}
		e.logf("bench read repeat %d/%d", i+1, o.Repeats)
		t0 := time.Now()
		pid := strconv.Itoa(e.s3.Pid())
		got, err := e.bench(ctx, 3*time.Minute, "read", "--json", "--store", e.s3.URL(bucket, "read"), "--server-pid", pid,
			// The peers' data set: 4 ranks x 16 files x 4 MiB.
			"--steps", "16", "--ranks", "4", "--size", "4MiB", "--readers", "1,4")
		for _, g := range got {
			g["repeat"] = float64(i + 1)
			// The server's pid means nothing to a reader reproducing it.
			if c, ok := g["command"].(string); ok {
				g["command"] = strings.Replace(c, " --server-pid "+pid, "", 1)
			}
		}
		rows = append(rows, got...)
		if err != nil {
			notes = append(notes, fmt.Sprintf("bench read, repeat %d: %v", i+1, err))
			break
		}
		// The report's time budget holds at most about 3 minutes
		// of bench read.
		if took := time.Since(t0); took*time.Duration(i+2) > 3*time.Minute && i+1 < o.Repeats {
			notes = append(notes, fmt.Sprintf("bench read took %s a run, so it ran %d time(s), not %d, to keep make bench within its budget", took.Round(time.Second), i+1, o.Repeats))
			break
		}
	}
	return rows, notes, nil
}

// readSection writes the read path's table, figure and notes.
func (e *env) readSection(rep *Report, g *Group, rows []Row, notes []string) {
	sec := &Section{Title: "Read path"}
	sec.printf("One reader reads rank 0's files in order; four readers read one rank each in parallel. Every reader opens a file, reads it to EOF in 1 MiB reads and checks its CRC32C; the page cache is dropped before each pass. `mount` and `direct` come from `lakefs-bench read` (lakefs-mount, and the store client reading the same bytes: the limit); `direct-s3`, `s3fs` and `rclone` are the same kind of files as plain 4 MiB objects on the same versitygw, read with the SDK's GetObject, through `s3fs` and through `rclone mount` (--vfs-cache-mode off). fetched/served is bytes fetched from the store per byte served (not counted for the peers: 0). RSS is the mount process's peak; CPU is the mount process's user+system seconds per GB served; server CPU is versitygw's, for the `lakefs-bench read` rows. On a machine with two CPUs or more, the section runs a versitygw of its own on the first half of them and everything else on the rest (the note below says which), as a cloud store serves from machines of its own.\n\n")
	t := Table{Header: []string{"system", "readers", "MB/s", "p50 ms/file", "p95 ms/file", "fetched/served", "peak RSS MiB", "CPU s/GB", "server CPU s/GB", "load"}}
	fig := Figure{Title: "Read throughput, page cache dropped", XLabel: "readers", YLabel: "MB/s (median, min-max)"}
	series := map[string]*Series{}
	var order []string
	for _, k := range g.Keys {
		r := g.Rows[k]
		sys := r.Str("system")
		ratio := "n/a"
		if f, s := g.Stat(k, "fetched_bytes"), g.Stat(k, "served_bytes"); f.Med > 0 && s.Med > 0 {
			ratio = fmt.Sprintf("%.3f", f.Med/s.Med)
		}
		t.Rows = append(t.Rows, []string{sys, fmt.Sprint(r.Num("readers")), g.Stat(k, "mb_per_s").String(), g.Stat(k, "p50_ms").String(),
			g.Stat(k, "p95_ms").String(), ratio, orNA(g.Stat(k, "rss_mib")), orNA(g.Stat(k, "cpu_s_per_gb")), orNA(g.Stat(k, "server_cpu_s_per_gb")), loadCell(g, k)})
		if series[sys] == nil {
			series[sys] = &Series{Name: sys}
			order = append(order, sys)
		}
		s := series[sys]
		s.X, s.Y = append(s.X, r.Num("readers")), append(s.Y, g.Stat(k, "mb_per_s"))
	}
	for _, n := range order {
		fig.Series = append(fig.Series, *series[n])
	}
	sec.printf("%s\n", t.Markdown())
	sec.printf("%s", rep.Stamp(fmt.Sprintf("peers: 4 ranks x 16 files x 4 MiB, 1 MiB reads, %d repeats; bench read: --steps 16 --ranks 4 --size 4MiB --readers 1,4 (the same shape)", e.o.Repeats)))
	sec.printf("%sThe peers (`direct-s3`, `s3fs`, `rclone`) run inside `lakefs-bench report --sections read` (bench/report/readpeer.go).\n\n", commands(rows))
	sec.figure("read-mbps.png", fig)
	for _, n := range notes {
		sec.printf("Note: %s\n\n", n)
	}
	rep.Sections = append(rep.Sections, sec)
}

// readHeadline compares lakefs-mount's read MB/s with readers readers to
// direct store reads (the limit) and the best peer, and records a loss to
// that peer.
func readHeadline(rep *Report, g *Group, readers float64) {
	stat := func(sys string) Stat {
		for _, k := range g.Keys {
			if r := g.Rows[k]; r.Str("system") == sys && r.Num("readers") == readers {
				return g.Stat(k, "mb_per_s")
			}
		}
		return Stat{}
	}
	h := Headline{Figure: fmt.Sprintf("read MB/s, %v reader(s), through lakefs-mount", readers), Lakestream: stat("mount"),
		Limit: stat("direct"), LimitName: "direct store reads", Unit: "MB/s"}
	for _, p := range []string{PeerS3fs, PeerRclone} {
		if s := stat(p); s.N > 0 && s.Med > h.Peer.Med {
			h.Peer, h.PeerName = s, p
		}
	}
	if h.Lakestream.N == 0 {
		h.MissingComment = "no mount rows: `bench read` missing or failed"
		if h.Peer.N > 0 {
			h.MissingComment += fmt.Sprintf("; best peer %s %s MB/s", h.PeerName, h.Peer)
		}
	} else if h.Peer.N > 0 && h.Lakestream.Med < h.Peer.Med {
		rep.Losses = append(rep.Losses, fmt.Sprintf("Reading with %v reader(s): lakefs-mount %s MB/s vs %s %s MB/s (%s).",
			readers, num(h.Lakestream.Med), h.PeerName, num(h.Peer.Med), Ratio(h.Lakestream.Med, h.Peer.Med)))
	}
	rep.Summary = append(rep.Summary, h)
}

func orNA(s Stat) string {
	if s.N == 0 || s.Med == 0 {
		return "n/a"
	}
	return s.String()
}

// storage runs section 4a: a producer commits steps through the staging
// tree with `run --once`, a checkpoint is recorded at the head and gc run
// after every round, and the bytes under data/ and _log/ are measured; a
// second stream gets the same batches and no checkpoints.
func (e *env) measureStorage(ctx context.Context) ([]Row, error) {
	streams := []storageStream{{name: "checkpointed", checkpoint: true}, {name: "never checkpointed"}}
	var rows []Row
	load := bench.Load1()
	for si := range streams {
		dir := filepath.Join(e.work, "storage", fmt.Sprint(si))
		staging := filepath.Join(e.work, "staging", fmt.Sprint(si))
		if err := e.storageRun(ctx, &streams[si], dir, staging); err != nil {
			return rows, err
		}
		for _, p := range streams[si].pts {
			rows = append(rows, Row{"stream": streams[si].name, "step": p.step, "data_bytes": p.data, "log_bytes": p.log, "load1": load})
		}
	}
	return rows, nil
}

// renderStorage writes section 4a from its rows, if both streams have
// them.
func (e *env) renderStorage(rep *Report, rows []Row) {
	streams := []storageStream{{name: "checkpointed", checkpoint: true}, {name: "never checkpointed"}}
	for i := range streams {
		for _, r := range rows {
			if r.Str("stream") == streams[i].name {
				streams[i].pts = append(streams[i].pts, storagePoint{step: r.Num("step"), data: r.Num("data_bytes"), log: r.Num("log_bytes")})
			}
		}
		if len(streams[i].pts) == 0 {
			rep.Sections = append(rep.Sections, &Section{Title: "Storage over a checkpointed run"})
			return
		}
	}
	e.storageSection(rep, streams, rows)
}

// The storage section's run: storageRounds rounds of storageBatches steps,
// each of Ranks x one storageFileSize file.
const storageRounds, storageBatches, storageFileSize = 20, 5, 256 << 10

// storageStream is one stream of the storage section and its bytes in
// the store after each round.
type storageStream struct {
	name       string
	checkpoint bool // checkpoint at the head and gc after every round
	pts        []storagePoint
}

type storagePoint struct{ step, data, log float64 }

// storageRun creates s's stream in dir and runs its rounds through the
// staging tree under staging, recording the store's bytes after each.
func (e *env) storageRun(ctx context.Context, s *storageStream, dir, staging string) error {
	url := "file://" + dir
	if err := e.cli(ctx, "init", "--store", url, "--ranks", fmt.Sprint(e.o.Ranks)); err != nil {
		return err
	}
	for round := range storageRounds {
		if err := sealBatches(staging, round*storageBatches, storageBatches, e.o.Ranks, storageFileSize); err != nil {
			return err
		}
		if err := e.cli(ctx, "run", "--store", url, "--staging", staging, "--producer-id", "p1", "--once", "--progress", "log"); err != nil {
			return err
		}
		head, err := e.head(ctx, url)
		if err != nil {
			return err
		}
		if s.checkpoint {
			if err := e.cli(ctx, "checkpoint", "--store", url, "--step", fmt.Sprint(head)); err != nil {
				return err
			}
			if err := e.cli(ctx, "gc", "--store", url, "--grace", "0s"); err != nil {
				return err
			}
		}
		s.pts = append(s.pts, storagePoint{step: float64(head), data: duBytes(filepath.Join(dir, "data")), log: duBytes(filepath.Join(dir, "_log"))})
	}
	return nil
}

// sealBatches writes n sealed batches numbered from first into the
// staging tree, each of ranks x one sample.bin of size bytes.
func sealBatches(staging string, first, n, ranks, size int) error {
	buf := make([]byte, size)
	for b := first; b < first+n; b++ {
		bd := filepath.Join(staging, fmt.Sprintf("b%05d", b))
		for r := range ranks {
			rd := filepath.Join(bd, fmt.Sprintf("rank-%d", r))
			if err := os.MkdirAll(rd, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(rd, "sample.bin"), buf, 0o644); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(bd, "_SEALED"), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// storageSection writes the storage section and its headline.
func (e *env) storageSection(rep *Report, streams []storageStream, rows []Row) {
	ranks := e.o.Ranks
	sec := &Section{Title: "Storage over a checkpointed run"}
	sec.printf("A producer commits %d steps per round through the staging tree (`run --once`), each of %d ranks x one %s file; after every round the checkpointed stream records a checkpoint at the head and runs `gc --grace 0s`, the other stream never does. Bytes are the sizes of the files under data/ and _log/ of the file:// store (one run: the figures are deterministic up to file-system rounding).\n\n",
		storageBatches, ranks, Bytes(storageFileSize))
	t := Table{Header: []string{"step", "data/ checkpointed", "_log/ checkpointed", "data/ never checkpointed", "_log/ never checkpointed"}}
	f := Figure{Title: "Bytes in the store vs step", XLabel: "step", YLabel: "MiB"}
	for _, s := range streams {
		d, l := Series{Name: "data/ " + s.name}, Series{Name: "_log/ " + s.name}
		for _, p := range s.pts {
			d.X, d.Y = append(d.X, p.step), append(d.Y, Summarize([]float64{p.data / (1 << 20)}))
			l.X, l.Y = append(l.X, p.step), append(l.Y, Summarize([]float64{p.log / (1 << 20)}))
		}
		f.Series = append(f.Series, d, l)
	}
	for i := range min(len(streams[0].pts), len(streams[1].pts)) {
		if i%4 != 3 && i != 0 {
			continue
		}
		a, b := streams[0].pts[i], streams[1].pts[i]
		t.Rows = append(t.Rows, []string{fmt.Sprint(a.step), Bytes(a.data), Bytes(a.log), Bytes(b.data), Bytes(b.log)})
	}
	sec.printf("%s\n%s", t.Markdown(), rep.Stamp(fmt.Sprintf("file:// store, %d ranks, %d rounds of %d steps, %s per rank file", ranks, storageRounds, storageBatches, Bytes(storageFileSize))))
	if l := Summarize(loads(rows)); l.N > 0 {
		sec.printf("Load average at the start: %s.\n\n", cell(l.Max, "load1"))
	}
	sec.printf("Reproduce: `lakefs-bench report --sections storage` (a sequence of `lakefs-produce init`, `run --once`, `checkpoint` and `gc --grace 0s`, bench/report/sections2.go).\n\n")
	sec.figure("storage.png", f)
	a, b := streams[0].pts[len(streams[0].pts)-1], streams[1].pts[len(streams[1].pts)-1]
	rep.Summary = append(rep.Summary, Headline{
		Figure:     fmt.Sprintf("store bytes (data/ + _log/) after %v steps, checkpointed", a.step+1),
		Lakestream: Summarize([]float64{(a.data + a.log) / (1 << 20)}), Limit: Summarize([]float64{(b.data + b.log) / (1 << 20)}),
		LimitName: "same stream never checkpointed", Unit: "MiB", LowerIsBetter: true,
	})
	rep.Sections = append(rep.Sections, sec)
}

// cli runs a lakefs-produce command that prints no rows.
func (e *env) cli(ctx context.Context, args ...string) error {
	_, err := e.exec(ctx, 2*time.Minute, e.produce, args...)
	return err
}

// head is the stream's head step.
func (e *env) head(ctx context.Context, url string) (int64, error) {
	cmd := exec.CommandContext(ctx, e.produce, "status", "--json", "--store", url)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("status of %s: %w", url, err)
	}
	var st struct {
		Head *int64 `json:"head"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Head == nil {
		return 0, fmt.Errorf("status of %s: no head in %q", url, tail(string(out), 200))
	}
	return *st.Head, nil
}

// duBytes sums the sizes of the regular files under dir.
func duBytes(dir string) float64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return float64(n)
}

// scaleParams are the scale section's parameters: small, to fit the
// report's budget (smaller still in a quick run).
func scaleParams(o *Options) []string {
	if o.Quick {
		return []string{"--ranks", "16", "--files", "2", "--steps", "10", "--versions", "50", "--mounts", "1", "--window", "2s"}
	}
	return []string{"--ranks", "16,256", "--files", "4", "--steps", "20", "--versions", "200", "--mounts", "1,4", "--window", "3s"}
}

// measureScale runs section 4b: `bench scale` with small parameters,
// when this build has it.
func (e *env) measureScale(ctx context.Context) ([]Row, error) {
	if !e.has(ctx, "scale", "--json") {
		return []Row{{"note": "`lakefs-bench scale` does not exist in this build; the scale figures are missing."}}, nil
	}
	bucket, err := e.newBucket(ctx, "scale")
	if err != nil {
		return nil, err
	}
	rows, err := e.bench(ctx, 3*time.Minute, append([]string{"scale", "--json", "--store", e.s3.URL(bucket, "scale"),
		"--mount-bin", filepath.Join(filepath.Dir(e.produce), "lakefs-mount")}, scaleParams(e.o)...)...)
	if err != nil {
		rows = append(rows, Row{"note": fmt.Sprintf("bench scale failed or was cut: %v", err)})
	}
	return rows, nil
}

// renderScale writes section 4b: one table per kind of row.
func (e *env) renderScale(rep *Report, rows []Row, notes []string) {
	sec := &Section{Title: "Scale"}
	rep.Sections = append(rep.Sections, sec)
	sec.printf("`lakefs-bench scale` (one run, its rows as printed; it counts store requests through a proxy in front of versitygw). Parameters: `%s`.\n\n", strings.Join(scaleParams(e.o), " "))
	for _, n := range notes {
		sec.printf("Note: %s\n\n", n)
	}
	kindTables(sec, rows)
	sec.printf("%s%s", rep.Stamp(strings.Join(scaleParams(e.o), " ")), commands(rows))
	figs := []struct{ file, title, x, y, metric string }{
		{"scale-record-bytes.png", "Log bytes per step vs ranks", "ranks", "bytes", "record_bytes"},
		{"scale-mount-rss.png", "lakefs-mount peak RSS vs ranks", "ranks", "MiB", "mount_rss_mib"},
	}
	for _, fd := range figs {
		s := Series{Name: fd.metric}
		for _, r := range rows {
			if v, ok := r[fd.metric].(float64); ok && v > 0 {
				s.X, s.Y = append(s.X, r.Num("ranks")), append(s.Y, Summarize([]float64{v}))
			}
		}
		if len(s.X) > 0 {
			sec.figure(fd.file, Figure{Title: fd.title, XLabel: fd.x, YLabel: fd.y, Series: []Series{s}})
		}
	}
}

// kindTables adds one table per "kind" of rows, with the columns that
// kind fills (the harness's own fields left out).
func kindTables(sec *Section, rows []Row) {
	kinds := map[string][]Row{}
	var order []string
	for _, r := range rows {
		k := r.Str("kind")
		if kinds[k] == nil {
			order = append(order, k)
		}
		kinds[k] = append(kinds[k], r)
	}
	for _, k := range order {
		var cols []string
		seen := map[string]bool{"kind": true, "section": true, "command": true}
		for _, r := range kinds[k] {
			for _, c := range sortedKeys(r) {
				if !seen[c] {
					seen[c] = true
					cols = append(cols, c)
				}
			}
		}
		t := Table{Header: cols}
		for _, r := range kinds[k] {
			var cells []string
			for _, c := range cols {
				cells = append(cells, cell(r[c], c))
			}
			t.Rows = append(t.Rows, cells)
		}
		sec.printf("### %s\n\n%s\n", k, t.Markdown())
	}
}

// cell prints one value of a generic table.
func cell(v any, col string) string {
	switch v := v.(type) {
	case float64:
		if col == "load1" && v > busyLoad {
			return fmt.Sprintf("**%s busy**", num(v))
		}
		return num(v)
	case nil:
		return ""
	case map[string]any:
		b, _ := json.Marshal(v)
		return string(b)
	}
	return fmt.Sprint(v)
}

func sortedKeys(r Row) []string {
	// The scale rows' own order is lost in a map; a fixed order of the
	// identifying fields first keeps the tables readable.
	first := []string{"ranks", "files_per_rank", "steps", "versions", "mounts"}
	var out []string
	for _, k := range first {
		if _, ok := r[k]; ok {
			out = append(out, k)
		}
	}
	var rest []string
	for k := range r {
		isFirst := false
		for _, f := range first {
			isFirst = isFirst || f == k
		}
		if !isFirst {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}
