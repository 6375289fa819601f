"""No GPU handed out twice (issue 20 items 1-3, issue 19 item 1): every reservation is its own.

Through the Python API (several reservations in one process, threads, forked workers), and through
nested launches and a nested ``each`` inside a job: every one of them locks what it gets against
every other holder, its own process's other reservations and its parent's other children included.
Each test runs real processes and checks from outside what a second job would get.
"""

from __future__ import annotations

import os
import pwd
import sys
import time
from pathlib import Path


from api_helpers import SNAP, cli
from cli_run import ROOT, clean_env
from test_api import py, locks  # noqa: F401  (fixtures: a driven Python child, a private lock dir)

R1 = "gpu_launch.reserve(1, snapshot=S, lock_dir=L, quiet=True)"


# --- item 1: one process, several reservations ----------------------------------------------------

def test_four_reserves_in_one_process_get_four_gpus(py) -> None:
    child = py()
    got = child.value(f"[{R1}.env['CUDA_VISIBLE_DEVICES'] for _ in range(4)]")
    assert len(set(got)) == 4, got  # was ['2', '2', '2', '2']


def test_reserve_after_use_gets_another_gpu_and_the_same_one_twice_is_a_conflict(py, locks: str) -> None:
    child = py()
    child("gpu_launch.use(1, snapshot=S, lock_dir=L, quiet=True)")
    assert child.value(f"{R1}.devices[0].index") != child.value("gpu_launch.held()[0].index")
    child("r = gpu_launch.reserve(gpus=6, snapshot=S, lock_dir=L, quiet=True)")
    error = child.error("gpu_launch.reserve(gpus=6, snapshot=S, lock_dir=L, quiet=True)")
    assert error["type"] == "ReservationConflict" and error["exit_code"] == 6, error
    assert "GPU 6 is reserved by" in error["message"] and f"pid {child.pid}" in error["message"]


def test_threads_get_distinct_gpus_and_release_frees_everything(py, locks: str) -> None:
    child = py()
    child("import threading; out = []; lock = threading.Lock()")
    child(f"def grab(): r = {R1}; lock.acquire(); out.append(r); lock.release()")
    child("ts = [threading.Thread(target=grab) for _ in range(5)]; [t.start() for t in ts]; [t.join() for t in ts]")
    got = child.value("sorted(r.devices[0].index for r in out)")
    assert len(set(got)) == 5, got
    child("u = threading.Thread(target=lambda: gpu_launch.use(1, snapshot=S, lock_dir=L, quiet=True)); "
          "u.start(); u.join()")
    assert child.value("gpu_launch.held()[0].index") not in got
    child("[r.release() for r in out]; gpu_launch.release()")
    free = cli(locks, "--gpus", "2-7", "--", "true")  # every lock the threads took is given back
    assert free.returncode == 0, free.stderr


# --- item 2: what is inherited ----------------------------------------------------------------------

LAUNCH_AUTO1 = ("[sys.executable, '-m', 'gpu_launch', '--snapshot', S, '--lock-dir', L, '-q', '--auto', '1', '--', "
                "sys.executable, '-c', 'import os; print(os.environ[\"GPULAUNCH_GPUS\"])']")


def test_a_gpulaunch_started_after_reserve_does_not_get_the_reserved_gpu(py) -> None:
    child = py()
    child(f"r = {R1}")
    mine = child.value("r.devices[0].index")
    child(f"done = __import__('subprocess').run({LAUNCH_AUTO1}, capture_output=True, text=True)")
    assert child.value("done.returncode") == 0, child.value("done.stderr")
    assert int(child.value("done.stdout")) != mine


def test_reserve_inherit_true_makes_the_gpus_its_childrens_allotment(py) -> None:
    child = py()
    child("r = gpu_launch.reserve(2, snapshot=S, lock_dir=L, quiet=True, inherit=True)")
    mine = child.value("[d.index for d in r.devices]")
    child(f"done = __import__('subprocess').run({LAUNCH_AUTO1}, capture_output=True, text=True, "
          "env={**os.environ, **r.env})")
    assert child.value("done.returncode") == 0, child.value("done.stderr")
    assert int(child.value("done.stdout")) in mine


def test_release_frees_the_gpu_while_an_os_system_child_lives(py, locks: str) -> None:
    child = py()
    child(f"r = {R1}; gpu = r.devices[0].index")
    child("import threading; t = threading.Thread(target=os.system, args=('sleep 30',), daemon=True); t.start()")
    time.sleep(0.3)  # the shell child is running, with whatever descriptors it inherited
    child("r.release()")
    gpu = child.value("gpu")
    free = cli(locks, "--gpus", str(gpu), "--", "true")
    assert free.returncode == 0, free.stderr


