"""The --wait queue: strict first come, first served, and no planted file can turn it off (issue 12)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sharing_helpers import HOLD, Lines, env, example, first_gpus, start, write_snapshot
from two_users import as_nobody, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

NOTE = "import sys, time; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); time.sleep(0.05)"


def _one_gpu(where: Path) -> Path:
    snap = write_snapshot(where / "one.json", first_gpus(example("workstation-4x"), 1))
    snap.chmod(0o644)
    return snap


def test_five_waiters_are_served_in_the_order_they_came(tmp_path: Path) -> None:
    locks, release, order = tmp_path / "locks", tmp_path / "release", tmp_path / "order.txt"
    one = _one_gpu(tmp_path)
    holder = start(["--snapshot", str(one), "--gpus", "0", "--", "python3", "-c", HOLD, str(release)], locks)
    Lines(holder.stdout).wait("CVD=0")
    waiters = []
    for i in range(5):
        waiter = start(["--snapshot", str(one), "--auto", "1", "--wait", "--", "python3", "-c", NOTE, str(order),
                        f"w{i}"], locks)
        line = Lines(waiter.stderr).wait("waiting")  # in the queue before the next one starts
        assert (f"{i} waiter" in line) if i else ("eligible now" in line), line
        waiters.append(waiter)
    release.touch()
    assert holder.wait(timeout=60) == 0
    assert [w.wait(timeout=60) for w in waiters] == [0] * 5
    assert order.read_text().split() == [f"w{i}" for i in range(5)]


def _plant(queue: Path, *names: str) -> None:
    for name in names:
        (queue / name).write_text("")  # root's, unlocked: dead or junk, and nobody cannot remove them


def test_planted_dead_and_junk_tickets_neither_block_nor_reorder_the_queue(shared_dir: Path) -> None:
    """Tickets another user cannot remove (root's, in the sticky lock dir): ignored, FIFO still exact."""
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared_dir)
    locks, release, out = shared_dir / "locks", shared_dir / "release", shared_dir / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)  # where nobody's jobs note their order
    order = out / "order.txt"
    locks.mkdir()
    locks.chmod(0o1777)
    _plant(locks, "ticket-000000000000-1", "ticket-999999999999-1", "ticket-abc", "ticket-5-x-y", "ticket-" + "9" * 40 + "-1")
    one = _one_gpu(shared_dir)

    def nobody(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*prefix, python, "-m", "gpu_launch", "--snapshot", str(one), *args], env=env(locks),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=shared_dir)

    holder = nobody("--gpus", "0", "--", python, "-c", HOLD, str(release))
    Lines(holder.stdout).wait("CVD=0")
    first = nobody("--auto", "1", "--wait", "--", python, "-c", NOTE, str(order), "first")
    first_line = Lines(first.stderr).wait("waiting")
    assert "ahead in the queue" not in first_line, first_line  # the planted tickets are nobody ahead of it
    second = nobody("--auto", "1", "--wait", "--", python, "-c", NOTE, str(order), "second")
    assert "1 waiter ahead in the queue" in Lines(second.stderr).wait("waiting")
    release.touch()
    assert holder.wait(timeout=60) == 0
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    assert order.read_text() == "first\nsecond\n"
    assert (locks / "ticket-999999999999-1").exists()  # it could not be removed, and blocked no one
    assert not [p for p in os.listdir(locks) if re.fullmatch(r"ticket-\d+-\d+-[0-9a-f]+", p)]  # theirs are gone


def test_waiters_do_not_wait_for_the_poll_interval_when_a_gpu_frees_or_their_turn_comes(tmp_path: Path) -> None:
    """A freed GPU and a waiter ahead leaving wake the next waiter by themselves, not the next re-read.

    With a 10-minute poll interval, both waiters finishing well within the timeout shows it.
    """
    locks, release, order = tmp_path / "locks", tmp_path / "release", tmp_path / "order.txt"
    one = _one_gpu(tmp_path)
    slow = env(locks, GPULAUNCH_POLL_INTERVAL="600")
    holder = start(["--snapshot", str(one), "--gpus", "0", "--", "python3", "-c", HOLD, str(release)], locks)
    Lines(holder.stdout).wait("CVD=0")
    first = start(["--snapshot", str(one), "--auto", "1", "--wait", "--", "python3", "-c", NOTE, str(order), "a"],
                  env=slow)
    Lines(first.stderr).wait("waiting")
    second = start(["--snapshot", str(one), "--auto", "1", "--wait", "--", "python3", "-c", NOTE, str(order), "b"],
                   env=slow)
    Lines(second.stderr).wait("1 waiter ahead")
    release.touch()
    assert holder.wait(timeout=60) == 0
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    assert order.read_text() == "a\nb\n"


def test_a_planted_live_ticket_at_the_top_number_does_not_reorder_later_waiters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20 item 6: every later waiter got the top number, and pid text decided (pid 1 went first)."""
    import fcntl

    from gpu_launch.reservations import waitqueue

    locks = tmp_path / "locks"
    locks.mkdir()
    locks.chmod(0o1777)
    planted = locks / f"ticket-{'9' * 30}-77-abcd"
    fd = os.open(planted, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # live: someone holds it
    try:
        tickets = []
        for pid in (50, 1):  # the earlier waiter's pid sorts after the later one's as text
            monkeypatch.setattr(waitqueue.os, "getpid", lambda pid=pid: pid)
            ticket = waitqueue.Ticket(str(locks))
            ticket.join()
            tickets.append(ticket)
        monkeypatch.undo()
        assert [t.ahead() for t in tickets] == [1, 2]  # the planted one, then arrival order
        tickets[0].leave()
        assert tickets[1].ahead() == 1
        tickets[1].leave()
    finally:
        os.close(fd)
