#!/usr/bin/env python3
"""DDP training on a Lakestream mount, 4 ranks on CPU (gloo).

Rank r reads its share of step n, <mount>/steps/<n>/rank-<r>/, through
lakestream.torch.StepDataset and a DataLoader of 2 forked workers, which
share each step's files; lakefs-mount --wait makes a step that is not
committed yet block until it is, so the trainer needs no polling. Every
--ckpt-every steps rank 0 saves a Megatron-style checkpoint
(iter_<N>/mp_rank_00/model_optim_rng.pt, then the tracker file
latest_checkpointed_iteration.txt, written last and atomically) into
--ckpt-dir, which lakefs-mount --checkpoint-dir watches so gc can reclaim
the steps behind it. A restart resumes from the last checkpoint and reads
exactly the steps after it.

--colocated is the baseline: the same model and samples, but each DataLoader
worker generates and transforms the raw corpus itself (writer.py's code), as
a colocated input pipeline does.

Each rank prints one JSON line per step: step, loss, the sample ids read.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]  # writer.py, and the package from a checkout
import writer  # noqa: E402  the corpus and transform, for --colocated
from lakestream.torch import StepDataset  # noqa: E402

TRACKER = "latest_checkpointed_iteration.txt"


class Colocated(IterableDataset):
    """The baseline's samples, generated in the DataLoader workers: worker w
    of W takes steps first+w, first+w+W, ...; one (step, True, samples)
    per step, as samples() gives for a rank's last file of a step."""

    def __init__(self, a, rank, first):
        self.a, self.rank, self.first = a, rank, first

    def __iter__(self):
        w = get_worker_info()
        wid, nw = (w.id, w.num_workers) if w else (0, 1)
        for step in range(self.first + wid, self.a.steps, nw):
            sids = [writer.sample_id(step, self.rank, i, self.a.ranks, self.a.per_rank) for i in range(self.a.per_rank)]
            yield step, True, [writer.transform(sid, writer.raw_text(sid)) for sid in sids]


def samples(f):
    """StepDataset's decode: a file of JSON-lines samples, its step, and
    whether it is the rank's last file of the step (with lakefs-mount
    --view-ranks a rank reads one file per original rank)."""
    return f.step, f.last, [json.loads(line) for line in f.read().splitlines()]


def emit(rec):
    # one write per line, so the ranks' lines never interleave
    os.write(1, (json.dumps(rec) + "\n").encode())


def last_checkpoint(d):
    try:
        with open(os.path.join(d, TRACKER)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return 0


def save_checkpoint(d, n, model, opt):
    """Megatron's layout; the tracker is written last and renamed into place,
    so a reader (lakefs-mount, a restart) never sees a partial checkpoint."""
    path = os.path.join(d, "iter_%07d" % n, "mp_rank_00")
    os.makedirs(path, exist_ok=True)
    torch.save({"iteration": n, "model": model.state_dict(), "optimizer": opt.state_dict()},
               os.path.join(path, "model_optim_rng.pt"))
    tmp = os.path.join(d, "." + TRACKER)
    with open(tmp, "w") as f:
        f.write("%d\n" % n)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(d, TRACKER))


def run(rank, a):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(writer.DIM, 1))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    first = 0
    if a.ckpt_dir:
        os.makedirs(a.ckpt_dir, exist_ok=True)
        first = last_checkpoint(a.ckpt_dir)
        if first:
            ck = torch.load(os.path.join(a.ckpt_dir, "iter_%07d" % first, "mp_rank_00", "model_optim_rng.pt"))
            model.module.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
    if rank == 0:
        emit({"resume_from": first})
    # Rank and world size come from the process group.
    ds = Colocated(a, rank, first) if a.colocated else StepDataset(a.mount, start=first, end=a.steps, decode=samples)
    pids = (lambda _: open(os.path.join(a.pid_dir, "worker-%d-%d" % (rank, os.getpid())), "w").close()) if a.pid_dir else None
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork", worker_init_fn=pids)
    batch = []
    for step, last, part in dl:
        batch += part
        if not last:
            continue  # the rest of this rank's step is in its next files
        t0 = time.time()
        x, y = torch.tensor([s["x"] for s in batch]), torch.tensor([[s["y"]] for s in batch])
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the mean loss over ranks, for one comparable curve
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        emit({"rank": rank, "step": step, "loss": lt.item() / a.ranks, "ids": [s["id"] for s in batch], "t": t0})
        batch = []
        done = step + 1
        if a.ckpt_dir and rank == 0 and done % a.ckpt_every == 0:
            save_checkpoint(a.ckpt_dir, done, model.module, opt)
        if a.step_sleep:
            time.sleep(a.step_sleep)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mount", help="the lakefs-mount mount point (not needed with --colocated)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="train until this step count")
    p.add_argument("--per-rank", type=int, default=32, help="samples per rank per step (as writer.py)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--ckpt-dir")
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--colocated", action="store_true", help="baseline: transform inside the DataLoader workers")
    p.add_argument("--pid-dir", help="record DataLoader worker pids here (for kill tests)")
    p.add_argument("--step-sleep", type=float, default=0, help="seconds of simulated compute per step")
    a = p.parse_args()
    if not a.colocated and not a.mount:
        p.error("--mount is required (or --colocated for the baseline)")
    mp.spawn(run, args=(a,), nprocs=a.ranks)


if __name__ == "__main__":
    main()
