"""Reservations at their edges, as a user sees them (issue 28: mutants of gpu_launch/reservations/ that the
suite let live; benchmarks/mutation.py finds them). Each test says the slip it catches.

Locks are taken here with ``flock`` on the real lock files, as another gpulaunch would take them;
what is asserted is what gpulaunch then says about the GPU.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.reservations import holders, lockdir, reservations
from sharing_helpers import Lines, env, gl, run, start
from two_users import python_for_nobody, shared_dir  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parent.parent
GPU2 = snapshot.resolve("dgx-h100").gpus[2].uuid
GPU3 = snapshot.resolve("dgx-h100").gpus[3].uuid
SNAP = ["--snapshot", "dgx-h100"]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (locks init; a process of a user with no name)")


@contextmanager
def held(path: str, record: dict[str, object]) -> Iterator[None]:
    """Hold ``path``'s reservation (an exclusive flock) with ``record`` as its holder text."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, (json.dumps(record) + "\n").encode())
        yield
    finally:
        os.close(fd)


@pytest.mark.parametrize("pid, shown", [(2**32 - 1, "pid 4294967295"), (2**32, None), (0, None)])
def test_a_holder_pid_is_named_only_when_it_can_be_one(tmp_path: Path, pid: int, shown: str | None) -> None:
    # Slip: the bound on a holder's pid (0 < pid < 2**32) loosened by one; a forged record would then
    # be named as a process. (A record naming a user alone reads "mallory", not "mallory ()".)
    locks = tmp_path / "locks"
    locks.mkdir()
    with held(lockdir.lock_path(str(locks), GPU2), {"pid": pid, "user": "mallory"}):
        holder = holders.probe(str(locks), GPU2)
        assert holder is not None
        text = holder.describe(age=False)
    assert text == (f"mallory ({shown})" if shown else "mallory"), text


# --- waiting ---------------------------------------------------------------------------------------

def test_waiting_for_more_than_the_whole_machine_holds_fails_at_once(tmp_path: Path) -> None:
    # Slip: the "waiting cannot help" check of --fit SIZE turned off; gpulaunch would wait the full
    # --wait for 2000 GiB on a machine of 8 x 80 GiB, then time out (exit 5), instead of saying so.
    done = run(["--snapshot", "dgx-h100", "--fit", "2000G", "--wait", "3", "--", "true"], tmp_path / "locks")
    assert done.returncode == 4, done.stderr
    assert done.stderr.endswith("waiting cannot help: --fit 2000.0 GiB: all usable GPUs together have 637.2 GiB "
                                "(hint: relax the constraints, or ask for fewer GPUs)\n"), done.stderr


def test_waiting_for_exactly_what_the_whole_machine_holds_is_waited_for(tmp_path: Path) -> None:
    # The line of that check: 8 x 81,559 MiB asked is every GPU's total, so it could fit once
    # everything is free; gpulaunch waits (and times out, exit 5), it does not refuse (exit 4).
    done = run(["--snapshot", "dgx-h100", "--fit", f"{8 * 81559}MiB", "--wait", "0.5", "-q", "--", "true"],
               tmp_path / "locks")
    assert done.returncode == 5, done.stderr
    assert "waited" in done.stderr and "waiting cannot help" not in done.stderr, done.stderr



def test_a_launch_that_waited_says_how_long_and_one_that_did_not_says_nothing(tmp_path: Path) -> None:
    # Slips: the "waited" line shown when the launch did not wait (or not when it did), and its
    # seconds counted from the wrong end (a sum of clocks: days).
    locks = tmp_path / "locks"
    with held(_lock_file(locks, GPU2), {"pid": 4242, "user": "alice"}):
        waiter = start([*SNAP, "--gpus", "2", "--wait", "60", "--", "true"], locks)
        assert waiter.stderr is not None
        lines = Lines(waiter.stderr)
        lines.wait("waiting")
    assert waiter.wait(timeout=60) == 0
    waited = next(line for line in lines.lines if "waited" in line)
    assert re.fullmatch(r"gpulaunch: waited \d\.\ds for the GPUs\n", waited), lines.lines
    at_once = run([*SNAP, "--gpus", "3", "--wait", "60", "--", "true"], locks)
    assert at_once.returncode == 0 and "waited" not in at_once.stderr, at_once.stderr


