"""The bytes the tests write and check, the same in every process."""
from __future__ import annotations

import hashlib


def content(batch: str, rank: int, name: str, size: int) -> bytes:
    """Deterministic bytes for a file, so a reader can check every byte."""
    seed = hashlib.sha256(f"{batch}/{rank}/{name}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def files(i: int, rank: int) -> dict[str, int]:
    """Batch i's files of rank, name -> size: 1 to 3 of them, up to 300 kB,
    some nested, so steps differ in how many files a rank has."""
    names = ["part-0.bin", "sub/part-1.bin", "sub/deep/part-2.bin"][: 1 + (i + rank) % 3]
    return {name: 1 + (i * 7919 + rank * 131 + k * 65537) % 300_000 for k, name in enumerate(names)}
