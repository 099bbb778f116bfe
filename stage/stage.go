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
//   - Inside a batch only two top-level names are the protocol's, never
//     data: _SEALED (the writer's seal) and _REASON (the producer's
//     rejection reason). Every other name, '_'-prefixed ones included, is
//     committed; a sealed batch holding its own _REASON is rejected, never
//     committed without it or deleted.
//   - Nothing that was not committed is deleted: a batch is removed only
//     after its commit is durable, and then it holds only committed files,
//     its _SEALED and empty directories.
package stage

import (
	"cmp"
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
	// crashed, if set (tests), is called between the steps of an
	// operation that a kill may interrupt, with the step's name, and
	// once a scan has listed the batches ("scanned").
	crashed func(point string)
}

func (t *Tree) crashPoint(point string) {
	if t.crashed != nil {
		t.crashed(point)
	}
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

// fileKind names a non-regular file's type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return "special file"
	}
}

// Skipped is a top-level entry that looks like a sealed batch but is never
// picked up, and why.
type Skipped struct {
	Name, Why string
}

// Scan returns the names of the sealed batches, in name order, and the
// sealed entries it will never pick up (a symlink, a '_' or '.' name):
// they stay where they are, untouched, and a user should be told why.
func (t *Tree) Scan() (names []string, skipped []Skipped, err error) {
	ents, err := os.ReadDir(t.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading staging directory: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		// Only a regular file seals: a directory named _SEALED is a
		// writer's mistake, not its promise that the batch is complete.
		// (Lstat follows a symlinked batch directory, not the marker.)
		fi, err := os.Lstat(filepath.Join(t.Dir, n, Sealed))
		if err != nil {
			continue
		}
		switch {
		case n == RejectedDir || strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".done"):
			// the producer's own
		case !fi.Mode().IsRegular():
			// Never picked up, but said: the writer meant to seal it.
			skipped = append(skipped, Skipped{n, "its " + Sealed + " is a " + fileKind(fi.Mode()) + ", not a regular file: a batch is sealed by a file " + Sealed + " created last; replace it with one"})
		case strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_"):
			skipped = append(skipped, Skipped{n, "names beginning with '.' or '_' in the staging directory are the producer's own, never batches; rename it to commit it"})
		case e.Type()&fs.ModeSymlink != 0:
			skipped = append(skipped, Skipped{n, "it is a symlink: a batch must be a directory in the staging directory itself; move the directory here (mv) instead of linking to it"})
		case e.IsDir():
			names = append(names, n)
		}
	}
	slices.Sort(names) // ReadDir sorts already; the order is the contract
	t.crashPoint("scanned")
	return names, skipped, nil
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
		switch {
		case n == Sealed:
			continue
		case n == Reason:
			return nil, invalid("%s at the top of a batch is reserved for the producer's rejection reason; rename it (any other name is committed)", Reason)
		case strings.HasPrefix(n, "rank-") && e.Type()&fs.ModeSymlink != 0:
			return nil, invalid("%s is a symlink: a rank directory must be a real directory inside the batch; move (or copy) the directory into the batch instead of linking to it", n)
		case strings.HasPrefix(n, "rank-") && !e.IsDir():
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
			files, err := walk(p, "", n+"/")
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
		files, err := walkEntry(p, n, "", e)
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
// with rel, in name order. Reasons name a file as top+name: its path
// inside the batch, rank directory included.
func walk(dir, rel, top string) ([]File, error) {
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
		files, err := walkEntry(filepath.Join(dir, e.Name()), name, top, e)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}

func walkEntry(p, name, top string, e fs.DirEntry) ([]File, error) {
	if err := checkName(name); err != nil {
		if top != "" {
			return nil, fmt.Errorf("%w: in %s: %v", ErrInvalid, strings.TrimSuffix(top, "/"), err)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch t := e.Type(); {
	case t.IsDir():
		return walk(p, name, top)
	case t.IsRegular():
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		return []File{{Name: name, Path: p, Size: fi.Size()}}, nil
	case t&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%w: %s%s is a symlink: stage regular files only", ErrInvalid, top, name)
	default:
		return nil, fmt.Errorf("%w: %s%s is a %s, not a regular file", ErrInvalid, top, name, kind(t))
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
			// O_NOFOLLOW: a file swapped for a symlink after Load checked
			// it is refused, not followed (run may read as root).
			out[i] = txn.FileSource{Name: f.Name, Size: f.Size, Open: func() (io.ReadCloser, error) {
				return os.OpenFile(f.Path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			}}
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
// The move comes first and is the one step that takes the batch out of
// the tree, so a kill at any point leaves either the batch staged as the
// writer left it or the batch rejected; the reason is then written to a
// temporary name and linked into place, so a _REASON is never seen empty
// or partial (a kill before the link leaves the reason in the log only).
// A name already taken under _rejected gets a numeric suffix: rejected
// data is never overwritten or deleted, and neither is a _REASON the
// writer put there (ours goes to _REASON.1, ...).
//
// Writing the reason is best-effort: on a full disk the batch is rejected
// without it (the reason is in the caller's log line). If the batch cannot
// move, it stays where it is, untouched, and the error wraps ErrUnmovable:
// later batches can still commit, and a later pass moves it.
func (t *Tree) Reject(name, reason string) (string, error) {
	src := filepath.Join(t.Dir, name)
	if err := os.MkdirAll(filepath.Join(t.Dir, RejectedDir), 0o755); err != nil {
		return "", fmt.Errorf("%w: rejecting batch %s: %w", ErrUnmovable, name, err)
	}
	if fi, err := os.Lstat(filepath.Join(t.Dir, RejectedDir)); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: rejecting batch %s: %s is not a directory (a symlink?); remove it, run makes its own", ErrUnmovable, name, filepath.Join(t.Dir, RejectedDir))
	}
	dst := filepath.Join(t.Dir, RejectedDir, name)
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
			break
		}
		dst = filepath.Join(t.Dir, RejectedDir, fmt.Sprintf("%s.%d", name, i))
	}
	if err := os.Rename(src, dst); err != nil {
		return "", fmt.Errorf("%w: rejecting batch %s: %w", ErrUnmovable, name, err)
	}
	t.crashPoint("moved")
	if err := syncDir(t.Dir); err != nil {
		return dst, err
	}
	t.writeReason(dst, reason)
	return dst, nil
}

// ErrUnmovable classifies a rejected batch that could not be moved out of
// the tree (a full disk, permissions): it stays staged, untouched.
var ErrUnmovable = errors.New("rejected batch not moved")

// writeReason writes reason to a new temporary file under _rejected/,
// then links it into dir (the rejected batch) as the first free name of
// _REASON, _REASON.1, ... (never over a file already there), so the file
// appears whole or not at all. It returns the path linked, or "" when it
// could not (the reason stays in the log).
//
// A batch's files are its writer's: nothing is ever opened for writing
// inside it. The temporary file has a random name created with O_EXCL
// (a planted name or symlink is never written through), and the link is
// made in dir opened without following symlinks (link(2) itself never
// follows one at its new name).
func (t *Tree) writeReason(dir, reason string) string {
	f, err := os.CreateTemp(filepath.Join(t.Dir, RejectedDir), reasonTmpPrefix+"*")
	if err != nil {
		return ""
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(reason + "\n")
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "" // a partial reason is worse than none
	}
	t.crashPoint("reason-written")
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(dfd)
	for i := 0; ; i++ {
		name := Reason
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		err := unix.Linkat(unix.AT_FDCWD, tmp, dfd, name, 0)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return ""
		}
		t.crashPoint("reason-linked")
		return filepath.Join(dir, name)
	}
}

// reasonTmpPrefix names writeReason's temporary files in _rejected/
// (a kill can leave one; Sweep removes them).
const reasonTmpPrefix = ".reason-"

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
	// Reasons a kill left unlinked (regular files only: a writer's
	// symlink of that name is not ours to follow or remove).
	tmps, _ := filepath.Glob(filepath.Join(t.Dir, RejectedDir, reasonTmpPrefix+"*"))
	for _, p := range tmps {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			_ = os.Remove(p)
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
// can name it. The lock file and the name are best-effort: on a full
// staging disk the lock itself still holds, and committing is what frees
// the space.
func (t *Tree) Lock(id string) (unlock func(), err error) {
	// The flock that excludes is on the directory itself: it needs no
	// inode, so a full staging disk still lets run start and commit, which
	// is what frees it.
	d, err := os.Open(t.Dir)
	if err != nil {
		return nil, fmt.Errorf("locking staging directory: %w", err)
	}
	p := filepath.Join(t.Dir, LockFile)
	held := func() error {
		holder, _ := os.ReadFile(p)
		if len(holder) > 256 {
			holder = holder[:256]
		}
		return fmt.Errorf("%w: staging directory %s is held by %s; stop that producer, or give this one its own staging directory",
			ErrLocked, t.Dir, cmp.Or(strings.TrimSpace(string(holder)), "another producer"))
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		d.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, held()
		}
		return nil, fmt.Errorf("locking staging directory %s: %w", t.Dir, err)
	}
	// _lock names the holder for a refused producer and excludes one of an
	// older version, which locks only it. Best effort when no inode is free.
	// O_NOFOLLOW: a symlink planted as _lock is refused, never followed
	// (the truncate below would empty its target).
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return func() { d.Close() }, nil
	}
	if errors.Is(err, unix.ELOOP) {
		d.Close()
		return nil, fmt.Errorf("locking staging directory: %s is a symlink, which run never follows; remove it (run creates its own)", p)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("locking staging directory: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		d.Close()
		return nil, fmt.Errorf("locking staging directory: %s is not a regular file; remove it (run creates its own)", p)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		d.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, held()
		}
		return nil, fmt.Errorf("locking staging directory %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		// An error leaves the file empty (a refused producer then names
		// no holder); the flock is what excludes.
		if _, err := f.WriteAt([]byte(fmt.Sprintf("producer %s (pid %d)\n", id, os.Getpid())), 0); err != nil {
			_ = f.Truncate(0)
		}
	}
	return func() { f.Close(); d.Close() }, nil
}