def _lock_file(locks: Path, uuid: str) -> str:
    locks.mkdir(exist_ok=True)
    return lockdir.lock_path(str(locks), uuid)

# --- taking a lock -------------------------------------------------------------------------------------

@pytest.mark.parametrize("instants", [1, 2])
def test_a_lock_another_gpulaunch_holds_for_an_instant_is_taken_after_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         instants: int) -> None:
    # Slips: a failed non-blocking flock not looked at again (`if delay is None` inverted, or its
    # `continue` turned into `break`): a launch that met another gpulaunch's look at the lock (a shared
    # flock held for microseconds) would report a free GPU as taken. The look ends while we wait.
    locks = tmp_path / "locks"
    locks.mkdir()
    path = lockdir.lock_path(str(locks), GPU2)
    fd = reservations.try_lock(str(locks), GPU2)  # makes the lock file as a launch does
    assert fd is not None
    os.close(fd)
    look = os.open(path, os.O_RDONLY)
    fcntl.flock(look, fcntl.LOCK_SH)
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the other gpulaunch's look ends after `instants` waits
        waits.append(seconds)
        if len(waits) == instants:
            fcntl.flock(look, fcntl.LOCK_UN)

    monkeypatch.setattr(reservations.time, "sleep", sleep)
    try:
        fd = reservations.try_lock(str(locks), GPU2)
        assert fd is not None, "a GPU free after an instant was reported taken"
        other = os.open(path, os.O_RDONLY)
        with pytest.raises(BlockingIOError):  # and it is really held
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)
        os.close(fd)
        assert len(waits) == instants
    finally:
        os.close(look)


def test_a_lock_held_for_longer_counts_as_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The other side: a lock someone keeps is looked at a bounded number of times, then the GPU is taken.
    locks = tmp_path / "locks"
    locks.mkdir()
    fd = reservations.try_lock(str(locks), GPU2)
    assert fd is not None
    waits: list[float] = []
    monkeypatch.setattr(reservations.time, "sleep", waits.append)
    assert reservations.try_lock(str(locks), GPU2) is None
    assert 1 <= len(waits) <= 3
    os.close(fd)


# --- lock files gpulaunch cannot use -----------------------------------------------------------------

@root_only
def test_a_symlink_in_a_hardened_dir_is_refused_and_locks_init_puts_it_right(tmp_path: Path) -> None:
    # Slip: the hint for an unusable lock file in a hardened dir built wrongly (it raised instead of
    # saying "which puts it right"); and the hint's promise is checked: locks init repairs the file.
    hardened, victim = tmp_path / "hardened", tmp_path / "victim"
    victim.write_text("precious\n")
    assert run([*SNAP, "locks", "init", str(hardened)]).returncode == 0
    planted = Path(lockdir.lock_path(str(hardened), GPU3))
    planted.unlink()
    planted.symlink_to(victim)
    refused = run([*SNAP, "--gpus", "3", "--", "true"], hardened)
    assert refused.returncode == 7, refused.stderr
    assert refused.stderr == (f"gpulaunch: error: --gpus: GPU 3 is unavailable for reservation: its lock file "
                              f"{planted} is a symlink; refusing to follow it (owner: root) (hint: run `gpulaunch "
                              f"locks init {hardened}`, which puts it right)\n")
    assert run([*SNAP, "locks", "init", str(hardened)]).returncode == 0
    assert run([*SNAP, "--gpus", "3", "-q", "--", "true"], hardened).returncode == 0
    assert victim.read_text() == "precious\n" and not planted.is_symlink()


UNNAMED = 54321  # a uid with no passwd entry


