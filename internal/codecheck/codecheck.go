// Package codecheck holds the repository's own lint checks, run as tests by
// `go test ./...` (so by `make test`) over the module the package sits in:
//
//   - MissingDocs: a Go comment, docs/*.md, README.md or a build file or
//     script citing a .md file that is not in the repository, or a
//     document's relative link that leads nowhere (a pointer to nowhere
//     misleads the next reader more than no pointer at all);
//   - UnknownTests: a document naming a Test, Benchmark or Fuzz function that
//     no _test.go file declares (a guarantee whose named proof is gone is an
//     unproven guarantee);
//   - LongFuncs: a non-test function longer than MaxFuncLines;
//   - Layering: an import that goes up the package floors (cmd -> csi,
//     mount -> fs -> cache, stage -> txn -> store) or sideways, or
//     production code importing benchmark or test machinery.
//
// Each check takes the repository root and returns its findings, one line
// each naming the file and the fix, so the tests can run them on a planted
// tree as well as on the real one. The package has no state.
package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// MaxFuncLines is the longest a non-test function may be, counted from the
// line of its func keyword to the line of its closing brace.
const MaxFuncLines = 80

// walk calls fn for every regular file under root whose name ends in suffix,
// skipping hidden directories (.git, .tools) and bin/ (build output).
func walk(root, suffix string, fn func(rel string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), suffix) {
			return nil
		}
		return fn(rel)
	})
}

// mdRef matches a token that names a Markdown file: a path of word
// characters, dots, dashes and slashes ending in ".md".
var mdRef = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)

// urlRef matches a URL (scheme://...) up to a space or a closing bracket.
var urlRef = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]]*`)

// mdExists reports whether ref, cited from the file at rel, names a file in
// the repository: relative to the citing file's directory, relative to the
// root, or (for a bare name such as "REPORT.md") any file of that name.
func mdExists(root, rel, ref string, byBase map[string]bool) bool {
	ref = strings.TrimPrefix(ref, "./")
	if !strings.Contains(ref, "/") && byBase[ref] {
		return true
	}
	for _, p := range []string{filepath.Join(filepath.Dir(rel), ref), ref} {
		if st, err := os.Stat(filepath.Join(root, p)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// MissingDocs returns one finding per citation of a .md file that does not
// exist under root: in the comments of every .go file, and anywhere in
// README.md and docs/*.md, whose relative links (to any file) must also
// resolve from the linking document's directory, and in build files,
// scripts and manifests (isScript).
func MissingDocs(root string) ([]string, error) {
	byBase := map[string]bool{}
	if err := walk(root, ".md", func(rel string) error {
		byBase[filepath.Base(rel)] = true
		return nil
	}); err != nil {
		return nil, err
	}
	var out []string
	check := func(rel string, line int, text string) {
		text = urlRef.ReplaceAllString(text, "") // another site's .md is not ours
		for _, ref := range mdRef.FindAllString(text, -1) {
			if !mdExists(root, rel, ref, byBase) {
				out = append(out, fmt.Sprintf("%s:%d: cites %s, which is not in the repository: point it at a document that is (docs/ARCHITECTURE.md, docs/FORMAT.md, docs/RELIABILITY.md) or state the fact inline", rel, line, ref))
			}
		}
	}
	err := walk(root, ".go", func(rel string) error {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				check(rel, fset.Position(c.Pos()).Line, c.Text)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	docs, err := docFiles(root)
	if err != nil {
		return nil, err
	}
	for _, rel := range docs {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, fmt.Errorf("codecheck: %w", err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			check(rel, i+1, line)
			out = append(out, brokenLinks(root, rel, i+1, line)...)
		}
	}
	err = walk(root, "", func(rel string) error {
		if !isScript(rel) {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			check(rel, i+1, line)
		}
		return nil
	})
	return out, err
}

// isScript reports whether rel is a build file, script or manifest whose
// text (comments included) may cite a document.
func isScript(rel string) bool {
	switch base := filepath.Base(rel); {
	case base == "Makefile" || strings.HasPrefix(base, "Dockerfile"):
		return true
	default:
		switch filepath.Ext(base) {
		case ".sh", ".py", ".yaml", ".yml", ".tpl", ".mk":
			return true
		}
	}
	return false
}

// mdLink matches the target of a Markdown link, without its #anchor.
var mdLink = regexp.MustCompile(`\]\(([^)#\s]*)(?:#[^)\s]*)?\)`)

// brokenLinks returns one finding per relative link target on line (of
// the document rel) that names no file or directory: a link resolves
// against the document's own directory, as a Markdown viewer resolves it.
func brokenLinks(root, rel string, line int, text string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		t := m[1]
		if t == "" || strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
			continue
		}
		p := filepath.Join(root, filepath.Dir(rel), filepath.FromSlash(t))
		if strings.HasPrefix(t, "/") {
			p = filepath.Join(root, filepath.FromSlash(t))
		}
		if _, err := os.Stat(p); err != nil {
			out = append(out, fmt.Sprintf("%s:%d: links to %s, which does not exist relative to %s: fix the path", rel, line, t, filepath.ToSlash(filepath.Dir(rel))))
		}
	}
	return out
}

