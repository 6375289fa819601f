"""No user can forge or break another's reservation at any depth (issue 27 item 1).

A launch nested in a job locks the job's GPU one level deeper (``UUID.in1.lock``, …). In a hardened
directory those files are root's, made by ``locks init`` like the machine-wide ones, so another user
can neither remove, rename, plant nor chmod one a nested job relies on. A *shared* ``flock`` cannot be
refused by any mode (``flock`` needs only an open descriptor): it is shown instead, as what blocks the
GPU, in ``ls``, ``--explain``, ``--gpus`` and ``--wait``. And a launch nested in a job started with
``--lock-dir D`` finds ``D`` by itself.

The second user is ``nobody`` (tests/two_users.py): these tests need root, and skip without it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.reservations import lockdir
from sharing_helpers import Lines, env, gl, run, start
from two_users import as_nobody, nobody_gpulaunch, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

SNAP = ["--snapshot", "dgx-h100"]
GPUS = [g.uuid for g in snapshot.resolve("dgx-h100").gpus]

#: A job that says its pid and GPUs, then runs until its stdin closes.
HOLD = ("import os, sys; print('ready', os.getpid(), os.environ.get('GPULAUNCH_GPUS'), flush=True); "
        "sys.stdin.read()")

#: Run as the second user: every way to take away (``take``) or plant (``plant``) a lock file at the
#: given paths; prints what worked.
TAMPER = r"""
import os, sys, tempfile
how, scratch, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
for path in paths:
    mine = tempfile.mkstemp(dir=scratch)[1]  # a file of our own, on the same file system
    tries = {"take": [("removed", lambda: os.unlink(path)), ("renamed", lambda: os.rename(path, path + ".x")),
                      ("renamed a file over", lambda: os.rename(mine, path)),
                      ("chmod-ed", lambda: os.chmod(path, 0o600))],
             "plant": [("planted a symlink at", lambda: os.symlink("/nonexistent", path)),
                       ("planted a file at", lambda: os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))),
                       ("hard-linked over", lambda: os.link(sys.executable, path))]}[how]
    for what, act in tries:
        try:
            act()
            print(what, path)
        except OSError:
            pass
"""


def _hardened(top: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("locks init needs root (the lock files it makes are root's)")
    locks = top / "hardened"
    done = run([*SNAP, "locks", "init", str(locks)])
    assert done.returncode == 0, done.stderr
    return locks


def _depths(locks: Path, gpu: int) -> list[str]:
    """The lock files of GPU ``gpu`` at every depth a launch may nest to."""
    return [lockdir.nested_path(str(locks), GPUS[gpu], d) for d in range(lockdir.MAX_DEPTH)]


def _tamper(top: Path, how: str, paths: list[str]) -> str:
    prefix = as_nobody()
    python = python_for_nobody(prefix, top)
    scratch = top / "nobodys"
    scratch.mkdir(exist_ok=True)
    os.chown(scratch, 65534, 65534)
    done = subprocess.run([*prefix, python, "-c", TAMPER, how, str(scratch), *paths], capture_output=True, text=True,
                          timeout=60, cwd=top)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _nested_first(top: Path, locks: Path) -> None:
    """Nobody's own job with a launch nested in it, first on GPU 2: where nested lock files are made on
    demand, this made them, and they are nobody's."""
    python = python_for_nobody(as_nobody(), top)
    inner = [python, "-m", "gpu_launch", *SNAP, "-q", "--auto", "1", "--", "true"]
    done = nobody_gpulaunch(top, [*SNAP, "-q", "--gpus", "2", "--", *inner], locks)
    assert done.returncode == 0, done.stderr


