"""Whose reservation is it? Decided by the lock descriptors, never by the pid text of a lock file (issue 12).

A gpulaunch inside a job may use the job's GPUs; nobody else may, whatever they write into the
world-writable lock file and whatever pid numbers another PID namespace happens to use.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.reservations import lockdir
from sharing_helpers import HOLD, Lines, env, gl, run, start
from two_users import as_nobody, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

GPU2 = snapshot.resolve("dgx-h100").gpus[2].uuid
SNAP = ["--snapshot", "dgx-h100"]


def _holder_pid(locks: Path) -> int | None:
    text = Path(lockdir.lock_path(str(locks), GPU2)).read_text()
    return json.loads(text.splitlines()[0]).get("pid") if text else None


def test_a_shell_script_inside_a_job_uses_the_jobs_gpu_through_its_inherited_lock(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    inner = " ".join(gl(*SNAP, "--gpus", "2", "-q", "--", "sh", "-c", "'echo inner:$CUDA_VISIBLE_DEVICES'"))
    result = run([*SNAP, "--gpus", "2", "-q", "--", "sh", "-c", f"{inner}; echo rc=$?"], locks)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"inner:{GPU2}\nrc=0\n"


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


#: In a new PID namespace: sh is pid 1 and the command it runs (not exec's: `; true`) is pid 2.
NS = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", '"$@"; true', "sh"]


@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare --pid --fork --mount-proc` (root or user namespaces)")
def test_the_same_pid_number_in_another_pid_namespace_is_not_the_holder(tmp_path: Path) -> None:
    """Two containers share the lock dir: the job's parent there has the holder's pid number, yet no GPU."""
    locks, release = tmp_path / "locks", tmp_path / "release"
    holder = subprocess.Popen([*NS, *gl(*SNAP, "--gpus", "2", "-q", "--", sys.executable, "-c", HOLD, str(release))],
                              env=env(locks), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        Lines(holder.stdout).wait("CVD=2")
        assert _holder_pid(locks) == 2  # the holder's pid in its own namespace
        wrapper = ("import os, subprocess, sys; print('wrapper pid', os.getpid()); "
                   f"r = subprocess.run({gl(*SNAP, '--gpus', '2', '--', 'true')!r}, capture_output=True, text=True); "
                   "print('rc', r.returncode); print(r.stderr)")
        other = subprocess.run([*NS, sys.executable, "-c", wrapper], env=env(locks), capture_output=True, text=True,
                               timeout=60)
        assert other.stdout.startswith("wrapper pid 2\n"), other.stdout + other.stderr  # same number as the holder
        assert "rc 6\n" in other.stdout, other.stdout
        assert "GPU 2 is reserved by" in other.stdout
    finally:
        release.touch()
        holder.wait(timeout=30)


ATTACK = """
import json, os, subprocess, sys
path, argv = sys.argv[1], sys.argv[2:]
fd = os.open(path, os.O_RDWR | os.O_TRUNC)  # the lock file is 0666: anyone may write it
os.write(fd, (json.dumps({"pid": os.getpid(), "user": "nobody"}) + "\\n").encode())
os.set_inheritable(fd, True)  # and keep it open, handed down: a descriptor on the file, but not the lock
r = subprocess.run(argv, capture_output=True, text=True, pass_fds=(fd,))
print("rc", r.returncode)
print(r.stderr)
"""


def test_another_user_writing_their_pid_into_the_lock_file_does_not_get_the_gpu(shared_dir: Path) -> None:
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared_dir)
    locks, release = shared_dir / "locks", shared_dir / "release"
    holder = start([*SNAP, "--gpus", "2", "-q", "--", sys.executable, "-c", HOLD, str(release)], locks)
    try:
        Lines(holder.stdout).wait("CVD=2")
        lock = lockdir.lock_path(str(locks), GPU2)
        theirs = [python, "-m", "gpu_launch", *SNAP, "--gpus", "2", "--", "true"]
        attack = subprocess.run([*prefix, python, "-c", ATTACK, lock, *theirs],
                                env=env(locks), capture_output=True, text=True, timeout=60)
        assert attack.returncode == 0, attack.stderr
        assert json.loads(Path(lock).read_text())["user"] == "nobody"  # the text now names the attacker
        assert attack.stdout.startswith("rc 6\n"), attack.stdout
        assert "GPU 2 is reserved by nobody" in attack.stdout  # the holder line stays information only
        assert holder.poll() is None
    finally:
        release.touch()
        holder.wait(timeout=30)