// docFiles lists README.md and docs/*.md under root (the documents a reader
// follows; generated reports in docs/ subdirectories are not among them).
func docFiles(root string) ([]string, error) {
	var out []string
	if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
		out = append(out, "README.md")
	}
	m, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("codecheck: %w", err)
	}
	for _, p := range m {
		out = append(out, "docs/"+filepath.Base(p))
	}
	sort.Strings(out)
	return out, nil
}

// testRef matches a test function named in a document, optionally qualified
// by its package ("stage.TestX", "lakefs-produce.TestY") and followed by a
// subtest ("TestX/case", not captured).
var testRef = regexp.MustCompile(`(?:\b([a-z][a-z0-9_-]*)\.)?\b((?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*)`)

// testFuncs maps each Test/Benchmark/Fuzz function declared in a _test.go
// file under root to the set of qualifiers it may be named by: its package
// name and its directory's base name.
func testFuncs(root string) (map[string]map[string]bool, error) {
	funcs := map[string]map[string]bool{}
	err := walk(root, "_test.go", func(rel string) error {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !testRef.MatchString(fd.Name.Name) {
				continue
			}
			q := funcs[fd.Name.Name]
			if q == nil {
				q = map[string]bool{}
				funcs[fd.Name.Name] = q
			}
			q[pkg] = true
			q[filepath.Base(filepath.Dir(filepath.Join(root, rel)))] = true
		}
		return nil
	})
	return funcs, err
}

// UnknownTests returns one finding per Test/Benchmark/Fuzz function named in
// README.md or docs/*.md that no _test.go file under root declares (in the
// named package, when the name is qualified).
func UnknownTests(root string) ([]string, error) {
	funcs, err := testFuncs(root)
	if err != nil {
		return nil, err
	}
	docs, err := docFiles(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rel := range docs {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, fmt.Errorf("codecheck: %w", err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range testRef.FindAllStringSubmatch(line, -1) {
				pkg, name := m[1], m[2]
				q, ok := funcs[name]
				switch {
				case !ok:
					out = append(out, fmt.Sprintf("%s:%d: names %s, which no _test.go file declares: name the test that proves the claim now", rel, i+1, name))
				case pkg != "" && !q[pkg]:
					out = append(out, fmt.Sprintf("%s:%d: names %s.%s, but %s is declared in package %s: fix the qualifier", rel, i+1, pkg, name, name, keys(q)))
				}
			}
		}
	}
	return out, nil
}

func keys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " or ")
}

// FuncLen is a function and its length in lines.
type FuncLen struct {
	Name  string // "dir.Func" or "dir.Type.Method", dir relative to the root
	Lines int
}

