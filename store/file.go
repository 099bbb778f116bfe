package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// fileStore keeps each object as a regular file under root, at the path its
// key names. New objects are written to a temporary file in root/.lakefs-tmp
// (same file system), fsynced, then published with rename (Put) or link
// (Create: link fails with EEXIST if the name exists, which makes it an
// atomic create-if-absent), and the parent directory is fsynced. A reader
// therefore never sees a partial object under its final name, and a crash
// leaves at most a stray temporary file. Concurrent publishes into one
// directory share its fsync (groupSync).
type fileStore struct {
	root  string // absolute, cleaned
	tmp   string // root/.lakefs-tmp
	syncs *groupSync
}

// NewFile opens (creating if needed) a file store rooted at the absolute
// directory dir.
func NewFile(dir string) (Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: store directory %q is relative; use an absolute path (file:///abs/dir)", ErrInvalid, dir)
	}
	// Nothing is created until the first write: a read-only command on a
	// mistyped path must leave nothing behind.
	root := filepath.Clean(dir)
	return &fileStore{root: root, tmp: filepath.Join(root, reservedDir), syncs: &groupSync{fsync: syncDir, dirs: map[string]*dirSync{}}}, nil
}

func openFile(u *url.URL, raw string) (Store, error) {
	if u.Host != "" && u.Host != "localhost" || u.Opaque != "" || u.Path == "" {
		return nil, fmt.Errorf("%w: store URL %q is not an absolute file URL; use file:///abs/dir (three slashes)", ErrInvalid, raw)
	}
	return NewFile(u.Path)
}

func (s *fileStore) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// classify turns OS errors into the package's sentinels.
func classify(op, key string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("file %s %s: %w", op, key, ErrNotFound)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("file %s %s: %w", op, key, ErrExists)
	}
	return fmt.Errorf("file %s %s: %w", op, key, err)
}

func (s *fileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, "get", key); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, classify("get", key, err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("file get %s: %w", key, ErrNotFound)
	}
	return f, nil
}

func (s *fileStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	rc, err := s.GetRangeStream(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := make([]byte, n)
	if _, err := io.ReadFull(rc, buf); err != nil {
		if !errors.Is(err, ErrRange) {
			err = classify("get range", key, err)
		}
		return nil, err
	}
	return buf, nil
}

// GetRangeStream implements RangeStreamer: a section of the open file.
func (s *fileStore) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := checkRange(key, off, n); err != nil {
		return nil, err
	}
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, "get range", key); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, classify("get range", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, classify("get range", key, err)
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("file get range %s: %w", key, ErrNotFound)
	}
	if off+n > st.Size() {
		f.Close()
		return nil, rangeErr("file", key, off, n, st.Size())
	}
	return &exactReader{r: sectionFile{io.NewSectionReader(f, off, n), f}, left: n, errLine: func(got int64) error {
		return rangeErr("file", key, off, n, off+got)
	}}, nil
}

type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s sectionFile) Close() error { return s.f.Close() }

// GetTail implements TailGetter: one open, fstat and pread.
func (s *fileStore) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, 0, err
	}
	if err := ctxErr(ctx, "get tail", key); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, classify("get tail", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, classify("get tail", key, err)
	}
	if st.IsDir() {
		return nil, 0, fmt.Errorf("file get tail %s: %w", key, ErrNotFound)
	}
	k := min(n, st.Size())
	buf := make([]byte, k)
	if _, err := f.ReadAt(buf, st.Size()-k); err != nil {
		return nil, 0, classify("get tail", key, err)
	}
	return buf, st.Size(), nil
}

