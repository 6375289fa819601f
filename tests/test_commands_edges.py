"""The slips in `gpulaunch jobs`, `log` and `cancel` a user would suffer (issue 37): which jobs
`jobs --clear` removes and which it keeps, what `log` copies, the grace `cancel --grace` asks for,
and a job of another host never cancelled from here. In-process: the commands' own run() on a real
job directory under tmp_path; a live supervisor is a thread holding the job's log lock."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpu_launch.commands import cancel as cancel_cmd
from gpu_launch.commands import config as config_cmd
from gpu_launch.commands import jobs as jobs_cmd
from gpu_launch.commands import log as log_cmd
from gpu_launch.commands import wait as wait_cmd
from gpu_launch.errors import UsageError
from gpu_launch.jobs import recordfile, status
from gpu_launch.jobs.store import Job, JobDir
from gpu_launch.options import args


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobDir:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    d = JobDir.open(os.environ, create=True)
    assert d is not None
    return d


def record(jobs: JobDir, job_id: str, state: str, **changes: object) -> Job:
    fields = dict(id=job_id, state=state, argv=("python", f"j{job_id}.py"), options=(), cwd="/", host=status.host(),
                  boot_id=status.boot_id(), lock_dir="/tmp/l", submitted=time.time() - 50)
    fields.update(changes)
    j = Job(**fields)  # type: ignore[arg-type]
    jobs.write(j)
    log = Path(jobs.path, f"{job_id}.log")
    if not log.exists():
        log.write_bytes(f"output of {job_id}\n".encode())
        log.chmod(0o600)
    return j


def supervise(jobs: JobDir, job_id: str) -> int:
    fd = os.open(os.path.join(jobs.path, f"{job_id}.log"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def gl(module: object, *argv: str) -> int:
    return module.run(args.parse(list(argv)))  # type: ignore[attr-defined]


def test_jobs_clear_removes_the_ended_keeps_the_running_and_another_hosts(jobs: JobDir, capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "1", "done", exit_code=0)
    record(jobs, "2", "failed", exit_code=2)
    record(jobs, "3", "running", pid=None)  # its supervisor is gone: lost, nothing of it runs
    record(jobs, "4", "running", host="other-node")  # a shared home: never taken for lost
    submitted = time.time()
    command = subprocess.Popen(["sleep", "60"])
    record(jobs, "5", "running", pid=command.pid, submitted=submitted)  # lost, but its command may still run
    record(jobs, "6", "running")
    fd = supervise(jobs, "6")
    try:
        assert gl(jobs_cmd, "jobs", "--clear") == 0
    finally:
        os.close(fd)
        command.kill()
        command.wait()
    err = capsys.readouterr().err
    assert jobs.ids() == [4, 5, 6]
    assert "kept job 5 (lost): its command may still run as pid" in err and "removed 3 ended jobs and their logs" in err
    assert not Path(jobs.path, "1.log").exists() and Path(jobs.path, "4.log").exists()


def test_jobs_clear_of_a_named_running_job_removes_nothing(jobs: JobDir) -> None:
    record(jobs, "1", "done", exit_code=0)
    record(jobs, "2", "running")
    fd = supervise(jobs, "2")
    try:
        with pytest.raises(UsageError, match="job 2 is running: only jobs that have ended are cleared"):
            gl(jobs_cmd, "jobs", "--clear", "1", "2")
    finally:
        os.close(fd)
    assert jobs.ids() == [1, 2]
    assert gl(jobs_cmd, "jobs", "--clear", "#1", "1") == 0 and jobs.ids() == [2]


def test_jobs_clear_of_a_named_lost_job_removes_it_even_if_its_pid_lives(jobs: JobDir) -> None:
    submitted = time.time()
    command = subprocess.Popen(["sleep", "60"])
    try:
        record(jobs, "5", "running", pid=command.pid, submitted=submitted)
        assert gl(jobs_cmd, "jobs", "--clear", "5") == 0 and jobs.ids() == []
    finally:
        command.kill()
        command.wait()


def test_jobs_json_and_detail_say_the_state_now(jobs: JobDir, capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "1", "done", exit_code=3, started=time.time() - 20, ended=time.time() - 10)
    record(jobs, "2", "running")
    assert gl(jobs_cmd, "jobs", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(j["id"], j["state"], j["exit_code"]) for j in doc["jobs"]] == [("1", "done", 3), ("2", "lost", None)]
    assert doc["jobs"][0]["log"] == os.path.join(jobs.path, "1.log")
    assert gl(jobs_cmd, "jobs", "1") == 0
    assert capsys.readouterr().out.startswith("job 1: failed (exit 3)\n")
    with pytest.raises(UsageError, match="at most one job id"):
        gl(jobs_cmd, "jobs", "1", "2")


def test_log_copies_the_whole_log_and_refuses_what_is_no_job(jobs: JobDir, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    record(jobs, "1", "done")
    Path(jobs.path, "1.log").write_bytes(b"x" * 200_000 + b"\nend\n")
    assert gl(log_cmd, "log", "1") == 0
    out = capfdbinary.readouterr().out
    assert out == b"x" * 200_000 + b"\nend\n"
    with pytest.raises(UsageError, match="there is no job 2"):
        gl(log_cmd, "log", "2")
    with pytest.raises(UsageError, match="takes one job id"):
        gl(log_cmd, "log", "1", "2")


def test_log_follow_stops_when_the_supervisor_ends_and_misses_nothing(jobs: JobDir,
                                                                     capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    record(jobs, "1", "running")
    fd = supervise(jobs, "1")

    def the_job() -> None:
        time.sleep(0.3)
        with open(os.path.join(jobs.path, "1.log"), "ab") as log:
            log.write(b"last words\n")
        os.close(fd)

    t = threading.Thread(target=the_job)
    t.start()
    assert gl(log_cmd, "log", "1", "-f") == 9  # its record never said how it ended: lost (docs/jobs.md)
    t.join()
    assert capfdbinary.readouterr().out == b"output of 1\nlast words\n"


def fake_supervisor(jobs: JobDir, job_id: str, seen: list[float | None]) -> threading.Thread:
    """Holds the log's lock until a cancel is asked for, records the grace asked, then ends the job."""
    fd = supervise(jobs, job_id)

    def run() -> None:
        deadline = time.monotonic() + 30
        while (grace := recordfile.cancel_grace(jobs.fd, job_id)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(grace)
        j = jobs.read(job_id)
        jobs.write(Job(**{**{k: getattr(j, k) for k in j.__dataclass_fields__}, "state": "cancelled",
                          "note": "cancelled by you"}))
        os.close(fd)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_cancel_asks_for_the_grace_given_and_says_how_the_job_ended(jobs: JobDir,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for job_id, extra, grace in (("1", ["--grace", "30"], 30.0), ("2", [], 10.0)):
        record(jobs, job_id, "running")
        seen: list[float | None] = []
        t = fake_supervisor(jobs, job_id, seen)
        assert gl(cancel_cmd, "cancel", job_id, *extra) == 0
        t.join()
        assert seen == [grace]
        assert capsys.readouterr().err == f"gpulaunch: job {job_id}: cancelled (cancelled by you)\n"


def test_cancel_of_an_ended_job_does_nothing_and_of_another_hosts_is_refused(jobs: JobDir,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "1", "done", exit_code=0)
    assert gl(cancel_cmd, "cancel", "1") == 0
    assert "job 1 is not waiting or running (done): nothing to cancel" in capsys.readouterr().err
    assert not Path(jobs.path, ".1.cancel").exists()
    record(jobs, "2", "running", host="other-node")
    with pytest.raises(UsageError, match="job 2 runs on other-node") as err:
        gl(cancel_cmd, "cancel", "2")
    assert err.value.hint == "cancel it there" and not Path(jobs.path, ".2.cancel").exists()


def test_cancel_of_a_lost_job_whose_command_is_gone_has_nothing_to_cancel(jobs: JobDir,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    record(jobs, "1", "running", pid=gone.pid)  # its supervisor was killed, and so was its command
    assert gl(cancel_cmd, "cancel", "1") == 0
    assert capsys.readouterr().err == "gpulaunch: job 1 is not waiting or running (lost): nothing to cancel\n"
    assert jobs.read("1").state == "running"  # the record is left as it was: `jobs --clear` removes it


class _Clock:
    """cancel's clock: each sleep is a hundredth of a second of real time and one second of the clock's."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        time.sleep(0.01)
        self.now += 1.0

    def time(self) -> float:
        return time.time()


def test_cancel_of_a_lost_job_returns_once_its_command_ends_not_after_the_grace(jobs: JobDir, tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The command of a lost job is proved the job's (its own session, the job's log as its output, its
    GPULAUNCH_JOB_ID), ended by SIGTERM, and cancel says so as soon as it has ended: `--grace 1000` is the
    most it waits, not how long."""
    record(jobs, "1", "running", pid=None)
    with open(os.path.join(jobs.path, "1.log"), "ab") as log:
        command = subprocess.Popen(["sleep", "600"], stdout=log, stderr=log, start_new_session=True,
                                   env={**os.environ, "GPULAUNCH_JOB_ID": "1"})
    try:
        record(jobs, "1", "running", pid=command.pid)
        clock = _Clock()
        monkeypatch.setattr(cancel_cmd, "time", clock)
        assert gl(cancel_cmd, "cancel", "--grace", "1000", "1") == 0
        assert clock.now < 1000  # it did not wait out the grace once the command had ended
        assert command.wait(timeout=60) == -15  # SIGTERM ended it, no SIGKILL was needed
    finally:
        command.kill()
        command.wait()
    assert capsys.readouterr().err == f"gpulaunch: job 1: cancelled (it was lost; its command, pid {command.pid}, was ended)\n"
    assert jobs.read("1").state == "cancelled"


def test_wait_exits_with_the_first_failing_jobs_code_in_the_order_named_and_says_each_end(
        jobs: JobDir, capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "1", "done", exit_code=0)
    record(jobs, "2", "done", exit_code=3)
    record(jobs, "3", "done", exit_code=None, signal="SIGTERM")
    record(jobs, "4", "failed", exit_code=5, note="no GPU freed up within --wait 10s")
    record(jobs, "5", "running", pid=None)  # its supervisor was killed: lost, no one knows how it ended
    assert gl(wait_cmd, "wait", "1", "3", "2") == 143  # SIGTERM ended 3: 128 + 15, before 2's exit 3
    assert gl(wait_cmd, "wait", "1", "2", "3") == 3
    assert gl(wait_cmd, "wait", "1", "1") == 0
    assert gl(wait_cmd, "wait", "4", "5") == 5
    assert gl(wait_cmd, "wait", "5") == status.LOST_CODE
    assert capsys.readouterr().err.splitlines() == [
        "gpulaunch: job 1: done", "gpulaunch: job 3: killed (SIGTERM)", "gpulaunch: job 2: failed (exit 3)",
        "gpulaunch: job 1: done", "gpulaunch: job 2: failed (exit 3)", "gpulaunch: job 3: killed (SIGTERM)",
        "gpulaunch: job 1: done",
        "gpulaunch: job 4: failed to start (no GPU freed up within --wait 10s)",
        "gpulaunch: job 5: lost (its supervisor ended while the job was running, without recording how it ended)",
        "gpulaunch: job 5: lost (its supervisor ended while the job was running, without recording how it ended)"]
    assert gl(wait_cmd, "wait", "-q", "2") == 3 and capsys.readouterr().err == ""
    if status.boot_id():  # the kernel says which boot this is: a record of an earlier one is lost at reboot
        record(jobs, "6", "running", boot_id="an-earlier-boot")
        assert gl(wait_cmd, "wait", "6") == status.LOST_CODE
        assert capsys.readouterr().err == "gpulaunch: job 6: lost at reboot (the machine restarted while it was running)\n"


def test_wait_returns_when_a_running_job_ends_with_its_code(jobs: JobDir, capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "1", "done", exit_code=0)
    record(jobs, "2", "running")
    fd = supervise(jobs, "2")

    def the_end() -> None:
        time.sleep(0.3)
        j = jobs.read("2")
        jobs.write(Job(**{**{k: getattr(j, k) for k in j.__dataclass_fields__}, "state": "done", "exit_code": 7}))
        os.close(fd)

    t = threading.Thread(target=the_end)
    t.start()
    try:
        assert gl(wait_cmd, "wait", "2", "1") == 7
    finally:
        t.join()
    assert capsys.readouterr().err.splitlines() == ["gpulaunch: job 1: done", "gpulaunch: job 2: failed (exit 7)"]


def test_wait_refuses_another_hosts_running_job_and_what_is_no_job(jobs: JobDir) -> None:
    record(jobs, "1", "running", host="other-node")
    with pytest.raises(UsageError, match="job 1 runs on other-node") as err:
        gl(wait_cmd, "wait", "1")
    assert err.value.hint == "wait for it there"
    record(jobs, "2", "done", exit_code=4, host="other-node")  # over: its record says how it ended
    assert gl(wait_cmd, "wait", "-q", "2") == 4
    with pytest.raises(UsageError, match="there is no job 3"):
        gl(wait_cmd, "wait", "3")
    with pytest.raises(UsageError, match="takes the ids"):
        gl(wait_cmd, "wait")


def test_config_names_the_lock_dir_an_example_snapshot_uses_and_a_hardened_one_that_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_launch.reservations import lockdir

    monkeypatch.delenv("GPULAUNCH_LOCK_DIR")  # none set: the default in force is what `config` explains
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    hardened = os.environ["GPULAUNCH_HARDENED_LOCK_DIR"]
    assert gl(config_cmd, "config", "--json", "--snapshot", "workstation-4x") == 0
    doc = json.loads(capsys.readouterr().out)["lock_dir"]
    assert doc["path"] == str(tmp_path / "gpulaunch-example-locks")  # the user's own: the demo GPUs are not real
    assert doc["source"] == ("default for the bundled example workstation-4x (yours alone: its GPUs are not real)")
    assert gl(config_cmd, "config", "--json") == 0
    assert json.loads(capsys.readouterr().out)["lock_dir"] == {
        "path": lockdir.DEFAULT_LOCK_DIR, "hardened": False, "source": f"default (no hardened directory at {hardened})"}
    monkeypatch.setattr(lockdir, "is_hardened", lambda path: path == hardened)  # as `locks init` (root) makes it
    assert gl(config_cmd, "config", "--json", "--snapshot", "workstation-4x") == 0
    assert json.loads(capsys.readouterr().out)["lock_dir"] == {
        "path": hardened, "hardened": True, "source": "default (the hardened directory exists)"}


def test_jobs_clear_says_how_many_went_and_what_their_logs_freed(jobs: JobDir, capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "2", "done", exit_code=0)
    Path(jobs.path, "2.log").write_bytes(b"x" * (3 << 20))
    assert gl(jobs_cmd, "jobs", "--clear") == 0
    assert capsys.readouterr().err == "gpulaunch: removed 1 ended job and its log (3 MiB)\n"
    record(jobs, "3", "done", exit_code=0)
    record(jobs, "4", "failed", exit_code=2)
    assert gl(jobs_cmd, "jobs", "--clear", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(j["id"], j["log"]) for j in doc["jobs"]] == [("3", os.path.join(jobs.path, "3.log")),
                                                          ("4", os.path.join(jobs.path, "4.log"))]
    assert jobs.ids() == []


def test_jobs_clear_of_named_running_jobs_names_the_first_and_a_damaged_record_is_warned_of(
        jobs: JobDir, capsys: pytest.CaptureFixture[str]) -> None:
    record(jobs, "2", "running")
    record(jobs, "3", "running")
    fds = [supervise(jobs, "2"), supervise(jobs, "3")]
    try:
        with pytest.raises(UsageError, match="^job 2 is running: only jobs that have ended are cleared"):
            gl(jobs_cmd, "jobs", "--clear", "2", "3")
    finally:
        for fd in fds:
            os.close(fd)
    Path(jobs.path, "7.json").write_text("{")
    assert gl(jobs_cmd, "jobs") == 0
    err = capsys.readouterr().err
    assert err.startswith("gpulaunch: warning: job 7: its record is damaged"), err


def test_locks_init_takes_one_directory_and_says_when_it_is_not_the_default(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_launch.commands import locks as locks_cmd

    with pytest.raises(UsageError, match=r"^locks init takes one directory, got 2 arguments$"):
        gl(locks_cmd, "locks", "init", "a", "b")
    if os.geteuid() != 0:
        pytest.skip("locks init makes a root-owned directory: root only")
    monkeypatch.setenv("GPULAUNCH_HARDENED_LOCK_DIR", str(tmp_path / "default"))
    assert gl(locks_cmd, "--snapshot", "workstation-4x", "locks", "init", str(tmp_path / "default")) == 0
    assert "not the default" not in capsys.readouterr().out
    assert gl(locks_cmd, "--snapshot", "workstation-4x", "locks", "init", str(tmp_path / "other")) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"gpulaunch: not the default {tmp_path / 'default'}: point users at it with "
        f"GPULAUNCH_LOCK_DIR={tmp_path / 'other'} or lock-dir in the config file")


def test_config_shows_what_gpulaunch_does_when_an_option_is_set_nowhere(capsys: pytest.CaptureFixture[str]) -> None:
    assert gl(config_cmd, "config") == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line.startswith("--")}
    assert rows["--grace"] == ["10s", "default"] and rows["--gpus-per-job"] == ["1", "default"]
