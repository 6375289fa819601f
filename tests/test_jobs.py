"""Detached jobs (issue 26 item 2): submit and walk away, with no server. Real processes, a real shell on a
real terminal, real signals; every test in a private lock directory and a private job directory."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from sharing_helpers import HOLD, Lines, env, example, first_gpus, run, start, wait_for, write_snapshot
from terminal import Terminal
from two_users import as_nobody, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

#: A job that says where it runs, then waits for a release file and exits with the code it is given.
JOB = ("import os, sys, time; print('ran on', os.environ['CUDA_VISIBLE_DEVICES'], 'as job', "
       "os.environ.get('GPULAUNCH_JOB_ID'), flush=True); "
       "[time.sleep(0.02) for _ in iter(lambda: os.path.exists(sys.argv[1]), True)]; sys.exit(int(sys.argv[2]))")


class Box:
    """A private machine for one test: a two-GPU snapshot, a lock dir and a job dir (XDG_STATE_HOME)."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.locks = top / "locks"
        self.state = top / "state"
        self.snap = write_snapshot(top / "two.json", first_gpus(example("workstation-4x"), 2))
        self.snap.chmod(0o644)
        self.env = env(self.locks, XDG_STATE_HOME=str(self.state))
        self.holders: list[subprocess.Popen[str]] = []

    @property
    def job_dir(self) -> Path:
        return self.state / "gpulaunch" / "jobs"

    def gl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return run(["--snapshot", str(self.snap), *args], env=kw.pop("env", self.env), **kw)

    def submit(self, *args: str) -> str:
        done = self.gl("submit", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def jobs(self) -> dict[str, dict[str, Any]]:
        done = self.gl("jobs", "--json")
        assert done.returncode == 0, done.stderr
        return {j["id"]: j for j in json.loads(done.stdout)["jobs"]}

    def wait_state(self, job_id: str, state: str, timeout: float = 60) -> dict[str, Any]:
        wait_for(lambda: self.jobs()[job_id]["state"] == state, timeout, f"job {job_id} to be {state}")
        return self.jobs()[job_id]

    def queue(self) -> list[dict[str, Any]]:
        return json.loads(self.gl("ls", "--json").stdout)["queue"]

    def hold(self, gpu: str, release: Path) -> subprocess.Popen[str]:
        """A foreground launch holding ``gpu`` until ``release`` exists."""
        holder = start(["--snapshot", str(self.snap), "--gpus", gpu, "--", "python3", "-c", HOLD, str(release)],
                       env=self.env)
        self.holders.append(holder)
        Lines(holder.stdout).wait(f"CVD={gpu}")
        return holder

    def clean_up(self) -> None:
        """End whatever a failed test left running: holders, each job's process group, then its supervisor."""
        for holder in self.holders:
            holder.kill()
            holder.wait()
        for record in self.job_dir.glob("*.json") if self.job_dir.is_dir() else ():
            job = json.loads(record.read_text())
            for pid, kill in ((job["pid"], os.killpg), (job["supervisor"], os.kill)):
                if job["state"] in ("waiting", "running") and pid:
                    try:
                        kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    made = Box(tmp_path)
    yield made
    made.clean_up()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_job_submitted_from_a_shell_outlives_it_and_keeps_its_log_and_exit_code(tmp_path: Path, box: Box) -> None:
    release = tmp_path / "release"
    shell = Terminal(["/bin/bash", "--norc", "--noprofile", "-i"], {**box.env, "PS1": "$ "}, program=True)
    gl = shlex.join([sys.executable, "-m", "gpu_launch", "--snapshot", str(box.snap)])
    shell.type(f"{gl} submit --gpus 1 -- python3 -c {shlex.quote(JOB)} {release} 7; echo submitted:$?")
    shell.wait_for("submitted:0")
    shell.type(f"{gl} --gpus 0 --detach -- python3 -c 'print(\"the other spelling\")'; echo detached:$?")
    shell.wait_for("detached:0")
    ids = sorted(box.jobs())
    assert ids == ["1", "2"]
    running = box.wait_state("1", "running")
    assert running["gpus"] == "1"
    os.kill(shell.pid, signal.SIGKILL)  # the shell dies, and its terminal hangs up: nothing reaches the job
    shell.finish()

    taken = box.gl("--gpus", "1", "--", "true")
    assert taken.returncode == 6, taken.stderr  # the job's command holds GPU 1 while it runs
    assert box.jobs()["1"]["state"] == "running"
    release.touch()
    done = box.wait_state("1", "done")
    assert done["exit_code"] == 7 and done["signal"] is None and done["started"] <= done["ended"]
    assert box.gl("--gpus", "1", "--", "true").returncode == 0  # freed as soon as the command ended
    log = box.gl("log", "1")
    assert log.returncode == 0
    assert "gpulaunch: CUDA_VISIBLE_DEVICES=1" in log.stdout and "ran on 1 as job 1" in log.stdout
    assert "the other spelling" in box.gl("log", "2", "-f").stdout  # -f: until it ends
    assert box.jobs()["2"]["state"] == "done" and box.jobs()["2"]["exit_code"] == 0
    table = box.gl("jobs", env={**box.env, "COLUMNS": "80"}).stdout.splitlines()
    assert table[0].split() == ["ID", "STATE", "EXIT", "GPUS", "SUBMITTED", "TIME", "COMMAND"]
    # issue 36: a command that exited 7 failed, and is counted apart
    assert table[1].split()[:6] == ["1", "failed", "(exit", "7)", "7", "1"] and table[-1] == "2 jobs: 1 done, 1 failed"
    assert all(len(line) <= 80 for line in table)
    detail = box.gl("jobs", "1").stdout
    assert detail.startswith("job 1: failed (exit 7)\n") and f"  directory  {os.getcwd()}\n" in detail
    # private: the directory is the user's alone, every file in it too
    assert stat.S_IMODE(box.job_dir.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in box.job_dir.iterdir()} == {0o600}


def test_cancelling_a_waiting_job_takes_it_out_of_the_queue_and_it_never_runs(tmp_path: Path, box: Box) -> None:
    release, ran = tmp_path / "release", tmp_path / "ran"
    holder = box.hold("0", release)
    job = box.submit("--gpus", "0", "--", "python3", "-c", f"open({str(ran)!r}, 'w')")
    wait_for(lambda: box.jobs()[job]["position"] == 1, what="the job to queue")
    waiting = box.jobs()[job]
    assert waiting["state"] == "waiting" and [w["pid"] for w in box.queue()] == [waiting["pid"]]
    cancel = box.gl("cancel", job)
    assert cancel.returncode == 0 and f"job {job}: cancelled" in cancel.stderr, cancel.stderr
    gone = box.jobs()[job]
    assert gone["state"] == "cancelled" and gone["exit_code"] is None and "never ran" in gone["note"]
    assert box.queue() == [] and not _alive(waiting["pid"])
    release.touch()
    assert holder.wait(timeout=60) == 0
    after = box.submit("--gpus", "0", "--", "true")  # GPU 0 is free, and the queue empty: it runs at once
    box.gl("log", after, "-f")
    assert box.jobs()[after]["state"] == "done" and not ran.exists()
    again = box.gl("cancel", job)  # cancelling what is over does nothing, and says so
    assert again.returncode == 0 and "nothing to cancel" in again.stderr


def test_cancelling_a_running_job_ends_its_processes_and_frees_its_gpus(tmp_path: Path, box: Box) -> None:
    child = tmp_path / "child.pid"
    # job 1 leaves a child in its process group; job 2 ignores SIGTERM, so only SIGKILL ends it
    polite = box.submit("--gpus", "0", "--", "sh", "-c", f"sleep 300 & echo $! > {child}; echo ready; wait")
    stubborn = box.submit("--gpus", "1", "--", "python3", "-c",
                          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                          "time.sleep(300)")
    for job in (polite, stubborn):
        box.wait_state(job, "running")
        wait_for(lambda job=job: "ready" in box.gl("log", job).stdout, what=f"job {job} to start")
    sleeper = int(child.read_text())
    cancel = box.gl("cancel", polite, stubborn, "--grace", "1")
    assert cancel.returncode == 0, cancel.stderr
    jobs = box.jobs()
    assert (jobs[polite]["state"], jobs[polite]["signal"]) == ("cancelled", "SIGTERM")
    assert (jobs[stubborn]["state"], jobs[stubborn]["signal"]) == ("cancelled", "SIGKILL")
    wait_for(lambda: not _alive(sleeper), what="the job's background child to end too")
    assert box.gl("--gpus", "0,1", "--", "true").returncode == 0  # both GPUs free again
    assert f"gpulaunch: job {stubborn}: cancelled while running" in box.gl("log", stubborn).stdout


def test_a_job_that_cannot_start_says_why_and_nothing_is_submitted_that_cannot_run(tmp_path: Path, box: Box) -> None:
    release = tmp_path / "release"
    holder = box.hold("0", release)
    timeout = box.submit("--gpus", "0", "--wait", "0.5s", "--", "true")  # GPU 0 stays taken: it gives up
    failed = box.wait_state(timeout, "failed to start")
    assert failed["exit_code"] == 5 and failed["started"] is None and "waited 0s" in failed["note"], failed
    assert "gpulaunch: error: waited 0s" in box.gl("log", timeout).stdout
    release.touch()
    assert holder.wait(timeout=60) == 0
    missing = box.gl("submit", "--gpus", "0", "--", "no-such-program-here")
    assert missing.returncode == 127 and "command not found" in missing.stderr
    hopeless = box.gl("submit", "--auto", "3", "--", "true")
    assert hopeless.returncode == 4 and "waiting cannot help" in hopeless.stderr
    assert sorted(box.jobs()) == [timeout]  # neither became a job


def test_a_job_that_was_running_when_the_machine_went_down_says_lost_at_reboot(
        tmp_path: Path, box: Box, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    release = tmp_path / "release"
    finished = box.submit("--gpus", "1", "--", "true")
    box.gl("log", finished, "-f")
    running = box.submit("--gpus", "0", "--", "python3", "-c", JOB, str(release), "0")
    box.wait_state(running, "running")
    waiting = box.submit("--gpus", "0", "--", "true")
    wait_for(lambda: box.jobs()[waiting]["position"] == 1, what="the second job to queue")
    # The power goes: every process of the jobs dies at once, and nothing is written any more.
    records = box.jobs()
    for job in (running, waiting):
        os.kill(records[job]["pid"], signal.SIGKILL)
        os.kill(json.loads((box.job_dir / f"{job}.json").read_text())["supervisor"], signal.SIGKILL)
    wait_for(lambda: box.jobs()[running]["state"] == "lost", what="the supervisors to be gone")

    from gpu_launch import cli
    from gpu_launch.jobs import status

    new_boot = tmp_path / "boot_id"
    new_boot.write_text(f"{uuid.uuid4()}\n")
    monkeypatch.setattr(status, "BOOT_ID", str(new_boot))  # the machine came back up: a new boot id
    for name, value in box.env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert cli.run(["jobs", "--json"]) == 0
    after = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert after[running]["state"] == after[waiting]["state"] == "lost at reboot"
    assert after[finished]["state"] == "done"  # a job that was over stays as it was
    assert cli.run(["jobs"]) == 0
    assert "2 lost at reboot" in capsys.readouterr().out


def test_another_user_can_neither_read_nor_cancel_your_job(shared_dir: Path,  # noqa: F811
                                                           request: pytest.FixtureRequest) -> None:
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared_dir)
    box = Box(shared_dir)
    request.addfinalizer(box.clean_up)
    box.locks.mkdir()
    box.locks.chmod(0o1777)
    release = shared_dir / "release"
    job = box.submit("--gpus", "0", "--", "python3", "-c", JOB, str(release), "0")
    box.wait_state(job, "running")

    def nobody(*args: str, state: Path = box.state) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, python, "-m", "gpu_launch", "--snapshot", str(box.snap), *args],
                              env={**box.env, "XDG_STATE_HOME": str(state)}, capture_output=True, text=True,
                              timeout=60, cwd=shared_dir)

    for verb in (["log", job], ["cancel", job], ["jobs"]):
        refused = nobody(*verb)
        assert refused.returncode == 7 and "Permission denied" in refused.stderr, (verb, refused.stderr)
    peek = subprocess.run([*prefix, "cat", str(box.job_dir / f"{job}.log")], capture_output=True, text=True)
    assert peek.returncode != 0 and "ran on" not in peek.stdout  # the file modes, not gpulaunch, say no
    own = shared_dir / "nobody-state"
    own.mkdir(mode=0o777)
    own.chmod(0o777)
    theirs = nobody("jobs", "--json", state=own)
    assert theirs.returncode == 0 and json.loads(theirs.stdout)["jobs"] == []  # their own list: empty
    assert box.jobs()[job]["state"] == "running"  # untouched
    release.touch()
    assert box.wait_state(job, "done")["exit_code"] == 0


