// Package stage reads the staging tree that writers in any language fill,
// and Run turns its sealed batches into committed steps (the loop of
// `lakefs-produce run`):
//
//	<staging>/<batch>/rank-<r>/<files, subdirectories allowed>
//	<staging>/<batch>/<step-level files>
//	<staging>/<batch>/_SEALED        created last: the batch is complete
//
// Invariants:
//   - A batch without _SEALED is never read, moved or removed.
//   - Names beginning with '.' or '_' at the top of the tree are never
//     picked up as batches; the package uses them for its own bookkeeping
//     (_lock, _rejected/, and .<batch>.done-* while a committed batch is
//     removed).
//   - A staging directory belongs to one running producer: Run holds an
//     exclusive flock on _lock (Tree.Lock) for as long as it runs.
//   - A batch leaves the tree in one rename: to _rejected/<batch>/ when it
//     is invalid (with a _REASON file), or to a dot name before it is
//     deleted once its commit is durable. A crash leaves either the whole
//     batch under its name or none of it.
//   - Top-level names beginning with '_' inside a batch (_SEALED, _REASON)
//     are the protocol's, never data.
package stage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/txn"
)

// Sealed is the marker a writer creates last.
const Sealed = "_SEALED"

// RejectedDir holds invalid batches, each with a Reason file.
const RejectedDir = "_rejected"

// Reason is the file in a rejected batch that says why.
const Reason = "_REASON"

// ErrInvalid classifies a sealed batch that must be rejected; the message is
// the reason.
var ErrInvalid = errors.New("invalid batch")

// File is one staged file.
type File struct {
	Name string // '/'-separated path inside its rank directory or the batch
	Path string // on disk
	Size int64
}

// Batch is a sealed, validated batch.
type Batch struct {
	Name   string
	Dir    string
	Ranks  [][]File
	Shared []File
	Bytes  int64
}

// Tree is a staging directory.
type Tree struct {
	Dir string
}

// Open checks that dir is a directory.
func Open(dir string) (*Tree, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("staging directory %s: %w; create it or fix --staging", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("staging directory %s is not a directory; fix --staging", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &Tree{Dir: abs}, nil
}

// SealedBatches returns the names of the sealed batches, in name order.
func (t *Tree) SealedBatches() ([]string, error) {
	ents, err := os.ReadDir(t.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading staging directory: %w", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || !e.IsDir() {
			continue
		}
		// Only a regular file seals: a directory named _SEALED is a
		// writer's mistake, not its promise that the batch is complete.
		if fi, err := os.Lstat(filepath.Join(t.Dir, n, Sealed)); err == nil && fi.Mode().IsRegular() {
			names = append(names, n)
		}
	}
	slices.Sort(names) // ReadDir sorts already; the order is the contract
	return names, nil
}

// Load reads and validates a sealed batch for a stream of ranks ranks. An
// invalid batch gives an error wrapping ErrInvalid whose text is the reason.
func (t *Tree) Load(name string, ranks int) (*Batch, error) {
	b := &Batch{Name: name, Dir: filepath.Join(t.Dir, name), Ranks: make([][]File, ranks)}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if err := checkName(name); err != nil {
		return nil, invalid("batch name: %v", err)
	}
	ents, err := os.ReadDir(b.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading batch %s: %w", name, err)
	}
	seen := make([]bool, ranks)
	for _, e := range ents {
		n := e.Name()
		p := filepath.Join(b.Dir, n)
		if strings.HasPrefix(n, "_") {
			continue
		}
		if strings.HasPrefix(n, "rank-") && !e.IsDir() {
			return nil, invalid("%s is a %s, not a directory: names rank-N at the top of a batch are rank directories; rename it", n, entryKind(e.Type()))
		}
		if strings.HasPrefix(n, "rank-") {
			r, err := strconv.Atoi(strings.TrimPrefix(n, "rank-"))
			if err != nil || r < 0 || strconv.Itoa(r) != strings.TrimPrefix(n, "rank-") {
				return nil, invalid("extra directory %q: rank directories are rank-0 .. rank-%d", n, ranks-1)
			}
			if r >= ranks {
				return nil, invalid("extra rank directory %q: the stream has %d ranks (rank-0 .. rank-%d)", n, ranks, ranks-1)
			}
			files, err := walk(p, "")
			if err != nil {
				return nil, err
			}
			if len(files) == 0 {
				return nil, invalid("rank directory %s is empty: every rank needs at least one file", n)
			}
			seen[r] = true
			b.Ranks[r] = files
			continue
		}
		files, err := walkEntry(p, n, e)
		if err != nil {
			return nil, err
		}
		b.Shared = append(b.Shared, files...)
	}
	for r, ok := range seen {
		if !ok {
			return nil, invalid("missing rank directory rank-%d: the stream has %d ranks", r, ranks)
		}
	}
	for _, files := range append(slices.Clone(b.Ranks), b.Shared) {
		for _, f := range files {
			b.Bytes += f.Size
		}
	}
	return b, nil
}

// walk lists the regular files under dir, names relative to it prefixed
// with rel, in name order.
func walk(dir, rel string) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var out []File
	for _, e := range ents {
		name := e.Name()
		if rel != "" {
			name = rel + "/" + name
		}
		files, err := walkEntry(filepath.Join(dir, e.Name()), name, e)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}

func walkEntry(p, name string, e fs.DirEntry) ([]File, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch t := e.Type(); {
	case t.IsDir():
		return walk(p, name)
	case t.IsRegular():
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		return []File{{Name: name, Path: p, Size: fi.Size()}}, nil
	case t&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%w: %s is a symlink: stage regular files only", ErrInvalid, name)
	default:
		return nil, fmt.Errorf("%w: %s is a %s, not a regular file", ErrInvalid, name, kind(t))
	}
}

func entryKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeSymlink != 0:
		return "symlink"
	case t.IsRegular():
		return "file"
	}
	return kind(t)
}

