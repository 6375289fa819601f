"""Reservations: one flock per GPU, held by the command itself, seen by every later gpulaunch."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from gpu_launch.reservations import acquire

from gpu_launch.reservations import holders, lockdir, reservations
from gpu_launch.choose import select as gpu_select
from gpu_launch.hardware import snapshot
from sharing_helpers import HOLD, Lines, env, example, first_gpus, gl, run, start, wait_for, write_snapshot

#: A child for the stress test: notes when it started on which GPU, waits for the release file,
#: then notes when it ended. Its lock is released only after it exits, so with working
#: reservations the spans of one GPU can never overlap.
SPAN = ("import os, sys, time; rec, release = sys.argv[1], sys.argv[2]; start = time.time(); "
        "cvd = os.environ['CUDA_VISIBLE_DEVICES']; "
        "tmp = os.path.join(rec, f'.tmp-{os.getpid()}'); open(tmp, 'w').write(cvd); "
        "os.replace(tmp, os.path.join(rec, f'ready-{os.getpid()}')); "
        "[time.sleep(0.01) for _ in iter(lambda: os.path.exists(release), True)]; "
        "open(os.path.join(rec, f'span-{os.getpid()}'), 'w').write(f'{cvd} {start} {time.time()}')")
ROUNDS = int(os.environ.get("GPULAUNCH_STRESS_ROUNDS", "5"))
WAIT_ROUNDS = int(os.environ.get("GPULAUNCH_STRESS_WAIT_ROUNDS", "2"))
PROCESSES = 16


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


@pytest.fixture
def one_gpu(tmp_path: Path) -> Path:
    # an idle GPU: a waiting --auto waits for GPUs free for it, and dgx-h100's GPU 0 is alice's, at 98%
    return write_snapshot(tmp_path / "one.json", first_gpus(example("dgx1-v100"), 1))


def _uuids(name: str) -> list[str]:
    return [g.uuid for g in snapshot.resolve(name).gpus]


def _spans(rec: Path) -> list[tuple[str, float, float]]:
    spans = []
    for path in rec.glob("span-*"):
        cvd, begin, end = path.read_text().split()
        spans.append((cvd, float(begin), float(end)))
    return spans


def _assert_no_overlap(spans: list[tuple[str, float, float]]) -> None:
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for cvd, begin, end in spans:
        assert "," not in cvd, f"--auto 1 gave {cvd!r}"
        by_gpu.setdefault(cvd, []).append((begin, end))
    for gpu, intervals in by_gpu.items():
        intervals.sort()
        for (b1, e1), (b2, e2) in zip(intervals, intervals[1:]):
            assert b2 >= e1, f"two children on GPU {gpu} at once: {b1}-{e1} and {b2}-{e2}"


def _stress_round(tmp_path: Path, locks: Path, n: int, wait: bool) -> list[tuple[str, float, float]]:
    rec = tmp_path / f"rec-{n}"
    rec.mkdir()
    release = tmp_path / f"release-{n}"
    logs = [open(tmp_path / f"err-{n}-{i}.txt", "w+") for i in range(PROCESSES)]
    # --max-util 100: --auto would otherwise (rightly) skip GPUs 0 and 1, busy with alice's work
    args = ["--snapshot", "dgx-h100", "--auto", "1", "--lock-dir", str(locks), "--max-util", "100",
            *(["--wait"] if wait else []),
            "--", "python3", "-c", SPAN, str(rec), str(release)]
    procs = [subprocess.Popen(gl(*args), env=env(), stdout=subprocess.DEVNULL, stderr=log) for log in logs]
    try:
        eligible = len(gpu_select.eligibility(snapshot.resolve("dgx-h100"), gpu_select.Constraints()).eligible)
        assert eligible == 8
        # The winners hold their GPU until released: exactly `eligible` of them start.
        wait_for(lambda: len(list(rec.glob("ready-*"))) >= eligible, what="8 children to start")
        if wait:
            wait_for(lambda: all("waiting" in (tmp_path / f"err-{n}-{i}.txt").read_text()
                                 for i, p in enumerate(procs) if p.poll() is None and not (rec / f"ready-{p.pid}").exists()),
                     what="the others to wait")
        else:
            wait_for(lambda: sum(p.poll() is not None for p in procs) >= PROCESSES - eligible, what="8 refusals")
        ready = {p.name.split("-")[1]: p.read_text() for p in rec.glob("ready-*")}
        assert len(ready) == eligible
        assert sorted(ready.values()) == [str(i) for i in range(8)]  # one child per GPU
        held = holders.holders(str(locks), _uuids("dgx-h100"))
        assert sorted(str(h.pid) for h in held.values()) == sorted(ready)  # the children hold the locks
        if not wait:
            codes = [p.poll() for p in procs if p.poll() is not None]
            assert codes == [4] * (PROCESSES - eligible)
        release.touch()
        codes = [p.wait(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    if wait:
        assert codes == [0] * PROCESSES
    else:
        assert sorted(codes) == [0] * eligible + [4] * (PROCESSES - eligible)
        errors = [(tmp_path / f"err-{n}-{i}.txt").read_text() for i, c in enumerate(codes) if c == 4]
        assert all("need 1 GPU, but only 0 of 8 are eligible" in e and "reserved by" in e for e in errors), errors
    return _spans(rec)


def test_stress_16_launches_on_8_gpus_never_share_a_gpu(tmp_path: Path, locks: Path) -> None:
    spans = []
    for n in range(ROUNDS):
        spans += _stress_round(tmp_path, locks, n, wait=False)
    assert len(spans) == 8 * ROUNDS
    _assert_no_overlap(spans)


def test_stress_with_wait_runs_all_16_one_per_gpu_at_a_time(tmp_path: Path, locks: Path) -> None:
    spans = []
    for n in range(WAIT_ROUNDS):
        spans += _stress_round(tmp_path, locks, n, wait=True)
    assert len(spans) == 16 * WAIT_ROUNDS
    _assert_no_overlap(spans)


def test_reservation_lives_as_long_as_the_command_and_ls_shows_it(tmp_path: Path, locks: Path) -> None:
    release = tmp_path / "release"
    holder = start(["--snapshot", "dgx-h100", "--gpus", "3", "--", "python3", "-c", HOLD, str(release)], locks)
    try:
        out = Lines(holder.stdout)
        assert out.wait("CVD=") == "CVD=3\n"
        ls = run(["--snapshot", "dgx-h100", "ls"], locks)
        assert ls.returncode == 0
        row3 = next(line for line in ls.stdout.splitlines() if line.startswith("3 "))
        assert "RESERVED BY" in ls.stdout and f"(pid {holder.pid}," in row3 and "python3 -c" in row3
        clash = run(["--snapshot", "dgx-h100", "--gpus", "3", "--", "true"], locks)
        assert clash.returncode == 6
        assert "GPU 3 is reserved by" in clash.stderr and f"pid {holder.pid}" in clash.stderr
        assert "--share" in clash.stderr
        other = run(["--snapshot", "dgx-h100", "--auto", "8", "--max-util", "100", "--", "true"], locks)
        assert other.returncode == 4 and "GPU 3: reserved by" in other.stderr
    finally:
        release.touch()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    again = run(["--snapshot", "dgx-h100", "--gpus", "3", "--", "python3", "-c", "print('ran')"], locks)
    assert again.returncode == 0 and again.stdout == "ran\n"
    assert "RESERVED BY" not in run(["--snapshot", "dgx-h100", "ls"], locks).stdout


def test_auto_skips_a_reserved_gpu(tmp_path: Path, locks: Path) -> None:
    show = ["python3", "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"]
    first = run(["--snapshot", "dgx-h100", "--auto", "1", "--", *show], locks).stdout.strip()
    release = tmp_path / "release"
    holder = start(["--snapshot", "dgx-h100", "--gpus", first, "--", "python3", "-c", HOLD, str(release)], locks)
    try:
        Lines(holder.stdout).wait("CVD=")
        second = run(["--snapshot", "dgx-h100", "--auto", "1", "--", *show], locks)
        assert second.returncode == 0 and second.stdout.strip() not in ("", first)
        explain = run(["--snapshot", "dgx-h100", "--auto", "1", "--explain"], locks)
        assert f"GPU {first}: reserved by" in explain.stdout
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_share_uses_a_reserved_gpu_anyway(tmp_path: Path, locks: Path) -> None:
    release = tmp_path / "release"
    holder = start(["--snapshot", "dgx-h100", "--gpus", "2", "--", "python3", "-c", HOLD, str(release)], locks)
    try:
        Lines(holder.stdout).wait("CVD=")
        shared = run(["--snapshot", "dgx-h100", "--gpus", "2,4", "--share", "--",
                      "python3", "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"], locks)
        assert shared.returncode == 0, shared.stderr
        assert shared.stdout == "2,4\n"
        assert "warning: GPU 2 is reserved by" in shared.stderr and "using it anyway" in shared.stderr
        refused = run(["--snapshot", "dgx-h100", "--auto", "1", "--share", "--", "true"], locks)
        assert refused.returncode == 2 and "--share is for --gpus" in refused.stderr
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_sigkill_frees_the_gpu_at_once(tmp_path: Path, locks: Path, one_gpu: Path) -> None:
    holder = start(["--snapshot", str(one_gpu), "--auto", "1", "--", "python3", "-c", HOLD, str(tmp_path / "never")], locks)
    Lines(holder.stdout).wait("CVD=0")
    waiter = start(["--snapshot", str(one_gpu), "--auto", "1", "--wait", "--",
                    "python3", "-c", "import os; print('got', os.environ['CUDA_VISIBLE_DEVICES'])"], locks)
    try:
        Lines(waiter.stderr).wait("waiting")
        assert waiter.poll() is None
        os.kill(holder.pid, signal.SIGKILL)  # gpulaunch exec'd the child: same pid
        holder.wait(timeout=30)
        assert waiter.wait(timeout=30) == 0
        assert waiter.stdout.read() == "got 0\n"
    finally:
        for p in (holder, waiter):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_no_lock_takes_no_reservation(tmp_path: Path, locks: Path) -> None:
    result = run(["--snapshot", "dgx-h100", "--auto", "1", "--no-lock", "--", "true"], locks)
    assert result.returncode == 0
    assert not locks.exists()  # nothing was created, let alone locked


def test_dry_run_and_explain_lock_nothing(locks: Path) -> None:
    for extra in (["--dry-run"], ["--explain"]):
        assert run(["--snapshot", "dgx-h100", "--auto", "2", *extra], locks).returncode == 0
    assert not locks.exists()


def test_a_planted_symlink_is_refused_not_followed(tmp_path: Path, locks: Path, one_gpu: Path) -> None:
    locks.mkdir()
    os.chmod(locks, 0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (uuid,) = [g["uuid"] for g in first_gpus(example("dgx1-v100"), 1)["gpus"]]
    planted = Path(lockdir.lock_path(str(locks), uuid))
    planted.symlink_to(victim)
    # its GPU alone is unavailable for reservation (tests/test_bad_lock_files.py): the only GPU here
    result = run(["--snapshot", str(one_gpu), "--auto", "1", "--", "true"], locks)
    assert result.returncode == 4
    assert f"{planted} is a symlink; refusing to follow it" in result.stderr
    named = run(["--snapshot", str(one_gpu), "--gpus", "0", "--", "true"], locks)
    assert named.returncode == 7 and f"{planted} is a symlink; refusing to follow it" in named.stderr
    assert "Traceback" not in result.stderr + named.stderr
    assert victim.read_text() == "precious\n" and planted.is_symlink()
    ls = run(["--snapshot", str(one_gpu), "ls"], locks)  # ls still lists, and says why GPU 0 cannot be reserved
    assert ls.returncode == 0 and "unavailable: lock file is a symlink" in ls.stdout


def test_a_lock_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    result = run(["--snapshot", "dgx-h100", "--auto", "1", "--", "true"], link)
    assert result.returncode == 7 and f"lock dir {link} is a symlink" in result.stderr


def test_a_lock_dir_owned_by_another_user(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 65534, 65534)  # nobody
        os.chmod(theirs, 0o755)
        fix = f"to run `chmod 1777 {theirs}`"  # its owner can open it up
    else:
        theirs = Path("/usr")  # root's, not sticky, not world-writable
        assert os.stat(theirs).st_uid != os.getuid()
        fix = f"ask an admin to run `sudo gpulaunch locks init {theirs}`"  # root's: an admin hardens it
    result = run(["--snapshot", "dgx-h100", "--auto", "1", "--", "true"], theirs)
    assert result.returncode == 7
    assert f"lock dir {theirs} belongs to" in result.stderr and "not sticky and world-writable" in result.stderr
    assert fix in result.stderr, result.stderr
    if os.geteuid() != 0:
        return
    os.chmod(theirs, 0o1777)  # sticky and world-writable, like /tmp: fine whoever owns it
    ok = run(["--snapshot", "dgx-h100", "--auto", "1", "--", "python3", "-c", "print('ran')"], theirs)
    assert ok.returncode == 0 and ok.stdout == "ran\n"


def test_dir_and_lock_files_are_shared_whatever_the_umask(locks: Path) -> None:
    result = subprocess.run(gl("--snapshot", "dgx-h100", "--gpus", "0", "--", "true"), env=env(locks),
                            capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.umask(0o077))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(locks).st_mode) == 0o1777
    (lock_file,) = locks.glob("*.lock")
    assert stat.S_IMODE(os.stat(lock_file).st_mode) == 0o666


def test_a_lost_race_reselects(locks: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone locks the best GPU between our read of the locks and our lock: we take the next."""
    machine = snapshot.resolve("dgx-h100")
    request = acquire.Request(auto=1)
    best = acquire.attempt(request, machine, None).selection.devices[0].gpu
    lockdir.prepare_dir(str(locks))
    theirs = reservations.try_lock(str(locks), best.uuid)
    assert theirs is not None
    # A stale read: the scan attempt() makes of the locks sees none held, as if it ran just before theirs.
    monkeypatch.setattr(holders, "scan", lambda lock_dir, uuids: ({}, {}))
    got = acquire.attempt(request, machine, acquire.Locking(str(locks)))
    try:
        assert got.selection.devices[0].gpu.index != best.index
        assert got.reserved == {best.uuid: "another gpulaunch job"}
        assert got.reservation is not None and len(got.reservation.fds) == 1
    finally:
        if got.reservation is not None:
            got.reservation.release()
        os.close(theirs)


