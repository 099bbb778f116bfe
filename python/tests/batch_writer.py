"""A writer the kill test SIGKILLs at random moments: it seals batches
b-<first>, b-<first+1>, ... into STAGING, for as long as it lives, saying
on stdout when it starts and when it has sealed each.

    batch_writer.py STAGING RANKS FIRST
"""
from __future__ import annotations

import os
import sys

import lakestream
from payload import content, files


def say(what: str, i: int) -> None:
    # One write(2) per line: a kill never leaves half a line in the pipe
    # (print may write a line in pieces).
    os.write(1, f"{what} {i}\n".encode())


def main() -> None:
    staging, ranks, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    i = first
    while True:
        name = f"b-{i:06d}"
        say("start", i)
        with lakestream.Batch(staging, name, ranks=ranks) as b:
            for r in range(ranks):
                for fname, size in files(i, r).items():
                    data = content(name, r, fname, size)
                    with b.file(r, fname) as f:
                        for off in range(0, size, 65536):  # several writes: more places to be killed at
                            f.write(data[off:off + 65536])
            b.write_step("batch.txt", name)
        say("sealed", i)
        i += 1


if __name__ == "__main__":
    main()
