"""A local sweep can be shaped (issue 26 item 3): --jobs-per-gpu, --max-running, --gpus; its waiting line tells the
sweep's own GPUs from others' and is said once per change; its summary fits the terminal (issue 27 item 7); its
times are right. Concurrency is recorded by the jobs themselves, under a lock, as they start and end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import run_in_terminal
from sharing_helpers import Lines, env, run, start, wait_for

#: A job that counts itself in (per GPU it got, and overall) under a lock, keeps the highest count it saw,
#: says it is up, waits for its release file (or "all"), then counts itself out.
RECORDER = r"""
import fcntl, os, sys, time
d, tag = sys.argv[1], sys.argv[2]
gpus = os.environ["GPULAUNCH_GPUS"].split(",")

def bump(name, delta):
    with open(os.path.join(d, name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = os.path.join(d, name + ".count")
        n = (int(open(path).read()) if os.path.exists(path) else 0) + delta
        open(path, "w").write(str(n))
        if delta > 0:
            open(os.path.join(d, name + ".max"), "a").write(f"{n}\n")

for name in ["all", *("gpu" + g for g in gpus)]:
    bump(name, 1)
open(os.path.join(d, ".up-" + tag), "w").write(",".join(gpus))
os.replace(os.path.join(d, ".up-" + tag), os.path.join(d, "up-" + tag))
while not (os.path.exists(os.path.join(d, "release-" + tag)) or os.path.exists(os.path.join(d, "release-all"))):
    time.sleep(0.01)
for name in ["all", *("gpu" + g for g in gpus)]:
    bump(name, -1)
"""


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def _recorder_jobs(tmp_path: Path, n: int) -> tuple[Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir()
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("".join(f"{sys.executable} {script} {rec} {i}\n" for i in range(1, n + 1)))
    return jobs, rec


def _end(sweep: subprocess.Popen[str], rec: Path) -> None:
    """However the test went: the recorder jobs are released (they would wait for ever, each in its own
    session, outliving a killed sweep), then the sweep ends."""
    (rec / "release-all").touch()
    if sweep.poll() is None:
        sweep.kill()
        sweep.wait()


def _highest(rec: Path, name: str) -> int:
    return max(int(x) for x in (rec / f"{name}.max").read_text().split())


def _up(rec: Path) -> dict[str, str]:
    return {p.name[3:]: p.read_text() for p in rec.glob("up-*")}


def test_jobs_per_gpu_2_never_puts_a_third_job_on_a_gpu_and_keeps_it_reserved(tmp_path: Path, locks: Path) -> None:
    jobs, rec = _recorder_jobs(tmp_path, 7)
    sweep = start(["--snapshot", "workstation-4x", "each", str(jobs), "--gpus", "0,1", "--jobs-per-gpu", "2",
                   "--log-dir", str(tmp_path / "logs")], locks)
    try:
        wait_for(lambda: len(_up(rec)) == 4, what="4 jobs to start, 2 on each of GPUs 0 and 1")
        assert sorted(_up(rec).values()) == ["0", "0", "1", "1"]
        # Each GPU stays reserved while its jobs run: nobody else's launch gets it.
        clash = run(["--snapshot", "workstation-4x", "--gpus", "0", "--", "true"], locks)
        assert clash.returncode == 6 and "GPU 0" in clash.stderr, clash.stderr
        (rec / "release-1").touch()  # one place frees: the 5th job takes it, on the GPU job 1 had
        wait_for(lambda: len(_up(rec)) == 5, what="the 5th job")
        (rec / "release-all").touch()
        assert sweep.wait(timeout=60) == 0, sweep.stderr.read() if sweep.stderr else ""
    finally:
        _end(sweep, rec)
    assert len(_up(rec)) == 7
    assert _highest(rec, "gpu0") == 2 and _highest(rec, "gpu1") == 2  # shared, and never by 3
    assert not (rec / "gpu2.max").exists() and not (rec / "gpu3.max").exists()
    assert run(["--snapshot", "workstation-4x", "--gpus", "0,1", "--", "true"], locks).returncode == 0  # given back


def test_max_running_caps_a_local_sweep(tmp_path: Path, locks: Path) -> None:
    """Was refused: "--max-running is for `each --slurm`"."""
    jobs, rec = _recorder_jobs(tmp_path, 5)
    sweep = start(["--snapshot", "workstation-4x", "each", str(jobs), "--max-running", "2",
                   "--log-dir", str(tmp_path / "logs")], locks)
    err = Lines(sweep.stderr)
    try:
        wait_for(lambda: len(_up(rec)) == 2, what="2 jobs")
        err.wait("waiting: 2 jobs running, as many as --max-running 2 allows")
        (rec / "release-all").touch()
        assert sweep.wait(timeout=60) == 0
    finally:
        _end(sweep, rec)
    assert len(_up(rec)) == 5 and _highest(rec, "all") == 2


def test_gpus_is_the_set_the_sweep_may_use(tmp_path: Path, locks: Path) -> None:
    jobs, rec = _recorder_jobs(tmp_path, 4)
    sweep = start(["--snapshot", "workstation-4x", "each", str(jobs), "--gpus", "1,3", "--log-dir",
                   str(tmp_path / "logs")], locks)
    try:
        wait_for(lambda: len(_up(rec)) == 2, what="2 jobs, on GPUs 1 and 3")
        assert sorted(_up(rec).values()) == ["1", "3"]
        (rec / "release-all").touch()
        assert sweep.wait(timeout=60) == 0
    finally:
        _end(sweep, rec)
    assert sorted(_up(rec).values()) in (["1", "1", "3", "3"], ["1", "1", "1", "3"], ["1", "3", "3", "3"])
    too_many = run(["--snapshot", "workstation-4x", "each", str(jobs), "--gpus", "1", "--gpus-per-job", "2"], locks)
    assert too_many.returncode == 4, too_many.stderr
    assert "--gpus-per-job 2: --gpus gives the sweep 1 GPU (hint: ask for at most 1 GPUs per job)" in too_many.stderr
    slurm = run(["--snapshot", "workstation-4x", "each", str(jobs), "--slurm", "--jobs-per-gpu", "2"], locks)
    assert slurm.returncode == 2 and "--jobs-per-gpu does not apply to `each --slurm`" in slurm.stderr


def test_the_waiting_line_says_the_sweep_fills_every_gpu_and_says_it_once(tmp_path: Path, locks: Path) -> None:
    """Was: "waiting for GPUs: need 1 GPU not busy or full with others' work" while every GPU ran the sweep's own
    jobs, said again after every start (13 times for 20 jobs)."""
    jobs, rec = _recorder_jobs(tmp_path, 10)
    sweep = start(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(tmp_path / "logs")], locks)
    err = Lines(sweep.stderr)
    try:
        wait_for(lambda: len(_up(rec)) == 4, what="4 jobs")
        for i in range(1, 7):  # one job ends, the next starts and the sweep waits again: each time the same reason
            (rec / f"release-{i}").touch()
            wait_for(lambda: len(_up(rec)) == min(10, i + 4), what=f"job {i + 4}")
        (rec / "release-all").touch()
        assert sweep.wait(timeout=60) == 0
    finally:
        _end(sweep, rec)
    waiting = [line for line in err.text().splitlines() if line.startswith("gpulaunch each: waiting")]
    assert len(waiting) == 1, waiting
    assert waiting[0].startswith("gpulaunch each: waiting: all 4 GPUs in use by this sweep ("), waiting


def test_job_times_are_never_short_of_the_run(tmp_path: Path, locks: Path) -> None:
    """Was: a 2 s job shown "done after 1s" (whole seconds, and the clock started after the job)."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("sleep 1.96\n")
    done = run(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(tmp_path / "logs"), "--json"],
               locks)
    assert done.returncode == 0, done.stderr
    shown = re.search(r"job 1/1 done after (\d+\.\d)s", done.stderr)
    assert shown and float(shown.group(1)) >= 2.0 - 0.05, done.stderr  # 1.96 s at least: "2.0s"
    assert json.loads(done.stdout)["jobs"][0]["seconds"] >= 1.96


@pytest.mark.parametrize("columns", [80, 20])
def test_the_summary_fits_the_terminal_one_line_a_job(tmp_path: Path, columns: int) -> None:
    """Was: at 80 columns each row wrapped to two lines; at 20 every cell was folded, a letter a line."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("python3 -c 'import sys' --learning-rate 1e-3 --epochs 30 --batch-size 64 --seed 1\n"
                    "sh -c 'exit 3' --learning-rate 3e-4 --epochs 30 --batch-size 64 --seed 2\n"
                    "true --learning-rate 1e-4 --epochs 30 --batch-size 64 --seed 3 --warmup-steps 1000\n")
    terminal = env(tmp_path / "locks", TERM="xterm-256color")
    terminal.pop("NO_COLOR", None)
    out, status = run_in_terminal(["--snapshot", "dgx-h100", "each", str(jobs), "--log-dir", str(tmp_path / "logs")],
                                  terminal, columns=columns)
    assert status == 9, out
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode()).replace("\r", "")
    summary = text[text.rindex("2 done, 0 running,"):text.rindex("gpulaunch: error:")].splitlines()
    assert all(len(line) <= columns for line in summary), summary
    header = next(i for i, line in enumerate(summary) if line.startswith("Job  Status"))
    rows = summary[header + 1:]
    assert [row.split()[:2] for row in rows] == [["1", "done"], ["2", "failed"], ["3", "done"]], summary
    if columns == 80:
        assert any("logs in" in line for line in summary[:header]), summary  # (its own line when the path is long)
        assert " job-2.log " in rows[1] and "--learning-rate 3e-4" in rows[1], summary
