"""Launches on a bundled example machine reserve in the user's own lock directory (issue 19, item 7):
one user's demo never makes another's fail, while a user's own demo jobs still keep off each other."""

from __future__ import annotations

import os
from pathlib import Path

from cli_run import clean_env
from sharing_helpers import Lines, gl

import subprocess

HOLD = ("import os, sys, time\nprint('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n")


def _user(runtime_dir: Path) -> dict[str, str]:
    """A user with no GPULAUNCH_LOCK_DIR of their own, whose private runtime directory is ``runtime_dir``."""
    env = clean_env({"XDG_RUNTIME_DIR": str(runtime_dir), "NO_COLOR": "1"})
    del env["GPULAUNCH_LOCK_DIR"]
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gl(*args), env=env, capture_output=True, text=True, timeout=60)


def test_demo_reservations_are_per_user(tmp_path: Path) -> None:
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    alice.mkdir()
    bob.mkdir()
    release = tmp_path / "release"
    holder = subprocess.Popen(gl("--snapshot", "dgx-h100", "--gpus", "2,3", "--", "python3", "-c", HOLD, str(release)),
                              env=_user(alice), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert Lines(holder.stdout).wait("CVD=") == "CVD=2,3\n"
        assert len(os.listdir(alice / "gpulaunch-example-locks")) >= 1  # alice's own directory holds the lock
        # bob runs the README's demo on the same GPUs: not his problem that alice is trying it too
        other = _run(["--snapshot", "dgx-h100", "--gpus", "2,3", "--", "true"], _user(bob))
        assert other.returncode == 0, other.stderr
        # alice's second demo job is kept off her first one, as on a real machine
        mine = _run(["--snapshot", "dgx-h100", "--gpus", "2,3", "--", "true"], _user(alice))
        assert mine.returncode == 6 and "GPUs 2,3 are reserved by" in mine.stderr
        listing = _run(["--snapshot", "dgx-h100", "ls"], _user(alice))  # alice's ls reads her own directory
        assert f"(pid {holder.pid}" in listing.stdout
        assert f"(pid {holder.pid}" not in _run(["--snapshot", "dgx-h100", "ls"], _user(bob)).stdout
    finally:
        release.touch()
        holder.communicate(timeout=30)


def test_an_explicit_lock_dir_is_still_obeyed_for_examples(tmp_path: Path) -> None:
    shared = tmp_path / "shared-locks"
    env = _user(tmp_path)
    env["GPULAUNCH_LOCK_DIR"] = str(shared)
    done = _run(["--snapshot", "dgx-h100", "config"], env)
    assert f"lock dir in force: {shared}" in done.stdout
    demo = _run(["--snapshot", "dgx-h100", "config"], _user(tmp_path))
    assert f"lock dir in force: {tmp_path / 'gpulaunch-example-locks'}" in demo.stdout
    assert "yours alone" in demo.stdout
