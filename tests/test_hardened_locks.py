"""`gpulaunch locks init`: a root-owned lock directory no user can tamper with, used when present (issue 12)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
import sys
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.reservations import lockdir
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
        lock = Path(lockdir.lock_path(str(hardened), uuid)).lstat()
        assert stat.S_ISREG(lock.st_mode) and (lock.st_uid, stat.S_IMODE(lock.st_mode)) == (0, 0o666)
    assert not (hardened / "queue.lock").exists()  # the queue needs no lock every user can hold
    assert stat.S_IMODE((hardened / "queue").stat().st_mode) == 0o1777
    # again, with a planted symlink at one lock path: the symlink goes, everything else is kept
    planted = Path(lockdir.lock_path(str(hardened), uuids[0]))
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
        assert "lock dir" not in ls.stdout  # hardened: nothing to warn about, so no footer
        conf = subprocess.run(gl("config", "--json"), env=_without_lock_dir(hardened), capture_output=True, text=True,
                              timeout=60)
        assert json.loads(conf.stdout)["lock_dir"] == {"path": str(hardened), "hardened": True,
                                                     "source": "default (the hardened directory exists)"}
        text = subprocess.run(gl("config"), env=_without_lock_dir(hardened), capture_output=True, text=True,
                              timeout=60).stdout
        assert f"lock dir in force: {hardened}\n  hardened by `locks init`" in text
        # GPULAUNCH_LOCK_DIR (like --lock-dir and the config file) still wins over the hardened dir
        other = tmp_path / "other"
        mine = _without_lock_dir(hardened, GPULAUNCH_LOCK_DIR=str(other))
        ls2 = subprocess.run(gl("--snapshot", "dgx-h100", "ls"), env=mine, capture_output=True, text=True, timeout=60)
        assert "RESERVED BY" not in ls2.stdout and "lock dir" not in ls2.stdout
        text = subprocess.run(gl("config"), env=mine, capture_output=True, text=True, timeout=60).stdout
        assert f"lock dir in force: {other}\n  not created yet; not hardened\n  from env GPULAUNCH_LOCK_DIR\n" in text
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
        lock = lockdir.lock_path(str(hardened), snapshot.resolve(str(one)).gpus[0].uuid)
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
    assert f"(hint: ask an admin to run `sudo gpulaunch locks init {hardened}`" in new_gpu.stderr
    old_gpu = nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "--gpus", "3", "--", "true"], hardened)
    assert old_gpu.returncode == 0, old_gpu.stderr  # the others work as usual


# --- "hardened" means "made by `locks init`" (issue 20 item 4) ------------------------------------------------

def _private_root_dir(tmp_path: Path, how: str) -> Path:
    """Root's own private lock dir, made as a container's entrypoint or a Slurm prolog would make one."""
    if how == "mkdtemp":
        import tempfile

        return Path(tempfile.mkdtemp(dir=tmp_path))  # 0700
    old = os.umask(0o022)
    try:
        (tmp_path / "mine").mkdir()  # 0755
    finally:
        os.umask(old)
    return tmp_path / "mine"


@root_only
@pytest.mark.parametrize("how", ["mkdtemp", "mkdir-umask-022"])
def test_roots_own_private_dir_works_for_wait_each_and_use(tmp_path: Path, how: str) -> None:
    locks = _private_root_dir(tmp_path, how)
    release = tmp_path / "release"
    holder = start(["--snapshot", "dgx-h100", "--gpus", "0", "-q", "--", sys.executable, "-c", HOLD, str(release)], locks)
    try:
        Lines(holder.stdout).wait("CVD=0")
        waiter = start(["--snapshot", "dgx-h100", "--gpus", "0", "--wait", "60", "--", "true"], locks)
        Lines(waiter.stderr).wait("waiting")  # queued (exit 7 "ask an admin" before the fix)
        release.touch()
        assert waiter.wait(timeout=60) == 0
    finally:
        release.touch()
        holder.wait(timeout=30)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\ntrue\n")
    each = run(["--snapshot", "dgx-h100", "each", str(jobs), "--log-dir", str(tmp_path / "logs")], locks)
    assert each.returncode == 0, each.stderr
    api = subprocess.run([sys.executable, "-c", "from gpu_launch import use; "
                          f"print(len(use(1, wait=30, snapshot='dgx-h100', lock_dir={str(locks)!r}, quiet=True)))"],
                         env=env(locks), capture_output=True, text=True, timeout=60)
    assert api.returncode == 0 and api.stdout == "1\n", api.stderr
    conf = json.loads(run(["config", "--json"], locks).stdout)["lock_dir"]
    assert conf["hardened"] is False
    assert not (locks / "queue").exists()  # tickets in the dir itself, as in any non-hardened one


def test_a_root_dir_locks_init_never_set_up_is_not_hardened_for_other_users(shared_dir: Path) -> None:
    as_nobody()
    locks = shared_dir / "roots"
    locks.mkdir(mode=0o755)
    assert run(["--snapshot", "dgx-h100", "--gpus", "0", "--", "true"], locks).returncode == 0  # root's lock file
    done = nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "--gpus", "1", "--", "true"], locks)
    assert done.returncode == 7 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "missing from the hardened lock dir" not in done.stderr
    assert f"lock dir {locks} belongs to root and is not sticky and world-writable" in done.stderr
    conf = nobody_gpulaunch(shared_dir, ["config", "--json"], locks)
    assert json.loads(conf.stdout)["lock_dir"]["hardened"] is False, conf.stderr


def test_the_hardened_dir_variable_cannot_make_etc_hardened(tmp_path: Path) -> None:
    # `config` only reads: safe to point at the real /etc
    conf = subprocess.run(gl("config", "--json"), env=_without_lock_dir(Path("/etc")), capture_output=True, text=True,
                          timeout=60)
    assert json.loads(conf.stdout)["lock_dir"] == {"path": lockdir.DEFAULT_LOCK_DIR, "hardened": False,
                                                 "source": "default (/etc was not set up by `locks init`)"}, conf.stderr
    assert not lockdir.is_hardened("/etc")
    # a root-owned 0755 directory with files in it, like /etc: a launch never picks it as its lock dir
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    assert lockdir.lock_dir_path(None, {lockdir.ENV_HARDENED: str(etc)}) == lockdir.DEFAULT_LOCK_DIR


# --- `locks init` works on descriptors (issue 20 item 5) ------------------------------------------------------

@root_only
def test_locks_init_never_chmods_the_target_of_a_hard_link_at_a_lock_path(tmp_path: Path) -> None:
    hardened = tmp_path / "hardened"
    assert _init(hardened).returncode == 0
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    lock = Path(lockdir.lock_path(str(hardened), snapshot.resolve("dgx-h100").gpus[0].uuid))
    lock.unlink()
    os.link(secret, lock)  # as a user who owned the directory before `locks init` might have left it
    again = _init(hardened)
    assert again.returncode == 0 and "1 replaced" in again.stdout, again.stderr
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.stat().st_nlink == 1
    assert stat.S_IMODE(lock.stat().st_mode) == 0o666 and not lock.samefile(secret)


@root_only
def test_locks_init_under_a_parent_another_user_can_write_is_refused(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.mkdir()
    os.chown(users, 65534, 65534)  # nobody's: they could rename the hardened dir away and make their own
    done = _init(users / "locks")
    assert done.returncode == 7 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"locks init: {users} can be written by nobody" in done.stderr and "Traceback" not in done.stderr
    assert not (users / "locks").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, not sticky: anyone can rename anything in it
    done = _init(shared / "locks")
    assert done.returncode == 7 and "can be written by users other than root (mode 0777)" in done.stderr


@root_only
def test_a_symlink_swapped_in_during_locks_init_is_never_followed(tmp_path: Path) -> None:
    from gpu_launch.errors import LockDirError
    from gpu_launch.reservations import hardening
    import threading

    parent = tmp_path / "sticky"
    parent.mkdir()
    parent.chmod(0o1777)  # like /tmp
    target = tmp_path / "target"
    target.write_text("root only\n")
    target.chmod(0o600)
    named = parent / "locks"
    named.mkdir()
    stop = threading.Event()

    def swap() -> None:  # the directory's owner swapping it for a symlink and back, as fast as it can
        while not stop.is_set():
            try:
                os.rename(named, parent / "real")
                os.symlink(target, named)
                os.unlink(named)
                os.rename(parent / "real", named)
            except OSError:
                pass

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    outcomes = set()
    try:
        for _ in range(150):
            try:
                hardening.init_dir(str(named), ["GPU-a", "GPU-b"])
                outcomes.add("done")
            except LockDirError as exc:
                outcomes.add(exc.message.split(":")[0])
    finally:
        stop.set()
        swapper.join(timeout=10)
    st = target.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), outcomes
    assert outcomes <= {"done", "locks init"}


@root_only
def test_root_is_told_to_run_locks_init_not_to_ask_an_admin(tmp_path: Path) -> None:
    hardened = tmp_path / "hardened"
    assert _init(hardened).returncode == 0
    (hardened / "queue").rmdir()
    done = run(["--snapshot", "dgx-h100", "--auto", "1", "--wait", "5", "--", "true"], hardened)
    assert done.returncode == 7, done.stderr
    assert f"(hint: run `gpulaunch locks init {hardened}`" in done.stderr and "ask an admin" not in done.stderr


# --- lock files missing from a hardened dir (issue 20 item 11) -----------------------------------------------

def test_missing_lock_files_fail_at_once_naming_the_gpus_and_the_fix(shared_dir: Path) -> None:
    as_nobody()
    hardened = shared_dir / "hardened"
    four = write_snapshot(shared_dir / "four.json", first_gpus(example("dgx-h100"), 4))
    assert run(["--snapshot", str(four), "locks", "init", str(hardened)]).returncode == 0
    for extra in ([], ["--wait", "60"]):
        began = time.monotonic()
        done = nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "--auto", "5", *extra, "--", "true"], hardened)
        assert done.returncode == 7 and len(done.stderr.splitlines()) == 1, done.stderr
        assert time.monotonic() - began < 20  # not --wait's 60 s
        assert "GPU 4, GPU 5, GPU 6, GPU 7 have no lock file in the hardened lock dir" in done.stderr
        assert "--wait" not in done.stderr and f"sudo gpulaunch locks init {hardened}` again" in done.stderr


# --- the /tmp kind said where users see it (issue 20 item 7, issue 19 item 4) --------------------------------

def test_ls_and_explain_say_when_users_share_a_tmp_kind_lock_dir_and_only_then(shared_dir: Path) -> None:
    as_nobody()
    locks = shared_dir / "locks"
    note = "lock dir: 2 users can remove each other's locks (fix: sudo gpulaunch locks init)"
    assert run(["--snapshot", "dgx-h100", "--gpus", "0", "--", "true"], locks).returncode == 0
    alone = run(["--snapshot", "dgx-h100", "ls"], locks)
    assert alone.returncode == 0 and "lock dir" not in alone.stdout, alone.stdout  # only root's files: nothing to say
    assert nobody_gpulaunch(shared_dir, ["--snapshot", "dgx-h100", "--gpus", "1", "--", "true"], locks).returncode == 0
    for args in (["ls"], ["--auto", "1", "--explain"]):
        shown = run(["--snapshot", "dgx-h100", *args], locks)
        lines = [line for line in shown.stdout.splitlines() if "lock dir" in line]
        assert lines == [note] and len(note) <= 80, shown.stdout


# --- a relative lock dir (issue 20 item 12) ------------------------------------------------------------------

@pytest.mark.parametrize("where", ["env", "flag", "file"])
def test_a_relative_lock_dir_is_refused_in_one_line(tmp_path: Path, where: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text('lock-dir = "locks"\n')
    extra = {"env": {"GPULAUNCH_LOCK_DIR": "locks"}, "file": {"GPULAUNCH_CONFIG": str(config)}}.get(where, {})
    flag = ["--lock-dir", "locks"] if where == "flag" else []
    environ = {**_without_lock_dir(tmp_path / "no-hardened"), **extra}
    done = subprocess.run(gl("--snapshot", "dgx-h100", *flag, "--auto", "1", "--", "true"), env=environ,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode in (2, 7) and len(done.stderr.splitlines()) == 1, done.stderr
    assert "'locks' is a relative path" in done.stderr and f"e.g. {tmp_path / 'locks'}" in done.stderr
    assert not (tmp_path / "locks").exists()
