"""A PyTorch IterableDataset over a lakefs-mount's steps.

    loader = DataLoader(StepDataset("/mnt/stream", start=0), batch_size=None, num_workers=2)

Each rank reads <mount>/steps/<n>/rank-<rank>/ (every file under it, in
name order) for n = start, start+1, ... A step not committed yet is waited
for by the mount itself (lakefs-mount --wait): opening it blocks until it
is committed. The files of the pass form one sequence; DataLoader worker w
of W takes files w, w+W, w+2W, ..., so together the workers read each file
once, and the DataLoader, which takes from them in turn, hands them out in
the sequence's order.

state_dict()/load_state_dict() follow torchdata's StatefulDataLoader: in a
DataLoader worker, state_dict() is that worker's position, and
StatefulDataLoader saves one per worker and gives each back to its worker;
in the main process (num_workers=0) it is the position of the next file.
With a plain DataLoader and workers the main process sees nothing of the
workers' progress, so, as with MosaicML Streaming, pass the number of
samples the loop consumed: state_dict(num_samples=n). Each rank saves and
loads its own state.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Union

import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info


@dataclass(frozen=True)
class StepFile:
    """One file of a rank's share of a step, as a decode function sees it."""
    step: int
    rank: int
    name: str  # '/'-separated, relative to the rank directory
    path: str
    index: int  # its place among the rank's files of the step (name order)
    count: int  # how many files the rank has in the step

    @property
    def last(self) -> bool:
        """Whether it is the rank's last file of the step."""
        return self.index == self.count - 1

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()


def decode_bytes(f: StepFile) -> bytes:
    return f.read()


def decode_json(f: StepFile) -> Any:
    return json.loads(f.read())


def decode_npy(f: StepFile) -> Any:
    try:
        import numpy
    except ImportError:
        raise ImportError("decoding .npy files needs NumPy: apt-get install python3-numpy (or pip install numpy)") from None
    return numpy.load(f.path, allow_pickle=False)


def decode_auto(f: StepFile) -> Any:
    """.npy files as NumPy arrays, .json files parsed, anything else as bytes."""
    if f.name.endswith(".npy"):
        return decode_npy(f)
    if f.name.endswith(".json"):
        return decode_json(f)
    return decode_bytes(f)


DECODERS: dict[str, Callable[[StepFile], Any]] = {
    "auto": decode_auto, "bytes": decode_bytes, "json": decode_json, "npy": decode_npy,
}


