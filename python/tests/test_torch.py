"""lakestream.torch.StepDataset over a real lakefs-mount."""
from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator

import pytest

import lakestream
from conftest import Stream, need
from payload import content, files

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    from lakestream.torch import StepDataset, StepFile, decode_json, decode_npy
except ImportError:  # the tests say so through need()
    torch = None  # type: ignore[assignment]

READER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_reader.py")
STEPS, RANKS = 6, 2
Item = tuple[int, str, str]


def need_torch() -> None:
    need(torch is not None, "the dataset tests need PyTorch: apt-get install -y python3-torch")


def seal(s: Stream, step: int) -> None:
    name = f"b-{step:06d}"
    with lakestream.Batch(s.staging, name, ranks=RANKS) as b:
        for r in range(RANKS):
            for fname, size in files(step, r).items():
                b.write(r, fname, content(name, r, fname, size))


def expected(rank: int, first: int, end: int) -> list[Item]:
    """Rank's files of steps [first, end): (step, name, sha256), in order."""
    return [(s, n, hashlib.sha256(content(f"b-{s:06d}", rank, n, size)).hexdigest())
            for s in range(first, end) for n, size in sorted(files(s, rank).items())]


def key(f: StepFile) -> Item:
    return (f.step, f.name, hashlib.sha256(f.read()).hexdigest())


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: Any) -> Iterator[tuple[Stream, str]]:
    """A 2-rank stream with steps 0..5 committed (1 to 3 files per rank,
    some nested), mounted with --wait 30s."""
    need_torch()
    s = Stream(str(tmp_path_factory.mktemp("torch")), RANKS)
    try:
        for step in range(STEPS):
            seal(s, step)
        s.produce_once()
        yield s, s.mount()
    finally:
        s.close()


def mid_step_cut(want: list[Item]) -> int:
    """A number of samples that ends inside a step, past the first one."""
    return next(k for k in range(3, len(want)) if want[k][0] == want[k - 1][0])