@root_only
def test_a_shared_lock_by_a_user_with_no_name_names_the_uid(shared_dir: Path) -> None:  # noqa: F811
    # Slip: the lookup of a shared lock's holder lets a uid without a passwd entry raise (KeyError):
    # `--explain` would end in a traceback instead of naming "uid 54321".
    try:
        pwd.getpwuid(UNNAMED)
        pytest.skip(f"uid {UNNAMED} has a name here")
    except KeyError:
        pass
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux) to act as another user")
    locks = shared_dir / "locks"
    assert run([*SNAP, "-q", "--gpus", "3", "--", "true"], locks).returncode == 0  # makes the 0666 lock file
    prefix = ["setpriv", "--reuid", str(UNNAMED), "--regid", str(UNNAMED), "--clear-groups"]
    hold = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_SH); "
            "print(os.getpid(), flush=True); sys.stdin.read()")
    holder = subprocess.Popen([*prefix, python_for_nobody(prefix, shared_dir), "-c", hold,
                               lockdir.lock_path(str(locks), GPU3)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=shared_dir, env=env(locks))
    try:
        assert holder.stdout is not None
        pid = holder.stdout.readline().strip()
        assert pid.isdigit(), pid
        explain = run([*SNAP, "--auto", "1", "--explain"], locks)
        assert explain.returncode == 0, explain.stderr
        assert f"GPU 3: blocked by a shared lock held by uid {UNNAMED} (pid {pid}" in " ".join(explain.stdout.split()), \
            explain.stdout
    finally:
        holder.kill()
        holder.wait(timeout=30)


@root_only
def test_locks_init_refuses_a_symlink_to_a_directory(tmp_path: Path) -> None:
    # Slip: the directory opened without O_NOFOLLOW | O_DIRECTORY; locks init would follow the link and
    # make someone's directory root's.
    real, link = tmp_path / "someones", tmp_path / "locks"
    real.mkdir()
    os.chown(real, 65534, 65534)
    real.chmod(0o700)
    link.symlink_to(real)
    done = run([*SNAP, "locks", "init", str(link)])
    assert done.returncode == 7, done.stderr
    assert done.stderr.startswith(f"gpulaunch: error: locks init: {link} is a symlink; refusing to follow it "), \
        done.stderr
    st = real.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), os.listdir(real)) == (65534, 0o700, [])


@root_only
@pytest.mark.parametrize("where", ["the dir", "a parent"])
def test_locks_init_refuses_a_file_where_a_directory_should_be(tmp_path: Path, where: str) -> None:
    # Slip: the directories opened without O_DIRECTORY (`O_RDONLY | O_DIRECTORY` turned into
    # `O_RDONLY & O_DIRECTORY`, which is 0): a file would be opened as if it were the lock dir or one of
    # its parents, and locks init would fail later, elsewhere, with another message.
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    target = a_file if where == "the dir" else a_file / "locks"
    done = run([*SNAP, "locks", "init", str(target)])
    assert done.returncode == 7, done.stderr
    assert done.stderr.startswith(f"gpulaunch: error: locks init: {a_file} exists and is not a directory "), \
        done.stderr
    assert len(done.stderr.splitlines()) == 1 and a_file.read_text() == "mine\n"


# --- holders as shown ----------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [40, 41])
def test_a_holders_command_is_shown_whole_up_to_40_characters(tmp_path: Path, length: int) -> None:
    # Slip: the 40-character cut moved by one.
    locks = tmp_path / "locks"
    locks.mkdir()
    command = "python train.py --config " + "x" * (length - 25)
    assert len(command) == length
    with held(lockdir.lock_path(str(locks), GPU2), {"pid": 4242, "user": "alice", "command": command}):
        holder = holders.probe(str(locks), GPU2)
        assert holder is not None
        text = holder.describe(age=False)
    shown = command if length <= 40 else command[:39] + "…"
    assert text == f"alice (pid 4242: {shown})", text


# --- nesting -----------------------------------------------------------------------------------------

def test_a_launch_two_processes_below_its_job_gets_the_jobs_gpu(tmp_path: Path) -> None:
    # Slip: the parent pid read from the wrong field of /proc/PID/stat (the process group): a launch
    # started by a script the job started (its descriptors closed) would not find its job two levels
    # up, and would take another GPU instead of the job's.
    inner = [*gl("--snapshot", "dgx-h100", "-q", "--auto", "1", "--", "sh", "-c", "echo $GPULAUNCH_GPUS")]
    middle = f"import subprocess; subprocess.run({inner!r}, check=True)"
    outer = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {middle!r}], check=True)"
    done = run([*SNAP, "-q", "--gpus", "5", "--", sys.executable, "-c", outer], tmp_path / "locks")
    assert (done.returncode, done.stdout) == (0, "5\n"), done.stderr