_FORK_USE = """
def fork_use(k):
    import os
    r, w = os.pipe()
    hold_r, hold_w = os.pipe()  # each child holds its GPU until the parent has every answer
    pids = []
    for _ in range(k):
        pid = os.fork()
        if pid == 0:
            os.close(hold_w)
            try:
                line = b"%d\\n" % gpu_launch.use(1, snapshot=S, lock_dir=L, quiet=True)[0].index
            except BaseException as exc:
                line = ("E " + type(exc).__name__ + "\\n").encode()
            os.write(w, line)
            os.read(hold_r, 1)  # EOF once the parent closes its end: the siblings have all chosen
            os._exit(0)
        pids.append(pid)
    os.close(hold_r)
    with os.fdopen(r) as got:
        os.close(w)
        lines = [got.readline().strip() for _ in range(k)]
    os.close(hold_w)
    for pid in pids:
        os.waitpid(pid, 0)
    return lines
"""


def test_forked_workers_calling_use_do_not_share_the_parents_gpu(py) -> None:
    child = py(prelude=_FORK_USE)
    mine = child.value("gpu_launch.use(1, snapshot=S, lock_dir=L, quiet=True)[0].index")
    got = child.value("fork_use(2)")
    assert str(mine) not in got and len(set(got)) == 2 and not any(g.startswith("E") for g in got), (mine, got)


# --- issue 19 item 1: the README's example --------------------------------------------------------

def test_use_does_not_narrow_the_same_processes_later_calls(py) -> None:
    child = py()
    child("gpus = gpu_launch.use(2, snapshot=S, lock_dir=L, quiet=True)")
    mine = child.value("[d.index for d in gpus]")
    picked = child.value("[d.index for d in gpu_launch.select(2, snapshot=S, lock_dir=L, quiet=True)]")
    assert len(picked) == 2 and not set(picked) & set(mine), (mine, picked)
    child("r = gpu_launch.reserve(gpus='4-7', snapshot=S, lock_dir=L, quiet=True)")
    assert child.value("r.env['CUDA_VISIBLE_DEVICES']") == "4,5,6,7"
    assert child.value("os.environ['CUDA_VISIBLE_DEVICES']") == ",".join(map(str, mine))  # use()'s, untouched


# --- item 3: nested launches and a nested `each` -----------------------------------------------------

_RECORD = ("sh -c 'echo start $GPULAUNCH_GPUS $(date +%s.%N) >> {rec}; sleep 0.4; "
           "echo end $GPULAUNCH_GPUS $(date +%s.%N) >> {rec}'")


def _intervals(rec: Path) -> dict[str, list[tuple[float, float]]]:
    starts: dict[str, list[float]] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for line in rec.read_text().splitlines():
        what, gpu, when = line.split()
        if what == "start":
            starts.setdefault(gpu, []).append(float(when))
        else:
            spans.setdefault(gpu, []).append((starts[gpu].pop(0), float(when)))
    return spans


def _no_overlap(spans: dict[str, list[tuple[float, float]]]) -> None:
    for gpu, runs in spans.items():
        runs.sort()
        for (_, end), (start, _) in zip(runs, runs[1:]):
            assert start >= end, f"two jobs on GPU {gpu} at once: {runs}"


def _gl(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpu_launch", *args]


def _run(argv: list[str], locks: str, timeout: float = 60):
    import subprocess

    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=clean_env({"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_LOCK_DIR": locks,
                                         "GPULAUNCH_POLL_INTERVAL": "0.05"}))


def test_each_inside_a_job_shares_the_jobs_gpus_out_without_overlap(tmp_path: Path, locks: str) -> None:
    rec = tmp_path / "rec"
    jobs = tmp_path / "jobs4.txt"
    jobs.write_text("\n".join([_RECORD.format(rec=rec)] * 4) + "\n")
    done = _run(_gl("--gpus", "2,3", "-q", "--", *_gl("each", str(jobs), "-q", "--log-dir", str(tmp_path / "logs"))),
                locks)
    assert done.returncode == 0, done.stderr
    spans = _intervals(rec)
    assert sorted(spans) == ["2", "3"] and sum(map(len, spans.values())) == 4, spans
    _no_overlap(spans)


def test_two_launches_nested_in_one_job_take_different_gpus(tmp_path: Path, locks: str) -> None:
    rec = tmp_path / "rec"
    inner = " ".join(_gl("-q", "--auto", "1", "--", "sh", "-c", f"'echo $GPULAUNCH_GPUS >> {rec}; sleep 1'"))
    script = f"{inner} & {inner} & wait"
    done = _run(_gl("--gpus", "2,3", "-q", "--", "sh", "-c", script), locks)
    assert done.returncode == 0, done.stderr
    assert sorted(rec.read_text().split()) == ["2", "3"]