def test_two_ranks_two_workers_read_every_file_once(mounted: tuple[Stream, str], tmp_path: Any) -> None:
    """Two ranks of a real torch.distributed job, each with a DataLoader of
    two workers, for two epochs: each epoch gives each rank every one of
    its files once, in step and name order, from both workers."""
    _, mnt = mounted
    procs = [subprocess.Popen([sys.executable, READER, mnt, str(r), str(RANKS), str(tmp_path / "pg"), "0", str(STEPS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(RANKS)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    for r, (out, _) in enumerate(outs):
        recs = [json.loads(line) for line in out.splitlines()]
        for epoch in range(2):
            got = [x for x in recs if x["epoch"] == epoch]
            assert [(x["step"], x["name"], x["sha"]) for x in got] == expected(r, 0, STEPS), f"rank {r} epoch {epoch}"
            assert {x["rank"] for x in got} == {r}
            assert {x["worker"] for x in got} == {0, 1}, f"rank {r}'s files did not come from both workers"


def test_resume_in_the_main_process_mid_step(mounted: tuple[Stream, str]) -> None:
    _, mnt = mounted
    want = expected(0, 0, STEPS)
    cut = mid_step_cut(want)
    ds = StepDataset(mnt, rank=0, world_size=RANKS, start=0, end=STEPS, decode=key)
    it = iter(ds)
    got = [next(it) for _ in range(cut)]
    state = ds.state_dict()
    assert state["index"] > 0, state  # taken inside a step
    again = StepDataset(mnt, rank=0, world_size=RANKS, start=0, end=STEPS, decode=key)
    again.load_state_dict(state)
    assert got + [tuple(x) for x in DataLoader(again, batch_size=None)] == want


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on 2 cores, on purpose
def test_resume_a_dataloader_with_workers_from_num_samples(mounted: tuple[Stream, str]) -> None:
    """A plain DataLoader's workers keep their positions to themselves: the
    main process counts what the loop consumed (MosaicML's convention), and
    the state it gives resumes under any number of workers."""
    _, mnt = mounted
    want = expected(0, 0, STEPS)
    cut = mid_step_cut(want)
    ds = StepDataset(mnt, rank=0, world_size=RANKS, start=0, end=STEPS, decode=key)
    it = iter(DataLoader(ds, batch_size=None, num_workers=2))
    got = [tuple(next(it)) for _ in range(cut)]
    del it
    state = ds.state_dict(num_samples=cut)
    assert state["index"] > 0, state
    for workers in (2, 3):
        again = StepDataset(mnt, rank=0, world_size=RANKS, start=0, end=STEPS, decode=key)
        again.load_state_dict(state)
        assert got + [tuple(x) for x in DataLoader(again, batch_size=None, num_workers=workers)] == want, f"{workers} workers"


def test_resume_from_per_worker_states(mounted: tuple[Stream, str]) -> None:
    """What torchdata's StatefulDataLoader does: each worker's state_dict()
    at its start and after each item it yields, the last one delivered kept
    per worker, each loaded back into its worker. Together they yield
    exactly the samples after the cut, each once."""
    _, mnt = mounted
    want = expected(0, 0, STEPS)
    cut = mid_step_cut(want)

    class Reporting(IterableDataset):  # type: ignore[misc]
        def __init__(self, ds: StepDataset, states: dict[int, dict[str, Any]] | None = None) -> None:
            self.ds, self.states = ds, states

        def __iter__(self) -> Iterator[Any]:
            w = get_worker_info().id
            if self.states is not None:
                self.ds.load_state_dict(self.states[w])
            yield None, w, self.ds.state_dict()  # the state at start (torchdata's _AckStartup)
            for item in self.ds:
                yield item, w, self.ds.state_dict()

    def run(states: dict[int, dict[str, Any]] | None, limit: int | None) -> tuple[list[Item], dict[int, dict[str, Any]]]:
        ds = StepDataset(mnt, rank=0, world_size=RANKS, start=0, end=STEPS, decode=key)
        got: list[Item] = []
        kept: dict[int, dict[str, Any]] = {}
        for item, w, state in DataLoader(Reporting(ds, states), batch_size=None, num_workers=2):
            kept[w] = state
            if item is not None:
                got.append(tuple(item))
                if len(got) == limit:
                    break
        return got, kept

    got, states = run(None, cut)
    assert got == want[:cut]
    assert set(states) == {0, 1} and all(s["num_workers"] == 2 for s in states.values())
    assert any(s["index"] > 0 for s in states.values()), states  # the cut is inside a step
    rest, _ = run(states, None)
    assert collections.Counter(rest) == collections.Counter(want[cut:])

    # A worker's state resumes only in that worker of as many.
    alone = StepDataset(mnt, rank=0, world_size=RANKS, start=0, end=STEPS, decode=key)
    alone.load_state_dict(states[1])
    with pytest.raises(ValueError, match="num_workers=2"):
        next(iter(alone))
    with pytest.raises(ValueError, match="rank 0's"):
        StepDataset(mnt, rank=1, world_size=RANKS).load_state_dict(states[0])


def test_wait_blocks_then_delivers(mounted: tuple[Stream, str]) -> None:
    """Reading a step not committed yet blocks in the mount (--wait) and
    delivers the step once it is committed, with no polling code."""
    s, mnt = mounted
    step = STEPS
    got: list[Item] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            ds = StepDataset(mnt, rank=1, world_size=RANKS, start=step, end=step + 1, decode=key)
            got.extend(tuple(x) for x in DataLoader(ds, batch_size=None, num_workers=2))
        except BaseException as e:  # noqa: B036  reported by the test
            errors.append(e)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert not done.wait(1.5), f"the read of uncommitted step {step} returned: {got or errors}"
    seal(s, step)
    assert f"-> step {step}" in s.produce_once()
    assert done.wait(30), "the step was committed, but the waiting read did not deliver it"
    assert not errors, errors
    assert got == expected(1, step, step + 1)


def test_without_wait_a_pass_ends_at_the_head(mounted: tuple[Stream, str]) -> None:
    s, mnt = mounted
    head = max(int(n) for n in os.listdir(os.path.join(mnt, "steps")))
    ds = StepDataset(mnt, rank=0, world_size=RANKS, start=head - 1, wait=False, decode=key)
    assert list(ds) == expected(0, head - 1, head + 1)
    # A mount without --wait fails a lookup at once: the dataset says what to change.
    nowait = s.mount("mnt-nowait", wait="0s")
    with pytest.raises(TimeoutError, match=f"steps/{head + 1} was not committed within lakefs-mount's --wait"):
        list(StepDataset(nowait, rank=0, world_size=RANKS, start=head + 1))


def test_rank_and_world_size_are_checked(mounted: tuple[Stream, str]) -> None:
    _, mnt = mounted
    with pytest.raises(ValueError, match="has no rank-3"):
        list(StepDataset(mnt, rank=3, world_size=4, start=0, end=1))
    with pytest.raises(ValueError, match="--view-ranks 1"):
        list(StepDataset(mnt, rank=0, world_size=1, start=0, end=1))


def test_reclaimed_steps_say_so(new_stream: Callable[..., Stream]) -> None:
    """Steps gc reclaimed behind checkpoints: start=None begins at the
    oldest step left, and asking for a reclaimed one names that step."""
    need_torch()
    s = new_stream(1)
    for step in range(4):
        with lakestream.Batch(s.staging, f"b-{step}", ranks=1) as b:
            b.write(0, "x.bin", str(step))
    s.produce_once()
    for step in ("2", "3"):
        assert s.produce("checkpoint", "--store", s.url, "--step", step).returncode == 0
    gc = s.produce("gc", "--store", s.url, "--grace", "0s")
    assert gc.returncode == 0, gc.stderr
    mnt = s.mount()
    oldest = min(int(n) for n in os.listdir(os.path.join(mnt, "steps")))
    assert oldest > 0, "gc reclaimed nothing: the test needs a reclaimed step"
    assert StepDataset(mnt, wait=False).start == oldest
    with pytest.raises(FileNotFoundError, match=f"steps/0 is gone .*oldest step is {oldest}"):
        list(StepDataset(mnt, start=0))


def test_decode_hooks(new_stream: Callable[..., Stream]) -> None:
    need_torch()
    import numpy

    s = new_stream(1)
    arr = numpy.arange(12, dtype=numpy.int32).reshape(3, 4)
    with lakestream.Batch(s.staging, "b-0", ranks=1) as b:
        numpy.save(b.file(0, "x.npy"), arr)  # left open: the seal closes it
        b.write(0, "meta.json", '{"lr": 0.5}')
        b.write(0, "blob.bin", b"\x00raw")
    s.produce_once()
    mnt = s.mount()

    def items(decode: Any) -> list[Any]:
        return list(DataLoader(StepDataset(mnt, start=0, end=1, decode=decode), batch_size=None))

    blob, meta, x = items("auto")  # name order: blob.bin, meta.json, x.npy
    assert blob == b"\x00raw" and meta == {"lr": 0.5} and torch.equal(x, torch.from_numpy(arr))
    assert items("bytes") == [b"\x00raw", b'{"lr": 0.5}', open(os.path.join(mnt, "steps/0/rank-0/x.npy"), "rb").read()]
    blob_f, meta_f, x_f = StepDataset(mnt, start=0, end=1, decode=lambda f: f)
    assert decode_json(meta_f) == {"lr": 0.5} and numpy.array_equal(decode_npy(x_f), arr)
    assert [tuple(t) for t in items(lambda f: (f.step, f.name, f.index, f.count, f.last))] == [
        (0, "blob.bin", 0, 3, False), (0, "meta.json", 1, 3, False), (0, "x.npy", 2, 3, True)]
    with pytest.raises(ValueError, match="decode='pickle'"):
        StepDataset(mnt, decode="pickle")