def test_no_other_user_can_remove_a_nested_lock_so_two_children_never_share_the_gpu(shared_dir: Path) -> None:
    """The issue's (a): root's job holds GPU 2, its first child holds GPU 2 one level deeper; nobody
    removes that file (it made it first, in the sticky queue/), and a second child ran on GPU 2 too."""
    locks = _hardened(shared_dir)
    _nested_first(shared_dir, locks)
    driver = ("import subprocess, sys\n"
              f"first = subprocess.Popen({gl(*SNAP, '-q', '--auto', '1', '--', sys.executable, '-c', HOLD)!r}, "
              "stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
              "print('first', first.stdout.readline().strip(), flush=True)\n"
              "sys.stdin.readline()  # the other user has done their worst\n"
              f"second = subprocess.run({gl(*SNAP, '--auto', '1', '--', 'true')!r}, capture_output=True, text=True)\n"
              "print('second', second.returncode, second.stderr.strip().replace(chr(10), ' '), flush=True)\n"
              "first.stdin.close(); first.wait()\n")
    job = subprocess.Popen(gl(*SNAP, "-q", "--gpus", "2", "--", sys.executable, "-c", driver), env=env(locks),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = Lines(job.stdout)
        assert out.wait("first ready").split()[-1] == "2"
        tampered = _tamper(shared_dir, "take", _depths(locks, 2))
        assert job.stdin is not None
        job.stdin.write("go\n")
        job.stdin.flush()
        second = out.wait("second ")
        assert not second.startswith("second 0"), second  # it ran on GPU 2 beside the first child
        assert "GPU 2: reserved by root" in second, second
        assert tampered == ""
    finally:
        job.kill()
        job.wait(timeout=30)


def test_no_other_user_can_take_the_gpu_of_a_nested_job_that_outlived_its_job(shared_dir: Path) -> None:
    """The issue's (b): the job ended, the job nested in it still runs (holding only the deeper lock);
    nobody removes that lock file, and took the GPU."""
    locks = _hardened(shared_dir)
    _nested_first(shared_dir, locks)
    launcher = ("import subprocess, sys\n"  # the nested launch, started with the job's descriptors closed
                f"p = subprocess.Popen({gl(*SNAP, '-q', '--auto', '1', '--', sys.executable, '-c', HOLD)!r}, "
                "stdout=subprocess.PIPE, text=True)\n"
                "print(p.stdout.readline().strip(), flush=True)\n")
    job = subprocess.Popen(gl(*SNAP, "-q", "--gpus", "2", "--", sys.executable, "-c", launcher), env=env(locks),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = job.stdout.readline() if job.stdout is not None else ""
        assert line.startswith("ready") and line.split()[-1] == "2", line + (job.stderr.read() if job.stderr else "")
        assert job.wait(timeout=30) == 0  # the job is gone; its nested job runs on
        tampered = _tamper(shared_dir, "take", _depths(locks, 2))
        taken = nobody_gpulaunch(shared_dir, [*SNAP, "--gpus", "2", "--", "true"], locks)
        assert taken.returncode == 6 and "GPU 2 is reserved by root" in taken.stderr, taken.stderr
        ls = nobody_gpulaunch(shared_dir, [*SNAP, "ls"], locks)
        assert f"root (pid {line.split()[1]}" in ls.stdout, ls.stdout
        assert tampered == ""
    finally:
        job.kill()
        job.wait(timeout=30)
        job.stdin.close()  # type: ignore[union-attr]  # the nested job's stdin too: it ends


def test_nothing_another_user_plants_can_keep_a_nested_launch_off_its_jobs_gpu(shared_dir: Path) -> None:
    locks = _hardened(shared_dir)
    tampered = _tamper(shared_dir, "plant", _depths(locks, 3))
    inner = gl(*SNAP, "-q", "--auto", "1", "--", "sh", "-c", "echo inner $GPULAUNCH_GPUS")
    done = run([*SNAP, "-q", "--gpus", "3", "--", *inner], locks)
    assert done.returncode == 0 and done.stdout == "inner 3\n", done.stderr
    assert tampered == ""
    for path in _depths(locks, 3):  # all there, all root's, as `locks init` made them
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o666), path


def test_in_the_tmp_kind_a_file_planted_one_level_deeper_is_named_as_what_blocks_the_gpu(shared_dir: Path) -> None:
    """Where the file system cannot refuse it (a sticky, world-writable dir), it is shown: a symlink
    another user planted at GPU 5's nested lock path keeps the launches nested in any job on GPU 5
    off it, so GPU 5 is unavailable, and `ls`, `--explain` and `--gpus` say which file and whose."""
    locks = shared_dir / "locks"
    assert run([*SNAP, "-q", "--gpus", "5", "--", "true"], locks).returncode == 0  # the 1777 dir and GPU 5's file
    nested = lockdir.nested_path(str(locks), GPUS[5], 1)
    assert _tamper(shared_dir, "plant", [nested]).startswith(f"planted a symlink at {nested}\n")
    ls = run([*SNAP, "ls"], locks)
    row = next(line for line in ls.stdout.splitlines() if line.split()[:1] == ["5"])
    assert "unavailable: lock file is a symlink; refusing to follow it (owner: nobody)" in row, ls.stdout
    explain = run([*SNAP, "--auto", "1", "--explain"], locks)
    assert f"GPU 5: unavailable for reservation: its lock file {nested} is a symlink" in explain.stdout, explain.stdout
    named = run([*SNAP, "--gpus", "5", "--", "true"], locks)
    assert named.returncode == 7 and nested in named.stderr and "(hint: ask nobody to remove it" in named.stderr, \
        named.stderr


def test_a_nested_launch_in_a_dir_an_older_locks_init_set_up_says_to_run_it_again(shared_dir: Path) -> None:
    """An older `locks init` made no nested lock files, and no user may add one: a launch nested in a
    job there fails at once (exit 7, not a wait for ever) with the admin's fix."""
    locks = _hardened(shared_dir)
    for depth in range(1, lockdir.MAX_DEPTH):
        os.unlink(lockdir.nested_path(str(locks), GPUS[2], depth))
    python = python_for_nobody(as_nobody(), shared_dir)
    inner = [python, "-m", "gpu_launch", *SNAP, "--auto", "1", "--wait", "60", "--", "true"]
    done = nobody_gpulaunch(shared_dir, [*SNAP, "-q", "--gpus", "2", "--", *inner], locks)
    assert done.returncode == 7 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "GPU 2 has no lock file in the hardened lock dir" in done.stderr, done.stderr
    assert done.stderr.endswith(f"(hint: ask an admin to run `sudo gpulaunch locks init {locks}` again)\n")
    again = run([*SNAP, "locks", "init", str(locks)])
    assert again.returncode == 0 and "7 created" in again.stdout, again.stdout
    assert nobody_gpulaunch(shared_dir, [*SNAP, "-q", "--gpus", "2", "--", *inner], locks).returncode == 0


def test_locks_init_again_keeps_a_held_lock_file_another_user_hard_linked(shared_dir: Path) -> None:
    """A user may hard-link a 0666 lock file into a directory of their own; `locks init` run again
    (after adding GPUs) must not take that for a planted link and replace the file a job holds."""
    locks = _hardened(shared_dir)
    mine = shared_dir / "mine"
    mine.mkdir()
    os.chown(mine, 65534, 65534)
    job = start([*SNAP, "-q", "--gpus", "2", "--", sys.executable, "-c", HOLD], locks, stdin=subprocess.PIPE)
    try:
        Lines(job.stdout).wait("ready")
        prefix = as_nobody()
        linked = subprocess.run([*prefix, python_for_nobody(prefix, shared_dir), "-c",
                                 "import os, sys; os.link(sys.argv[1], sys.argv[2])", lockdir.lock_path(str(locks), GPUS[2]),
                                 str(mine / "kept")], capture_output=True, text=True, timeout=60, cwd=shared_dir)
        if linked.returncode != 0:
            pytest.skip(f"this kernel does not let nobody link a 0666 file of root's: {linked.stderr.strip()}")
        again = run([*SNAP, "locks", "init", str(locks)])
        assert again.returncode == 0 and "replaced" not in again.stdout, again.stdout
        second = run([*SNAP, "--gpus", "2", "--", "true"], locks)
        assert second.returncode == 6 and "GPU 2 is reserved by root" in second.stderr, second.stderr
    finally:
        job.kill()
        job.wait(timeout=30)


# --- a shared flock: no mode refuses it, so it is shown (issue 27 item 1) --------------------------------

SHARED = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_SH); "
          "print('shared', os.getpid(), flush=True); sys.stdin.read()")


