"""`gpulaunch each`: a sweep, each job on its own reserved GPUs, one log per job, a summary."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from gpu_launch.reservations import holders

from gpu_launch.hardware import snapshot
from gpu_launch.commands.each import parse_jobs
from gpu_launch.errors import UsageError
from sharing_helpers import Lines, env, gl, run, start, wait_for

CVD = "python3 -c 'import os; print(os.environ[\"CUDA_VISIBLE_DEVICES\"])'"


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def _jobs(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.txt"
    path.write_text(text)
    return path


def test_each_runs_every_job_and_fails_when_one_fails(tmp_path: Path, locks: Path) -> None:
    jobs = _jobs(tmp_path, f"""# a sweep
{CVD}

sh -c 'echo broken >&2; exit 3'   # this one fails
{CVD}
{CVD}
""")
    logs = tmp_path / "logs"
    result = run(["--snapshot", "workstation-4x", "each", str(jobs), "--gpus-per-job", "2", "--log-dir", str(logs)],
                 locks)
    assert result.returncode == 9
    assert "gpulaunch: error: 1 of 4 jobs failed: 2" in result.stderr
    assert sorted(p.name for p in logs.iterdir()) == ["job-1.log", "job-2.log", "job-3.log", "job-4.log"]
    for n in (1, 3, 4):
        gpus = (logs / f"job-{n}.log").read_text().strip().split(",")
        assert len(gpus) == 2 and set(gpus) <= {"0", "1", "2", "3"}
    assert (logs / "job-2.log").read_text() == "broken\n"
    summary = result.stdout.splitlines()
    assert summary[0] == "3 done, 0 running, 0 queued, 1 failed (1 exit 3)"
    assert summary[1].split()[:3] == ["JOB", "STATUS", "RESULT"]
    row2 = next(line for line in summary if line.startswith("2 "))
    assert "failed" in row2 and "exit 3" in row2
    assert "job 2/4 failed: exit 3" in result.stderr


def test_jobs_never_share_a_gpu_and_hold_their_own_reservations(tmp_path: Path, locks: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    release = tmp_path / "release"
    job = (f"python3 -c 'import os, sys, time; "
           f"t = os.path.join(sys.argv[1], \".t\" + str(os.getpid())); open(t, \"w\").write(os.environ[\"CUDA_VISIBLE_DEVICES\"]); "
           f"os.replace(t, os.path.join(sys.argv[1], str(os.getpid()))); "
           f"[time.sleep(0.02) for _ in iter(lambda: os.path.exists(sys.argv[2]), True)]' {rec} {release}\n")
    jobs = _jobs(tmp_path, job * 6)
    sweep = start(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(tmp_path / "logs")], locks)
    try:
        wait_for(lambda: len(list(rec.glob("[0-9]*"))) == 4, what="4 jobs to start")
        started = {p.name: p.read_text() for p in rec.glob("[0-9]*")}
        assert sorted(started.values()) == ["0", "1", "2", "3"]  # one job per GPU, two still queued
        held = holders.holders(str(locks), [g.uuid for g in snapshot.resolve("workstation-4x").gpus])
        assert sorted(str(h.pid) for h in held.values()) == sorted(started)  # each job holds its own GPU
        clash = run(["--snapshot", "workstation-4x", "--auto", "1", "--", "true"], locks)
        assert clash.returncode == 4
        release.touch()
        assert sweep.wait(timeout=60) == 0
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert len(list(rec.glob("[0-9]*"))) == 6


def test_jobs_from_stdin(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    result = subprocess.run(gl("--snapshot", "workstation-4x", "each", "-", "--log-dir", str(logs)), env=env(locks),
                            input="echo one\n\n# nothing\necho 'two words'\n", capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert (logs / "job-1.log").read_text() == "one\n"
    assert (logs / "job-2.log").read_text() == "two words\n"


def test_existing_logs_are_never_overwritten(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job-1.log").write_text("keep me\n")
    result = run(["--snapshot", "workstation-4x", "each", str(_jobs(tmp_path, "echo new\n")), "--log-dir", str(logs)],
                 locks)
    assert result.returncode == 0
    assert (logs / "job-1.log").read_text() == "keep me\n"
    assert (logs / "job-1.1.log").read_text() == "new\n"


def test_default_log_dir_is_timestamped_under_the_current_directory(tmp_path: Path, locks: Path) -> None:
    result = run(["--snapshot", "workstation-4x", "each", str(_jobs(tmp_path, "echo hi\n"))], locks, cwd=tmp_path)
    assert result.returncode == 0
    (log,) = (tmp_path / "gpulaunch-logs").glob("*/job-1.log")
    assert log.read_text() == "hi\n"


def test_a_command_that_does_not_exist_stops_the_sweep_before_it_starts(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    result = run(["--snapshot", "workstation-4x", "each", str(_jobs(tmp_path, "echo ok\nno-such-program-xyz\n")),
                  "--log-dir", str(logs)], locks)
    assert result.returncode == 127
    assert "line 2: no-such-program-xyz: command not found" in result.stderr
    assert not logs.exists()


def test_more_gpus_per_job_than_the_machine_has(tmp_path: Path, locks: Path) -> None:
    result = run(["--snapshot", "workstation-4x", "each", str(_jobs(tmp_path, "true\n")), "--gpus-per-job", "5"], locks)
    assert result.returncode == 4 and "--gpus-per-job 5" in result.stderr


def test_ctrl_c_stops_launching_and_forwards_to_running_jobs(tmp_path: Path, locks: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    job = (f"python3 -c 'import os, signal, sys, time; d = sys.argv[1]; "
           f"signal.signal(signal.SIGINT, lambda *a: (open(os.path.join(d, \"int-\" + str(os.getpid())), \"w\"), sys.exit(5))); "
           f"open(os.path.join(d, \"up-\" + str(os.getpid())), \"w\"); time.sleep(60)' {marks}\n")
    sweep = start(["--snapshot", "workstation-4x", "each", str(_jobs(tmp_path, job * 6)), "--gpus-per-job", "2",
                   "--log-dir", str(tmp_path / "logs")], locks)
    err = Lines(sweep.stderr)
    wait_for(lambda: len(list(marks.glob("up-*"))) == 2, what="2 jobs to start")
    sweep.send_signal(signal.SIGINT)
    assert sweep.wait(timeout=30) == 130
    assert sorted(p.name[4:] for p in marks.glob("int-*")) == sorted(p.name[3:] for p in marks.glob("up-*"))
    text = err.text()
    assert "stopping: no more jobs start; sending SIGINT to 2 running jobs" in text
    assert "interrupted: 4 jobs not started, 2 failed" in text
    assert len(list(marks.glob("up-*"))) == 2  # nothing started after Ctrl-C
    assert "not started" in sweep.stdout.read()


def test_parse_jobs_splits_like_a_shell() -> None:
    jobs = parse_jobs("a 'b c' $HOME\n\n  # comment\nd  # trailing\n", "f")
    assert [(j.number, j.line, j.argv) for j in jobs] == [(1, 1, ("a", "b c", "$HOME")), (2, 4, ("d",))]
    with pytest.raises(UsageError, match="f, line 2: cannot split"):
        parse_jobs("ok\nbad 'quote\n", "f")


def test_each_takes_one_file(tmp_path: Path) -> None:
    result = run(["--snapshot", "workstation-4x", "each", "a.txt", "b.txt"])
    assert result.returncode == 2 and "`each` takes one job file" in result.stderr


def test_each_help_lists_its_options() -> None:
    result = run(["help", "each"])
    assert result.returncode == 0
    assert "--gpus-per-job K" in result.stdout and "--log-dir DIR" in result.stdout and "--min-free" in result.stdout
    for option in ("--gpus, -g SPEC", "--jobs-per-gpu K", "--max-running K", "--no-shell"):  # issue 26 item 3
        assert option in result.stdout


def test_each_stays_inside_the_parents_visible_gpus(tmp_path: Path, locks: Path) -> None:
    logs = tmp_path / "logs"
    jobs = _jobs(tmp_path, f"{CVD}\n{CVD}\n{CVD}\n")
    result = run(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(logs)], None,
                 env=env(locks, CUDA_VISIBLE_DEVICES="1,3"))
    assert result.returncode == 0, result.stderr
    allowed = {g.uuid for g in snapshot.resolve("workstation-4x").gpus if g.index in (1, 3)}
    seen = {(logs / f"job-{n}.log").read_text().strip() for n in (1, 2, 3)}
    assert seen <= allowed and seen  # UUIDs of GPUs 1 and 3 only, as a launch would write them


def test_each_names_gpus_by_uuid_where_nvml_does_not_number_them_by_bus_id(tmp_path: Path, locks: Path) -> None:
    """As a launch: an index would be counted by bus id under PCI_BUS_ID, and name another GPU."""
    from childproc import example, write

    doc = example("workstation-4x")
    gpus = doc["gpus"]
    gpus[0]["pci_bus_id"], gpus[3]["pci_bus_id"] = gpus[3]["pci_bus_id"], gpus[0]["pci_bus_id"]
    logs = tmp_path / "logs"
    result = run(["--snapshot", write(tmp_path, doc), "each", str(_jobs(tmp_path, f"{CVD}\n{CVD}\n")),
                  "--gpus-per-job", "2", "--log-dir", str(logs)], locks)
    assert result.returncode == 0, result.stderr
    seen = [(logs / f"job-{n}.log").read_text().strip().split(",") for n in (1, 2)]
    assert sorted(u for job in seen for u in job) == sorted(g["uuid"] for g in gpus)


def test_each_inside_a_launch_shares_out_the_launchs_own_gpus(tmp_path: Path, locks: Path) -> None:
    """`gpulaunch --gpus 0,1 -- gpulaunch each jobs.txt`: the sweep runs inside the launch's allotment,
    its jobs on its two GPUs (they are its own to share out, not someone else's to wait
    for: a sweep that took them for others' waited for ever)."""
    logs = tmp_path / "logs"
    jobs = _jobs(tmp_path, f"{CVD}\n{CVD}\n{CVD}\n")
    result = run(["--snapshot", "workstation-4x", "--gpus", "0,1", "-q", "--", *gl("--snapshot", "workstation-4x"),
                  "each", str(jobs), "-q", "--log-dir", str(logs)], locks, timeout=90)
    assert result.returncode == 0, result.stderr
    allowed = {g.uuid for g in snapshot.resolve("workstation-4x").gpus if g.index in (0, 1)}
    seen = [(logs / f"job-{n}.log").read_text().strip() for n in (1, 2, 3)]
    assert set(seen) <= allowed, seen