def test_a_waiter_reads_the_machine_once_a_poll_not_in_a_busy_loop() -> None:
    # Slip: the waiter's sleep returning at once; it would re-read the machine (NVML calls) and burn a
    # core for as long as it waits, then time out just the same.
    from test_choice_states import gpu, machine

    from gpu_launch.errors import WaitTimeout
    from gpu_launch.reservations.acquire import Request
    from gpu_launch.reservations.waiting import acquire
    from gpu_launch.base.units import parse_size

    reads = []
    m = machine([gpu(0, used=20000)], lambda i, j: "X")  # 60 GiB free of 80: 70 GiB may come, later

    def read():
        reads.append(1)
        return m

    with pytest.raises(WaitTimeout):
        acquire(Request(auto=1, min_free=parse_size("70GiB")), read, None, wait=1.0, quiet=True,
                environ={"GPULAUNCH_POLL_INTERVAL": "0.25"})
    assert 2 <= len(reads) <= 8, len(reads)  # about one a poll (1 s / 0.25 s), never hundreds


def test_wait_on_nvml_launches(tmp_path: Path) -> None:
    # Slip: the check that a snapshot can be read again (for --wait) applied when there is no snapshot
    # at all (NVML, here a fake one): the launch would crash on the missing path instead of running.
    shim = tmp_path / "nvml"
    shim.mkdir()
    (shim / "pynvml.py").write_text("from tests import fake_pynvml as _f\n_FAKE = _f.dgx_h100()\n"
                                    "def __getattr__(name):\n    return getattr(_FAKE, name)\n")
    environ = env(tmp_path / "locks", PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]))
    environ.pop("GPULAUNCH_SNAPSHOT", None)
    done = subprocess.run(gl("--wait", "5", "--gpus", "3", "-q", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"),
                          env=environ, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "3\n"), done.stderr


def test_each_reports_how_long_a_job_ran(tmp_path: Path) -> None:
    # Slip: a job's seconds added to its start instead of taken from its end (thousands of seconds).
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("sleep 0.3\n")
    done = subprocess.run(gl(*SNAP, "each", str(jobs), "--log-dir", str(tmp_path / "logs"), "--json", "-q"),
                          env=env(tmp_path / "locks"), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (job,) = json.loads(done.stdout)["jobs"]
    assert 0.3 <= job["seconds"] < 120, job  # the sleep, and no more than the whole run


def test_launches_nest_seven_deep_in_a_job_and_no_deeper(tmp_path: Path) -> None:
    # Slip: the depth limit one level early (depth + 2 for depth + 1): the seventh nested launch refused.
    def chain(levels: int) -> subprocess.CompletedProcess[str]:
        command = ["sh", "-c", "echo $GPULAUNCH_GPUS"]
        for _ in range(levels):
            command = gl(*SNAP, "-q", "--auto", "1", "--", *command)
        return run([*SNAP, "-q", "--gpus", "2", "--", *command], tmp_path / "locks")

    seven = chain(7)
    assert (seven.returncode, seven.stdout) == (0, "2\n"), seven.stderr
    eight = chain(8)
    assert eight.returncode == 4, eight.stderr
    assert "GPU 2: reserved by this job, and launches nest at most 7 deep in a job" in eight.stderr, eight.stderr


@root_only
def test_a_lock_file_of_a_user_with_no_name_names_the_uid(tmp_path: Path) -> None:
    # Slip: the owner lookup lets a uid without a passwd entry raise: the refusal would be a traceback.
    try:
        pwd.getpwuid(UNNAMED)
        pytest.skip(f"uid {UNNAMED} has a name here")
    except KeyError:
        pass
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o1777)
    locks.chmod(0o1777)
    planted = Path(lockdir.lock_path(str(locks), GPU3))
    planted.symlink_to(tmp_path / "victim")
    os.lchown(planted, UNNAMED, UNNAMED)
    done = run([*SNAP, "--gpus", "3", "--", "true"], locks)
    assert done.returncode == 7, done.stderr
    assert f"its lock file {planted} is a symlink; refusing to follow it (owner: uid {UNNAMED})" in done.stderr, \
        done.stderr