def test_a_nested_launch_beside_a_running_sibling_gets_the_other_gpu(tmp_path: Path, locks: str) -> None:
    """use() then two child launches: they share use()'s GPUs out, one each."""
    rec = tmp_path / "rec"
    code = ("import gpu_launch, subprocess, sys; gpu_launch.use(2, quiet=True); "
            f"cmd = [sys.executable, '-m', 'gpu_launch', '-q', '--auto', '1', '--', 'sh', '-c', "
            f"'echo $GPULAUNCH_GPUS >> {rec}; sleep 1']; "
            "ps = [subprocess.Popen(cmd) for _ in range(2)]; print([p.wait() for p in ps])")
    done = _run([sys.executable, "-c", code], locks)
    assert done.returncode == 0 and done.stdout.strip() == "[0, 0]", done.stderr
    assert sorted(rec.read_text().split()) == ["2", "3"]


def test_a_nested_waiter_takes_the_gpu_the_moment_its_sibling_gives_it_back(tmp_path: Path, locks: str) -> None:
    """Inside a job, a `--wait` launch waits for a sibling's lock one level deeper, and wakes when it goes
    (not at the poll interval, set to a minute here: it would still be waiting at its 20 s limit)."""
    rec = tmp_path / "rec"
    first = " ".join(_gl("-q", "--auto", "1", "--", "sh", "-c", f"'echo first $GPULAUNCH_GPUS >> {rec}; sleep 0.5'"))
    second = " ".join(_gl("-q", "--auto", "1", "--wait", "20", "--", "sh", "-c",
                          f"'echo second $GPULAUNCH_GPUS >> {rec}'"))
    script = f"{first} & sleep 0.3; {second}; wait"
    import subprocess

    started = time.monotonic()
    done = subprocess.run(_gl("--gpus", "2", "-q", "--", "sh", "-c", script), capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=clean_env({"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_LOCK_DIR": locks,
                                                               "GPULAUNCH_POLL_INTERVAL": "60"}))
    assert done.returncode == 0, done.stderr
    assert rec.read_text().split("\n")[:2] == ["first 2", "second 2"]
    assert time.monotonic() - started < 15  # woken by the sibling's lock, long before the minute's poll


def test_the_readmes_python_example_runs_as_written(tmp_path: Path, locks: str) -> None:
    """Issue 19 item 1: the example of README "Python and notebooks" (torch left out), on dgx-h100."""
    import subprocess

    example = """
import os, subprocess, sys
import gpu_launch

gpus = gpu_launch.use(2, min_free="20GiB")
devs = gpu_launch.select(2, idle=True)
m = gpu_launch.machine()
with gpu_launch.reserve(gpus="4-7", wait="30m") as r:
    cmd = [sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"]
    subprocess.run(cmd, env={**os.environ, **r.env})
print([d.index for d in gpus], [d.index for d in devs], len(m.gpus))
"""
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=clean_env({"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_LOCK_DIR": locks}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["4,5,6,7", "[2, 3] [4, 6] 8"]


# --- a job nested in a job outlives its parent --------------------------------------------------

def _wait_for_lines(path: Path, n: int, timeout: float = 30) -> list[str]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{path}: fewer than {n} lines after {timeout} s")


def _held_script(tmp_path: Path) -> str:
    """A job that says which GPU it got, then runs until the test creates ``stop`` (at most a minute)."""
    return (f"echo $GPULAUNCH_GPUS >> {tmp_path / 'ready'}; i=0; "
            f"while [ ! -e {tmp_path / 'stop'} ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done")


def test_a_killed_sweep_inside_a_job_leaves_its_running_jobs_gpus_taken(tmp_path: Path, locks: str) -> None:
    """`gpulaunch --gpus 2,3 -- gpulaunch each` killed with -9 while its jobs run: the jobs hold only the
    locks one level deeper, and the machine-wide ones went with the sweep. Their GPUs were free to
    anyone else at once (a second job on each); they stay taken until the jobs end."""
    import signal
    import subprocess

    jobs = tmp_path / "jobs.txt"
    jobs.write_text(f"sh -c '{_held_script(tmp_path)}'\n" * 2)
    env = clean_env({"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_LOCK_DIR": locks})
    sweep = subprocess.Popen(_gl("--gpus", "2,3", "-q", "--", *_gl("each", str(jobs), "-q", "--log-dir",
                                                                     str(tmp_path / "logs"))),
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert sorted(_wait_for_lines(tmp_path / "ready", 2)) == ["2", "3"]
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=30)
        for gpu in ("2", "3"):
            second = _run(_gl("--gpus", gpu, "-q", "--", "true"), locks)
            assert second.returncode == 6 and "reserved by" in second.stderr, (gpu, second.stderr)
        other = _run(_gl("--auto", "2", "--max-util", "100", "-q", "--", "sh", "-c", "echo $GPULAUNCH_GPUS"), locks)
        assert other.returncode == 0 and not {"2", "3"} & set(other.stdout.strip().split(",")), other
    finally:
        (tmp_path / "stop").touch()
        if sweep.poll() is None:
            sweep.kill()
    end = time.monotonic() + 30  # the jobs end: their GPUs are free again
    while _run(_gl("--gpus", "2,3", "-q", "--", "true"), locks).returncode != 0:
        assert time.monotonic() < end, "GPUs 2 and 3 still taken after the jobs ended"


def test_a_launch_started_from_a_reserving_process_keeps_its_gpu_after_the_release(tmp_path: Path,
                                                                                  locks: str) -> None:
    """reserve(inherit=True), a gpulaunch started with subprocess (descriptors closed) gets its GPU as
    its allotment, then the parent releases: the child's job still runs there, so no one else gets it."""
    code = ("import gpu_launch, os, subprocess, sys; r = gpu_launch.reserve(gpus=2, inherit=True, quiet=True); "
            "p = subprocess.Popen([sys.executable, '-m', 'gpu_launch', '-q', '--auto', '1', '--', 'sh', '-c', "
            f"{_held_script(tmp_path)!r}], env={{**os.environ, **r.env}}); "
            # until the job's whole line is there: `>>` creates the file before echo writes to it
            f"import time\nready = {str(tmp_path / 'ready')!r}\n"
            "while not (os.path.exists(ready) and open(ready).read().endswith('\\n')) and p.poll() is None: "
            "time.sleep(0.02)\n"
            "r.release(); print('released', flush=True); p.wait()")
    import subprocess

    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=clean_env({"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_LOCK_DIR": locks}))
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "released"
        assert (tmp_path / "ready").read_text().split() == ["2"]
        second = _run(_gl("--gpus", "2", "-q", "--", "true"), locks)
        assert second.returncode == 6 and "reserved by" in second.stderr, second.stderr
    finally:
        (tmp_path / "stop").touch()
        parent.wait(timeout=30)


