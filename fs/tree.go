package fs

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/lakestream/lakestream/txn"
)

// PackSource gives the file list of one rank (r >= 0) or of the shared
// step-level files (r < 0; nil, nil when there are none) of a committed
// step. It may fetch it from the store; the view asks only for what a
// reader lists or opens, once per directory.
type PackSource interface {
	Pack(ctx context.Context, t *txn.TGB, r int) (*txn.Pack, error)
}

// tree is one directory's listing inside a step. A step directory's rank
// directories are not materialised: the ranks field lists them from the
// layout (rankSet.names), and an entry is made for a rank only when it is
// looked up, so a step of 1,024 ranks costs a node the ranks it reads.
type tree struct {
	names []string // listing order, after the ranks
	kids  map[string]*treeEntry
	ranks *rankSet // a step directory's ranks, or nil
}

// rankSet is the rank directories of one step directory.
type rankSet struct {
	src    PackSource
	tgb    *txn.TGB
	layout layout
	warm   func() // called when a rank's listing is built

	mu   sync.Mutex
	made map[int]*treeEntry // GUARDED_BY(mu)
}

// names lists the shown rank directories in numeric order.
func (rs *rankSet) names() []string {
	var out []string
	for r := range rs.layout.shownRanks() {
		if rs.layout.shown == nil || rs.layout.shown[r] {
			out = append(out, "rank-"+strconv.Itoa(r))
		}
	}
	return out
}

