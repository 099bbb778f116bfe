package txn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
)

// The stream of docs/FORMAT.md's worked example, built with the real API:
//
//	v1 register prep-b (epoch 1); prep-b announces b-0001 and stops
//	v2 register prep-a (epoch 1)
//	v3 prep-a commits a-0001 (step 0) and prep-b's b-0001 (step 1)
//	v4 prep-a commits a-0002 (step 2)
//	v5 checkpoint 2 (snapshot 5)
//	   prep-b announces b-0002 and b-0003
//	v6 register prep-a (epoch 2)
//	v7 prep-a commits a-0003 (step 3), b-0002 (4), b-0003 (5)
//	v8 reclaim below 3 (gc)
//	v9 checkpoint 4
//	   prep-b announces b-0004 (not committed)
const docStreamPath = "/srv/lakestream/demo" // the doc's D=, replaced by the test's directory

// docFile is the content of a worked-example file: the same sizes for
// every batch, the bytes depending on the batch name.
func docFile(batch, what string, size int) []byte {
	if strings.HasSuffix(what, ".bin") {
		b := make([]byte, size)
		seed := CRC32C([]byte(batch + what))
		for i := range b {
			seed = seed*1664525 + 1013904223
			b[i] = byte(seed >> 24)
		}
		return b
	}
	s := fmt.Sprintf("%s %s", batch, what)
	return []byte(s + strings.Repeat(".", size-len(s)-1) + "\n")
}

func docBatch(name string) Batch {
	return Batch{Name: name, Cursor: name, Ranks: [][]FileSource{
		{BytesFile("sample.txt", docFile(name, "rank 0 sample", 23)), BytesFile("sub/tokens.bin", docFile(name, "tokens.bin", 9000))},
		{BytesFile("sample.txt", docFile(name, "rank 1 sample", 23))},
	}, Shared: []FileSource{BytesFile("meta.json", docFile(name, "meta", 16))}}
}

func buildDocStream(t *testing.T, dir string) *Log {
	t.Helper()
	ctx := t.Context()
	quiet := slog.New(slog.DiscardHandler)
	s, err := store.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Create(ctx, s, CreateOptions{Ranks: 2, ChunkSize: 4096, SnapshotEvery: 5, RetainCheckpoints: 1})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	bEpoch, err := RegisterForTest(ctx, l, "prep-b")
	must(err)
	must(Announce(ctx, l, "prep-b", bEpoch, 1, docBatch("b-0001")))
	produce := func(names ...string) {
		t.Helper()
		p, err := OpenProducer(ctx, l, ProducerOptions{ID: "prep-a", Logger: quiet})
		must(err)
		for _, n := range names {
			pd, err := p.Append(ctx, docBatch(n))
			must(err)
			_, err = pd.Wait(ctx)
			must(err)
		}
		must(p.Close(ctx))
	}
	produce("a-0001", "a-0002")
	_, err = RecordCheckpoint(ctx, l, 2, quiet)
	must(err)
	must(Announce(ctx, l, "prep-b", bEpoch, 2, docBatch("b-0002")))
	must(Announce(ctx, l, "prep-b", bEpoch, 3, docBatch("b-0003")))
	produce("a-0003")
	_, err = GC(ctx, l, GCOptions{Logger: quiet})
	must(err)
	_, err = RecordCheckpoint(ctx, l, 4, quiet)
	must(err)
	must(Announce(ctx, l, "prep-b", bEpoch, 4, docBatch("b-0004")))
	return l
}

