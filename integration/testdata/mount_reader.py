"""An unmodified-dataloader stand-in: reads steps in order with plain open().

Usage: mount_reader.py MOUNTPOINT FIRST_STEP COUNT RANK

For each step it opens steps/{step}/rank-{RANK}/... (the lookup of a step
that is not committed yet waits, thanks to lakefs-mount --wait), reads
every file and prints one JSON line per file: step, path, size, md5.
Only the standard library, no polling code.
"""
import hashlib
import json
import os
import sys


def main():
    mnt, first, count, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    for step in range(first, first + count):
        rank_dir = os.path.join(mnt, "steps", str(step), "rank-%d" % rank)
        # The first file is opened by its known name, as a training loop
        # does; the others are found by walking the directory.
        with open(os.path.join(rank_dir, "sample-00.bin"), "rb") as f:
            f.read(1)
        for dirpath, dirnames, filenames in os.walk(rank_dir):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                h = hashlib.md5()
                n = 0
                with open(path, "rb") as f:
                    while True:
                        b = f.read(1 << 16)
                        if not b:
                            break
                        h.update(b)
                        n += len(b)
                rel = os.path.relpath(path, rank_dir)
                print(json.dumps({"step": step, "path": rel, "size": n, "md5": h.hexdigest()}), flush=True)


if __name__ == "__main__":
    main()
