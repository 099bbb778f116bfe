package mount

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/internal/flagval"
)

// ErrInUse: the mount point already has a live filesystem mounted on it.
var ErrInUse = errors.New("mount point is in use")

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dev    string // major:minor
	point  string
	fstype string
	source string
}

// findMount returns the topmost mount at path (absolute, clean), if any.
func findMount(path string) (mountEntry, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountEntry{}, false, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	var found mountEntry
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source superopts
		pre, post, cut := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !cut || len(fields) < 5 || len(tail) < 2 {
			continue
		}
		if unescapeMountinfo(fields[4]) == path {
			found, ok = mountEntry{dev: fields[2], point: path, fstype: tail[0], source: tail[1]}, true
		}
	}
	if err := sc.Err(); err != nil {
		return mountEntry{}, false, fmt.Errorf("reading the mount table: %w", err)
	}
	return found, ok, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// StatTimeout bounds StateOf: a hung FUSE server blocks a stat forever.
const StatTimeout = 5 * time.Second

// MountState is what is mounted at a path.
type MountState int

// The states StateOf tells apart.
const (
	NotMounted MountState = iota // nothing (or the path does not exist)
	Live                         // a filesystem that answers
	Dead                         // a FUSE mount whose server is gone (ENOTCONN)
	Hung                         // no answer within StatTimeout
)

func (s MountState) String() string {
	switch s {
	case NotMounted:
		return "not mounted"
	case Live:
		return "live"
	case Dead:
		return "dead"
	case Hung:
		return "hung"
	}
	return fmt.Sprintf("MountState(%d)", int(s))
}

// StateOf tells what is mounted at path within StatTimeout: the one check
// of "what is mounted here" for the mount, its supervisors and the CSI
// driver. A stat that does not return in time means Hung; its goroutine
// stays blocked until the mount is aborted or answers. A symlink is
// NotMounted: the kernel mounts on what it resolves to.
func StateOf(ctx context.Context, path string) (MountState, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return NotMounted, err
	}
	type res struct {
		s   MountState
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := stateOf(abs)
		ch <- res{s, err}
	}()
	timer := time.NewTimer(StatTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-timer.C:
		return Hung, nil
	case <-ctx.Done():
		return NotMounted, fmt.Errorf("checking the mount at %s: %w", abs, ctx.Err())
	}
}

// stateOf is StateOf without the bound.
func stateOf(path string) (MountState, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		switch {
		case errors.Is(err, unix.ENOTCONN), errors.Is(err, unix.ECONNABORTED):
			return Dead, nil
		case errors.Is(err, unix.ENOENT):
			return NotMounted, nil
		}
		return NotMounted, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Lstat(filepath.Dir(path), &parent); err != nil {
		return NotMounted, fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	if st.Dev != parent.Dev || st.Ino == parent.Ino { // another device, or "/"
		return Live, nil
	}
	// A bind mount of the same filesystem keeps the device: ask the table.
	if _, ok, err := findMount(path); err != nil || ok {
		return Live, err
	}
	return NotMounted, nil
}

// Unmount unmounts everything stacked at path, detaching what is busy. A
// path that is gone or has nothing mounted is fine. A dead or hung FUSE
// mount is unmounted like any other: umount does not ask the server.
func Unmount(path string) error {
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

// prepareMountpoint checks that path can be mounted on: it exists, is a
// directory, and has no live mount. A stale FUSE mount left by a killed
// process ("transport endpoint is not connected") is unmounted.
func prepareMountpoint(ctx context.Context, path string, log *slog.Logger) error {
	return prepare(ctx, path, log, 3)
}

// prepare is prepareMountpoint, unmounting up to tries stale mounts
// stacked on path.
func prepare(ctx context.Context, path string, log *slog.Logger, tries int) error {
	s, err := StateOf(ctx, path)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", path, err)
	}
	switch s {
	case Dead:
		m, ok, err := findMount(path)
		if err != nil {
			return err
		}
		if !ok || !strings.HasPrefix(m.fstype, "fuse") || tries == 0 {
			return fmt.Errorf("mount point %s: %w; unmount it (umount -l %s) and retry", path, syscall.ENOTCONN, path)
		}
		log.Warn("mount point has a stale FUSE mount (its process died); unmounting it", "mountpoint", path, "type", m.fstype, "source", m.source)
		if err := syscall.Unmount(path, 0); err != nil {
			// Busy: processes still hold files in it. Detach it; they keep
			// their errors, new accesses see the new mount.
			if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("mount point %s has a stale mount that could not be unmounted: %w; run umount -l %s", path, err, path)
			}
		}
		log.Info("stale mount removed", "mountpoint", path)
		return prepare(ctx, path, log, tries-1)
	case Hung:
		hint := "umount -l " + path
		if m, ok, _ := findMount(path); ok {
			if conn, cerr := devNumber(m.dev); cerr == nil && strings.HasPrefix(m.fstype, "fuse") {
				hint = fmt.Sprintf("mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null; echo 1 > /sys/fs/fuse/connections/%d/abort; umount -l %s", conn, path)
			}
		}
		return fmt.Errorf("mount point %s does not answer (a hung filesystem is mounted there); free it with: %s", path, hint)
	case Live:
		if m, ok, err := findMount(path); err == nil && ok {
			return fmt.Errorf("%w: %s has a %s filesystem (%s) mounted; unmount it (umount %s) or choose another directory",
				ErrInUse, path, m.fstype, m.source, path)
		}
		return fmt.Errorf("%w: %s has a filesystem mounted; unmount it (umount %s) or choose another directory", ErrInUse, path, path)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return flagval.Usagef("mount point %s does not exist; create it (mkdir -p %s)", path, path)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", path, err)
	case !fi.IsDir():
		return flagval.Usagef("mount point %s is not a directory", path)
	}
	return nil
}

