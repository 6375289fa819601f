"""`each` and `--wait` are polite (issue 20 item 13): they wait for GPUs free for the job.

On dgx-h100, alice keeps GPUs 0 and 1 at 97-98 %: a sweep never lands there unless the user says so
(`--max-util 100`), except inside an allotment (a parent job's reservation, a Slurm step), whose GPUs
are the job's whatever their load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharing_helpers import env, gl, run

GPU = "sh -c 'echo $GPULAUNCH_GPUS; sleep 0.3'"


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def _sweep(tmp_path: Path, n: int) -> Path:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(f"{GPU}\n" * n)
    return jobs


def _gpus(logs: Path) -> list[str]:
    return sorted(p.read_text().strip() for p in logs.glob("job-*.log"))


def test_each_waits_for_gpus_free_for_its_jobs_and_says_so(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    done = run(["--snapshot", "dgx-h100", "each", str(_sweep(tmp_path, 8)), "--log-dir", str(logs)], locks)
    assert done.returncode == 0, done.stderr
    used = _gpus(logs)
    assert len(used) == 8 and not {"0", "1"} & set(used), used  # was: jobs 7 and 8 on alice's GPUs 0, 1
    assert "waiting for others' GPUs: need 1 GPU not busy or full with others' work; 6 of 8 in use by this sweep" \
        in done.stderr


def test_max_util_100_is_the_users_choice_to_take_busy_gpus(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    done = run(["--snapshot", "dgx-h100", "each", str(_sweep(tmp_path, 8)), "--log-dir", str(logs),
                "--max-util", "100"], locks)
    assert done.returncode == 0, done.stderr
    assert _gpus(logs) == [str(i) for i in range(8)]  # all at once, one per GPU


def test_inside_a_parents_reservation_its_gpus_are_the_jobs_whatever_their_load(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    done = run(["--snapshot", "dgx-h100", "--gpus", "0,1", "-q", "--", *gl("--snapshot", "dgx-h100", "each",
                str(_sweep(tmp_path, 2)), "--log-dir", str(logs), "-q")], locks)
    assert done.returncode == 0, done.stderr
    assert _gpus(logs) == ["0", "1"]


def test_a_slurm_steps_gpus_are_the_jobs_whatever_their_load(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    slurm = env(locks, SLURM_JOB_ID="42", SLURM_JOB_GPUS="0,1", CUDA_VISIBLE_DEVICES="0,1")
    done = run(["--snapshot", "dgx-h100", "each", str(_sweep(tmp_path, 2)), "--log-dir", str(logs), "-q"],
               env=slurm)
    assert done.returncode == 0, done.stderr
    assert _gpus(logs) == ["0", "1"]


def test_wait_under_auto_waits_for_gpus_free_for_it_and_says_which_are_busy(locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "--auto", "7", "--wait", "0.5", "--", "true"], locks)
    assert done.returncode == 5, done.stderr  # WaitTimeout: it would have put the job on alice's GPU 0
    assert "GPU 0, GPU 1 busy or full with others' work" in done.stderr
    assert "GPU 0: busy by alice (98% utilisation; --max-util 100 takes it anyway)" in done.stderr
    # No --wait: the same rule (issue 26 item 5); the request fails at once, saying why (it took GPU 0 before).
    now = run(["--snapshot", "dgx-h100", "--auto", "7", "--", "true"], locks)
    assert now.returncode == 4, now.stderr
    assert "GPU 0: busy by alice (98% utilisation; --max-util 100 takes it anyway)" in now.stderr


# --- issue 20 item 14: jobs are reaped the moment they end ------------------------------------------

def test_the_scheduler_wakes_when_a_job_ends_not_at_a_polling_tick() -> None:
    """The loop sleeps in `Signals.wait` until a signal: a job's end (SIGCHLD) wakes it at once.
    (Before, it slept a fixed 0.1 s between checks, and ~0.2 s after the last job.)"""
    import subprocess
    import time

    from gpu_launch.sweeps.sweep import Signals

    with Signals() as signals:
        job = subprocess.Popen(["sleep", "0.2"])
        started = time.monotonic()
        signals.wait(30.0)  # returns on the SIGCHLD, long before the timeout
        woke = time.monotonic() - started
        assert job.poll() == 0 and woke < 10.0, woke
        signals.wait(0.0)  # nothing pending: returns at once
        assert signals.received == []  # a job's end is no Ctrl-C


def test_benchmark_each_vs_simple_runs_or_says_why_not(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "benchmarks/each_vs_simple.py", "--jobs", "8", "--job", "0.05", "--runs", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    if done.stdout.startswith("skipped: simple_gpu_scheduler is not installed"):
        return
    doc = json.loads(out.read_text())
    assert doc["jobs"] == 8 and len(doc["gpulaunch_s"]) == 1 and doc["ratio"] > 0
