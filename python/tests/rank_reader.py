"""One rank of a torch.distributed job (gloo) reading a mount with
StepDataset and a DataLoader of 2 workers, for two epochs; rank and world size come from
the process group. Prints one JSON line per file it got.

    rank_reader.py MOUNT RANK WORLD_SIZE INIT_FILE START END
"""
from __future__ import annotations

import hashlib
import json
import sys

import torch.distributed as dist
from torch.utils.data import DataLoader, get_worker_info

from lakestream.torch import StepDataset, StepFile


def describe(f: StepFile) -> dict[str, object]:
    info = get_worker_info()
    return {"step": f.step, "rank": f.rank, "name": f.name, "sha": hashlib.sha256(f.read()).hexdigest(),
            "worker": info.id if info is not None else -1}


def main() -> None:
    mount, rank, world, init, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    ds = StepDataset(mount, start=start, end=end, decode=describe)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    for epoch in range(2):
        for item in loader:
            print(json.dumps({**item, "epoch": epoch}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