func (s *fileStore) Stat(ctx context.Context, key string) (Info, error) {
	p, err := s.path(key)
	if err != nil {
		return Info{}, err
	}
	if err := ctxErr(ctx, "stat", key); err != nil {
		return Info{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return Info{}, classify("stat", key, err)
	}
	if st.IsDir() {
		return Info{}, fmt.Errorf("file stat %s: %w", key, ErrNotFound)
	}
	return Info{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// writeTemp copies exactly size bytes of r into a new fsynced temporary
// file and returns its path. ctx is checked between chunks so a cancelled
// large write stops early.
func (s *fileStore) writeTemp(ctx context.Context, r io.Reader, size int64) (string, error) {
	if size < 0 {
		return "", fmt.Errorf("%w: negative size %d", ErrInvalid, size)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	p := filepath.Join(s.tmp, hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(s.tmp, 0o755); err == nil {
			f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		}
	}
	if err != nil {
		return "", fmt.Errorf("file store %s: %w", s.root, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(p)
		}
	}()
	n, err := io.Copy(f, ContextReader(ctx, io.LimitReader(r, size)))
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("input ended after %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err := expectEOF(r, size); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	ok = true
	return p, nil
}

// publish moves the finished temporary file tmp to key's path with link
// (exclusive) or rename (replace), creating parent directories as needed.
func (s *fileStore) publish(ctx context.Context, op, key, tmp string, exclusive bool) error {
	defer os.Remove(tmp) // after a link the temporary name remains; after a rename it is gone
	p, err := s.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	// A concurrent Delete may remove an empty parent between MkdirAll and
	// the link, so retry a few times on ENOENT.
	for attempt := 0; ; attempt++ {
		if err := ctxErr(ctx, op, key); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return classifyMkdir(op, key, err)
		}
		if exclusive {
			err = os.Link(tmp, p)
		} else {
			err = os.Rename(tmp, p)
		}
		if err == nil {
			break
		}
		if errors.Is(err, fs.ErrNotExist) && attempt < 5 {
			continue
		}
		if exclusive && errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("file %s %s: %w", op, key, ErrExists)
		}
		return fmt.Errorf("file %s %s: %w", op, key, err)
	}
	return s.syncs.sync(dir)
}

// groupSync is group commit for directory fsyncs: a publisher needs one
// fsync of its directory that starts after its link or rename. While one
// runs, the publishers that arrive wait, and then one fsync covers them
// all, so N concurrent commits into one directory (the log's versions, a
// producer's data) cost about two fsyncs, not N.
type groupSync struct {
	fsync func(dir string) error // syncDir; tests slow it down

	mu   sync.Mutex
	dirs map[string]*dirSync // GUARDED_BY(mu); an entry lives while it has users
}

// dirSync is one directory's fsync generations. INVARIANT: done <= started
// <= done+1, and running == (started > done).
type dirSync struct {
	cond          *sync.Cond // on groupSync.mu
	started, done uint64     // fsyncs started and finished
	running       bool
	err           error // of fsync number done
	users         int
}

func (g *groupSync) sync(dir string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.dirs[dir]
	if d == nil {
		d = &dirSync{cond: sync.NewCond(&g.mu)}
		g.dirs[dir] = d
	}
	d.users++
	defer func() {
		if d.users--; d.users == 0 {
			delete(g.dirs, dir)
		}
	}()
	// A running fsync may have started before our link: we need the next.
	need := d.started + 1
	for d.done < need {
		if d.running {
			d.cond.Wait()
			continue
		}
		d.running = true
		d.started++
		n := d.started
		g.mu.Unlock()
		err := g.fsync(dir)
		g.mu.Lock()
		d.running, d.done, d.err = false, n, err
		d.cond.Broadcast()
	}
	// Fsync number done started after our link, so it covers it.
	return d.err
}

// classifyMkdir explains the one expected mkdir failure: a key whose parent
// is an existing object (like S3 servers that store keys as files, the file
// store cannot hold both "a" and "a/b").
func classifyMkdir(op, key string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: file %s %s: a parent of the key is an object; keys \"a\" and \"a/b\" cannot both exist", ErrInvalid, op, key)
	}
	return fmt.Errorf("file %s %s: %w", op, key, err)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *fileStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if _, err := s.path(key); err != nil {
		return err
	}
	tmp, err := s.writeTemp(ctx, r, size)
	if err != nil {
		return fmt.Errorf("file put %s: %w", key, err)
	}
	return s.publish(ctx, "put", key, tmp, false)
}

func (s *fileStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	// Cheap early answer for the common lost race; the link below is what
	// makes the decision atomic.
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("file create %s: %w", key, ErrExists)
	}
	tmp, err := s.writeTemp(ctx, r, size)
	if err != nil {
		return fmt.Errorf("file create %s: %w", key, err)
	}
	return s.publish(ctx, "create", key, tmp, true)
}

