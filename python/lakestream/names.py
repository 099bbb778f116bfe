"""The names lakefs-produce accepts, checked before anything is written.

The producer rejects a whole sealed batch over one bad name, long after the
writer has gone (docs/FORMAT.md, "The staging tree"). These are its rules,
word for word, so that the mistake is a ValueError at the line that made it:

- a file name is a clean relative '/'-separated path: not empty, no NUL, no
  leading '/', no empty, '.' or '..' element, at most 255 bytes per element
  and 4096 in all (txn.ValidateName);
- at the top of a batch, a name beginning with 'rank-' is a rank directory,
  and _SEALED and _REASON are the protocol's own (stage.Tree.Load);
- a batch is a directory of the staging directory whose name is a valid
  file name element not beginning with '.' or '_' (stage.Tree.Scan: those
  are never picked up), and of at most 249 bytes (see MAX_BATCH).
"""
from __future__ import annotations

import os

SEALED = "_SEALED"
REASON = "_REASON"
REJECTED = "_rejected"
MAX_ELEMENT = 255
MAX_PATH = 4096
# lakefs-produce removes a committed batch by renaming it to .<name>.done
# first, which a longer name cannot take: such a batch is committed but
# never removed from the staging directory.
MAX_BATCH = MAX_ELEMENT - len("..done")


def check_file_name(name: str, what: str = "file name") -> None:
    """Raise ValueError unless a step may carry a file of this name."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if name == "":
        raise ValueError(f"{what} is empty: give the file a name")
    raw = os.fsencode(name)
    if b"\0" in raw:
        raise ValueError(f"{what} {name!r} contains a NUL byte: remove it")
    if len(raw) > MAX_PATH:
        raise ValueError(f"{what} {name[:40]!r}... is {len(raw)} bytes: names are at most {MAX_PATH} bytes in all; shorten it")
    if name.startswith("/"):
        raise ValueError(f"{what} {name!r} is absolute: give a path relative to the rank (or the batch), without the leading '/'")
    for element in name.split("/"):
        if element in ("", ".", ".."):
            raise ValueError(f"{what} {name!r} has an empty, '.' or '..' element: write it as a clean path such as 'dir/file.bin'")
        if len(os.fsencode(element)) > MAX_ELEMENT:
            raise ValueError(f"{what} {name!r} has an element of {len(os.fsencode(element))} bytes: each part of a path is at most {MAX_ELEMENT} bytes; shorten it")


def check_step_name(name: str) -> None:
    """Raise ValueError unless name may be a step-level file (shared by all ranks)."""
    check_file_name(name, "step-level file name")
    top = name.split("/", 1)[0]
    if top.startswith("rank-"):
        raise ValueError(f"step-level file name {name!r} begins with 'rank-', which at the top of a batch names a rank directory: write a rank's files with write(rank, ...), or rename it")
    if top in (SEALED, REASON):
        raise ValueError(f"step-level file name {name!r} begins with {top}, which at the top of a batch belongs to the producer's protocol: rename it")


def check_batch_name(name: str) -> None:
    """Raise ValueError unless lakefs-produce picks up a batch of this name."""
    check_file_name(name, "batch name")
    if "/" in name:
        raise ValueError(f"batch name {name!r} has a '/': a batch is one directory of the staging directory; drop the '/'")
    if name.startswith((".", "_")):
        raise ValueError(f"batch name {name!r} begins with {name[0]!r}: the producer never picks up names beginning with '.' or '_' (they are its own); rename it")
    if len(os.fsencode(name)) > MAX_BATCH:
        raise ValueError(f"batch name {name[:40]!r}... is {len(os.fsencode(name))} bytes: batch names are at most {MAX_BATCH} (the producer renames a committed batch to .<name>.done to delete it); shorten it")


def check_rank(rank: int, ranks: int | None) -> None:
    """Raise ValueError unless rank is a rank number (below ranks, when known)."""
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"rank must be an int, not {type(rank).__name__}")
    if rank < 0 or (ranks is not None and rank >= ranks):
        within = f"0..{ranks - 1}" if ranks is not None else "0 or more"
        raise ValueError(f"rank {rank} is out of range: ranks are {within}")