def _share_lock(top: Path, path: str) -> tuple[subprocess.Popen[str], str]:
    """Nobody holds a shared lock on ``path`` until its stdin closes; returns it and its pid."""
    prefix = as_nobody()
    holder = subprocess.Popen([*prefix, python_for_nobody(prefix, top), "-c", SHARED, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=top)
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.startswith("shared "), line
    return holder, line.split()[1]


@pytest.mark.parametrize("kind", ["hardened", "tmp"])
def test_a_shared_lock_on_a_lock_file_shows_the_gpu_blocked_everywhere(shared_dir: Path, kind: str) -> None:
    if kind == "hardened":
        locks = _hardened(shared_dir)
    else:
        locks = shared_dir / "locks"
        assert run([*SNAP, "-q", "--gpus", "3", "--", "true"], locks).returncode == 0  # makes the 0666 lock file
    holder, pid = _share_lock(shared_dir, lockdir.lock_path(str(locks), GPUS[3]))
    blocked = f"blocked by a shared lock held by nobody (pid {pid}"
    try:
        ls = run([*SNAP, "ls"], locks)
        row = next(line for line in ls.stdout.splitlines() if line.split()[:1] == ["3"])
        assert "blocked by a shared lock" in row, ls.stdout  # shown free before
        explain = run([*SNAP, "--auto", "1", "--explain"], locks)
        assert f"GPU 3: {blocked}" in " ".join(explain.stdout.split()), explain.stdout  # (--explain wraps reasons)
        named = run([*SNAP, "--gpus", "3", "--", "true"], locks)
        assert named.returncode == 6 and f"GPU 3 is {blocked}" in named.stderr, named.stderr
        auto = run([*SNAP, "--auto", "1", "--max-util", "100", "-q", "--", "sh", "-c", "echo $GPULAUNCH_GPUS"], locks)
        assert auto.returncode == 0 and auto.stdout.strip() != "3"
        waiter = start([*SNAP, "--gpus", "3", "--wait", "60", "--", "true"], locks)
        assert f"GPU 3 is {blocked}" in Lines(waiter.stderr).wait("waiting")  # "eligible now" before
        holder.stdin.close()  # type: ignore[union-attr]  # the shared lock goes: the waiter runs
        assert waiter.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_a_shared_lock_one_level_deeper_is_shown_too(shared_dir: Path) -> None:
    """A shared lock on a nested lock file blocks the launches nested in whichever job takes the GPU:
    the GPU is shown blocked, not free."""
    locks = _hardened(shared_dir)
    holder, pid = _share_lock(shared_dir, lockdir.nested_path(str(locks), GPUS[4], 1))
    try:
        explain = run([*SNAP, "--auto", "1", "--explain"], locks)
        assert f"GPU 4: blocked by a shared lock held by nobody (pid {pid}" in " ".join(explain.stdout.split()), \
            explain.stdout  # (--explain wraps reasons)
    finally:
        holder.kill()
        holder.wait(timeout=30)


# --- a nested launch finds its job's lock dir (issue 27 item 1) --------------------------------------------

def test_a_launch_nested_in_a_job_with_its_own_lock_dir_reserves_there(tmp_path: Path) -> None:
    """The job was started with --lock-dir D; the launch nested in it is not told again, and must still
    lock in D: when the job ends first, the nested job's GPU stays taken for everyone using D."""
    locks = tmp_path / "team-locks"
    plain = env(None, XDG_RUNTIME_DIR=str(tmp_path))  # no lock dir set: a launch alone would use its own
    del plain["GPULAUNCH_LOCK_DIR"]
    launcher = ("import os, subprocess, sys\n"
                "print('dir', os.environ.get('GPULAUNCH_LOCK_DIR'), flush=True)\n"
                f"p = subprocess.Popen({gl(*SNAP, '-q', '--auto', '1', '--', sys.executable, '-c', HOLD)!r}, "
                "stdout=subprocess.PIPE, text=True)\n"
                "print(p.stdout.readline().strip(), flush=True)\n")
    job = subprocess.Popen(gl(*SNAP, "--lock-dir", str(locks), "-q", "--gpus", "2", "--", sys.executable, "-c",
                              launcher), env=plain, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline() == f"dir {locks}\n"
        ready = job.stdout.readline()
        assert ready.startswith("ready") and ready.split()[-1] == "2", ready  # the nested job runs on the job's GPU
        assert job.wait(timeout=30) == 0  # the job is gone; its nested job runs on (its stdin is ours)
        second = subprocess.run(gl(*SNAP, "--lock-dir", str(locks), "--gpus", "2", "--", "true"), env=plain,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 6 and "GPU 2 is reserved by" in second.stderr, second.stderr
    finally:
        job.kill()
        job.wait(timeout=30)
        job.stdin.close()  # type: ignore[union-attr]