// TestFormatDocWorkedExample: docs/FORMAT.md's worked example, run as the
// doc has it. It builds the example's stream with the Go API on a file://
// store, extracts the doc's helpers (state.jq, crc32c.py, table.py,
// footer.py), its file:// accessors and the example's script, runs the
// script with bash, and checks that every `#>` line is what the script
// prints, that the state state.jq computes is the state Load computes
// (here and, from scratch, on the format 2 stream of testdata/format2),
// that the extracted file is the bytes the producer wrote, and that every
// JSON example in the doc decodes into the type the code writes with no
// unknown field and encodes back to the same JSON.
func TestFormatDocWorkedExample(t *testing.T) {
	for _, tool := range []string{"bash", "jq", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the worked example needs %s: %v", tool, err)
		}
	}
	doc, err := os.ReadFile("../docs/FORMAT.md")
	must(t, err)
	blocks := codeBlocks(string(doc))
	t.Run("json", func(t *testing.T) { checkJSONExamples(t, blocks) })

	dir := t.TempDir()
	l := buildDocStream(t, dir)
	if keep := os.Getenv("FORMATDOC_KEEP"); keep != "" {
		must(t, os.CopyFS(keep, os.DirFS(dir)))
	}
	st, err := l.Load(t.Context())
	must(t, err)

	work := t.TempDir()
	var defs, script string
	helpers := 0
	for _, b := range blocks {
		switch name := helperName(b.text); {
		case name != "":
			must(t, os.WriteFile(filepath.Join(work, name), []byte(b.text), 0o644))
			helpers++
		case strings.HasPrefix(b.text, "# On a file:// store"):
			defs = strings.ReplaceAll(b.text, docStreamPath, dir)
		case strings.HasPrefix(b.text, "# The worked example"):
			script = b.text
		}
	}
	if helpers != 4 || defs == "" || script == "" || !strings.Contains(defs, dir) {
		t.Fatalf("docs/FORMAT.md: found %d of the 4 helpers, file:// accessors %v, example script %v", helpers, defs != "", script != "")
	}
	var want []string
	for _, line := range strings.Split(script, "\n") {
		if out, ok := strings.CutPrefix(line, "#> "); ok {
			want = append(want, out)
		}
	}
	cmd := exec.CommandContext(t.Context(), "bash", "-c", defs+"\n"+script)
	cmd.Dir = work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("the example's script: %v; stderr:\n%s", err, stderr.String())
	}
	t.Logf("the example's script ran in %v", time.Since(start).Round(time.Millisecond))
	got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	for i := range max(len(got), len(want)) {
		g, w := "(nothing)", "(nothing)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("output line %d of the example:\n got: %s\nwant: %s (the doc's #> line)", i+1, g, w)
		}
	}

	// The jq state is the Go state, field for field.
	jqState, err := os.ReadFile(filepath.Join(work, "state.json"))
	must(t, err)
	sameState(t, "the example's state.json (snapshot 5 + versions 6-9)", jqState, st)
	sameState(t, "state.jq from scratch", stateFromScratch(t, filepath.Join(work, "state.jq"), dir, st.Version), st)

	// The extracted file is what the producer wrote.
	tokens, err := os.ReadFile(filepath.Join(work, "tokens.bin"))
	must(t, err)
	if !bytes.Equal(tokens, docFile("b-0002", "tokens.bin", 9000)) {
		t.Errorf("tokens.bin extracted by the example (%d bytes) differs from what b-0002 holds", len(tokens))
	}

	// state.jq also follows the format 2 rules: the `producer` field.
	format2, err := filepath.Abs("testdata/format2")
	must(t, err)
	s2, err := store.NewFile(format2)
	must(t, err)
	l2, err := Open(t.Context(), s2)
	must(t, err)
	st2, err := l2.Load(t.Context())
	must(t, err)
	if st2.Format != 2 {
		t.Fatalf("testdata/format2 is format %d", st2.Format)
	}
	sameState(t, "state.jq from scratch on testdata/format2", stateFromScratch(t, filepath.Join(work, "state.jq"), format2, st2.Version), st2)
}

type codeBlock struct{ lang, text string }

// codeBlocks returns the fenced code blocks of a Markdown document.
func codeBlocks(doc string) []codeBlock {
	var out []codeBlock
	var cur *codeBlock
	for _, line := range strings.SplitAfter(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &codeBlock{lang: strings.TrimPrefix(trimmed, "```")}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line
		}
	}
	return out
}

var helperRE = regexp.MustCompile(`(?m)\A(?:#!.*\n)?# (state\.jq|crc32c\.py|table\.py|footer\.py)\b`)