class StepDataset(IterableDataset):
    """This rank's files of steps start, start+1, ... (up to end, exclusive).

    rank, world_size: from torch.distributed when it is initialised, else
    from the RANK and WORLD_SIZE variables torchrun sets, else rank 0.
    start: the first step; by default the oldest step the mount shows (0
    when it shows none yet). end: the step to stop before; None: never.
    wait: True waits for a step not committed yet as long as the mount's
    --wait (then TimeoutError); False ends the pass at the first such step.
    decode: "auto" (.npy as NumPy arrays, .json parsed, else bytes),
    "bytes", "json", "npy", or a function of a StepFile; the dataset yields
    what it returns.
    """

    def __init__(self, mount: str | os.PathLike[str], rank: int | None = None, world_size: int | None = None,
                 start: int | None = None, end: int | None = None, wait: bool = True,
                 decode: Union[str, Callable[[StepFile], Any]] = "auto") -> None:
        super().__init__()
        self.mount = os.fspath(mount)
        if not os.path.isdir(os.path.join(self.mount, "steps")):
            raise FileNotFoundError(f"{self.mount} has no steps/ directory: mount the stream there first (lakefs-mount --store URL --wait 10m {self.mount})")
        self.rank, self.world_size = _rank_and_world_size(rank, world_size)
        self.start = _oldest_step(self.mount) if start is None else start
        self.end = end
        self.wait = wait
        if isinstance(decode, str):
            if decode not in DECODERS:
                raise ValueError(f"decode={decode!r}: give one of {', '.join(DECODERS)} or a function of a StepFile")
            decode = DECODERS[decode]
        self.decode = decode
        # Where the pass is: its next file is file _pos[1] of step _pos[0],
        # after _skip files that belong to other DataLoader workers (None:
        # as many as this worker's id, as at a pass's start). _saved_by:
        # the (worker, num_workers) whose position it is (None: the main
        # process's). _began: where the pass began, which num_samples
        # counts from. _resume: load_state_dict was called, so the next
        # pass goes on from _pos instead of from start.
        self._pos = (self.start, 0)
        self._skip: int | None = None
        self._saved_by: tuple[int, int] | None = None
        self._began = self._pos
        self._resume = False

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if not self._resume:
            self._pos, self._skip, self._saved_by = (self.start, 0), None, None
        elif self._saved_by is not None and self._saved_by != (worker, workers):
            w, n = self._saved_by
            raise ValueError(f"this state is DataLoader worker {w}'s of {n}, loaded in worker {worker} of {workers}: resume with num_workers={n} (StatefulDataLoader gives each worker its own state)")
        self._resume = False
        self._began = self._pos
        step, index = self._pos
        skip = worker if self._skip is None else self._skip
        saved_by = (worker, workers) if info is not None else None
        checked = False
        while self.end is None or step < self.end:
            files = self._files(step, check=not checked)
            checked = True
            if files is None:
                break  # wait=False: the pass ends at the first step not committed
            while index < len(files):
                if skip:
                    n = min(skip, len(files) - index)
                    index, skip = index + n, skip - n
                    continue
                f = files[index]
                index += 1
                # Saved before the yield: a StatefulDataLoader worker takes
                # its state_dict() right after each item.
                self._pos = (step, index) if index < len(files) else (step + 1, 0)
                self._skip, self._saved_by = workers - 1, saved_by
                yield self.decode(f)
                skip = workers - 1
            step, index = step + 1, 0
        self._pos, self._skip, self._saved_by = (step, index), skip, saved_by

    def state_dict(self, num_samples: int | None = None) -> dict[str, Any]:
        """Where this rank's pass is: load it into a new StepDataset to go on
        with the next sample. num_samples: the samples a plain DataLoader
        with workers handed out since the pass began (they are counted in
        the main process, which does not see the workers' positions)."""
        if num_samples is not None:
            return self._advanced(num_samples)
        step, index = self._pos
        state: dict[str, Any] = {"rank": self.rank, "step": step, "index": index}
        info = get_worker_info()
        saved_by = self._saved_by or ((info.id, info.num_workers) if info is not None else None)
        if saved_by is not None:
            skip = saved_by[0] if self._skip is None else self._skip
            state.update(skip=skip, worker=saved_by[0], num_workers=saved_by[1])
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("rank", self.rank) != self.rank:
            raise ValueError(f"this state is rank {state['rank']}'s, loaded in rank {self.rank}: each rank loads the state it saved")
        self._pos = (int(state["step"]), int(state["index"]))
        if "worker" in state:
            self._skip, self._saved_by = int(state["skip"]), (int(state["worker"]), int(state["num_workers"]))
        else:
            self._skip, self._saved_by = None, None
        self._began = self._pos
        self._resume = True

    def _advanced(self, n: int) -> dict[str, Any]:
        """The main-process state n files after the pass's beginning."""
        if self._saved_by is not None:
            raise ValueError("state_dict(num_samples=...) counts from the start of a pass, but this dataset holds a DataLoader worker's state: call state_dict() without it")
        if n < 0:
            raise ValueError(f"num_samples={n}: give the number of samples consumed, 0 or more")
        step, index = self._began
        while n and (self.end is None or step < self.end):
            files = self._files(step, wait=False)
            if files is None:
                raise ValueError(f"num_samples is {n} more than the files of this rank up to step {step}, which is not committed: count the samples the loop consumed since the pass began")
            taken = min(n, len(files) - index)
            index, n = index + taken, n - taken
            if index == len(files):
                step, index = step + 1, 0
        return {"rank": self.rank, "step": step, "index": index}

    def _files(self, step: int, check: bool = False, wait: bool | None = None) -> list[StepFile] | None:
        """This rank's files of step, in name order; None if the step is not
        committed and not waited for."""
        d = os.path.join(self.mount, "steps", str(step))
        if not (self.wait if wait is None else wait) and step > _head(self.mount):
            return None  # not committed: asked without looking it up, which would wait
        try:
            # lakefs-mount --wait: this lookup blocks until the step is
            # committed, or the wait ends (ENOENT).
            os.stat(d)
        except FileNotFoundError:
            live = _steps(self.mount)
            if live and step < live[0]:
                raise FileNotFoundError(f"steps/{step} is gone from {self.mount} (its oldest step is {live[0]}): it was reclaimed after a checkpoint; resume from a later one, or keep more checkpoints") from None
            if step not in live:  # else committed since the lookup gave up
                if not (self.wait if wait is None else wait):
                    return None
                raise TimeoutError(f"steps/{step} was not committed within lakefs-mount's --wait at {self.mount}: start the mount with --wait long enough for the producers (e.g. --wait 10m), and check they are running") from None
        if check:
            self._check_ranks(d, step)
        top = os.path.join(d, f"rank-{self.rank}")
        names = []
        for root, _, files in os.walk(top, onerror=_raise):
            rel = os.path.relpath(root, top)
            names += [name if rel == "." else f"{rel}/{name}" for name in files]
        names.sort()
        return [StepFile(step, self.rank, name, os.path.join(top, name), i, len(names)) for i, name in enumerate(names)]

    def _check_ranks(self, d: str, step: int) -> None:
        ranks = sorted(int(n[5:]) for n in os.listdir(d) if n.startswith("rank-") and n[5:].isdigit())
        if self.rank not in ranks:
            raise ValueError(f"steps/{step} at {self.mount} has no rank-{self.rank} (it shows {', '.join(f'rank-{r}' for r in ranks) or 'none'}): fix the rank, or mount this node with --ranks including {self.rank}")
        if self.world_size is not None and ranks[-1] >= self.world_size:
            raise ValueError(f"steps/{step} at {self.mount} has rank-{ranks[-1]}, but world_size is {self.world_size}: a job on fewer ranks than the stream mounts it with --view-ranks {self.world_size}")


def _rank_and_world_size(rank: int | None, world_size: int | None) -> tuple[int, int | None]:
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
        else:
            env_rank, env_size = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
            rank = int(env_rank) if rank is None and env_rank else rank
            world_size = int(env_size) if world_size is None and env_size else world_size
    rank = 0 if rank is None else rank
    if rank < 0 or (world_size is not None and rank >= world_size):
        raise ValueError(f"rank {rank} is not in 0..{'' if world_size is None else world_size - 1}: fix rank or world_size")
    return rank, world_size


def _head(mount: str) -> int:
    """The highest committed step (-1: none yet)."""
    with open(os.path.join(mount, "head")) as f:
        text = f.read().strip()
    return int(text) if text else -1


def _steps(mount: str) -> list[int]:
    """The steps the mount shows: committed and not reclaimed, in order."""
    return sorted(int(n) for n in os.listdir(os.path.join(mount, "steps")) if n.isdigit())


def _oldest_step(mount: str) -> int:
    return next(iter(_steps(mount)), 0)


def _raise(err: OSError) -> None:
    raise err
