"""No lock another user can hold keeps a waiter out of the queue, or past its timeout (issue 27 item 1).

Tickets used to be published under ``queue.lock``, a file every user could open: anyone holding its
``flock`` (shared or exclusive, read-only opens included) made every new ``--wait``, ``each`` and
detached job block in joining the queue, for ever, past its own timeout, saying nothing. Joining now
takes no lock any other user can open, so these run as if the file were not there. The second user
is ``nobody`` (tests/two_users.py): these tests need root, and skip without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharing_helpers import HOLD, PAUSED_JOIN, Lines, env, run, start, wait_for
from two_users import as_nobody, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

SNAP = ["--snapshot", "dgx-h100"]

#: Run as the second user: open a file read-only (all it takes), lock it, say so, hold it until stdin closes.
HOLD_LOCK = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == 'shared' else fcntl.LOCK_EX)\n"
             "print('locked', flush=True)\n"
             "sys.stdin.read()\n")


def _lock_dir(top: Path, kind: str) -> Path:
    """A lock dir of ``kind`` with a 0666 ``queue.lock`` in it, as an older gpulaunch (or its ``locks
    init``) left it: every user can open it."""
    locks = top / kind
    if kind == "hardened":
        if os.geteuid() != 0:
            pytest.skip("locks init needs root (the lock files it makes are root's)")
        done = run([*SNAP, "locks", "init", str(locks)])
        assert done.returncode == 0, done.stderr
    else:
        locks.mkdir(mode=0o1777)
        locks.chmod(0o1777)
    queue_lock = locks / "queue.lock"
    queue_lock.touch()
    queue_lock.chmod(0o666)
    return locks


def _as_nobody_holding(top: Path, path: Path, how: str) -> subprocess.Popen[str]:
    prefix = as_nobody()
    holder = subprocess.Popen([*prefix, python_for_nobody(prefix, top), "-c", HOLD_LOCK, str(path), how],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=top)
    Lines(holder.stdout).wait("locked")
    return holder


def _end(*procs: subprocess.Popen[str] | None) -> None:
    for proc in procs:
        if proc is not None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.parametrize(("kind", "how"), [("tmp", "exclusive"), ("hardened", "shared")])
def test_a_lock_another_user_holds_on_queue_lock_keeps_no_waiter_out(shared_dir: Path, kind: str, how: str) -> None:
    """Bug: `--wait 3s` hung for ever in joining the queue (no line, no exit 5), and so did a `--wait`
    on a free GPU, and `each`: all blocked in Ticket.join on queue.lock, which nobody held."""
    locks = _lock_dir(shared_dir, kind)
    lock = _as_nobody_holding(shared_dir, locks / "queue.lock", how)
    job = None
    try:
        job = start([*SNAP, "--gpus", "2", "--", sys.executable, "-c", HOLD, str(shared_dir / "release")], locks)
        Lines(job.stdout).wait("CVD=")
        timed_out = run([*SNAP, "--gpus", "2", "--wait", "3s", "--", "true"], locks, timeout=90)
        assert timed_out.returncode == 5, timed_out.stderr  # its own timeout ended it, saying why
        assert "waited 3s, and the request still cannot be met: --gpus: GPU 2 is reserved by root" in timed_out.stderr
        served = run([*SNAP, "--gpus", "3", "--wait", "60", "--", "true"], locks, timeout=90)
        assert served.returncode == 0, served.stderr
        jobs = shared_dir / f"jobs-{kind}.txt"
        jobs.write_text("true\ntrue\n")
        sweep = run([*SNAP, "each", str(jobs), "--log-dir", str(shared_dir / f"logs-{kind}")], locks, timeout=90)
        assert sweep.returncode == 0, sweep.stderr
    finally:
        (shared_dir / "release").touch()
        _end(lock, job)


#: Run as the second user: lock the waiter's ticket that is not locked yet (found by listing the dir).
LOCK_FIRST = ("import fcntl, glob, os, sys\n"
              "[path] = glob.glob(os.path.join(sys.argv[1], '.ticket-*'))\n"
              "try:\n"
              "    fd = os.open(path, os.O_RDONLY)\n"
              "    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
              "    print('locked', flush=True)\n"
              "except OSError as exc:\n"
              "    print('refused', exc.strerror, flush=True)\n"
              "sys.stdin.read()\n")


def test_no_other_user_can_lock_a_ticket_before_its_waiter_does(shared_dir: Path) -> None:
    """Bug: a new ticket was made 0644 and locked after: another user who saw it in the directory (inotify
    tells at once) could take a shared lock on it first, and the waiter blocked for ever in joining."""
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared_dir)
    locks, here = _lock_dir(shared_dir, "tmp"), shared_dir / "here"
    here.mkdir()
    waiter = other = None
    try:
        waiter = subprocess.Popen([sys.executable, "-c", PAUSED_JOIN, str(here), *SNAP, "--gpus", "2", "--wait", "60",
                                   "--", "true"], env=env(locks), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        wait_for(lambda: (here / "paused").exists() or waiter.poll() is not None, what="the waiter to pause")
        assert waiter.poll() is None, waiter.stderr.read() if waiter.stderr else ""
        other = subprocess.Popen([*prefix, python, "-c", LOCK_FIRST, str(locks)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=shared_dir)
        said = Lines(other.stdout).wait("e")  # "locked" or "refused ..."
        (here / "go").touch()
        assert waiter.wait(timeout=60) == 0, waiter.stderr.read() if waiter.stderr else ""
        assert said.startswith("refused"), said
    finally:
        (here / "go").touch()
        _end(other, waiter)


def test_the_queue_makes_no_file_every_user_can_lock(tmp_path: Path) -> None:
    """What joining leaves in a fresh lock dir: nothing but lock files of GPUs (no queue.lock)."""
    locks = tmp_path / "locks"
    done = run([*SNAP, "--gpus", "2", "--wait", "60", "--", "true"], locks)
    assert done.returncode == 0, done.stderr
    assert sorted(p for p in os.listdir(locks) if not p.startswith("GPU-")) == []