def test_a_gpulaunch_inside_a_job_may_use_that_jobs_gpus(locks: Path) -> None:
    """A script started by gpulaunch that calls gpulaunch on its own GPUs is not refused."""
    inner = ("import subprocess, sys; r = subprocess.run([sys.executable, '-m', 'gpu_launch', '--snapshot', 'dgx-h100', "
             "'--gpus', '2', '-q', '--', sys.executable, '-c', "
             "'import os; print(os.environ[\"CUDA_VISIBLE_DEVICES\"])']); print('inner exit', r.returncode)")
    result = run(["--snapshot", "dgx-h100", "--gpus", "2", "-q", "--", "python3", "-c", inner], locks)
    assert result.returncode == 0, result.stderr
    gpu2 = snapshot.resolve("dgx-h100").by_index(2)
    assert gpu2 is not None
    # inside the job CUDA_VISIBLE_DEVICES=2 narrows the view, so the inner launch writes the UUID
    assert result.stdout == f"{gpu2.uuid}\ninner exit 0\n"
    stranger = run(["--snapshot", "dgx-h100", "--gpus", "2", "--", "true"], locks)  # not a descendant: free again
    assert stranger.returncode == 0


def test_env_avoids_reserved_gpus_and_warns_about_a_named_one(tmp_path: Path, locks: Path) -> None:
    release = tmp_path / "release"
    best = run(["--snapshot", "dgx-h100", "env", "--auto", "1", "-q"], locks).stdout
    first = next(line for line in best.splitlines() if line.startswith("export CUDA_VISIBLE_DEVICES=")).split("=")[1]
    holder = start(["--snapshot", "dgx-h100", "--gpus", first, "--", "python3", "-c", HOLD, str(release)], locks)
    try:
        Lines(holder.stdout).wait("CVD=")
        other = run(["--snapshot", "dgx-h100", "env", "--auto", "1", "-q"], locks)
        assert other.returncode == 0 and f"export CUDA_VISIBLE_DEVICES={first}\n" not in other.stdout
        named = run(["--snapshot", "dgx-h100", "env", "--gpus", first], locks)
        assert named.returncode == 0 and f"export CUDA_VISIBLE_DEVICES={first}\n" in named.stdout
        assert f"GPU {first} is reserved by" in named.stderr and "using it anyway" in named.stderr
        assert holders.holders(str(locks), _uuids("dgx-h100")).keys() == {
            g.uuid for g in snapshot.resolve("dgx-h100").gpus if str(g.index) == first}  # env took nothing
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_mig_devices_are_reserved_one_by_one(tmp_path: Path, locks: Path) -> None:
    release = tmp_path / "release"
    holder = start(["--snapshot", "mig-a100", "--auto", "1", "--mig", "--", "python3", "-c", HOLD, str(release)], locks)
    try:
        first = Lines(holder.stdout).wait("CVD=MIG-").strip().removeprefix("CVD=")
        second = run(["--snapshot", "mig-a100", "--auto", "1", "--mig", "--",
                      "python3", "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"], locks)
        assert second.returncode == 0, second.stderr
        assert second.stdout.startswith("MIG-") and second.stdout.strip() != first
        ls = run(["--snapshot", "mig-a100", "ls"], locks)
        row = next(line for line in ls.stdout.splitlines() if line.rstrip().endswith(first))
        assert f"(pid {holder.pid}," in row
    finally:
        release.touch()
        holder.wait(timeout=30)
