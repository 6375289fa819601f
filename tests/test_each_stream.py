"""`each` as sweep users expect (issue 36 item 3): `each -` starts each line as it arrives (simple-gpu-scheduler's
habit: `tail -f queue | gpulaunch each -`), `{index}`/`{index1}` (Slurm's array task id), the partly-used warning a
launch prints, a summary that counts failures apart. Every test that starts jobs ends them when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sharing_helpers import env, gl, run, wait_for


def _marker_job(rec: Path, tag: str) -> str:
    """A job line that leaves ``rec/TAG`` (its GPU list in it) and exits."""
    return f'echo "$GPULAUNCH_GPUS" > {rec}/{tag}\n'


def test_each_dash_starts_a_line_before_the_next_one_is_written(tmp_path: Path) -> None:
    """Was: stdin read to its end first, so job 1 of `(echo job1; sleep 4; echo job2) | each -` started after 4 s,
    and `tail -f queue | each -` never. Job 1's marker must exist while the writer still holds line 2 back."""
    rec = tmp_path / "rec"
    rec.mkdir()
    sweep = subprocess.Popen(gl("--snapshot", "workstation-4x", "each", "-", "--log-dir", str(tmp_path / "logs")),
                             env=env(tmp_path / "locks"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert sweep.stdin is not None
    try:
        time.sleep(1.0)  # a slow writer: the sweep is up and waiting when the first line comes
        sweep.stdin.write("# a queue of jobs\n" + _marker_job(rec, "first"))
        sweep.stdin.flush()
        written = time.monotonic()
        wait_for(lambda: (rec / "first").exists(), what="job 1 to run while its input is still open")
        latency = time.monotonic() - written
        assert sweep.poll() is None  # it waits for more input, not done yet
        sweep.stdin.write(_marker_job(rec, "second"))
        sweep.stdin.flush()
        written = time.monotonic()
        wait_for(lambda: (rec / "second").exists(), what="job 2, once its line arrives")
        latency2 = time.monotonic() - written
        out, err = sweep.communicate(timeout=60)  # (closes stdin) input ends: the sweep ends once its jobs are done
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 0, err
    assert "starting each job line of stdin as it arrives" in err
    assert "job 1 started on GPU 0" in err and "job 2 started" in err, err  # (no total: input was open)
    assert out.splitlines()[0] == "2 done, 0 running, 0 queued, 0 failed", out
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["job-1.log", "job-2.log"]
    print(f"job 1 ran {latency:.3f}s, job 2 {latency2:.3f}s after its line was written")  # (shown with -s; not asserted)


def test_a_bad_line_that_arrives_later_fails_that_job_only(tmp_path: Path) -> None:
    """Lines known up front are checked up front (exit 2, nothing runs); a later one that cannot run is that
    job's failure, named by its line, and the sweep goes on (exit 9)."""
    rec = tmp_path / "rec"
    rec.mkdir()
    sweep = subprocess.Popen(gl("--snapshot", "workstation-4x", "each", "-", "--log-dir", str(tmp_path / "logs")),
                             env=env(tmp_path / "locks"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert sweep.stdin is not None
    try:
        sweep.stdin.write(_marker_job(rec, "first"))
        sweep.stdin.flush()
        wait_for(lambda: (rec / "first").exists(), what="job 1")
        out, err = sweep.communicate("no-such-program-xyz --lr 1\n" + "echo 'unclosed\n" + _marker_job(rec, "fourth"),
                                     timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 9, err
    assert (rec / "fourth").exists()
    assert "job 2/4 failed: stdin, line 2: " in err or "job 2 failed: stdin, line 2: " in err, err
    assert "no-such-program-xyz" in err and "line 3: cannot split the command" in err, err
    assert out.splitlines()[0] == "2 done, 0 running, 0 queued, 2 failed (2 never ran)", out
    assert "gpulaunch: error: 2 of 4 jobs failed: 2, 3" in err, err


def test_lines_piped_all_at_once_are_checked_before_anything_runs(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    result = run(["--snapshot", "workstation-4x", "each", "-", "--log-dir", str(tmp_path / "logs")],
                 tmp_path / "locks", input=_marker_job(rec, "first") + "echo {nope} {tp}\n")
    assert result.returncode == 2, result.stderr
    assert "stdin, line 2: {tp} is filled in only when --fit names a model" in result.stderr
    assert not (rec / "first").exists()


def test_index_and_index1_are_each_jobs_own(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# comment lines are no jobs\necho {index} {index1} --seed={index}\n\necho {index} {{index}}\n")
    logs = tmp_path / "logs"
    result = run(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(logs)], tmp_path / "locks")
    assert result.returncode == 0, result.stderr
    assert (logs / "job-1.log").read_text() == "0 1 --seed=0\n"
    assert (logs / "job-2.log").read_text() == "1 {index}\n"
    no_shell = run(["--snapshot", "workstation-4x", "each", str(jobs), "--no-shell", "--log-dir", str(logs / "2")],
                   tmp_path / "locks")
    assert no_shell.returncode == 0, no_shell.stderr
    assert (logs / "2" / "job-2.log").read_text() == "1 {index}\n"
    launch = run(["--snapshot", "workstation-4x", "--auto", "1", "--", "echo", "{index}"], tmp_path / "locks")
    assert launch.returncode == 2
    assert "{index} is filled in only when `each` runs a job line" in launch.stderr, launch.stderr


def test_slurm_task_fills_index_from_the_array_task_id(tmp_path: Path) -> None:
    """`each --slurm`'s task N (SLURM_ARRAY_TASK_ID=N) is job N: {index} is N-1, with and without the shell."""
    copy = tmp_path / "jobs.txt"
    copy.write_text("echo a {index} {index1}\necho b {index} {index1} {n}\n")
    for shell, logs in ((True, tmp_path / "logs"), (False, tmp_path / "logs-no-shell")):
        logs.mkdir()
        task = subprocess.run(gl("__slurm-task", str(copy), str(logs), "1", *([] if shell else ["--no-shell"])),
                              env=env(tmp_path / "locks", SLURM_ARRAY_TASK_ID="2", SLURM_JOB_ID="77",
                                      GPULAUNCH_SNAPSHOT="workstation-4x"),
                              capture_output=True, text=True, timeout=60)
        log = (logs / "job-2.log").read_text()
        assert task.returncode == 0, (task.stderr, log)
        assert log.splitlines()[-1] == "b 1 2 1", log


def test_a_job_on_a_partly_used_gpu_is_warned_of_as_a_launch_is(tmp_path: Path) -> None:
    """dgx-h100's GPU 5 has bob's work (3%, 12 GiB): a launch warns when --auto puts you there; each did not."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    launch = run(["--snapshot", "dgx-h100", "--gpus", "5", "--auto", "1", "--", "true"], tmp_path / "locks")
    said = "warning: GPU 5 is partly used by bob (3% utilisation, 65.1 GiB free)"
    sweep = run(["--snapshot", "dgx-h100", "each", str(jobs), "--gpus", "5", "--log-dir", str(tmp_path / "logs")],
                tmp_path / "locks")
    assert sweep.returncode == 0, sweep.stderr
    assert f"gpulaunch each: job 1/1: {said}" in sweep.stderr, sweep.stderr
    quiet = run(["--snapshot", "dgx-h100", "each", str(jobs), "--gpus", "5", "-q", "--log-dir",
                 str(tmp_path / "logs2")], tmp_path / "locks")
    assert quiet.returncode == 0 and "partly used" not in quiet.stderr  # -q hides it, as a launch's -q does
    if launch.returncode == 0:  # (the launch's own form of it, for comparison)
        assert said in launch.stderr, launch.stderr


def test_the_summary_counts_failures_apart(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\nsh -c 'exit 3'\nsh -c 'exit 3'\nsh -c 'kill -TERM $$'\n")
    result = run(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(tmp_path / "logs")],
                 tmp_path / "locks")
    assert result.returncode == 9, result.stderr
    assert result.stdout.splitlines()[0] == \
        "1 done, 0 running, 0 queued, 3 failed (2 exit 3, 1 killed by SIGTERM)", result.stdout