// devNumber turns "major:minor" into the dev_t number that names a FUSE
// connection in /sys/fs/fuse/connections.
func devNumber(majMin string) (uint64, error) {
	a, b, ok := strings.Cut(majMin, ":")
	if !ok {
		return 0, fmt.Errorf("bad device %q", majMin)
	}
	maj, err := strconv.ParseUint(a, 10, 32)
	if err != nil {
		return 0, err
	}
	mnr, err := strconv.ParseUint(b, 10, 32)
	if err != nil {
		return 0, err
	}
	return unix.Mkdev(uint32(maj), uint32(mnr)), nil
}

// setReadAhead sets the kernel read-ahead of the filesystem mounted at
// path. The kernel otherwise reads ahead 128 KiB, so sequential reads
// would reach the mount as 128 KiB requests whatever max_read allows.
func setReadAhead(path string, bytes int64) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	f := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(f, []byte(strconv.FormatInt(bytes>>10, 10)), 0o644)
}

// abortConnection aborts FUSE connection dev (the device number of the
// mount, see devNumber) through fusectl, mounting fusectl if needed, so a
// detached mount still in use stops at once.
func abortConnection(dev uint64) error {
	dir := "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(dir, strconv.FormatUint(dev, 10))); err != nil {
		if err := syscall.Mount("none", dir, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mounting fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(dir, strconv.FormatUint(dev, 10), "abort"), []byte("1"), 0o200)
}

// FSType is the filesystem type of a lakefs mount in /proc/self/mountinfo
// ("fuse." + the FUSE mount's Name).
const FSType = "fuse.lakefs"

// Abort frees the mount point path of a hung or dead lakefs-mount: it
// aborts the FUSE connection mounted there (every request blocked in it,
// and every later one, fails with ENOTCONN instead of waiting forever) and
// detaches the mount, so that the next lakefs-mount on path starts clean.
// It refuses anything but a lakefs mount: a mistyped path must not kill
// another filesystem (an s3fs mount a trainer writes checkpoints to). It
// never looks inside the mount (a hung filesystem would block it). The
// process that served the mount is not signalled: a stopped or stuck one is
// the operator's to kill.
func Abort(path string) error {
	abs, err := resolveMountpoint(path)
	if err != nil {
		return err
	}
	m, ok, err := findMount(abs)
	if err != nil {
		return err
	}
	if !ok {
		return flagval.Usagef("nothing is mounted on %s; nothing to abort", abs)
	}
	if m.fstype != FSType {
		return flagval.Usagef("%s has a %s filesystem (%s) mounted, not a lakefs mount (%s); refusing to abort it", abs, m.fstype, m.source, FSType)
	}
	dev, err := devNumber(m.dev)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", abs, err)
	}
	if err := abortConnection(dev); err != nil && !errors.Is(err, os.ErrNotExist) {
		// ErrNotExist: the connection is already gone (its process died).
		return fmt.Errorf("aborting the FUSE connection of %s: %w", abs, err)
	}
	if err := syscall.Unmount(abs, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching %s: %w; run umount -l %s", abs, err, abs)
	}
	return nil
}

// resolveMountpoint is path as the kernel recorded the mount on it: absolute,
// symlinks resolved. Only the parent is resolved first, because stat of the
// mount point itself would block on a hung filesystem; the last element is
// followed only when it is not a mount point, and then with a timeout.
func resolveMountpoint(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", flagval.Usagef("mount point %q: %v", path, err)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", flagval.Usagef("mount point %s: %v", abs, err)
	}
	abs = filepath.Join(dir, filepath.Base(abs))
	if _, ok, err := findMount(abs); err != nil || ok {
		return abs, err
	}
	type res struct {
		p   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		p, err := filepath.EvalSymlinks(abs)
		ch <- res{p, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return abs, nil // reported as "nothing is mounted"
		}
		return r.p, nil
	case <-time.After(StatTimeout):
		return abs, nil
	}
}