// LongFuncs returns every function declared in a non-test .go file under
// root (testdata excluded: it holds test programs) longer than MaxFuncLines,
// sorted by name.
func LongFuncs(root string) ([]FuncLen, error) {
	var out []FuncLen
	err := walk(root, ".go", func(rel string) error {
		if strings.HasSuffix(rel, "_test.go") || strings.Contains("/"+rel, "/testdata/") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > MaxFuncLines {
				out = append(out, FuncLen{Name: funcName(filepath.Dir(rel), fd), Lines: n})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// funcName names fd by its directory and, for a method, its receiver type.
func funcName(dir string, fd *ast.FuncDecl) string {
	name := fd.Name.Name
	if fd.Recv != nil && len(fd.Recv.List) == 1 {
		t := fd.Recv.List[0].Type
		if s, ok := t.(*ast.StarExpr); ok {
			t = s.X
		}
		if g, ok := t.(*ast.IndexExpr); ok {
			t = g.X
		}
		if g, ok := t.(*ast.IndexListExpr); ok {
			t = g.X
		}
		if id, ok := t.(*ast.Ident); ok {
			name = id.Name + "." + name
		}
	}
	return filepath.ToSlash(dir) + "." + name
}

// Root returns the module root above dir: the nearest directory holding go.mod.
func Root(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("codecheck: no go.mod above %s", dir)
		}
	}
}

// Layers is the import rule of the repository's packages. Directories are
// relative to the module root; a package belongs to the floor of its
// longest listed directory prefix, and packages on no floor (integration/)
// are not judged as importers.
type Layers struct {
	// Floors maps a directory to its floor: a package may import packages
	// on lower floors only.
	Floors map[string]int
	// Sideways lists "from->to" pairs of directories on one floor that
	// may import each other's packages anyway.
	Sideways map[string]bool
	// Private lists directories that no package on a floor below
	// PrivateAbove may import (benchmark and test machinery), unless it
	// is such machinery itself.
	Private      []string
	PrivateAbove int
}

// floorOf returns the floor of dir and the listed directory it falls in.
func (ls Layers) floorOf(dir string) (int, string, bool) {
	best := ""
	for d := range ls.Floors {
		if (dir == d || strings.HasPrefix(dir, d+"/")) && len(d) > len(best) {
			best = d
		}
	}
	if best == "" {
		return 0, "", false
	}
	return ls.Floors[best], best, true
}

// Layering returns one finding per import in a non-test .go file under
// root that breaks ls.
func Layering(root string, ls Layers) ([]string, error) {
	mod, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	var out []string
	err = walk(root, ".go", func(rel string) error {
		if strings.HasSuffix(rel, "_test.go") || strings.Contains("/"+rel, "/testdata/") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		floor, top, ok := ls.floorOf(dir)
		if !ok {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		for _, im := range f.Imports {
			path := strings.Trim(im.Path.Value, `"`)
			to, ok := strings.CutPrefix(path, mod+"/")
			if !ok {
				continue
			}
			if msg := ls.judge(dir, floor, top, to); msg != "" {
				out = append(out, fmt.Sprintf("%s:%d: %s", rel, fset.Position(im.Pos()).Line, msg))
			}
		}
		return nil
	})
	return out, err
}

// judge returns why package dir (on floor, in listed directory top) may not
// import package to, or "".
func (ls Layers) judge(dir string, floor int, top, to string) string {
	for _, p := range ls.Private {
		if floor < ls.PrivateAbove && under(to, p) && !ls.private(dir) {
			return fmt.Sprintf("%s imports %s, benchmark or test machinery that production packages must not carry", dir, to)
		}
	}
	tf, ttop, ok := ls.floorOf(to)
	switch {
	case !ok || ttop == top:
		return ""
	case tf > floor:
		return fmt.Sprintf("%s (floor %d) imports %s (floor %d): imports go down the floors; move the shared part down", dir, floor, to, tf)
	case tf == floor && !ls.Sideways[top+"->"+ttop]:
		return fmt.Sprintf("%s imports %s on its own floor (%d): siblings stay independent; move the shared part down", dir, to, tf)
	}
	return ""
}

// private reports whether dir is machinery itself: it may use the rest.
func (ls Layers) private(dir string) bool {
	for _, p := range ls.Private {
		if under(dir, p) {
			return true
		}
	}
	return false
}

func under(dir, p string) bool { return dir == p || strings.HasPrefix(dir, p+"/") }

// modulePath reads the module path from root's go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("codecheck: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", fmt.Errorf("codecheck: no module line in %s", filepath.Join(root, "go.mod"))
}

// LongTests returns the test functions under root that skip themselves
// under -short (a longtest.Skip call among their top-level statements), as
// "dir.TestName".
func LongTests(root string) (map[string]bool, error) {
	long := map[string]bool{}
	err := walk(root, "_test.go", func(rel string) error {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		dir := filepath.Base(filepath.Dir(filepath.Join(root, rel)))
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Test") {
				continue
			}
			for _, st := range fd.Body.List {
				if isLongSkip(st) {
					long[dir+"."+fd.Name.Name] = true
				}
			}
		}
		return nil
	})
	return long, err
}

func isLongSkip(st ast.Stmt) bool {
	es, ok := st.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "longtest" && sel.Sel.Name == "Skip"
}

// TestingDoc is where the split of the suite is written down.
const TestingDoc = "docs/TESTING.md"

// keptHeading opens TestingDoc's section of the tests make test keeps,
// one per guarantee; the section ends at the next "## " heading.
const keptHeading = "## What make test keeps"

// ShortSuite returns one finding per test that TestingDoc's kept section
// names but that skips itself under -short, and per long test TestingDoc
// does not name at all: the document is the list of what make test leaves
// out, and its promise of one real-process test per guarantee holds.
func ShortSuite(root string) ([]string, error) {
	long, err := LongTests(root)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, TestingDoc))
	if err != nil {
		return nil, fmt.Errorf("codecheck: %w", err)
	}
	named := map[string]bool{}
	var out []string
	inKept := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			inKept = strings.HasPrefix(line, keptHeading)
		}
		for _, m := range testRef.FindAllStringSubmatch(line, -1) {
			named[m[1]+"."+m[2]] = true
			if inKept && long[m[1]+"."+m[2]] {
				out = append(out, fmt.Sprintf("%s:%d: %s.%s is kept in make test here but skips itself under -short (longtest.Skip)", TestingDoc, i+1, m[1], m[2]))
			}
		}
	}
	for name := range long {
		if !named[name] {
			out = append(out, fmt.Sprintf("%s: %s skips itself under -short but is not listed: add it to the long tests, saying why", TestingDoc, name))
		}
	}
	sort.Strings(out)
	return out, nil
}