def test_the_job_dir_is_never_followed_through_a_symlink_and_is_made_private(tmp_path: Path, box: Box) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    box.job_dir.parent.mkdir(parents=True)
    box.job_dir.symlink_to(elsewhere)
    refused = box.gl("submit", "--auto", "1", "--", "true")
    assert refused.returncode == 7 and "is a symlink; refusing to follow it" in refused.stderr
    assert list(elsewhere.iterdir()) == []  # nothing was written through it
    box.job_dir.unlink()
    box.job_dir.mkdir(mode=0o755)
    box.job_dir.chmod(0o755)  # a directory of the user's that others can read: private again before use
    job = box.submit("--auto", "1", "--", "true")
    box.gl("log", job, "-f")
    assert stat.S_IMODE(box.job_dir.stat().st_mode) == 0o700 and box.jobs()[job]["state"] == "done"


def test_jobs_clear_removes_ended_jobs_and_their_logs_never_a_waiting_or_running_one(tmp_path: Path, box: Box) -> None:
    """`ts -C`'s idea: `jobs --clear` removes what has ended (done, failed to start, cancelled, lost), prints
    it, and never a waiting or running job, nor a lost one whose command may still run (unless named)."""
    release, release0 = tmp_path / "release", tmp_path / "release0"
    holder = box.hold("0", release0)
    done = box.submit("--gpus", "1", "--", "true")
    box.gl("log", done, "-f")
    running = box.submit("--gpus", "1", "--", "python3", "-c", JOB, str(release), "0")
    box.wait_state(running, "running")  # before the others queue: the queue is strict FIFO
    failed = box.submit("--gpus", "0", "--wait", "0.5s", "--", "true")
    box.wait_state(failed, "failed to start")
    cancelled = box.submit("--gpus", "0", "--", "true")
    assert box.gl("cancel", cancelled).returncode == 0
    dead, stray = box.submit("--gpus", "0", "--", "true"), box.submit("--gpus", "0", "--", "true")
    wait_for(lambda: box.jobs()[stray]["position"] == 2, what="both jobs to queue")
    records = {job: json.loads((box.job_dir / f"{job}.json").read_text()) for job in (dead, stray)}
    os.kill(records[dead]["pid"], signal.SIGKILL)  # lost, and nothing of it runs
    for job in (dead, stray):  # stray's launch goes on waiting without its supervisor: lost, but it runs
        os.kill(records[job]["supervisor"], signal.SIGKILL)
    wait_for(lambda: {box.jobs()[j]["state"] for j in (dead, stray)} == {"lost"}, what="both jobs to be lost")
    waiting = box.submit("--gpus", "0", "--", "true")
    try:
        refused = box.gl("jobs", "--clear", done, running)
        assert refused.returncode == 2 and f"job {running} is running" in refused.stderr, refused.stderr
        assert (box.job_dir / f"{done}.log").exists()  # refused before anything was removed

        cleared = box.gl("jobs", "--clear", env={**box.env, "COLUMNS": "80"})
        assert cleared.returncode == 0, cleared.stderr
        rows = cleared.stdout.splitlines()
        assert [r.split()[0] for r in rows[1:-1]] == [done, failed, cancelled, dead]
        assert rows[-1] == "4 jobs: 1 done, 1 failed to start, 1 cancelled, 1 lost"
        assert "removed 4 ended jobs and their logs" in cleared.stderr
        assert f"kept job {stray} (lost): its command may still run as pid {records[stray]['pid']}" in cleared.stderr
        assert sorted(box.jobs(), key=int) == [running, stray, waiting]
        for job in (done, failed, cancelled, dead):
            assert not (box.job_dir / f"{job}.json").exists() and not (box.job_dir / f"{job}.log").exists()
        assert box.gl("log", done).returncode == 2  # gone: "there is no job"

        named = box.gl("jobs", "--clear", stray, "--json")  # named: removed, though its launch still runs
        assert named.returncode == 0 and [j["id"] for j in json.loads(named.stdout)["jobs"]] == [stray]
        assert box.gl("jobs", "--clear").stderr.strip() == "gpulaunch: no ended jobs to remove"
        assert box.submit("--gpus", "1", "--", "true") == str(int(waiting) + 1)  # ids are never used again
    finally:
        os.kill(records[stray]["pid"], signal.SIGKILL)
        release.touch()
        release0.touch()
        holder.wait(timeout=60)
