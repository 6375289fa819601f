"""One unusable lock file makes its GPU alone unavailable for reservation; everyone else goes on (issue 12)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.reservations import lockdir
from sharing_helpers import run
from two_users import NOBODY, nobody_gpulaunch, shared_dir  # noqa: F401  (a fixture)

SNAP = ["--snapshot", "dgx-h100"]
GPU2 = snapshot.resolve("dgx-h100").gpus[2].uuid


def _plant_symlink(locks: Path, victim: Path) -> Path:
    locks.mkdir(mode=0o1777, exist_ok=True)
    locks.chmod(0o1777)
    planted = Path(lockdir.lock_path(str(locks), GPU2))
    planted.symlink_to(victim)
    if os.geteuid() == 0:
        os.lchown(planted, NOBODY, NOBODY)  # planted by another user
    return planted


def test_a_planted_symlink_makes_only_its_gpu_unavailable(tmp_path: Path) -> None:
    locks, victim = tmp_path / "locks", tmp_path / "victim"
    victim.write_text("precious\n")
    planted = _plant_symlink(locks, victim)
    named = run([*SNAP, "--gpus", "2", "--", "true"], locks)
    assert named.returncode == 7, named.stderr
    assert f"GPU 2 is unavailable for reservation: its lock file {planted} is a symlink" in named.stderr
    if os.geteuid() == 0:
        assert "(owner: nobody)" in named.stderr and "(hint: ask nobody to remove it" in named.stderr
    other = run([*SNAP, "--gpus", "3", "-q", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], locks)
    assert (other.returncode, other.stdout) == (0, "3\n"), other.stderr
    auto = run([*SNAP, "--auto", "7", "--max-util", "100", "-q", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
               locks)
    assert auto.returncode == 0 and "2" not in auto.stdout.strip().split(","), auto.stderr
    explain = run([*SNAP, "--auto", "1", "--explain"], locks)
    assert f"GPU 2: unavailable for reservation: its lock file {planted} is a symlink" in explain.stdout
    ls = run([*SNAP, "ls"], locks)
    row = next(line for line in ls.stdout.splitlines() if line.startswith("2 "))
    assert "unavailable: lock file is a symlink" in row
    assert "GPU 2 is unavailable for reservation" in ls.stderr
    assert victim.read_text() == "precious\n" and planted.is_symlink()


def test_a_read_only_lock_file_of_another_user_blocks_only_its_gpu(shared_dir: Path) -> None:
    locks = shared_dir / "locks"
    locks.mkdir()
    locks.chmod(0o1777)
    bad = Path(lockdir.lock_path(str(locks), GPU2))
    bad.write_text("")
    bad.chmod(0o644)  # root's, and only root may write it: nobody cannot lock it
    named = nobody_gpulaunch(shared_dir, [*SNAP, "--gpus", "2", "--", "true"], locks)
    assert named.returncode == 7, named.stderr
    assert f"its lock file {bad} cannot be opened read-write by you (mode 0644" in named.stderr
    assert "(owner: root)" in named.stderr and "sudo gpulaunch locks init" in named.stderr
    for args in (["--gpus", "3"], ["--auto", "1"], ["--auto", "1", "--wait", "30"]):
        ok = nobody_gpulaunch(shared_dir, [*SNAP, *args, "-q", "--", "true"], locks)
        assert ok.returncode == 0, (args, ok.stderr)
    ls = nobody_gpulaunch(shared_dir, [*SNAP, "ls"], locks)
    assert ls.returncode == 0 and "unavailable: lock file cannot be opened read-write" in ls.stdout


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_lock_path_that_is_not_a_file_blocks_only_its_gpu(tmp_path: Path, kind: str) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o1777)
    path = lockdir.lock_path(str(locks), GPU2)
    os.mkfifo(path) if kind == "fifo" else os.mkdir(path)
    named = run([*SNAP, "--gpus", "2", "--", "true"], locks, timeout=30)
    assert named.returncode == 7 and "GPU 2 is unavailable for reservation" in named.stderr, named.stderr
    assert run([*SNAP, "--auto", "1", "-q", "--", "true"], locks, timeout=30).returncode == 0
