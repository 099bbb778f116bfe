"""lakestream.Batch against a real lakefs-produce (and lakefs-mount)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest

import lakestream
from lakestream.staging import TMP_PREFIX
from payload import content, files

WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "batch_writer.py")


def tree(top: str) -> dict[str, bytes]:
    """Every file under top, by '/'-separated path, with its bytes."""
    out = {}
    for root, _, names in os.walk(top):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, top)] = f.read()
    return out


def staged_files(staging: str) -> list[str]:
    return [os.path.join(root, n) for root, _, names in os.walk(staging) for n in names]


def test_sealed_batch_is_one_whole_step(new_stream: Callable[..., Any]) -> None:
    s = new_stream(2)
    with lakestream.Batch(s.staging, "b-1", ranks=2) as b:
        b.write(0, "x.bin", b"\x00\x01\x02")
        with b.file(1, "sub/y.txt", "w") as f:
            f.write("h\u00e9llo")
        b.write_step("meta.json", '{"lr": 0.1}')
        # Until the block ends there is nothing the producer would take.
        assert lakestream.pending(s.staging) == []
        assert all(n.startswith(".") for n in os.listdir(s.staging))
    assert lakestream.pending(s.staging) == ["b-1"]
    assert tree(os.path.join(s.staging, "b-1")) == {
        "rank-0/x.bin": b"\x00\x01\x02", "rank-1/sub/y.txt": "h\u00e9llo".encode(), "meta.json": b'{"lr": 0.1}', "_SEALED": b""}
    assert "b-1 -> step 0" in s.produce_once()
    assert lakestream.pending(s.staging) == []
    mnt = s.mount()
    assert tree(os.path.join(mnt, "steps", "0")) == {
        "rank-0/x.bin": b"\x00\x01\x02", "rank-1/sub/y.txt": "h\u00e9llo".encode(), "meta.json": b'{"lr": 0.1}'}


def test_exception_leaves_nothing(new_stream: Callable[..., Any]) -> None:
    s = new_stream(2)
    with pytest.raises(RuntimeError, match="boom"):
        with lakestream.Batch(s.staging, "b-1", ranks=2) as b:
            b.write(0, "x.bin", b"data")
            raise RuntimeError("boom")
    # A batch that fails its own seal check (rank 1 has no file) is dropped too.
    with pytest.raises(ValueError, match="no file for rank 1"):
        with lakestream.Batch(s.staging, "b-2", ranks=2) as b:
            b.write(0, "x.bin", b"data")
    assert os.listdir(s.staging) == []


def test_default_names_commit_in_seal_order(new_stream: Callable[..., Any]) -> None:
    s = new_stream(1)
    names = []
    for i in range(3):
        with lakestream.Batch(s.staging, ranks=1) as b:
            b.write(0, "i.txt", str(i))
        names.append(b.name)
    assert names == sorted(set(names)), names
    out = s.produce_once()
    for i, name in enumerate(names):
        assert f"{name} -> step {i}" in out


# Each call the producer would reject, with a piece of the message that
# names what is wrong.
BAD_CALLS: list[tuple[str, tuple[Any, ...], str]] = [
    ("write", (0, ""), "empty"),
    ("write", (0, "/abs/x.bin"), "'/abs/x.bin'"),
    ("write", (0, "a/../b"), "'a/../b'"),
    ("write", (0, ".."), "'..'"),
    ("write", (0, "a//b"), "'a//b'"),
    ("write", (0, "a/"), "'a/'"),
    ("write", (0, "./a"), "'./a'"),
    ("write", (0, "x" * 256), "256 bytes"),
    ("write", (0, "a\0b"), "NUL"),
    ("write", (0, "d/" * 2048 + "f"), "4097 bytes"),
    ("write", (2, "x.bin"), "rank 2"),
    ("write", (-1, "x.bin"), "rank -1"),
    ("file", (0, "a/../b"), "'a/../b'"),
    ("write_step", ("rank-0/x.bin",), "'rank-0/x.bin'"),
    ("write_step", ("rank-x",), "'rank-x'"),
    ("write_step", ("_SEALED",), "'_SEALED'"),
    ("write_step", ("_REASON",), "'_REASON'"),
    ("write_step", ("_REASON/why",), "'_REASON/why'"),
    ("file_step", ("..",), "'..'"),
]


@pytest.mark.parametrize("method,args,names", BAD_CALLS, ids=[f"{m}{a!r:.30}" for m, a, _ in BAD_CALLS])
def test_names_the_producer_rejects_raise_at_once(new_stream: Callable[..., Any], method: str, args: tuple[Any, ...], names: str) -> None:
    s = new_stream(2)
    with lakestream.Batch(s.staging, "b-1", ranks=2) as b:
        b.write(0, "ok.bin", b"ok")
        with pytest.raises(ValueError) as err:
            getattr(b, method)(*args, *([b"data"] if method.startswith("write") else []))
        assert names in str(err.value)
        assert len(staged_files(s.staging)) == 1, "the refused call wrote a file"
        b.write(1, "ok.bin", b"ok")
    assert "b-1 -> step 0" in s.produce_once()


@pytest.mark.parametrize("name", ["", ".tmp", "_mine", "a/b", "..", "x" * 250])
def test_batch_names_the_producer_never_takes_raise(name: str, tmp_path: Any) -> None:
    with pytest.raises(ValueError) as err:
        lakestream.Batch(tmp_path, name)
    assert "batch name" in str(err.value)


def test_names_match_the_producer(new_stream: Callable[..., Any]) -> None:
    """The package refuses what the real producer rejects, and accepts the
    unusual names it commits."""
    s = new_stream(2)
    bad = {  # staged by hand, as a writer without the package would
        "c-1": ({"rank-0/x": b"x", "rank-1/x": b"x", "rank-x": b"x"}, lambda b: b.write_step("rank-x", b"x")),
        "c-2": ({"rank-0/x": b"x", "rank-1/x": b"x", "rank-01/f": b"x"}, lambda b: b.write_step("rank-01/f", b"x")),
        "c-3": ({"rank-0/x": b"x", "rank-1/x": b"x", "_REASON": b"mine"}, lambda b: b.write_step("_REASON", b"x")),
        "c-4": ({"rank-0/x": b"x"}, None),
        "c-5": ({"rank-0/x": b"x", "rank-1/x": b"x", "rank-2/x": b"x"}, lambda b: b.write(2, "x", b"x")),
    }
    for name, (staged, call) in bad.items():
        for rel, data in staged.items():
            os.makedirs(os.path.dirname(os.path.join(s.staging, name, rel)), exist_ok=True)
            with open(os.path.join(s.staging, name, rel), "wb") as f:
                f.write(data)
        open(os.path.join(s.staging, name, "_SEALED"), "wb").close()
        with pytest.raises(ValueError):  # c-4's missing rank when it seals, the others at the call
            with lakestream.Batch(s.root, "unused", ranks=2) as b:
                b.write(0, "x", b"x")
                if call is not None:
                    call(b)
    rank_names = ["_SEALED", "_REASON", ".hidden", "a..b", "..a", "x" * 255, "rank-3/x", "d/" * 20 + "f"]
    step_names = ["_meta.json", ".hidden", "rank_x", "ranks", "sub/_SEALED", "sub/rank-0"]
    good = "e" * 249  # the longest batch name the producer can remove once committed
    with lakestream.Batch(s.staging, good, ranks=2) as b:
        for r in range(2):
            for n in rank_names:
                b.write(r, n, f"{r}/{n}")
        for n in step_names:
            b.write_step(n, n)
    out = s.produce_once()
    assert f"{good} -> step 0" in out, out
    got = {r.name: r.reason for r in lakestream.rejected(s.staging)}
    assert set(got) == set(bad), out
    assert "rank-x" in got["c-1"] and "rank-01" in got["c-2"] and "_REASON" in got["c-3"]
    assert "missing rank directory rank-1" in got["c-4"] and "rank-2" in got["c-5"]
    assert sorted(os.listdir(s.staging)) == ["_lock", "_rejected"]  # the committed batch was removed
    mnt = s.mount()
    want = {f"rank-{r}/{n}": f"{r}/{n}".encode() for r in range(2) for n in rank_names}
    want.update({n: n.encode() for n in step_names})
    assert tree(os.path.join(mnt, "steps", "0")) == want


def test_same_name_never_removes_another_writers_batch(new_stream: Callable[..., Any]) -> None:
    """Another writer is staging batch "b-0" by hand (cp, then touch
    _SEALED): a Batch of that name refuses to seal over it, and removes
    nothing of it or of its own."""
    s = new_stream(1)
    other = os.path.join(s.staging, "b-0", "rank-0")
    os.makedirs(other)
    with open(os.path.join(other, "x"), "wb") as f:
        f.write(b"theirs")
    with pytest.raises(FileExistsError, match="b-0 exists unsealed"):
        with lakestream.Batch(s.staging, "b-0", ranks=1) as b:
            b.write(0, "x", b"mine")
    with open(os.path.join(other, "x"), "rb") as f:
        assert f.read() == b"theirs"
    assert sorted(os.listdir(s.staging)) == ["b-0"], "the refused batch left its temporary behind"
    open(os.path.join(s.staging, "b-0", "_SEALED"), "w").close()  # the other writer seals
    assert "b-0 -> step 0" in s.produce_once()


def test_max_pending_waits_while_batches_are_staged(new_stream: Callable[..., Any]) -> None:
    s = new_stream(1)
    for i in range(2):
        with lakestream.Batch(s.staging, f"b-{i}", ranks=1, max_pending=2) as b:
            b.write(0, "x", b"x")
    entered = threading.Event()

    def third() -> None:
        with lakestream.Batch(s.staging, "b-2", ranks=1, max_pending=2, poll=0.05) as b:
            entered.set()
            b.write(0, "x", b"x")

    t = threading.Thread(target=third)
    t.start()
    try:
        assert not entered.wait(1.0), "a third batch began while two sealed ones were staged (max_pending=2)"
        out = s.produce_once()
        assert "b-0 -> step 0" in out and "b-1 -> step 1" in out
        assert entered.wait(10), "the third batch did not begin once the producer took the others"
    finally:
        t.join(10)
    assert lakestream.pending(s.staging) == ["b-2"]


ROUNDS = 20


def test_killed_writer_leaves_nothing_or_a_whole_batch(new_stream: Callable[..., Any]) -> None:
    """A writer process sealing batches is SIGKILLed at random moments, 20
    times; a producer runs all along. Every step the mount shows is one
    whole batch, byte for byte, no batch is committed twice or rejected,
    and every batch the writer sealed is committed."""
    s = new_stream(2)
    seed = int(os.environ.get("LAKESTREAM_SEED", str(time.time_ns() % 2**32)))
    rng = random.Random(seed)
    s.start_producer()
    started: set[int] = set()
    sealed: set[int] = set()
    first = 0
    for _ in range(ROUNDS):
        w = subprocess.Popen([sys.executable, WRITER, s.staging, "2", str(first)], stdout=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.05, 0.4))
        w.kill()
        for line in w.communicate()[0].splitlines():
            what, _, i = line.partition(" ")
            assert what in ("start", "sealed") and i.isdigit(), f"the writer said {line!r} (seed {seed})"
            (started if what == "start" else sealed).add(int(i))
        first = max(started, default=-1) + 1
    deadline = time.monotonic() + 60
    while lakestream.pending(s.staging) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lakestream.pending(s.staging) == [], f"the producer did not take every sealed batch (seed {seed})"
    assert list(lakestream.rejected(s.staging)) == [], f"a killed writer's batch was rejected (seed {seed})"

    mnt = s.mount()
    committed: dict[int, int] = {}
    for step in sorted(int(n) for n in os.listdir(os.path.join(mnt, "steps"))):
        d = os.path.join(mnt, "steps", str(step))
        with open(os.path.join(d, "batch.txt")) as f:
            name = f.read()
        i = int(name[2:])
        assert i not in committed, f"batch {name} is both step {committed[i]} and step {step} (seed {seed})"
        committed[i] = step
        want = {f"rank-{r}/{n}": content(name, r, n, size) for r in range(2) for n, size in files(i, r).items()}
        want["batch.txt"] = name.encode()
        assert tree(d) == want, f"step {step} is not the whole batch {name} (seed {seed})"
    assert sealed <= set(committed), f"sealed batches {sorted(sealed - set(committed))} were never committed (seed {seed})"
    # The test proved something only if kills landed both before a seal
    # (leaving nothing) and after some seals.
    assert started - set(committed), f"no kill interrupted a batch (seed {seed})"
    assert committed, f"no batch was sealed before its writer was killed (seed {seed})"
    print(f"seed {seed}: {len(started)} batches begun, {len(committed)} committed whole, {len(started) - len(committed)} left nothing")

    # Killed writers leave '.'-named temporaries (never picked up); the
    # next Batch on this host removes those whose writer is gone.
    with lakestream.Batch(s.staging, "z-1", ranks=2) as b:
        b.write(0, "x", b"x")
        b.write(1, "x", b"x")
    assert [n for n in os.listdir(s.staging) if n.startswith(TMP_PREFIX)] == []
