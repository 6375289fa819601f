"""One rule for busy GPUs (issue 26 item 5): `--auto` and `--fit` skip others' busy or full GPUs with or
without `--wait`; `--max-util 100` takes them; `--gpus` may take one and says so; `-q` never hides that a
job was put on a GPU someone else computes on. A Slurm step's or a parent job's GPUs stay the job's.

On dgx-h100 alice keeps GPUs 0 and 1 at 97-98 % (14.4 GiB free); bob's GPU 5 is partly used (3 %).
Each test runs the real CLI with a real child, which prints the CUDA_VISIBLE_DEVICES it got.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharing_helpers import env, gl, run, write_snapshot

from gpu_launch.hardware import snapshot
from gpu_launch.reservations.holders import current_user

SHOW = ["python3", "-c", "import os; print(os.environ['GPULAUNCH_GPUS'])"]
ALICE_0 = "GPU 0: busy by alice (98% utilisation; --max-util 100 takes it anyway)"
WARN_0 = "gpulaunch: warning: GPU 0 is busy by alice (98% utilisation, 14.4 GiB free)"


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def test_auto_without_wait_refuses_a_colleagues_busy_gpu_exit_4(locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "--auto", "7", "--", *SHOW], locks)
    assert done.returncode == 4, done.stderr  # was: exit 0, on alice's GPU 0 (-q: without a word)
    assert done.stdout == ""  # nothing ran
    assert done.stderr.startswith("gpulaunch: error: need 7 GPUs, but only 6 of 8 are eligible (")
    assert ALICE_0 in done.stderr and "GPU 1: busy by alice (97% utilisation" in done.stderr
    quiet = run(["-q", "--snapshot", "dgx-h100", "--auto", "7", "--", *SHOW], locks)
    assert quiet.returncode == 4 and ALICE_0 in quiet.stderr
    # Six are left: they are given, GPU 5 (bob's, partly used) among them.
    six = run(["--snapshot", "dgx-h100", "--auto", "6", "--", *SHOW], locks)
    assert six.returncode == 0 and six.stdout == "2,3,4,5,6,7\n", six.stderr


def test_fit_skips_busy_gpus_too(locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "--fit", "400GiB", "--", *SHOW], locks)
    assert done.returncode == 4, done.stderr  # was: all 8 GPUs, alice's two included
    assert "6 of 8 GPUs are eligible: " in done.stderr and ALICE_0 in done.stderr
    fits = run(["--snapshot", "dgx-h100", "--fit", "300GiB", "--", *SHOW], locks)
    assert fits.returncode == 0 and fits.stdout == "2,3,4,6\n", fits.stderr


def test_max_util_100_takes_busy_gpus_and_quiet_still_says_so(locks: Path) -> None:
    done = run(["-q", "--snapshot", "dgx-h100", "--auto", "7", "--max-util", "100", "--", *SHOW], locks)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0,2,3,4,5,6,7\n"
    # alice computes on GPU 0: said even with -q; bob's partly used GPU 5 is not (-q silences that one).
    assert done.stderr == WARN_0 + "\n"
    fit = run(["-q", "--snapshot", "dgx-h100", "--fit", "400GiB", "--max-util", "100", "--", *SHOW], locks)
    assert fit.returncode == 0 and fit.stdout == "0,1,2,3,4,5,6,7\n", fit.stderr
    assert fit.stderr.splitlines() == [WARN_0, "gpulaunch: warning: GPU 1 is busy by alice (97% utilisation, "
                                       "14.3 GiB free)"]


def test_gpus_may_take_a_busy_gpu_and_says_so_even_with_q(locks: Path) -> None:
    done = run(["-q", "--snapshot", "dgx-h100", "--gpus", "2,0", "--", *SHOW], locks)
    assert done.returncode == 0 and done.stdout == "2,0\n", done.stderr
    assert done.stderr == WARN_0 + "\n"  # was: nothing at all
    env_cmd = run(["-q", "--snapshot", "dgx-h100", "env", "--gpus", "0"], locks)
    assert env_cmd.returncode == 0 and env_cmd.stderr == WARN_0 + "\n"


def test_env_and_the_python_api_follow_the_same_rule(locks: Path) -> None:
    done = run(["--snapshot", "dgx-h100", "env", "--auto", "7"], locks)
    assert done.returncode == 4 and ALICE_0 in done.stderr and done.stdout == ""
    import gpu_launch
    from gpu_launch.errors import NotEnoughGpus

    with pytest.raises(NotEnoughGpus) as exc:
        gpu_launch.select(7, snapshot="dgx-h100", lock_dir=str(locks), quiet=True)
    assert ALICE_0 in exc.value.message
    assert [d.index for d in gpu_launch.select(7, snapshot="dgx-h100", lock_dir=str(locks), quiet=True,
                                                 max_util=100)] == [0, 2, 3, 4, 5, 6, 7]


def test_my_own_busy_gpu_is_no_surprise_under_q(tmp_path: Path, locks: Path) -> None:
    """-q hides a warning about a GPU busy with my own work only: nobody else computes there."""
    doc = json.loads(snapshot.dump(snapshot.resolve("dgx-h100")))
    for gpu in doc["gpus"][:2]:
        for proc in gpu["processes"]:
            proc["user"] = current_user()
    path = write_snapshot(tmp_path / "mine.json", doc)
    loud = run(["--snapshot", str(path), "--gpus", "0", "--", *SHOW], locks)
    assert loud.returncode == 0 and f"warning: GPU 0 is busy by {current_user()}" in loud.stderr
    quiet = run(["-q", "--snapshot", str(path), "--gpus", "0", "--", *SHOW], locks)
    assert quiet.returncode == 0 and quiet.stdout == "0\n" and quiet.stderr == ""
    # A GPU busy with processes nobody can name (another container's) is someone else's.
    for proc in doc["gpus"][0]["processes"]:
        proc["user"] = None
    write_snapshot(path, doc)
    unknown = run(["-q", "--snapshot", str(path), "--gpus", "0", "--", *SHOW], locks)
    assert unknown.stderr == "gpulaunch: warning: GPU 0 is busy (98% utilisation, 14.4 GiB free)\n"
    assert run(["-q", "--snapshot", str(path), "--auto", "7", "--", *SHOW], locks).returncode == 4


def test_a_slurm_steps_and_a_parent_jobs_gpus_stay_the_jobs(locks: Path) -> None:
    outside = run(["--snapshot", "dgx-h100", "--auto", "2", "--exclude", "2-7", "--", *SHOW], locks)
    assert outside.returncode == 4 and ALICE_0 in outside.stderr  # was: GPUs 0,1
    slurm = env(locks, SLURM_JOB_ID="42", SLURM_JOB_GPUS="0,1", CUDA_VISIBLE_DEVICES="0,1")
    step = run(["--snapshot", "dgx-h100", "--auto", "2", "--", *SHOW], env=slurm)
    assert step.returncode == 0 and step.stdout == "0,1\n", step.stderr
    parent = run(["-q", "--snapshot", "dgx-h100", "--gpus", "0,1", "--", *gl("--snapshot", "dgx-h100", "--auto", "2",
                                                                              "--", *SHOW)], locks)
    assert parent.returncode == 0 and parent.stdout == "0,1\n", parent.stderr


def test_each_says_which_jobs_it_put_on_a_gpu_someone_else_computes_on(tmp_path: Path, locks: Path) -> None:
    # was: `each --max-util 100` put its jobs on alice's busy GPU 0 without a word, with or without -q
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("echo one\necho two\n")
    quiet = run(["-q", "--snapshot", "dgx-h100", "each", str(jobs), "--gpus", "0", "--max-util", "100",
                 "--log-dir", str(tmp_path / "q")], locks)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.splitlines() == [f"gpulaunch each: job {n}/2: warning: GPU 0 is busy by alice (98% "
                                         "utilisation, 14.4 GiB free)" for n in (1, 2)]  # once a job
    loud = run(["--snapshot", "dgx-h100", "each", str(jobs), "--gpus", "0", "--max-util", "100", "--no-shell",
                "--log-dir", str(tmp_path / "l")], locks)
    lines = loud.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("gpulaunch each: job 1/2 started on GPU 0 "))
    assert lines[start + 1] == "gpulaunch each: job 1/2: warning: " + WARN_0.removeprefix("gpulaunch: warning: ")
    idle = run(["-q", "--snapshot", "dgx-h100", "each", str(jobs), "--gpus", "2", "--log-dir", str(tmp_path / "i")],
               locks)
    assert (idle.returncode, idle.stderr) == (0, "")  # an idle GPU: nothing to say