func kind(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "fifo"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// checkName enforces the names a TGB may carry, as docs/FORMAT.md states
// them (txn.ValidateName): a ".." element, not ".." inside a name, is what
// is dangerous, and the limits are 255 bytes per element, 4096 in all.
func checkName(name string) error { return txn.ValidateName(name) }

// Batch converts b to the producer API's form; cursor is the batch name.
func (b *Batch) Batch() txn.Batch {
	src := func(files []File) []txn.FileSource {
		out := make([]txn.FileSource, len(files))
		for i, f := range files {
			out[i] = txn.FileSource{Name: f.Name, Size: f.Size, Open: func() (io.ReadCloser, error) { return os.Open(f.Path) }}
		}
		return out
	}
	tb := txn.Batch{Name: b.Name, Cursor: b.Name, Shared: src(b.Shared)}
	for _, r := range b.Ranks {
		tb.Ranks = append(tb.Ranks, src(r))
	}
	return tb
}

// Reject moves a batch, whole, to _rejected/<batch>/ with a _REASON file.
// The reason is written into the batch first, so the move is the one step
// that takes it out of the tree. A name already taken under _rejected gets
// a numeric suffix: rejected data is never overwritten or deleted.
func (t *Tree) Reject(name, reason string) (string, error) {
	src := filepath.Join(t.Dir, name)
	if err := os.WriteFile(filepath.Join(src, Reason), []byte(reason+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("rejecting batch %s: %w", name, err)
	}
	if err := os.MkdirAll(filepath.Join(t.Dir, RejectedDir), 0o755); err != nil {
		return "", fmt.Errorf("rejecting batch %s: %w", name, err)
	}
	dst := filepath.Join(t.Dir, RejectedDir, name)
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
			break
		}
		dst = filepath.Join(t.Dir, RejectedDir, fmt.Sprintf("%s.%d", name, i))
	}
	if err := os.Rename(src, dst); err != nil {
		return "", fmt.Errorf("rejecting batch %s: %w", name, err)
	}
	return dst, syncDir(t.Dir)
}

// Remove deletes a committed batch: a rename to a dot name takes it out of
// the tree at once, then the files go. Leftovers of a crash in between are
// swept by Sweep.
func (t *Tree) Remove(name string) error {
	gone := filepath.Join(t.Dir, "."+name+".done")
	if err := os.RemoveAll(gone); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(t.Dir, name), gone); err != nil {
		return fmt.Errorf("removing committed batch %s: %w", name, err)
	}
	if err := syncDir(t.Dir); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}

// Sweep deletes what Remove left behind when it was interrupted.
func (t *Tree) Sweep() error {
	ents, err := os.ReadDir(t.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".done") {
			if err := os.RemoveAll(filepath.Join(t.Dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// LockFile is the file in the staging directory a running producer holds
// an exclusive flock on: a staging directory belongs to one producer, or
// two would commit the same batches twice and remove each other's.
const LockFile = "_lock"

// ErrLocked classifies a staging directory held by another producer.
var ErrLocked = errors.New("staging directory in use")

// Lock takes the staging directory for producer id until unlock is called
// (or the process dies: the kernel drops a flock with its holder). The
// holder's id and pid are written into the lock file so a refused producer
// can name it.
func (t *Tree) Lock(id string) (unlock func(), err error) {
	p := filepath.Join(t.Dir, LockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking staging directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 256))
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: staging directory %s is held by %s; stop that producer, or give this one its own staging directory",
				ErrLocked, t.Dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("locking staging directory %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(fmt.Sprintf("producer %s (pid %d)\n", id, os.Getpid())), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return func() { f.Close() }, nil
}
