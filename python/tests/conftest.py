"""Real processes for the package's tests: lakefs-produce and lakefs-mount
(from LAKESTREAM_BIN, which make pytest sets to bin/) on a file:// store."""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
from typing import Iterator

import pytest

BIN = os.environ.get("LAKESTREAM_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bin")


def need(ok: bool, why: str) -> None:
    """Skip a test whose tool this machine lacks; in CI, which installs
    every tool, fail it instead: a skip there would hide a broken setup."""
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def binary(name: str) -> str:
    path = os.path.abspath(os.path.join(BIN, name))
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run make build (or set LAKESTREAM_BIN)")
    return path


class Mount:
    def __init__(self, proc: subprocess.Popen[bytes], path: str) -> None:
        self.proc, self.path = proc, path

    def stop(self) -> None:
        # SIGTERM unmounts; a mount left behind would wedge the temp dir.
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if os.path.ismount(self.path):
            subprocess.run(["fusermount3", "-u", "-z", self.path], check=False)


class Stream:
    """A stream on a file:// store, its staging directory, and the
    producer and mounts the test starts on it (stopped by the fixture)."""

    def __init__(self, root: str, ranks: int) -> None:
        self.root, self.ranks = root, ranks
        self.store = os.path.join(root, "store")
        self.staging = os.path.join(root, "staging")
        self.url = "file://" + self.store
        os.makedirs(self.store)
        os.makedirs(self.staging)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._mounts: list[Mount] = []
        self.produce("init", "--store", self.url, "--ranks", str(ranks))

    def produce(self, *args: str) -> subprocess.CompletedProcess[str]:
        """lakefs-produce with args; its exit status is the caller's to check."""
        return subprocess.run([binary("lakefs-produce"), *args], capture_output=True, text=True, timeout=120, check=False)

    def produce_once(self) -> str:
        """lakefs-produce run --once: commits what is sealed; its report."""
        r = self.produce("run", "--once", "--store", self.url, "--staging", self.staging, "--producer-id", "p1")
        if r.returncode not in (0, 1):  # 1: some batch was rejected
            pytest.fail(f"lakefs-produce run --once exited {r.returncode}: {r.stderr}")
        return r.stdout

    def start_producer(self) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([binary("lakefs-produce"), "run", "--store", self.url, "--staging", self.staging,
                              "--producer-id", "p1", "--poll", "50ms", "--progress", "log"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._procs.append(p)
        return p

    def mount(self, name: str = "mnt", wait: str = "30s") -> str:
        need(os.geteuid() == 0 and os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None,
             "the mount tests need root, /dev/fuse and fusermount3 (apt-get install -y fuse3)")
        path = os.path.join(self.root, name)
        os.makedirs(path)
        log = path + ".log"
        r, w = os.pipe()
        with open(log, "wb") as out:
            proc = subprocess.Popen([binary("lakefs-mount"), "--store", self.url, "--wait", wait, "--poll-interval", "20ms",
                                     "--cache-size", "64MiB", "--ready-fd", str(w), path],
                                    pass_fds=(w,), stdout=out, stderr=out)
        os.close(w)
        self._mounts.append(Mount(proc, path))
        ready, _, _ = select.select([r], [], [], 30)
        line = os.read(r, 100) if ready else b""
        os.close(r)
        if not line:
            with open(log, errors="replace") as f:
                pytest.fail(f"lakefs-mount did not come up: {f.read()[-2000:]}")
        return path

    def close(self) -> None:
        for m in self._mounts:
            m.stop()
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def new_stream(tmp_path: os.PathLike[str]) -> Iterator[object]:
    """new_stream(ranks) makes a Stream under the test's temp dir."""
    made: list[Stream] = []

    def make(ranks: int = 2) -> Stream:
        s = Stream(os.path.join(os.fspath(tmp_path), f"s{len(made)}"), ranks)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