func (rs *rankSet) lookup(name string) *treeEntry {
	num, ok := strings.CutPrefix(name, "rank-")
	if !ok {
		return nil
	}
	r, err := strconv.Atoi(num)
	if err != nil || r < 0 || r >= rs.layout.shownRanks() || strconv.Itoa(r) != num || (rs.layout.shown != nil && !rs.layout.shown[r]) {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e := rs.made[r]
	if e == nil {
		e = &treeEntry{lazy: rankTree(rs.src, rs.tgb, rs.layout, r, rs.warm), rank: r}
		rs.made[r] = e
	}
	return e
}

// lookup returns the entry called name, or nil.
func (t *tree) lookup(name string) *treeEntry {
	if e := t.kids[name]; e != nil {
		return e
	}
	if t.ranks != nil {
		return t.ranks.lookup(name)
	}
	return nil
}

// list returns the listing: the rank directories, then the other names.
func (t *tree) list() (names []string, isDir func(string) bool) {
	if t.ranks != nil {
		names = t.ranks.names()
	}
	names = append(names, t.names...)
	return names, func(name string) bool {
		e := t.kids[name]
		return e == nil || e.isDir() // only rank directories are not in kids
	}
}

// treeEntry is a file, a directory whose listing is known, or a directory
// whose listing is loaded on first use (a rank's files).
type treeEntry struct {
	dir  *tree
	lazy *lazyTree
	pack *txn.Pack
	file *txn.File
	rank int // the original rank whose file this is; -1: shared
}

func (e *treeEntry) isDir() bool { return e.dir != nil || e.lazy != nil }

func newTree() *tree { return &tree{kids: map[string]*treeEntry{}} }

func (t *tree) add(name string, e *treeEntry) {
	t.names = append(t.names, name)
	t.kids[name] = e
}

// lazyTree is a listing built on first use by a function that may fail (a
// store error); a failure is not kept, so the next use retries. Concurrent
// first uses wait for one build; a waiter whose context ends stops waiting
// at once (a build may wait out a store outage for the mount's retry
// window). A built listing may be evicted (memory bounds) and is then
// built again on the next use: it is a cache of immutable data, never
// what decides whether a name exists. A known listing (no build) is
// immutable and needs no lock.
type lazyTree struct {
	// mu is a lock whose waiters can give up: held while it holds a
	// token (a channel of capacity 1), nil for a known listing.
	mu      chan struct{}
	built   *tree // GUARDED_BY(mu)
	build   func(ctx context.Context) (*tree, error)
	onBuild func() // called after each build, outside mu
}

func newLazy(build func(ctx context.Context) (*tree, error), onBuild func()) *lazyTree {
	return &lazyTree{mu: make(chan struct{}, 1), build: build, onBuild: onBuild}
}

func known(t *tree) *lazyTree { return &lazyTree{built: t} }

func (l *lazyTree) get(ctx context.Context) (*tree, error) {
	if l.build == nil {
		return l.built, nil
	}
	select {
	case l.mu <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a directory listing: %w", ctx.Err())
	}
	if t := l.built; t != nil {
		<-l.mu
		return t, nil
	}
	t, err := l.build(ctx)
	if err == nil {
		l.built = t
	}
	<-l.mu
	if err != nil {
		return nil, err
	}
	if l.onBuild != nil {
		l.onBuild()
	}
	return t, nil
}

// evict drops the built listing if it can be built again. It never waits
// for a build in progress (that listing is about to be used).
func (l *lazyTree) evict() {
	if l.build == nil {
		return
	}
	select {
	case l.mu <- struct{}{}:
	default:
		return
	}
	l.built = nil
	<-l.mu
}

// layout is how a step directory maps to the stream's ranks.
type layout struct {
	ranks int          // the stream's R
	view  int          // R2 shown when > 0 (--view-ranks), else R
	shown map[int]bool // ranks (of the view) shown; nil: all
}

// per is how many original ranks one shown rank holds.
func (l layout) per() int {
	if l.view > 0 {
		return l.ranks / l.view
	}
	return 1
}

func (l layout) shownRanks() int {
	if l.view > 0 {
		return l.view
	}
	return l.ranks
}

// stepTree is a step directory: the shown ranks in numeric order, then the
// step-level files in name order. Rank directories are named from the
// layout alone; a rank's files are fetched when its directory is first
// listed or looked into, and the shared files when the step directory is.
func stepTree(ctx context.Context, src PackSource, t *txn.TGB, l layout, warm func()) (*tree, error) {
	root := newTree()
	root.ranks = &rankSet{src: src, tgb: t, layout: l, warm: warm, made: map[int]*treeEntry{}}
	shared, err := src.Pack(ctx, t, -1)
	if err != nil {
		return nil, fmt.Errorf("step %d shared files: %w", t.Step, err)
	}
	if shared != nil {
		st := packTree(shared, -1)
		for _, name := range st.names {
			root.add(name, st.kids[name])
		}
	}
	return root, nil
}

// rankTree is the lazy listing of shown rank r: its files, or with a view,
// one directory per original rank it holds, named rank-<original>.
func rankTree(src PackSource, t *txn.TGB, l layout, r int, warm func()) *lazyTree {
	orig := func(o int) *lazyTree {
		return newLazy(func(ctx context.Context) (*tree, error) {
			p, err := src.Pack(ctx, t, o)
			if err != nil {
				return nil, fmt.Errorf("step %d rank %d: %w", t.Step, o, err)
			}
			return packTree(p, o), nil
		}, warm)
	}
	if l.view <= 0 {
		return orig(r)
	}
	dir := newTree()
	for o := r * l.per(); o < (r+1)*l.per(); o++ {
		dir.add("rank-"+strconv.Itoa(o), &treeEntry{lazy: orig(o), rank: o})
	}
	return known(dir)
}

// packTree is the directory tree of a pack's file names, each directory's
// names in byte order; rank is the original rank of its files (-1 shared).
func packTree(p *txn.Pack, rank int) *tree {
	root := newTree()
	for i := range p.Files {
		f := &p.Files[i]
		d := root
		els := strings.Split(f.Name, "/")
		for _, el := range els[:len(els)-1] {
			e := d.kids[el]
			if e == nil {
				e = &treeEntry{dir: newTree(), rank: rank}
				d.add(el, e)
			}
			d = e.dir
		}
		d.add(els[len(els)-1], &treeEntry{pack: p, file: f, rank: rank})
	}
	sortTree(root)
	return root
}

func sortTree(t *tree) {
	slices.Sort(t.names)
	for _, e := range t.kids {
		if e.dir != nil {
			sortTree(e.dir)
		}
	}
}
