package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// memStore is an in-process store for unit tests. Objects are immutable
// byte slices; a Put replaces the slice, so readers holding the old one are
// unaffected.
type memStore struct {
	mu   sync.Mutex
	objs map[string]memObj // GUARDED_BY(mu)
	now  func() time.Time  // the store's clock: objects' ModTime
}

type memObj struct {
	data []byte
	mod  time.Time
}

// NewMem returns an empty in-process store that nothing else shares.
func NewMem() Store { return NewMemClock(time.Now) }

// NewMemClock is NewMem with its own clock: now stamps each object's
// ModTime (its Last-Modified), so a test can run a store whose clock
// differs from the processes' (see Clock).
func NewMemClock(now func() time.Time) Store {
	return &memStore{objs: map[string]memObj{}, now: now}
}

// openMem opens a new, empty store. Two opens of one mem:// URL do not
// share objects: sharing would need package state, and mem:// is only for
// unit tests, which pass the Store value itself (NewMem).
func openMem(u *url.URL, raw string) (Store, error) {
	if u.Host+u.Path == "" {
		return nil, fmt.Errorf("%w: store URL %q names no store; use mem://name", ErrInvalid, raw)
	}
	return NewMem(), nil
}

func (s *memStore) lookup(ctx context.Context, op, key string) (memObj, error) {
	if err := ValidateKey(key); err != nil {
		return memObj{}, err
	}
	if err := ctxErr(ctx, op, key); err != nil {
		return memObj{}, err
	}
	s.mu.Lock()
	o, ok := s.objs[key]
	s.mu.Unlock()
	if !ok {
		return memObj{}, fmt.Errorf("mem %s %s: %w", op, key, ErrNotFound)
	}
	return o, nil
}

func (s *memStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	o, err := s.lookup(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(o.data)), nil
}

func (s *memStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := checkRange(key, off, n); err != nil {
		return nil, err
	}
	o, err := s.lookup(ctx, "get range", key)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return []byte{}, nil
	}
	if off+n > int64(len(o.data)) {
		return nil, rangeErr("mem", key, off, n, int64(len(o.data)))
	}
	return slices.Clone(o.data[off : off+n]), nil
}

// GetTail implements TailGetter.
func (s *memStore) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	o, err := s.lookup(ctx, "get tail", key)
	if err != nil {
		return nil, 0, err
	}
	size := int64(len(o.data))
	return slices.Clone(o.data[size-min(n, size):]), size, nil
}

func (s *memStore) Stat(ctx context.Context, key string) (Info, error) {
	o, err := s.lookup(ctx, "stat", key)
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: int64(len(o.data)), ModTime: o.mod}, nil
}

func (s *memStore) read(ctx context.Context, op, key string, r io.Reader, size int64) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	data, err := readExactly(r, size)
	if err != nil {
		return nil, fmt.Errorf("mem %s %s: %w", op, key, err)
	}
	if err := ctxErr(ctx, op, key); err != nil {
		return nil, err
	}
	return data, nil
}

func (s *memStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	data, err := s.read(ctx, "put", key, r, size)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.objs[key] = memObj{data: data, mod: s.now()}
	s.mu.Unlock()
	return nil
}

func (s *memStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	data, err := s.read(ctx, "create", key, r, size)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[key]; ok {
		return fmt.Errorf("mem create %s: %w", key, ErrExists)
	}
	s.objs[key] = memObj{data: data, mod: s.now()}
	return nil
}

func (s *memStore) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, false, err
	}
	if err := ctxErr(ctx, "list", prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	s.mu.Lock()
	var out []Info
	for k, o := range s.objs {
		if strings.HasPrefix(k, prefix) && k > after {
			out = append(out, Info{Key: k, Size: int64(len(o.data)), ModTime: o.mod})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Key, b.Key) })
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

func (s *memStore) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	if err := ctxErr(ctx, "delete", keysName(keys)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.objs, k)
	}
	return nil
}

// readExactly reads size bytes from r and fails if r yields fewer or more.
func readExactly(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative size %d", ErrInvalid, size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("reading %d bytes of input: %w", size, err)
	}
	if err := expectEOF(r, size); err != nil {
		return nil, err
	}
	return data, nil
}

// expectEOF checks that r has nothing after the declared size bytes.
func expectEOF(r io.Reader, size int64) error {
	var one [1]byte
	n, err := r.Read(one[:])
	if n > 0 {
		return fmt.Errorf("%w: input is longer than the declared %d bytes", ErrInvalid, size)
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("reading past the declared %d bytes: %w", size, err)
	}
	return nil
}

func checkRange(key string, off, n int64) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("%w: range off=%d n=%d of %s is negative", ErrInvalid, off, n, key)
	}
	return nil
}

func rangeErr(backend, key string, off, n, size int64) error {
	return fmt.Errorf("%s get range %s [%d,%d) of %d bytes: %w", backend, key, off, off+n, size, ErrRange)
}
