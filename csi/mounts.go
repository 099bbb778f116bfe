package csi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bindReadOnly bind-mounts src at target and makes the bind read-only (a
// bind mount ignores MS_RDONLY on creation; only a remount applies it).
func bindReadOnly(src, target string) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s at %s: %w", src, target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return fmt.Errorf("making the bind mount at %s read-only: %w", target, err)
	}
	return nil
}

// unmountAll unmounts everything stacked at path, detaching what is busy.
// A path that is gone or not a mount point is fine: unpublish must
// succeed on a target the kubelet or a crash already cleaned. A dead FUSE
// server ("transport endpoint is not connected") is unmounted like any
// other: umount does not ask the server.
func unmountAll(path string) error {
	for range 16 {
		err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not (or no longer) a mount point
		default:
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmounting %s: still mounted after 16 unmounts", path)
}

// removeTarget unmounts and removes a target directory.
func removeTarget(target string) error {
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", target, err)
	}
	return nil
}

// mountState says what is mounted at path.
type mountState int

const (
	notMounted mountState = iota
	mountedLive
	mountedDead // its FUSE server is gone: ENOTCONN
)

// stateOf tells whether path is a mount point (its device differs from
// its parent's) and whether its FUSE server still answers. It stats path:
// a hung (not dead) server blocks it, as it blocks every reader.
func stateOf(path string) (mountState, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		switch {
		case errors.Is(err, unix.ENOTCONN):
			return mountedDead, nil
		case errors.Is(err, unix.ENOENT):
			return notMounted, nil
		}
		return notMounted, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Lstat(filepath.Dir(path), &parent); err != nil {
		return notMounted, fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	if st.Dev == parent.Dev && st.Ino != parent.Ino {
		return notMounted, nil
	}
	return mountedLive, nil
}

// startTime returns pid's start time (/proc/PID/stat field 22), or false
// if no such process runs.
func startTime(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19]. A zombie has exited.
	if len(f) < 20 || f[0] == "Z" {
		return 0, false
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return t, err == nil
}

// alive tells whether p still runs (the same process, not a reused pid).
func (p procID) alive() bool {
	if p.PID <= 0 {
		return false
	}
	t, ok := startTime(p.PID)
	return ok && t == p.Start
}
