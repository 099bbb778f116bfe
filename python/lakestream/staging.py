"""Sealing batches into a lakefs-produce staging directory.

A batch is written under a temporary '.'-prefixed name the producer never
picks up, every file and directory fsynced, renamed into place whole, and
sealed last by creating _SEALED (then fsynced too). A writer that raises or
is killed before the seal leaves nothing the producer commits; after it, a
whole batch. docs/PYTHON.md has the guide.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from typing import IO, Any, Iterator, NamedTuple

from .names import REASON, REJECTED, SEALED, check_batch_name, check_file_name, check_rank, check_step_name

# Temporary batch directories: TMP_PREFIX + "<pid>-<random>-<host>", so a
# later writer on the same host can tell (and remove) those of dead ones.
TMP_PREFIX = ".lakestream-tmp-"


class Batch:
    """One step's global batch, staged for `lakefs-produce run`::

        with Batch(staging, ranks=4) as b:
            for r in range(4):
                b.write(r, "tokens.bin", data[r])
            b.write_step("meta.json", '{"lr": 0.1}')

    It is sealed when the with block ends without an exception, and never
    seen by the producer otherwise. Names are checked as the producer
    checks them, when they are written.

    name: the batch name (the producer commits batches in name order, one
    step each); by default a UTC timestamp taken when it is sealed, so
    batches of one writer sort in the order they were sealed.
    ranks: the stream's rank count; when given, rank numbers are checked
    against it and every rank must have a file when the batch is sealed.
    max_pending: wait, before the batch starts, while this many sealed
    batches are staged and not yet taken by the producer (back-pressure),
    looking again every poll seconds.
    """

    def __init__(self, staging: str | os.PathLike[str], name: str | None = None, *,
                 ranks: int | None = None, max_pending: int | None = None, poll: float = 0.2) -> None:
        if name is not None:
            check_batch_name(name)
        if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
            raise ValueError(f"ranks={ranks!r}: give the stream's rank count (1 or more), or leave it out")
        if max_pending is not None and max_pending < 1:
            raise ValueError(f"max_pending={max_pending!r}: give 1 or more, or leave it out to never wait")
        self.staging = os.fspath(staging)
        self.name = name
        self.ranks = ranks
        self.max_pending = max_pending
        self.poll = poll
        self._tmp: str | None = None
        self._names: set[str] = set()
        self._ranks_written: set[int] = set()
        self._open: list[IO[Any]] = []

    def __enter__(self) -> Batch:
        if self._tmp is not None or self._names:
            raise RuntimeError("a Batch is one batch: make a new Batch for the next one")
        if not os.path.isdir(self.staging):
            raise FileNotFoundError(f"staging directory {self.staging} does not exist: create it, or fix the path")
        if self.name is not None and is_sealed(self.staging, self.name):
            raise FileExistsError(f"batch {self.name} is already sealed in {self.staging}: batch names must be new; pick another")
        while self.max_pending is not None and len(pending(self.staging)) >= self.max_pending:
            time.sleep(self.poll)
        _sweep(self.staging)
        tmp = os.path.join(self.staging, f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{socket.gethostname()}")
        os.mkdir(tmp)
        self._tmp = tmp
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                for f in self._open:
                    f.close()  # flushes; an error here must stop the seal
                self._seal()
        finally:
            for f in self._open:
                try:
                    f.close()
                except OSError:
                    pass  # the batch is being dropped; the first error is the one to see
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def write(self, rank: int, name: str, data: bytes | bytearray | memoryview | str) -> None:
        """Write rank's file name (a str is written as UTF-8)."""
        with self.file(rank, name, "w" if isinstance(data, str) else "wb") as f:
            f.write(data)

    def file(self, rank: int, name: str, mode: str = "wb") -> IO[Any]:
        """Open rank's file name for writing ("wb", or "w" for UTF-8 text).
        Close it when done; the batch closes any still open when it seals."""
        check_rank(rank, self.ranks)
        check_file_name(name, f"rank {rank}'s file name")
        f = self._create(f"rank-{rank}/{name}", mode)
        self._ranks_written.add(rank)
        return f

    def write_step(self, name: str, data: bytes | bytearray | memoryview | str) -> None:
        """Write a step-level file, shared by all ranks (steps/<n>/<name> in the mount)."""
        with self.file_step(name, "w" if isinstance(data, str) else "wb") as f:
            f.write(data)

    def file_step(self, name: str, mode: str = "wb") -> IO[Any]:
        """Open a step-level file for writing, as file() does for a rank's."""
        check_step_name(name)
        return self._create(name, mode)

    def _create(self, rel: str, mode: str) -> IO[Any]:
        if self._tmp is None:
            raise RuntimeError("a Batch is written inside its with block: with Batch(staging) as b: b.write(...)")
        if mode not in ("wb", "w"):
            raise ValueError(f"mode {mode!r}: a batch's files are new files, opened with 'wb' or 'w'")
        if rel in self._names:
            raise ValueError(f"{rel} is already in this batch: write each name once")
        parents = rel.split("/")
        for i in range(1, len(parents)):
            if "/".join(parents[:i]) in self._names:
                raise ValueError(f"{rel} would make the file {'/'.join(parents[:i])} a directory: rename one of them")
        if any(n.startswith(rel + "/") for n in self._names):
            raise ValueError(f"{rel} is already a directory in this batch: rename the file")
        path = os.path.join(self._tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "xb") if mode == "wb" else open(path, "x", encoding="utf-8")
        self._names.add(rel)
        self._open.append(f)
        return f

    def _seal(self) -> None:
        assert self._tmp is not None
        self._check_ranks()
        _fsync_tree(self._tmp)
        final = self._place()
        # From here the batch is in place under its name; until _SEALED
        # exists the producer never reads it.
        try:
            _fsync_dir(self.staging)
            fd = os.open(os.path.join(final, SEALED), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(final)

    def _check_ranks(self) -> None:
        want = range(self.ranks) if self.ranks is not None else range(max(self._ranks_written, default=-1) + 1)
        missing = [r for r in want if r not in self._ranks_written]
        if not want or missing:
            first = missing[0] if missing else 0
            raise ValueError(f"batch has no file for rank {first}: the producer rejects a batch unless every rank 0..R-1 has a file; write one with write({first}, name, data)")

    def _place(self) -> str:
        """Rename the temporary directory to the batch's name; returns the path."""
        assert self._tmp is not None
        while True:
            name = self.name or _timestamp_name()
            final = os.path.join(self.staging, name)
            if self.name is not None:
                if is_sealed(self.staging, name):
                    raise FileExistsError(f"batch {name} was sealed in {self.staging} while this one was written: batch names must be new; pick another")
                if os.path.lexists(final):
                    # Unsealed: another writer may be writing it right now
                    # (cp, then touch _SEALED), so it is never removed here.
                    raise FileExistsError(f"batch {name} exists unsealed in {self.staging}: another writer is writing it, or one was killed before sealing it; pick another name (or remove {final} once no writer uses it)")
            try:
                os.rename(self._tmp, final)
            except OSError:
                if self.name is not None or not os.path.lexists(final):
                    raise
                continue  # another writer took this timestamp: take the next
            self._tmp = None
            self.name = name
            return final


def is_sealed(staging: str | os.PathLike[str], name: str) -> bool:
    """Whether staging holds batch name, sealed (and not yet taken by the producer)."""
    try:
        return os.path.isfile(os.path.join(staging, name, SEALED)) and not os.path.islink(os.path.join(staging, name, SEALED))
    except ValueError:
        return False


def pending(staging: str | os.PathLike[str]) -> list[str]:
    """The sealed batches in staging that the producer has not committed yet, in name order."""
    with os.scandir(staging) as entries:
        names = [e.name for e in entries
                 if not e.name.startswith((".", "_")) and e.is_dir(follow_symlinks=False) and is_sealed(staging, e.name)]
    return sorted(names)


class Rejected(NamedTuple):
    """A batch the producer rejected, under staging/_rejected/."""
    name: str
    reason: str | None  # None: the producer was stopped before it wrote one (its log has it)
    path: str


def rejected(staging: str | os.PathLike[str]) -> Iterator[Rejected]:
    """The batches the producer rejected, in name order, each with its reason."""
    top = os.path.join(staging, REJECTED)
    try:
        names = sorted(os.listdir(top))
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(top, name)
        if not name.startswith(".") and os.path.isdir(path):  # '.' names: the producer's temporary files
            yield Rejected(name, _reason(path), path)


def _reason(batch: str) -> str | None:
    # The producer links its reason as the first free name of _REASON,
    # _REASON.1, ...: a _REASON staged by the writer keeps its name, so the
    # producer's is the last one.
    found, i = None, 0
    while True:
        path = os.path.join(batch, REASON if i == 0 else f"{REASON}.{i}")
        if not os.path.isfile(path):
            break
        found, i = path, i + 1
    if found is None:
        return None
    with open(found, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


_last_ns = 0


def _timestamp_name() -> str:
    """A name that sorts after every earlier one of this process (a UTC
    timestamp to the nanosecond, then the pid, for writers sharing a tree)."""
    global _last_ns
    ns = max(time.time_ns(), _last_ns + 1)
    _last_ns = ns
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ns // 10**9))
    return f"{stamp}.{ns % 10**9:09d}Z-{os.getpid()}"


def _sweep(staging: str) -> None:
    """Remove the temporary directories of writers on this host that are gone
    (killed before they sealed): the producer never reads them."""
    host = socket.gethostname()
    with os.scandir(staging) as entries:
        for e in entries:
            if not e.name.startswith(TMP_PREFIX) or not e.is_dir(follow_symlinks=False):
                continue
            parts = e.name[len(TMP_PREFIX):].split("-", 2)  # pid, random, host
            if len(parts) == 3 and parts[2] == host and parts[0].isdigit() and not _alive(int(parts[0])):
                shutil.rmtree(e.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive
    return True


def _fsync_tree(top: str) -> None:
    for root, dirs, files in os.walk(top, topdown=False):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(root)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