// helperName is the file name a helper block gives on its first lines.
func helperName(text string) string {
	if m := helperRE.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

// stateFromScratch runs state.jq over the empty state made from
// _stream.json (the doc's command) and versions 1..head of the stream in
// dir.
func stateFromScratch(t *testing.T, stateJQ, dir string, head uint64) []byte {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(dir, StreamKey))
	must(t, err)
	empty := exec.Command("jq", "-c", "{format: (.writer_version // .format), version: 0, config: ., live_from: .first_step, steps: [], producers: {}}")
	empty.Stdin = bytes.NewReader(cfg)
	in, err := empty.Output()
	must(t, err)
	for v := uint64(1); v <= head; v++ {
		b, err := os.ReadFile(filepath.Join(dir, VersionKey(v)))
		must(t, err)
		in = append(in, b...)
	}
	cmd := exec.Command("jq", "-n", "-f", stateJQ)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("state.jq: %v\n%s", err, stderr.String())
	}
	return out
}

// sameState checks that the state jq computed is st: the same JSON as a
// snapshot of st, up to fields omitted when empty.
func sameState(t *testing.T, what string, jqState []byte, st *State) {
	t.Helper()
	var got, want any
	if err := json.Unmarshal(jqState, &got); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	must(t, json.Unmarshal(encode(st), &want))
	got, want = dropEmpty(got), dropEmpty(want)
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("%s differs from the state Load computes:\n  jq: %s\n  Go: %s", what, g, w)
	}
	head, _ := st.Head()
	t.Logf("%s = Load's state: version %d, live steps %d-%d, %d producers, checkpoints %v", what, st.Version, st.LiveFrom, head, len(st.Producers), st.Checkpoints)
}

// dropEmpty removes null, "", [] and {} values from objects, recursively:
// what Go omits when empty, jq may write as an empty value.
func dropEmpty(x any) any {
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			v = dropEmpty(v)
			if isEmpty(v) {
				delete(x, k)
			} else {
				x[k] = v
			}
		}
		return x
	case []any:
		for i := range x {
			x[i] = dropEmpty(x[i])
		}
		return x
	}
	return x
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// checkJSONExamples decodes every JSON value in the doc's json blocks
// into the type that writes it, refusing unknown fields, and checks that
// encoding it again gives the same JSON: no field the code does not have,
// none it writes missing, every value in the code's own notation.
func checkJSONExamples(t *testing.T, blocks []codeBlock) {
	n := 0
	for _, b := range blocks {
		if b.lang != "json" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(b.text))
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("a JSON example does not parse: %v\n%s", err, b.text)
				}
				break
			}
			n++
			if err := checkJSONExample(raw); err != nil {
				t.Errorf("JSON example %.100s...: %v", raw, err)
			}
		}
	}
	if n < 15 {
		t.Errorf("found %d JSON examples in docs/FORMAT.md; the doc has more", n)
	}
}

func checkJSONExample(raw []byte) error {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	has := func(k string) bool { _, ok := m[k]; return ok }
	var x any
	switch {
	case has("txn"):
		x = new(Version)
	case has("live_from"):
		x = new(State)
	case has("stream_id"):
		x = new(StreamConfig)
	case has("node_id"):
		x = new(Heartbeat)
	case has("nonce"):
		x = new(announcement)
	case has("files") && has("chunks"):
		x = new(section)
	case has("rank") && has("sec"):
		// table.py's output: exactly the table entry's fields.
		if got, want := strings.Join(slices.Sorted(maps.Keys(m)), " "), "crc len off rank sec size"; got != want {
			return fmt.Errorf("table.py prints %s, the example shows %s", want, got)
		}
		return nil
	default:
		return fmt.Errorf("no type of the code writes this")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(x); err != nil {
		return fmt.Errorf("as %T: %v", x, err)
	}
	var back, orig any
	if err := json.Unmarshal(encode(x), &back); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &orig); err != nil {
		return err
	}
	if !reflect.DeepEqual(back, orig) {
		return fmt.Errorf("as %T it encodes to %s", x, encode(x))
	}
	return nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