// List walks the directory tree in key order. Within one directory, entries
// sort by their key spelling: a file "x" as "x", a directory "x" as "x/", so
// that "a-b" (0x2d) comes before the keys under "a/" (0x2f) as in S3.
// Subtrees that lie wholly before `after` or outside prefix are skipped.
func (s *fileStore) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	l := &lister{ctx: ctx, prefix: prefix, after: after, limit: limit}
	if err := s.list(l); err != nil && !errors.Is(err, errListFull) {
		return nil, false, err
	}
	return l.out, l.more, nil
}

// Walk lists every key under prefix after after in one pass (Walker): a
// directory is read once, where paging through List reads it once per
// page, which made listing a log of a million versions quadratic.
func (s *fileStore) Walk(ctx context.Context, prefix, after string, fn func(Info) error) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	return s.list(&lister{ctx: ctx, prefix: prefix, after: after, fn: fn})
}

func (s *fileStore) list(l *lister) error {
	// Start at the deepest directory that the prefix fully names.
	base := ""
	if i := strings.LastIndexByte(l.prefix, '/'); i >= 0 {
		base = l.prefix[:i+1]
	}
	err := l.walk(filepath.Join(s.root, filepath.FromSlash(base)), base)
	if err != nil && !errors.Is(err, errListFull) && l.fn == nil {
		return fmt.Errorf("file list %s: %w", l.prefix, err)
	}
	return err
}

var errListFull = errors.New("list page full")

// lister collects a page of keys (limit, out, more), or hands every key
// to fn.
type lister struct {
	ctx           context.Context
	prefix, after string
	limit         int
	out           []Info
	more          bool
	fn            func(Info) error
}

func (l *lister) walk(dir, keyDir string) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	sorted, err := readSorted(dir, keyDir == "")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return err
	}
	for i, en := range sorted {
		sorted[i] = dirEnt{} // let what was listed go as the walk moves on
		if i%1024 == 1023 {
			if err := l.ctx.Err(); err != nil {
				return err
			}
		}
		key := keyDir + en.name
		if en.dir {
			// Skip a subtree that cannot hold a key with the prefix, or whose
			// every key is <= after.
			if !strings.HasPrefix(key, l.prefix) && !strings.HasPrefix(l.prefix, key) {
				continue
			}
			if key < l.after && !strings.HasPrefix(l.after, key) {
				continue
			}
			if err := l.walk(filepath.Join(dir, strings.TrimSuffix(en.name, "/")), key); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(key, l.prefix) || key <= l.after || !en.regular {
			continue
		}
		if l.fn == nil && len(l.out) == l.limit {
			l.more = true
			return errListFull
		}
		fi, err := os.Lstat(filepath.Join(dir, en.name))
		if err != nil {
			continue // deleted since it was read
		}
		info := Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}
		if l.fn != nil {
			if err := l.fn(info); err != nil {
				return err
			}
			continue
		}
		l.out = append(l.out, info)
	}
	return nil
}

// dirEnt is what a listing keeps of a directory entry: a directory's name
// ends in "/" (its key spelling, which sorts it among the keys).
type dirEnt struct {
	name         string
	dir, regular bool
}

// readSorted reads dir's entries in key order, a batch at a time, keeping
// only names and kinds: a directory of a million log versions costs a
// name apiece, not an os.DirEntry.
func readSorted(dir string, root bool) ([]dirEnt, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []dirEnt
	for {
		batch, err := f.ReadDir(4096)
		for _, e := range batch {
			name := e.Name()
			if root && name == reservedDir {
				continue
			}
			en := dirEnt{name: name, dir: e.IsDir(), regular: e.Type().IsRegular()}
			if en.dir {
				en.name += "/"
			}
			out = append(out, en)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b dirEnt) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func (s *fileStore) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if _, err := s.path(k); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if err := ctxErr(ctx, "delete", k); err != nil {
			return err
		}
		p, _ := s.path(k)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file delete %s: %w", k, err)
		}
		// Remove parents left empty so per-TGB directories do not pile up;
		// rmdir fails harmlessly on a non-empty or concurrently filled one.
		for d := filepath.Dir(p); d != s.root && strings.HasPrefix(d, s.root); d = filepath.Dir(d) {
			if os.Remove(d) != nil {
				break
			}
		}
	}
	return nil
}

// ContextReader returns a reader of r whose reads fail once ctx is done,
// so long copies stop.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return &ctxReader{ctx: ctx, r: r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
