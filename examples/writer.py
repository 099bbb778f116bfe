#!/usr/bin/env python3
"""A Python writer for lakefs-produce, on the lakestream package (python/).

It generates a small synthetic corpus, tokenizes and transforms it into
training samples, and seals one batch per step into the staging tree with
lakestream.Batch, which writes it under a temporary name, renames it into
place whole and creates _SEALED last: a writer killed at any point leaves
either nothing or a complete batch.

    writer.py --staging DIR --ranks 4 --steps 20 [--start 0] [--interval 0.2]

The corpus and transform are shared with train.py's colocated baseline, so
both train on exactly the same samples.
"""
import argparse
import json
import os
import random
import sys
import time

# From a checkout the package need not be installed (pip install ./python).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import lakestream  # noqa: E402

VOCAB = 64
DIM = 16
WORDS = ["w%02d" % i for i in range(VOCAB)]


def sample_id(step, rank, i, ranks, per_rank):
    return (step * ranks + rank) * per_rank + i


def raw_text(sid):
    """The corpus: sample sid's text, deterministic in sid."""
    rng = random.Random(sid)
    return " ".join(rng.choice(WORDS) for _ in range(24))


def transform(sid, text):
    """Tokenize and turn a text into a (features, target) sample. The target
    is a fixed linear function of the features plus noise, so a tiny model
    can learn it and the loss goes down."""
    toks = [WORDS.index(w) for w in text.split()]
    x = [0.0] * DIM
    for t in toks:
        x[t % DIM] += 1.0 / len(toks)
    y = sum((j % 5 - 2) * v for j, v in enumerate(x)) * 4.0
    y += random.Random(sid ^ 0x5EED).gauss(0, 0.01)
    return {"id": sid, "x": x, "y": y}


def write_batch(staging, step, ranks, per_rank):
    name = "batch-%08d" % step
    if name in lakestream.pending(staging):
        return False  # already sealed by an earlier run: restart is idempotent
    with lakestream.Batch(staging, name, ranks=ranks) as b:
        for r in range(ranks):
            with b.file(r, "samples.jsonl", "w") as f:
                for i in range(per_rank):
                    sid = sample_id(step, r, i, ranks, per_rank)
                    f.write(json.dumps(transform(sid, raw_text(sid))) + "\n")
        b.write_step("step.json", json.dumps({"step": step, "lr": 0.05}))
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--staging", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--per-rank", type=int, default=32, help="samples per rank per step")
    p.add_argument("--interval", type=float, default=0, help="seconds between batches")
    a = p.parse_args()
    os.makedirs(a.staging, exist_ok=True)
    for s in range(a.start, a.start + a.steps):
        if write_batch(a.staging, s, a.ranks, a.per_rank):
            print(json.dumps({"sealed": s}), flush=True)
        if a.interval:
            time.sleep(a.interval)


if __name__ == "__main__":
    sys.exit(main())