_LATE_CHILD = """
import os, sys, time
from gpu_launch.reservations import reservations
real = reservations.lock_all

def paused(*args, **kwargs):  # the allotment has been read; the test ends the parent job now
    open(sys.argv[1] + "/resolved", "w").close()
    while not os.path.exists(sys.argv[1] + "/go"):
        time.sleep(0.02)
    return real(*args, **kwargs)

reservations.lock_all = paused
from gpu_launch.cli import main
main(["-q", "--auto", "1", "--", "sh", "-c", "echo late $GPULAUNCH_GPUS"])
"""


def test_a_nested_launch_whose_job_ends_before_it_locks_does_not_take_the_gpu(tmp_path: Path, locks: str) -> None:
    """The job above a nested launch ends between the launch's read of its allotment and its lock, and
    an outside job takes the GPU meanwhile: the nested launch must not run there too."""
    import signal
    import subprocess

    (tmp_path / "late.py").write_text(_LATE_CHILD)
    env = clean_env({"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_LOCK_DIR": locks})
    code = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(tmp_path / 'late.py')!r}, "
            f"{str(tmp_path)!r}], stdout=open({str(tmp_path / 'late.out')!r}, 'w'), stderr=subprocess.STDOUT); "
            "time.sleep(60)")
    parent = subprocess.Popen(_gl("--gpus", "2", "-q", "--", sys.executable, "-c", code), cwd=ROOT, env=env)
    outside = None
    try:
        end = time.monotonic() + 30
        while not (tmp_path / "resolved").exists():
            assert time.monotonic() < end and parent.poll() is None, "the nested launch never read its allotment"
            time.sleep(0.02)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        outside = subprocess.Popen(_gl("--gpus", "2", "-q", "--", "sh", "-c", _held_script(tmp_path)), cwd=ROOT,
                                   env=env)
        assert _wait_for_lines(tmp_path / "ready", 1) == ["2"]
        (tmp_path / "go").touch()
        end = time.monotonic() + 30
        while not any(word in (tmp_path / "late.out").read_text() for word in ("late ", "error")):
            assert time.monotonic() < end, "the nested launch did not finish"
            time.sleep(0.02)
        time.sleep(0.2)  # the rest of its one line
        late = (tmp_path / "late.out").read_text()
        assert "late 2" not in late and f"reserved by {pwd.getpwuid(os.getuid()).pw_name} " in late, late
    finally:
        (tmp_path / "stop").touch()
        (tmp_path / "go").touch()
        for proc in (parent, outside):
            if proc is not None and proc.poll() is None:
                proc.kill()
