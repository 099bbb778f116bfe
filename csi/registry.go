package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// sharedMount is one lakefs-mount serving every target of one share key.
type sharedMount struct {
	Key string `json:"key"`
	Dir string `json:"dir"` // <state-dir>/mounts/<key>
	// Proc is the serving process; zero once it is known dead (its
	// targets wait for their unpublish; a publish starts a new one).
	Proc procID `json:"proc"`
	// Targets are the pods' bind mounts of Dir, sorted. A target is
	// recorded before it is bound, so no bind exists unrecorded.
	Targets []string `json:"targets"`
	// Volumes are the volume ids of Targets (target -> id). Entries
	// written before it existed have none: any id matches them.
	Volumes map[string]string `json:"volumes,omitempty"`
}

// clone is a deep copy of m.
func (m *sharedMount) clone() sharedMount {
	c := *m
	c.Targets = slices.Clone(m.Targets)
	c.Volumes = maps.Clone(m.Volumes)
	return c
}

// procID names a process across pid reuse.
type procID struct {
	PID int `json:"pid"`
	// Start is the process's start time in clock ticks since boot
	// (/proc/PID/stat field 22): a pid reused by another process has
	// another.
	Start uint64 `json:"start"`
}

// registry is the set of shared mounts, persisted at <state-dir>/registry.json.
type registry struct {
	// Constant.
	path string

	mu sync.Mutex
	// mounts by share key.
	// GUARDED_BY(mu)
	// INVARIANT: every mount has at least one target, or a running
	// process a publish is about to give one.
	mounts map[string]*sharedMount
	// keyLocks serialize publishes and unpublishes of one share key;
	// an entry lives while someone holds or waits for it.
	// GUARDED_BY(mu)
	keyLocks map[string]*keyLock
}

type keyLock struct {
	mu    sync.Mutex
	users int // GUARDED_BY(registry.mu)
}

type registryFile struct {
	Mounts []*sharedMount `json:"mounts"`
}

// openRegistry reads the registry file, if any.
func openRegistry(stateDir string) (*registry, error) {
	r := &registry{path: filepath.Join(stateDir, "registry.json"), mounts: map[string]*sharedMount{}, keyLocks: map[string]*keyLock{}}
	b, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	var f registryFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("registry %s is corrupt (%w); move it away and restart: its mounts are then cleaned as unknown", r.path, err)
	}
	for _, m := range f.Mounts {
		r.mounts[m.Key] = m
	}
	return r, nil
}

// lock takes key's lock; the returned function releases it.
func (r *registry) lock(key string) (unlock func()) {
	r.mu.Lock()
	l := r.keyLocks[key]
	if l == nil {
		l = &keyLock{}
		r.keyLocks[key] = l
	}
	l.users++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.users--; l.users == 0 {
			delete(r.keyLocks, key)
		}
		r.mu.Unlock()
	}
}

// get returns a copy of key's mount.
func (r *registry) get(key string) (sharedMount, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.mounts[key]
	if !ok {
		return sharedMount{}, false
	}
	return m.clone(), true
}

// keyOf returns the share key whose mount has target.
func (r *registry) keyOf(target string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, m := range r.mounts {
		if slices.Contains(m.Targets, target) {
			return k, true
		}
	}
	return "", false
}

// all returns copies of every mount.
func (r *registry) all() []sharedMount {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]sharedMount, 0, len(r.mounts))
	for _, m := range r.mounts {
		out = append(out, m.clone())
	}
	return out
}

// put stores m (nil Targets and a zero Proc delete it) and persists.
func (r *registry) put(m sharedMount) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(m.Targets) == 0 && m.Proc == (procID{}) {
		delete(r.mounts, m.Key)
	} else {
		slices.Sort(m.Targets)
		maps.DeleteFunc(m.Volumes, func(t, _ string) bool { return !slices.Contains(m.Targets, t) })
		r.mounts[m.Key] = &m
	}
	return r.saveLocked()
}

// saveLocked writes the registry atomically. REQUIRES r.mu.
func (r *registry) saveLocked() error {
	var f registryFile
	for _, m := range r.mounts {
		f.Mounts = append(f.Mounts, m)
	}
	slices.SortFunc(f.Mounts, func(a, b *sharedMount) int { return strings.Compare(a.Key, b.Key) })
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the registry: %w", err)
	}
	tmp := r.path + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return fmt.Errorf("writing the registry: %w", err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		return fmt.Errorf("writing the registry: %w", err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
