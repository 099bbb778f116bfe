package csi

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/mount"
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

// removeTarget unmounts and removes a target directory.
func removeTarget(target string) error {
	if err := mount.Unmount(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", target, err)
	}
	return nil
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
