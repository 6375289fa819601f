"""Reservations at their edges, as a user sees them (issue 28: mutants of gpu_launch/share/ that the
suite let live; benchmarks/mutation.py finds them). Each test says the slip it catches.

Locks are taken here with ``flock`` on the real lock files, as another gpulaunch would take them;
what is asserted is what gpulaunch then says about the GPU.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.share import holders, lockdir

GPU2 = snapshot.resolve("dgx-h100").gpus[2].uuid


@contextmanager
def held(path: str, record: dict[str, object]) -> Iterator[None]:
    """Hold ``path``'s reservation (an exclusive flock) with ``record`` as its holder text."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, (json.dumps(record) + "\n").encode())
        yield
    finally:
        os.close(fd)


@pytest.mark.parametrize("pid, shown", [(2**32 - 1, "pid 4294967295"), (2**32, None), (0, None)])
def test_a_holder_pid_is_named_only_when_it_can_be_one(tmp_path: Path, pid: int, shown: str | None) -> None:
    # Slip: the bound on a holder's pid (0 < pid < 2**32) loosened by one; a forged record would then
    # be named as a process. (A record naming a user alone reads "mallory", not "mallory ()".)
    locks = tmp_path / "locks"
    locks.mkdir()
    with held(lockdir.lock_path(str(locks), GPU2), {"pid": pid, "user": "mallory"}):
        holder = holders.probe(str(locks), GPU2)
        assert holder is not None
        text = holder.describe(age=False)
    assert text == (f"mallory ({shown})" if shown else "mallory"), text
