package cache

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// Backing makes the memory-backed files whole files are streamed into:
// anonymous files on a private tmpfs that uses huge pages, or memfds where
// such a tmpfs cannot be made.
//
// Why a tmpfs of our own: a memfd's pages are 4 KiB (the system's shmem
// huge page setting is usually "never"), and allocating and freeing them
// one at a time cost 0.42 CPU s per GB written and closed on this
// machine's kernel, against 0.05 on a tmpfs mounted with huge=within_size
// (measured: 256 files of 4 MiB written with 256 KiB pwrites and closed).
// The tmpfs is created with the new mount API and never attached to any
// path (fsopen, fsmount): nothing outside this process can reach its
// files, it leaves no trace in the mount table, and it goes away with the
// last file. Its size limit is the memory budget (plus page rounding), so
// the kernel enforces the bound too.
type Backing struct {
	mnt  int // the detached tmpfs's mount fd, or -1: memfds
	kind string
}

// NewBacking returns the best backing this process may make for budget
// bytes: a private tmpfs with huge pages, else memfds.
func NewBacking(budget int64) *Backing {
	mnt, err := hugeTmpfs(budget)
	if err != nil {
		return &Backing{mnt: -1, kind: "memfd"}
	}
	return &Backing{mnt: mnt, kind: "tmpfs"}
}

// MemfdBacking returns a backing of memfds.
func MemfdBacking() *Backing { return &Backing{mnt: -1, kind: "memfd"} }

// Kind is "tmpfs" or "memfd".
func (b *Backing) Kind() string { return b.kind }

// Close releases the tmpfs's mount fd; files still open keep it alive.
func (b *Backing) Close() {
	if b.mnt >= 0 {
		unix.Close(b.mnt)
		b.mnt = -1
	}
}

func hugeTmpfs(budget int64) (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	// within_size: a huge page only where the file covers all of it, so a
	// file holds its size rounded to 4 KiB, as the budget counts it.
	// The limit leaves room for files' last pages (the budget counts
	// bytes, the tmpfs pages).
	limit := budget + budget/64 + 1<<20
	for k, v := range map[string]string{"huge": "within_size", "size": strconv.FormatInt(limit, 10), "mode": "0700"} {
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return -1, fmt.Errorf("tmpfs %s=%s: %w", k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("creating a tmpfs: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return mnt, nil
}

// create returns a new empty file of size bytes, open for writing.
func (b *Backing) create(name string, size int64) (int, error) {
	fd, err := b.newFile(name)
	if err != nil {
		return -1, fmt.Errorf("creating a %s file: %w", b.kind, outOfFds(err))
	}
	// Sized first: huge=within_size allocates huge pages by the file size.
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sizing a %s file to %d bytes: %w", b.kind, size, err)
	}
	return fd, nil
}

// newFile opens a new empty file of this backing. (No fd variable is
// declared before it is known: an int's zero value is fd 0, someone
// else's.)
func (b *Backing) newFile(name string) (int, error) {
	if b.mnt >= 0 {
		return unix.Openat(b.mnt, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	}
	return unix.MemfdCreate("lakefs:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
}

// freeze makes a written file unchangeable and returns the fd to hand
// out, fd itself or a new one: a memfd is sealed; a tmpfs file (which
// cannot take seals) is reopened read-only and its writable fd closed, so
// no fd can write it. On an error fd is closed.
func (b *Backing) freeze(fd int) (int, error) {
	if b.mnt < 0 {
		seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("sealing a memfd: %w", err)
		}
		return fd, nil
	}
	defer unix.Close(fd)
	ro, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reopening a tmpfs file read-only: %w", outOfFds(err))
	}
	return ro, nil
}

// ProbeFile returns a small file of this backing, for a caller that tries
// it as a FUSE backing file; the caller closes it.
func (b *Backing) ProbeFile() (int, error) {
	fd, err := b.create("probe", 4096)
	if err != nil {
		return -1, err
	}
	return b.freeze(fd)
}

// outOfFds marks a failure for want of a file descriptor (EMFILE, ENFILE)
// as ErrNoRoom: the file is served from blocks, not failed.
func outOfFds(err error) error {
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
		return fmt.Errorf("%w: %w", ErrNoRoom, err)
	}
	return err
}
