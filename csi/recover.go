package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/lakestream/lakestream/mount"
)

// recover makes the registry true again after a driver restart: a mount
// whose process still serves is adopted, with the targets still mounted;
// a dead one is detached (its targets keep failing with ENOTCONN until
// the kubelet unpublishes them, which then succeeds); directories under
// mounts/ that no entry names are leftovers of a crash and are cleaned.
func (d *driver) recover(ctx context.Context) error {
	for _, sub := range []string{"mounts", "logs"} {
		if err := os.MkdirAll(filepath.Join(d.stateDir, sub), 0o755); err != nil {
			return fmt.Errorf("creating the state directory: %w", err)
		}
	}
	known := map[string]bool{}
	for _, m := range d.reg.all() {
		known[m.Key] = true
		if err := d.recoverMount(ctx, m); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(filepath.Join(d.stateDir, "mounts"))
	if err != nil {
		return fmt.Errorf("reading the state directory: %w", err)
	}
	for _, e := range entries {
		if known[e.Name()] {
			continue
		}
		dir := filepath.Join(d.stateDir, "mounts", e.Name())
		d.log.Warn("cleaning a mount no registry entry names", "dir", dir)
		if err := mount.Unmount(dir); err != nil {
			return err
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
	}
	return nil
}

// recoverMount adopts or cleans one registry entry. A hung mount is
// adopted as it is, targets and all, without looking into them (they hang
// too): the driver must come up for the node's other volumes, and the
// next publish of its volume restarts it, its last unpublish stops it.
func (d *driver) recoverMount(ctx context.Context, m sharedMount) error {
	live := false
	if m.Proc.alive() {
		s, err := mount.StateOf(ctx, m.Dir)
		if err == nil && s == mount.Hung {
			d.log.Warn("adopted a shared mount that does not answer; the next publish of its volume restarts it", "mount", m.Key, "pid", m.Proc.PID, "targets", len(m.Targets))
			return d.reg.put(m)
		}
		live = err == nil && s == mount.Live
	}
	m.Targets = slices.DeleteFunc(m.Targets, func(t string) bool {
		s, err := mount.StateOf(ctx, t)
		return err == nil && s == mount.NotMounted
	})
	if !live {
		d.log.Warn("cleaning a dead shared mount", "mount", m.Key, "pid", m.Proc.PID, "targets", len(m.Targets))
		if err := d.mounter.stop(ctx, m.Proc, m.Dir); err != nil {
			return err
		}
		m.Proc = procID{}
		if len(m.Targets) == 0 {
			if err := os.Remove(m.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("removing %s: %w", m.Dir, err)
			}
		}
	} else if len(m.Targets) == 0 {
		d.log.Info("stopping an adopted shared mount nobody uses", "mount", m.Key)
		if err := d.mounter.stop(ctx, m.Proc, m.Dir); err != nil {
			return err
		}
		if err := os.Remove(m.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", m.Dir, err)
		}
		m.Proc = procID{}
	} else {
		d.log.Info("adopted a shared mount", "mount", m.Key, "pid", m.Proc.PID, "targets", len(m.Targets))
	}
	return d.reg.put(m)
}
