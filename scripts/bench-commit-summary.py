#!/usr/bin/env python3
"""bench-commit-summary.py OUT.jsonl: the table of scripts/bench-commit.sh's
rows: per store, payload and producer count (and process mode), dac against
raw-put and naive as ratios (median over rounds, with min-max), dac's
latency, requests per TGB and slowest first commit, and the load beside."""
import json
import statistics
import sys
from collections import defaultdict

rows = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["store"], r["payload_bytes"], r["producers"], r.get("processes", False))
    rows[key][r["strategy"]].append(r)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def rng(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}" if len(xs) > 1 else ""


print("| store | TGB | producers | dac MB/s | dac/raw-put | dac/naive | p50 / p99 ms | PUT/TGB | other/TGB | TGB/version | first commit max ms | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
order = {"s3": 0, "file": 1, "file+50ms": 2}
for key in sorted(rows, key=lambda k: (k[1], order.get(k[0], 9), k[3], k[2])):
    store, payload, producers, procs = key
    by = rows[key]
    dac, raw, naive = by.get("dac", []), by.get("raw-put", []), by.get("naive", [])
    n = min(len(dac), len(raw)) if raw else 0
    vs_raw = [dac[i]["mb_per_s"] / raw[i]["mb_per_s"] for i in range(n) if raw[i]["mb_per_s"]]
    m = min(len(dac), len(naive))
    vs_naive = [dac[i]["mb_per_s"] / naive[i]["mb_per_s"] for i in range(m) if naive[i]["mb_per_s"]]
    other = [d["gets_per_tgb"] + d["heads_per_tgb"] + d["lists_per_tgb"] + d["deletes_per_tgb"] for d in dac]
    loads = [float(x.get("load", "nan")) for x in dac + raw + naive]
    size = f"{payload >> 20} MiB" if payload >= 1 << 20 else f"{payload >> 10} KiB"
    print(f"| {store} | {size} | {producers}{' (processes)' if procs else ''} "
          f"| {med([d['mb_per_s'] for d in dac]):.1f} "
          f"| {med(vs_raw):.2f}x {rng(vs_raw)} | {med(vs_naive):.1f}x "
          f"| {med([d['p50_ms'] for d in dac]):.0f} / {med([d['p99_ms'] for d in dac]):.0f} "
          f"| {med([d['puts_per_tgb'] for d in dac]):.2f} | {med(other):.2f} "
          f"| {med([d['tgbs_per_version'] for d in dac]):.1f} "
          f"| {med([d['first_commit_max_ms'] for d in dac]):.0f} "
          f"| {min(loads):.1f}-{max(loads):.1f} |")
