package codecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// longFuncExceptions lists non-test functions allowed over MaxFuncLines,
// each with its length, which it may not exceed; a listed function that is
// no longer too long fails the test until its line is deleted, so the list
// only shrinks. It is empty: the ten functions over the limit when the
// check was written have all been split. Keep it so.
var longFuncExceptions = map[string]int{}

// layers is the repository's import rule (docs/ARCHITECTURE.md, packages
// and layering).
var layers = Layers{
	Floors: map[string]int{
		"internal": -1, // leaf helpers: they import only each other
		"store":    0, "txn": 1, "cache": 2, "stage": 2, "fs": 3,
		"mount": 4, "csi": 4, "bench": 5, "cmd": 6,
	},
	// csi parses volume attributes with mount's option table and runs
	// lakefs-mount through mount/proc.
	Sideways: map[string]bool{"csi->mount": true},
	Private: []string{
		"bench", "internal/s3test", "internal/gcstest", "internal/aztest", "internal/toxitest", "internal/testproc", "internal/codecheck", "store/storetest",
		"internal/procstat", "txn/txntest", "internal/longtest",
	},
	// Only cmd/ may import them: lakefs-bench hosts the benchmarks, and
	// lakefs-produce's TestProducerLinksNoFUSEOrNATS keeps them out of
	// the producer.
	PrivateAbove: 6,
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := Root(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestNoMissingDocs: no comment or document in the repository cites a .md
// file that is not in it.
func TestNoMissingDocs(t *testing.T) {
	found, err := MissingDocs(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestDocsNameRealTests: every test function a document names as the proof
// of a claim exists.
func TestDocsNameRealTests(t *testing.T) {
	found, err := UnknownTests(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestLayering: imports go down the floors, never sideways, and no
// production package carries benchmark or test machinery.
func TestLayering(t *testing.T) {
	found, err := Layering(repoRoot(t), layers)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestNoLongFuncs: no non-test function is longer than MaxFuncLines, but
// for the listed exceptions, none of which may grow.
func TestNoLongFuncs(t *testing.T) {
	long, err := LongFuncs(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range judgeLong(long, longFuncExceptions) {
		t.Error(msg)
	}
}

// judgeLong compares the long functions found with the exception list.
func judgeLong(long []FuncLen, except map[string]int) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range long {
		seen[f.Name] = true
		max, ok := except[f.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s is %d lines, over %d: split it along its phases", f.Name, f.Lines, MaxFuncLines))
		case f.Lines > max:
			out = append(out, fmt.Sprintf("%s grew from %d to %d lines (over %d): split it, do not grow it", f.Name, max, f.Lines, MaxFuncLines))
		}
	}
	for name := range except {
		if !seen[name] {
			out = append(out, fmt.Sprintf("%s is no longer over %d lines (or is gone): delete it from longFuncExceptions", name, MaxFuncLines))
		}
	}
	return out
}

// plant writes files (path -> content) under a fresh temp dir holding a
// go.mod, and returns the dir.
func plant(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files["go.mod"] = "module example.com/planted\n\ngo 1.22\n"
	for p, body := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestMissingDocsCatchesPlanted: a Go comment, a Makefile comment and a
// README link citing absent documents are each reported, naming file and
// line, and so are
// links that resolve only from the wrong directory or to a missing image;
// citations of documents that exist (relative to the root, to the citing
// file, or by bare name), URLs, anchors and a .md name in a string literal
// are not.
func TestMissingDocsCatchesPlanted(t *testing.T) {
	root := plant(t, map[string]string{
		"docs/FORMAT.md":       "# Format\nSee [reliability](RELIABILITY.md).\n",
		"docs/RELIABILITY.md":  "# Reliability\n",
		"docs/bench/REPORT.md": "generated\n",
		"README.md": "Read docs/FORMAT.md and [the design](docs/DESIGN.md).\n" +
			"[ok](docs/FORMAT.md#layout) [ok](https://x.org/a.md) [ok](#here) [bad](FORMAT.md) [bad](docs/x.png)\n",
		"Makefile":      "# see docs/FORMAT.md\n\n# and GONE.md\nall:\n",
		"deploy/x.yaml": "# docs/FORMAT.md\n",
		"p/p.go": "// Package p follows docs/FORMAT.md and REPORT.md.\npackage p\n\n" +
			"// F does what PLATFORM.md measured.\nfunc F() string { return \"GONE.md\" }\n",
	})
	found, err := MissingDocs(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p/p.go:4: cites PLATFORM.md",
		"README.md:1: cites docs/DESIGN.md",
		"README.md:1: links to docs/DESIGN.md",
		"README.md:2: links to FORMAT.md, which does not exist relative to .",
		"README.md:2: links to docs/x.png",
		"Makefile:3: cites GONE.md",
	}
	if len(found) != len(want) {
		t.Fatalf("found %d citations, want %d:\n%s", len(found), len(want), strings.Join(found, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(found[i], w) {
			t.Errorf("finding %d = %q, want prefix %q", i, found[i], w)
		}
	}
}

// TestUnknownTestsCatchesPlanted: a document naming a test that does not
// exist, or qualifying a real one with the wrong package, is reported;
// real tests named bare, by package name, by directory name or with a
// subtest are not.
func TestUnknownTestsCatchesPlanted(t *testing.T) {
	root := plant(t, map[string]string{
		"cmd/tool-x/main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestTool(t *testing.T) {}\n",
		"q/q_test.go": "package q_test\n\nimport \"testing\"\n\nfunc TestReal(t *testing.T) {}\n" +
			"func BenchmarkReal(b *testing.B) {}\nfunc FuzzReal(f *testing.F) {}\n",
		"docs/ARCHITECTURE.md": "Proved by `q.TestReal`, `TestReal/sub`, `tool-x.TestTool`, `main.TestTool`,\n" +
			"`BenchmarkReal`, `q.FuzzReal`.\nAlso by `TestGone` and `tool-x.TestReal`.\n",
	})
	found, err := UnknownTests(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docs/ARCHITECTURE.md:3: names TestGone", "docs/ARCHITECTURE.md:3: names tool-x.TestReal"}
	if len(found) != len(want) {
		t.Fatalf("found %d, want %d:\n%s", len(found), len(want), strings.Join(found, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(found[i], w) {
			t.Errorf("finding %d = %q, want prefix %q", i, found[i], w)
		}
	}
}

// TestLongFuncsCatchesPlanted: a function and a method one line over the
// limit are found with their lengths, one at the limit, a long test
// function and a long testdata program are not; judgeLong reports the
// unlisted, the grown and the stale exception.
func TestLongFuncsCatchesPlanted(t *testing.T) {
	body := func(name string, lines int) string {
		// "func ... {" and "}" are two of the lines.
		return "func " + name + " {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	root := plant(t, map[string]string{
		"r/r.go": "package r\n\ntype T struct{}\n\n" + body("Long()", MaxFuncLines+1) +
			body("(t *T) Method()", MaxFuncLines+1) + body("AtLimit()", MaxFuncLines),
		"r/r_test.go":             "package r\n\n" + body("longTest()", 200),
		"r/testdata/prog/main.go": "package main\n\n" + body("main()", 200),
	})
	long, err := LongFuncs(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []FuncLen{{"r.Long", MaxFuncLines + 1}, {"r.T.Method", MaxFuncLines + 1}}
	if fmt.Sprint(long) != fmt.Sprint(want) {
		t.Fatalf("LongFuncs = %v, want %v", long, want)
	}
	msgs := judgeLong(long, map[string]int{"r.T.Method": MaxFuncLines, "r.Gone": 90})
	if len(msgs) != 3 ||
		!strings.HasPrefix(msgs[0], "r.Long is 81 lines") ||
		!strings.HasPrefix(msgs[1], "r.T.Method grew from 80 to 81") ||
		!strings.HasPrefix(msgs[2], "r.Gone is no longer over") {
		t.Fatalf("judgeLong = %q", msgs)
	}
	if msgs := judgeLong(long, map[string]int{"r.Long": 81, "r.T.Method": 81}); len(msgs) != 0 {
		t.Fatalf("judgeLong with both listed = %q, want none", msgs)
	}
}

// TestLayeringCatchesPlanted: an import up a floor, one sideways, and one
// of private machinery are reported; imports down, within a directory,
// of unlisted packages, an allowed sideways pair, and imports from test
// files and unlisted directories are not.
func TestLayeringCatchesPlanted(t *testing.T) {
	imp := func(pkg string, paths ...string) string {
		s := "package " + pkg + "\n\nimport (\n"
		for _, p := range paths {
			s += "\t_ \"example.com/planted/" + p + "\"\n"
		}
		return s + "\t_ \"fmt\"\n)\n"
	}
	root := plant(t, map[string]string{
		"low/a.go":       imp("low", "high", "low/sub", "util"),
		"low/a_test.go":  imp("low", "high"),
		"low/sub/b.go":   imp("sub", "low"),
		"left/l.go":      imp("left", "right", "low", "bench"),
		"right/r.go":     imp("right", "left"),
		"high/h.go":      imp("high", "low", "left", "bench"),
		"tools/t.go":     imp("tools", "high"),
		"util/u.go":      "package util\n",
		"bench/bench.go": "package bench\n",
	})
	ls := Layers{
		Floors:       map[string]int{"low": 0, "left": 1, "right": 1, "high": 2},
		Sideways:     map[string]bool{"right->left": true},
		Private:      []string{"bench"},
		PrivateAbove: 2,
	}
	found, err := Layering(root, ls)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"left/l.go:4: left imports right on its own floor",
		"left/l.go:6: left imports bench, benchmark or test machinery",
		"low/a.go:4: low (floor 0) imports high (floor 2)",
	}
	if len(found) != len(want) {
		t.Fatalf("found %d, want %d:\n%s", len(found), len(want), strings.Join(found, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(found[i], w) {
			t.Errorf("finding %d = %q, want prefix %q", i, found[i], w)
		}
	}
}

// TestShortSuiteListed: docs/TESTING.md lists every test make test leaves
// out, and none it says make test keeps is one of them.
func TestShortSuiteListed(t *testing.T) {
	found, err := ShortSuite(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestShortSuiteCatchesPlanted: a long test listed as kept and a long
// test not listed are both found; a kept test that skips only a subtest,
// and a long test listed among the long ones, are not.
func TestShortSuiteCatchesPlanted(t *testing.T) {
	src := "package q\n\nimport (\n\t\"testing\"\n\n\t\"x/internal/longtest\"\n)\n\n" +
		"func TestKeptLong(t *testing.T) {\n\tlongtest.Skip(t, \"why\")\n}\n" +
		"func TestUnlisted(t *testing.T) {\n\tlongtest.Skip(t, \"why\")\n}\n" +
		"func TestListed(t *testing.T) {\n\tlongtest.Skip(t, \"why\")\n}\n" +
		"func TestMatrix(t *testing.T) {\n\tt.Run(\"gs\", func(t *testing.T) { longtest.Skip(t, \"why\") })\n}\n"
	root := plant(t, map[string]string{
		"q/q_test.go": src,
		TestingDoc: "# Testing\n\n" + keptHeading + "\n\n| g | `q.TestKeptLong`, `q.TestMatrix` |\n\n" +
			"## Long tests\n\n`q.TestListed`\n",
	})
	found, err := ShortSuite(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		TestingDoc + ": q.TestUnlisted skips itself under -short but is not listed",
		TestingDoc + ":5: q.TestKeptLong is kept in make test here but skips itself",
	}
	if len(found) != len(want) {
		t.Fatalf("found %d, want %d:\n%s", len(found), len(want), strings.Join(found, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(found[i], w) {
			t.Errorf("finding %d = %q, want prefix %q", i, found[i], w)
		}
	}
}
