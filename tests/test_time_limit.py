"""--time LIMIT (issue 36, left open): Slurm's forms and gpulaunch's durations, bad values in one line (exit 2);
a submitted job is ended at its limit (SIGTERM, then SIGKILL after the grace): outcome timeout, and `wait` exits
124 as timeout(1) does; the limit is declared in the job's lock file for the queue's backfill."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sharing_helpers import run
from test_jobs import Box


@pytest.mark.parametrize("value, why", [("30", "ambiguous"), ("0:00", "is no limit"), ("2x", "is not a duration"),
                                        ("400d", "out of range"), ("1-", "is not a duration")])
def test_a_bad_limit_is_one_line_and_exit_2(value: str, why: str) -> None:
    done = run(["--snapshot", "dgx-h100", "--auto", "1", "--time", value, "--", "true"])
    assert done.returncode == 2 and why in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gpulaunch: error: --time: ")


def test_a_submitted_job_is_ended_at_its_limit_and_waits_exit_124(tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    box = Box(tmp_path)
    request.addfinalizer(box.clean_up)
    job = box.submit("--auto", "1", "--time", "2s", "--", "sleep", "60")
    began = time.monotonic()
    waited = box.gl("wait", job, timeout=60)
    assert waited.returncode == 124, waited.stderr
    assert time.monotonic() - began < 30  # ended at its limit, not after its 60 s
    record = box.jobs()[job]
    assert record["state"] == record["outcome"] == "timeout" and record["signal"] == "SIGTERM"
    assert record["limit_s"] == 2.0
    assert "ended at its --time limit (2s): SIGTERM, it ended on SIGTERM" in record["note"]
    assert "  limit      2s\n" in box.gl("jobs", job).stdout
    listed = box.gl("jobs").stdout
    assert f"{job}  timeout" in listed and "1 job: 1 timeout" in listed, listed
    # a job that ends before its limit is done, with its own exit code
    quick = box.submit("--auto", "1", "--time", "1m", "--", "sh", "-c", "exit 3")
    assert box.gl("wait", quick).returncode == 3 and box.jobs()[quick]["outcome"] == "failed"


def test_a_job_that_ignores_sigterm_at_its_limit_gets_sigkill_after_the_grace(tmp_path: Path,
                                                                               request: pytest.FixtureRequest) -> None:
    box = Box(tmp_path)
    request.addfinalizer(box.clean_up)
    job = box.submit("--auto", "1", "--time", "1s", "--", "sh", "-c", "trap '' TERM; sleep 60")
    assert box.gl("wait", job, timeout=90).returncode == 124
    record = box.jobs()[job]
    assert record["outcome"] == "timeout" and record["signal"] == "SIGKILL", record
    assert "SIGTERM, then SIGKILL after the 10s grace" in record["note"]


def test_the_grace_at_the_limit_is_grace_from_the_flag_or_the_config(tmp_path: Path,
                                                                       request: pytest.FixtureRequest) -> None:
    """--grace (config key grace, GPULAUNCH_GRACE; Slurm's KillWait) sets the SIGTERM-to-SIGKILL time at --time for
    a submitted job and for each's jobs: 1 s, not 10, for a job that ignores SIGTERM (the default: the test above)."""
    box = Box(tmp_path)
    request.addfinalizer(box.clean_up)
    job = box.submit("--auto", "1", "--time", "1s", "--grace", "1", "--", "sh", "-c", "trap '' TERM; sleep 60")
    assert box.gl("wait", job, timeout=90).returncode == 124  # --grace is the supervisor's: the launch never sees it
    record = box.jobs()[job]
    assert record["signal"] == "SIGKILL" and "SIGTERM, then SIGKILL after the 1s grace" in record["note"], record
    assert record["ended"] - record["started"] < 8  # its 1 s, then 1 s of grace (the default would take 11 s)
    assert "  limit      1s (then SIGTERM, SIGKILL 1s later)\n" in box.gl("jobs", job).stdout
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("sh -c \"trap '' TERM; sleep 60\"\n")
    done = box.gl("each", str(jobs), "--time", "1s", "--json", "-q", "--log-dir", str(tmp_path / "l"), timeout=60,
                  env={**box.env, "GPULAUNCH_GRACE": "1"})
    assert done.returncode == 9, done.stderr
    only = json.loads(done.stdout)["jobs"][0]
    assert only["status"] == "timeout" and only["signal"] == "SIGKILL" and "after the 1s grace" in only["note"], only
    assert only["seconds"] < 8


def test_a_launch_declares_its_limit_in_its_lock_file(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    box = Box(tmp_path)
    request.addfinalizer(box.clean_up)
    before = time.time()
    done = box.gl("--gpus", "1", "--time", "1:30:00", "--", "sh", "-c", f"cat {box.locks}/*.lock")
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.splitlines()[0])
    assert before + 5400 - 5 <= line["ends"] <= time.time() + 5400


def test_each_ends_a_job_at_its_limit_and_counts_it_as_a_timeout(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A job ended at its --time is a timeout, counted apart from the failures (as `jobs` counts them), in the
    summary line, the live lines and --json; each still exits 9, naming it. One that exits 0 on the SIGTERM is a
    timeout too (as `jobs` and Slurm's TIMEOUT count it, and each --slurm), not done."""
    box = Box(tmp_path)
    request.addfinalizer(box.clean_up)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(f"sleep 60\nsh -c 'cat {box.locks}/*.lock'\nsh -c \"trap 'exit 0' TERM; sleep 60 & wait\"\n")
    began = time.monotonic()
    done = box.gl("each", str(jobs), "--time", "1s", "--json", "-q", "--log-dir", str(tmp_path / "logs"), timeout=60)
    assert time.monotonic() - began < 30  # not the 60 s of its sleep
    assert done.returncode == 9, done.stderr
    doc = json.loads(done.stdout)
    slow, quick, clean = doc["jobs"]
    assert slow["status"] == "timeout" and slow["signal"] == "SIGTERM" and slow["note"].startswith("timeout: ended at "
                                                                                                     "its --time limit (1s)")
    assert quick["status"] == "done" and doc["counts"]["failed"] == 0 and doc["counts"]["timeout"] == 2
    assert (clean["status"], clean["exit_code"], clean["signal"]) == ("timeout", 0, None), clean
    held = [json.loads(line) for line in (tmp_path / "logs" / "job-2.log").read_text().splitlines() if '"ends"' in line]
    assert held and all(h["ends"] - h["started"] == pytest.approx(1.0, abs=0.01) for h in held)  # declared for backfill
    shown = box.gl("each", str(jobs), "--time", "1s", "--log-dir", str(tmp_path / "logs2"), timeout=60)
    assert shown.returncode == 9 and "1 done, 0 running, 0 queued, 0 failed, 2 timeout (1 SIGTERM, 1 exit 0)" \
        in shown.stdout, \
        shown.stdout
    assert "job 1/3 timeout (SIGTERM) after " in shown.stderr and ": ended at its --time (log " in shown.stderr
    assert "job 3/3 timeout (exit 0) after " in shown.stderr
    assert "gpulaunch: error: 2 of 3 jobs failed: 1 (timeout), 3 (timeout)" in shown.stderr, shown.stderr
