"""Reservation behaviours users rely on that no test pinned (issue 28): each test here fails when the
code has the small, plausible bug its docstring names (written by hand, seen failing, reverted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.reservations import lockdir
from gpu_launch.reservations.holders import current_user
from sharing_helpers import PAUSED_JOIN, Lines, env, example, first_gpus, gl, run, start, wait_for, write_snapshot

SNAP = ["--snapshot", "dgx-h100"]
GPUS = [g.uuid for g in snapshot.resolve("dgx-h100").gpus]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (locks init; another user's directory)")

#: A job that says its pid and GPUs, then runs until its stdin closes.
HOLD = ("import os, sys; print('ready', os.getpid(), os.environ.get('GPULAUNCH_GPUS'), flush=True); "
        "sys.stdin.read()")


def test_a_gpu_held_only_by_a_nested_job_is_shown_held(tmp_path: Path) -> None:
    """Bug: the holder probe looks at the machine-wide lock only, not the deeper ones. The job ended;
    the launch nested in it (started with the job's descriptors closed) runs on, holding GPU 2 one
    level deeper: `ls` and `--explain` must name it, not show GPU 2 free."""
    locks = tmp_path / "locks"
    launcher = ("import subprocess, sys\n"
                f"p = subprocess.Popen({gl(*SNAP, '-q', '--auto', '1', '--', sys.executable, '-c', HOLD)!r}, "
                "stdout=subprocess.PIPE, text=True)\n"
                "print(p.stdout.readline().strip(), flush=True)\n")
    job = subprocess.Popen(gl(*SNAP, "-q", "--gpus", "2", "--", sys.executable, "-c", launcher), env=env(locks),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        ready = job.stdout.readline().split()
        assert ready[:1] == ["ready"] and ready[-1] == "2", ready
        assert job.wait(timeout=30) == 0  # the job is gone; the nested job runs on (its stdin is ours)
        ls = run([*SNAP, "ls"], locks)
        row = next(line for line in ls.stdout.splitlines() if line.split()[:1] == ["2"])
        assert f"{current_user()} (pid {ready[1]}" in row, ls.stdout
        explain = run([*SNAP, "--auto", "1", "--explain"], locks)
        assert f"GPU 2: reserved by {current_user()} (pid {ready[1]}" in explain.stdout, explain.stdout
    finally:
        job.kill()
        job.wait(timeout=30)
        job.stdin.close()  # type: ignore[union-attr]  # the nested job's stdin: it ends


#: Reserves GPUs 2 and 3 through the API, GPU 3 being taken by someone else right after the choice
#: read it free (between the read and the lock: a race, made certain here); then keeps running.
HALF_WAY = """
import fcntl, os, sys
import gpu_launch
from gpu_launch.reservations import holders, lockdir
locks, gpu3 = sys.argv[1], sys.argv[2]
real_scan = holders.scan
def scan(lock_dir, uuids):
    seen = real_scan(lock_dir, uuids)
    if not hasattr(scan, "other"):  # another job locks GPU 3 now (another open file: another lock)
        scan.other = os.open(lockdir.lock_path(lock_dir, gpu3), os.O_RDWR)
        fcntl.flock(scan.other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return seen
holders.scan = scan
try:
    gpu_launch.reserve(gpus="2,3", snapshot="dgx-h100", lock_dir=locks, quiet=True)
    print("reserved", flush=True)
except gpu_launch.GpuLaunchError as exc:
    print(type(exc).__name__, exc.exit_code, flush=True)
sys.stdin.read()
"""


def test_a_multi_gpu_reservation_that_fails_half_way_leaves_no_lock_behind(tmp_path: Path) -> None:
    """Bug: lock_all returns the GPU it lost without giving back those it already took. The process
    that failed lives on (a notebook, a waiter): GPU 2 must be free for everyone meanwhile."""
    locks = tmp_path / "locks"
    assert run([*SNAP, "-q", "--gpus", "2,3", "--", "true"], locks).returncode == 0  # the lock files exist
    child = subprocess.Popen([sys.executable, "-c", HALF_WAY, str(locks), GPUS[3]], env=env(locks),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ReservationConflict 6\n"
        free = run([*SNAP, "-q", "--gpus", "2", "--", "true"], locks)
        assert free.returncode == 0, free.stderr
        ls = run([*SNAP, "ls"], locks)
        row = next(line for line in ls.stdout.splitlines() if line.split()[:1] == ["2"])
        assert "pid" not in row, ls.stdout
    finally:
        child.kill()
        child.wait(timeout=30)


def test_a_queue_ticket_is_never_seen_before_it_is_locked(tmp_path: Path) -> None:
    """Bug: the ticket is put in place before it is locked. Another waiter looking at the queue in
    between takes it for a dead one and removes it: the waiter behind is then served first."""
    from gpu_launch.reservations import waitqueue

    locks, here = tmp_path / "locks", tmp_path / "here"
    here.mkdir()
    one = write_snapshot(tmp_path / "one.json", first_gpus(example("workstation-4x"), 1))
    holder = start(["--snapshot", str(one), "--gpus", "0", "--", sys.executable, "-c", HOLD], locks,
                   stdin=subprocess.PIPE)
    first = second = None
    try:
        Lines(holder.stdout).wait("ready")
        first = subprocess.Popen([sys.executable, "-c", PAUSED_JOIN, str(here), "--snapshot", str(one), "--gpus", "0",
                                  "--wait", "60", "--", "true"], env=env(locks), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (here / "paused").exists() or first.poll() is not None, what="the waiter to pause")
        assert first.poll() is None, first.stderr.read() if first.stderr else ""  # it waits for "go"
        # Another waiter looks at the queue now (each waiter does, every poll): what it sees as dead, it removes.
        waitqueue.Ticket(str(locks)).ahead()
        (here / "go").touch()  # it locks its ticket and waits
        Lines(first.stderr).wait("waiting")
        second = start(["--snapshot", str(one), "--gpus", "0", "--wait", "60", "--", "true"], locks)
        assert "1 waiter ahead in the queue" in Lines(second.stderr).wait("waiting")
    finally:
        (here / "go").touch()
        holder.kill()
        holder.wait(timeout=30)
        for waiter in (first, second):
            if waiter is not None:
                waiter.wait(timeout=60)


# --- what counts as which kind of lock directory ----------------------------------------------------------

@root_only
def test_locks_init_refuses_a_parent_directory_a_group_can_write(tmp_path: Path) -> None:
    """Bug: only "others" write permission is checked. Members of the group could rename the hardened
    directory away and put one of their own in its place."""
    parent = tmp_path / "team"
    parent.mkdir()
    os.chown(parent, 0, 65534)
    parent.chmod(0o775)
    done = run([*SNAP, "locks", "init", str(parent / "locks")])
    assert done.returncode == 7 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"locks init: {parent} can be written by users other than root (mode 0775)" in done.stderr
    assert not (parent / "locks").exists()


def _config_lock_dir(hardened: Path) -> dict[str, object]:
    environ = env(None, GPULAUNCH_HARDENED_LOCK_DIR=str(hardened))
    del environ["GPULAUNCH_LOCK_DIR"]
    done = subprocess.run(gl("config", "--json"), env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["lock_dir"]


@root_only
@pytest.mark.parametrize("how", ["owner nobody", "mode 0664", "mode 0446"])
def test_a_hardened_mark_that_is_not_root_only_does_not_count(tmp_path: Path, how: str) -> None:
    """Bug: the mark counts when it is a regular file, whoever owns it or can write it. Only root can
    have put a root-only mark in a directory only root can write."""
    hardened = tmp_path / "hardened"
    assert run([*SNAP, "locks", "init", str(hardened)]).returncode == 0
    assert _config_lock_dir(hardened)["hardened"] is True
    mark = hardened / lockdir.HARDENED_MARK
    if how == "owner nobody":
        os.chown(mark, 65534, 65534)
    else:
        mark.chmod(int(how.split()[1], 8))
    seen = _config_lock_dir(hardened)
    assert seen["hardened"] is False and seen["path"] == lockdir.DEFAULT_LOCK_DIR, seen


@root_only
@pytest.mark.parametrize("mode, usable", [(0o1777, True), (0o1733, True), (0o0777, False), (0o1775, False),
                                          (0o1770, False)])
def test_another_users_lock_dir_is_used_only_when_sticky_and_world_writable(tmp_path: Path, mode: int,
                                                                             usable: bool) -> None:
    """Bug: the /tmp kind recognised by the wrong mode bits. A directory of another user's is safe to
    share only when sticky (no one removes another's files) and world-writable (everyone can add)."""
    locks = tmp_path / "theirs"
    locks.mkdir()
    os.chown(locks, 65534, 65534)
    locks.chmod(mode)
    done = run([*SNAP, "-q", "--gpus", "2", "--", "true"], locks)
    if usable:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 7 and len(done.stderr.splitlines()) == 1, done.stderr
        assert f"lock dir {locks} belongs to nobody and is not sticky and world-writable (mode {mode:04o})" \
            in done.stderr
        assert "chmod 1777" in done.stderr
