"""PyTorch DataLoader (forked workers) and np.memmap over a lakefs mount.

Usage: mount_torch.py MOUNTPOINT FIRST_STEP COUNT RANK WORKERS

Builds a map-style dataset of every file of rank RANK in the given steps,
reads it through torch.utils.data.DataLoader with WORKERS forked worker
processes, and prints one JSON line per file (step, path, size, md5), in
index order. Then it maps the first file of every step with np.memmap and
prints one line per file with the md5 of the mapped bytes ("memmap": true).
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class StepFiles(Dataset):
    def __init__(self, mnt, first, count, rank):
        self.items = []
        for step in range(first, first + count):
            rank_dir = os.path.join(mnt, "steps", str(step), "rank-%d" % rank)
            for dirpath, dirnames, filenames in os.walk(rank_dir):
                dirnames.sort()
                for name in sorted(filenames):
                    path = os.path.join(dirpath, name)
                    self.items.append((step, os.path.relpath(path, rank_dir), path))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        step, rel, path = self.items[i]
        with open(path, "rb") as f:
            data = f.read()
        # A tensor, as a real dataset returns, plus the facts to check.
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
        return {"step": step, "path": rel, "size": int(t.numel()),
                "md5": hashlib.md5(t.numpy().tobytes()).hexdigest(), "pid": os.getpid()}


def main():
    mnt, first, count, rank, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    ds = StepFiles(mnt, first, count, rank)
    loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=workers,
                        multiprocessing_context="fork", collate_fn=lambda batch: batch)
    pids = set()
    for batch in loader:
        for item in batch:
            pids.add(item.pop("pid"))
            print(json.dumps(item), flush=True)
    print(json.dumps({"workers": len(pids)}), flush=True)
    for step in range(first, first + count):
        path = os.path.join(mnt, "steps", str(step), "rank-%d" % rank, "sample-00.bin")
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        print(json.dumps({"step": step, "path": "sample-00.bin", "size": int(mm.shape[0]),
                          "md5": hashlib.md5(mm.tobytes()).hexdigest(), "memmap": True}), flush=True)
        del mm


if __name__ == "__main__":
    main()
