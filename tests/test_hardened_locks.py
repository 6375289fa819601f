"""`gpulaunch locks init`: a root-owned lock directory no user can tamper with, used when present (issue 12)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.share import reservations
from sharing_helpers import HOLD, Lines, env, example, first_gpus, gl, run, start, write_snapshot
from two_users import as_nobody, nobody_gpulaunch, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="locks init needs root")


def _init(path: Path, snap: str = "dgx-h100") -> subprocess.CompletedProcess[str]:
    return run(["--snapshot", snap, "locks", "init", str(path)])


def _without_lock_dir(hardened: Path, **extra: str) -> dict[str, str]:
    """The test env with no lock dir set, so the hardened default (moved to ``hardened``) is looked up."""
    out = env(None, GPULAUNCH_HARDENED_LOCK_DIR=str(hardened))
    del out["GPULAUNCH_LOCK_DIR"]
    return {**out, **extra}


@root_only
def test_locks_init_makes_a_root_owned_dir_with_a_lock_file_per_gpu_and_mig_device(tmp_path: Path) -> None:
    hardened = tmp_path / "var" / "locks"
    done = _init(hardened, "mig-a100")
    assert done.returncode == 0, done.stderr
    assert f"{hardened}: lock files for" in done.stdout
    st = hardened.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
    machine = snapshot.resolve("mig-a100")
    uuids = [u for g in machine.gpus for u in (g.uuid, *(m.uuid for m in g.mig_devices))]
    assert any(g.mig_devices for g in machine.gpus)
    for uuid in uuids:
        lock = Path(reservations.lock_path(str(hardened), uuid)).lstat()
        assert stat.S_ISREG(lock.st_mode) and (lock.st_uid, stat.S_IMODE(lock.st_mode)) == (0, 0o666)
    assert stat.S_IMODE((hardened / "queue.lock").stat().st_mode) == 0o666
    assert stat.S_IMODE((hardened / "queue").stat().st_mode) == 0o1777
    # again, with a planted symlink at one lock path: the symlink goes, everything else is kept
    planted = Path(reservations.lock_path(str(hardened), uuids[0]))
    planted.unlink()
    planted.symlink_to(tmp_path / "victim")
    again = _init(hardened, "mig-a100")
    assert again.returncode == 0 and "1 replaced" in again.stdout, again.stdout
    assert planted.is_file() and not planted.is_symlink() and not (tmp_path / "victim").exists()


def test_locks_init_is_for_root(shared_dir: Path) -> None:
    done = nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "locks", "init", str(shared_dir / "mine")])
    assert done.returncode == 7, done.stderr
    assert "only root can set up a hardened lock directory" in done.stderr
    assert "(hint: run it as root: sudo gpulaunch locks init)" in done.stderr
    assert not (shared_dir / "mine").exists()


@pytest.mark.parametrize("argv", [["locks"], ["locks", "clean"], ["locks", "init", "a", "b"]])
def test_locks_needs_init_and_at_most_one_dir(argv: list[str], tmp_path: Path) -> None:
    done = run(argv, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("gpulaunch: error: locks"), done.stderr


@root_only
def test_the_hardened_dir_is_used_when_present_and_ls_and_config_say_so(tmp_path: Path) -> None:
    hardened, release = tmp_path / "hardened", tmp_path / "release"
    assert _init(hardened).returncode == 0
    holder = subprocess.Popen(gl("--snapshot", "dgx-h100", "--gpus", "2", "-q", "--", sys.executable, "-c", HOLD,
                                 str(release)), env=_without_lock_dir(hardened), stdout=subprocess.PIPE, text=True)
    try:
        Lines(holder.stdout).wait("CVD=2")
        ls = subprocess.run(gl("--snapshot", "dgx-h100", "ls"), env=_without_lock_dir(hardened), capture_output=True,
                            text=True, timeout=60)
        assert "RESERVED BY" in ls.stdout
        assert f"lock dir: {hardened} (hardened: root-owned" in ls.stdout
        conf = subprocess.run(gl("config", "--json"), env=_without_lock_dir(hardened), capture_output=True, text=True,
                              timeout=60)
        assert json.loads(conf.stdout)["lock_dir"] == {"path": str(hardened), "hardened": True,
                                                     "source": "default (the hardened directory exists)"}
        # GPULAUNCH_LOCK_DIR (like --lock-dir and the config file) still wins over the hardened dir
        other = tmp_path / "other"
        mine = _without_lock_dir(hardened, GPULAUNCH_LOCK_DIR=str(other))
        ls2 = subprocess.run(gl("--snapshot", "dgx-h100", "ls"), env=mine, capture_output=True, text=True, timeout=60)
        assert "RESERVED BY" not in ls2.stdout and f"lock dir: {other} (not created yet; not hardened" in ls2.stdout
        text = subprocess.run(gl("config"), env=mine, capture_output=True, text=True, timeout=60).stdout
        assert f"lock dir in force: {other} (not created yet; not hardened" in text
        assert "from env GPULAUNCH_LOCK_DIR" in text
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_in_a_hardened_dir_other_users_lock_wait_but_cannot_remove_anything(shared_dir: Path) -> None:
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared_dir)
    hardened, release = shared_dir / "hardened", shared_dir / "release"
    one = write_snapshot(shared_dir / "one.json", first_gpus(example("dgx-h100"), 1))
    one.chmod(0o644)
    assert run(["--snapshot", str(one), "locks", "init", str(hardened)]).returncode == 0
    holder = start(["--snapshot", str(one), "--gpus", "0", "-q", "--", sys.executable, "-c", HOLD, str(release)],
                   hardened)
    try:
        Lines(holder.stdout).wait("CVD=0")
        lock = reservations.lock_path(str(hardened), snapshot.resolve(str(one)).gpus[0].uuid)
        tamper = ("import os, sys\nfor f in (lambda: os.unlink(sys.argv[1]), lambda: os.rename(sys.argv[1], sys.argv[1] + '.x')):\n"
                  "    try:\n        f(); print('done')\n    except PermissionError:\n        print('refused')\n")
        tried = subprocess.run([*prefix, python, "-c", tamper, lock], capture_output=True, text=True, timeout=60)
        assert tried.stdout == "refused\nrefused\n", tried.stderr
        waiter = subprocess.Popen([*prefix, python, "-m", "gpu_launch", "--snapshot", str(one), "--auto", "1", "--max-util", "100",
                                   "--wait", "60", "--", "true"], env=env(hardened), stderr=subprocess.PIPE, text=True,
                                  cwd=shared_dir)
        Lines(waiter.stderr).wait("waiting")
        assert [p.name for p in (hardened / "queue").iterdir() if p.name.startswith("ticket-")]
        release.touch()
        assert waiter.wait(timeout=60) == 0
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_a_gpu_with_no_lock_file_in_a_hardened_dir_points_at_locks_init(shared_dir: Path) -> None:
    as_nobody()
    hardened = shared_dir / "hardened"
    four = write_snapshot(shared_dir / "four.json", first_gpus(example("dgx-h100"), 4))
    assert run(["--snapshot", str(four), "locks", "init", str(hardened)]).returncode == 0
    new_gpu = nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "--gpus", "6", "--", "true"], hardened)
    assert new_gpu.returncode == 7, new_gpu.stderr
    assert "is missing from the hardened lock dir" in new_gpu.stderr, new_gpu.stderr
    assert "(hint: ask an admin to run `sudo gpulaunch locks init`)" in new_gpu.stderr
    old_gpu = nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "--gpus", "3", "--", "true"], hardened)
    assert old_gpu.returncode == 0, old_gpu.stderr  # the others work as usual
