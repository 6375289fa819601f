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
from sharing_helpers import run

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


# --- waiting ---------------------------------------------------------------------------------------

def test_waiting_for_more_than_the_whole_machine_holds_fails_at_once(tmp_path: Path) -> None:
    # Slip: the "waiting cannot help" check of --fit SIZE turned off; gpulaunch would wait the full
    # --wait for 2000 GiB on a machine of 8 x 80 GiB, then time out (exit 5), instead of saying so.
    done = run(["--snapshot", "dgx-h100", "--fit", "2000G", "--wait", "3", "--", "true"], tmp_path / "locks")
    assert done.returncode == 4, done.stderr
    assert done.stderr.endswith("waiting cannot help: --fit 2000.0 GiB: all usable GPUs together have 637.2 GiB "
                                "(hint: relax the constraints, or ask for fewer GPUs)\n"), done.stderr


def test_waiting_for_exactly_what_the_whole_machine_holds_is_waited_for(tmp_path: Path) -> None:
    # The line of that check: 8 x 81,559 MiB asked is every GPU's total, so it could fit once
    # everything is free; gpulaunch waits (and times out, exit 5), it does not refuse (exit 4).
    done = run(["--snapshot", "dgx-h100", "--fit", f"{8 * 81559}MiB", "--wait", "0.5", "-q", "--", "true"],
               tmp_path / "locks")
    assert done.returncode == 5, done.stderr
    assert "waited" in done.stderr and "waiting cannot help" not in done.stderr, done.stderr
