"""The slips in a detached job's supervisor a user would suffer (issue 37): which signal reaches the job
and when (a cancel, a second cancel, a SIGTERM before the launch exists, the grace a cancel asked
for), and what its record says at the end (exit code, signal, cancelled, failed to start and why).

Unit-level: a real job directory under tmp_path and the supervisor's own object; the signals it would
send and the SIGKILL timer it would arm are recorded instead (no process of the test is signalled),
and the launch's wait status is made by hand. The real jobs are tests/test_job_outcomes.py's."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gpu_launch.jobs import recordfile, supervisor
from gpu_launch.jobs.store import Job, JobDir

LAUNCH = 4_000_000  # the launch's pid, as fork would give it (no process has it: nothing is really signalled)


@pytest.fixture
def jobs(tmp_path: Path) -> JobDir:
    d = JobDir.open({"XDG_STATE_HOME": str(tmp_path / "state")}, create=True)
    assert d is not None
    return d


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, float]]:
    """What the supervisor sends: ("killpg"/"kill", pid, signal) and ("timer", which, seconds)."""
    calls: list[tuple[str, int, float]] = []
    monkeypatch.setattr(os, "killpg", lambda pid, sig: calls.append(("killpg", pid, sig)))
    monkeypatch.setattr(os, "kill", lambda pid, sig: calls.append(("kill", pid, sig)))
    monkeypatch.setattr(signal, "setitimer", lambda which, seconds, *_: calls.append(("timer", which, seconds)))
    return calls


def new(jobs: JobDir, job_id: str = "1") -> supervisor._Supervisor:
    jobs.write(Job(job_id, "waiting", ("python", "train.py"), ("--gpus", "0"), "/w", "h", "b", "/l", 1.0e9))
    return supervisor._Supervisor(jobs.fd, recordfile.load(jobs.fd, job_id))


def record(jobs: JobDir, job_id: str = "1") -> dict:  # type: ignore[type-arg]
    return recordfile.load(jobs.fd, job_id)


# --- signals ----------------------------------------------------------------------------------------------------------

def test_nothing_is_signalled_before_the_launch_exists_and_a_cancel_then_is_not_lost(jobs: JobDir, sent: list) -> None:
    """A shutdown's SIGTERM or a cancel's SIGUSR1 between the supervisor's start and the launch's fork: no
    pid to signal yet (pid 0 would be the supervisor's own group, pid 1 init's); the cancel is taken up
    once the launch exists (run() looks for its file again), so it must not count as done."""
    s = new(jobs)
    s._signal(signal.SIGTERM)
    jobs.request_cancel("1", 30)
    s.cancel()
    assert sent == [] and not s.cancelled
    s.pid = LAUNCH  # forked: the cancel asked for before now is carried out
    s.cancel()
    assert sent == [("killpg", LAUNCH, signal.SIGTERM), ("timer", signal.ITIMER_REAL, 30.0)]


def test_a_cancel_sends_sigterm_once_and_sigkill_after_the_grace_asked_for(jobs: JobDir, sent: list) -> None:
    """`cancel --grace 30`: SIGTERM now, SIGKILL in 30 s (not 10, the default); a second cancel (or a second
    SIGUSR1) neither sends a second SIGTERM (a training script's "second signal: stop now, no checkpoint")
    nor starts the grace again."""
    s = new(jobs)
    s.pid = LAUNCH
    jobs.request_cancel("1", 30)
    s.cancel()
    s.cancel()
    assert sent == [("killpg", LAUNCH, signal.SIGTERM), ("timer", signal.ITIMER_REAL, 30.0)]
    s._signal(signal.SIGKILL)  # the timer's SIGALRM: the grace is over
    assert sent[-1] == ("killpg", LAUNCH, signal.SIGKILL)


@pytest.mark.parametrize(("grace", "armed"), [(None, supervisor.DEFAULT_GRACE), (0, 0.001), (2.5, 2.5),
                                               (7200, 3600.0)])
def test_the_sigkill_timer_is_the_grace_and_a_zero_grace_still_kills(jobs: JobDir, sent: list, grace: float | None,
                                                                     armed: float) -> None:
    """No grace given: 10 s. `--grace 0`: SIGKILL at once; a timer of 0 s would be no timer at all, the job
    never killed if it ignores SIGTERM. At most an hour."""
    s = new(jobs)
    s.pid = LAUNCH
    if grace is None:
        (Path(jobs.path) / ".1.cancel").write_text("soon\n")  # a file cancel did not write: the default
    else:
        jobs.request_cancel("1", grace)
    s.cancel()
    assert sent == [("killpg", LAUNCH, signal.SIGTERM), ("timer", signal.ITIMER_REAL, armed)]
    assert supervisor.DEFAULT_GRACE == 10.0


def test_a_job_that_ended_is_never_signalled_its_pid_may_be_anothers(jobs: JobDir, sent: list) -> None:
    s = new(jobs)
    s.pid, s.exited = LAUNCH, True
    s._signal(signal.SIGKILL)
    s.cancel()
    assert [c for c in sent if c[0] != "timer"] == [] and ("timer", signal.ITIMER_REAL, 10.0) not in sent


# --- what the record says at the end ----------------------------------------------------------------------------------

def _status(code: int = 0, sig: int = 0) -> int:
    """A wait status as waitpid gives it: exited with ``code``, or killed by ``sig``."""
    return sig if sig else code << 8


@pytest.mark.parametrize(("ran", "cancelled", "status", "want"), [
    (True, False, _status(0), ("done", 0, None)),
    (True, False, _status(3), ("done", 3, None)),
    (True, False, _status(sig=signal.SIGKILL), ("done", None, "SIGKILL")),
    (True, False, _status(sig=signal.SIGHUP), ("done", None, "SIGHUP")),  # signal 1: not "exit -1"
    (True, True, _status(sig=signal.SIGTERM), ("cancelled", None, "SIGTERM")),
    (True, True, _status(0), ("cancelled", 0, None)),
    (False, False, _status(5), ("failed", 5, None)),
])
def test_the_end_is_recorded_with_its_exit_code_or_signal(jobs: JobDir, sent: list, ran: bool, cancelled: bool,
                                                        status: int, want: tuple) -> None:  # type: ignore[type-arg]
    s = new(jobs)
    s.pid, s.exited, s.cancelled = LAUNCH, True, cancelled
    s._finish(ran, status)
    doc = record(jobs)
    assert (doc["state"], doc["exit_code"], doc["signal"]) == want
    assert doc["ended"] > 1.0e9
    if cancelled:
        assert doc["note"] == ("cancelled while running; ended by SIGTERM" if want[2] else "cancelled while running")


def test_a_launch_that_failed_is_recorded_with_its_last_error_line(jobs: JobDir, sent: list,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """`jobs` says why a job failed to start: the launch's last error line in the log, cut at 500
    characters; the log may be longer than what is read of it (its last 16 KiB), or much shorter."""
    s = new(jobs)
    s.pid, s.exited = LAUNCH, True
    log = Path(jobs.log_path("1"))
    log.write_text("gpulaunch: error: an earlier one\nsome output\ngpulaunch: error: no GPU is free (hint: wait)\n")
    s._finish(False, _status(5))
    assert (record(jobs)["state"], record(jobs)["note"]) == ("failed", "no GPU is free (hint: wait)")
    long = "x" * 600
    log.write_text("o" * 40_000 + "\n" + f"gpulaunch: error: {long}\n")
    s._finish(False, _status(5))
    assert record(jobs)["note"] == long[:500]
    log.write_text("gpulaunch: error: --gpus 9: there is no GPU 9\n")  # the launch's only line: the log's first byte
    s._finish(False, _status(2))
    assert record(jobs)["note"] == "--gpus 9: there is no GPU 9"
    log.write_text("nothing said\n")
    s._finish(False, _status(1))
    assert record(jobs)["note"] == "the launch ended before the command started"


def test_a_job_cancelled_while_it_waited_never_ran_and_its_log_says_so(jobs: JobDir, sent: list,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    s = new(jobs)
    s.pid, s.exited, s.cancelled = LAUNCH, True, True
    s._finish(False, _status(sig=signal.SIGTERM))
    doc = record(jobs)
    assert (doc["state"], doc["exit_code"], doc["note"]) == ("cancelled", None, "cancelled while waiting: it never ran")
    assert capfd.readouterr().err == "gpulaunch: job 1: cancelled while waiting: it never ran\n"


def test_a_full_disk_at_the_end_keeps_the_outcome_says_so_and_writes_the_record_once_it_can(
        jobs: JobDir, sent: list, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """The final record cannot be written (ENOSPC) twice: the log says so once, the outcome is kept where the
    store reads it, and the record is written at the third try (then the kept outcome is dropped)."""
    import errno
    import time

    s = new(jobs)
    s.pid, s.exited = LAUNCH, True
    s.outcome = recordfile.reserve(jobs.fd, "1")
    real, tries = recordfile.write, []

    def write(dir_fd: int, job_id: str, doc: dict) -> None:  # type: ignore[type-arg]
        tries.append(doc["state"])
        if len(tries) <= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(dir_fd, job_id, doc)

    monkeypatch.setattr(recordfile, "write", write)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    s._finish(True, _status(4))
    assert capfd.readouterr().err == ("gpulaunch: job 1: its record cannot be written (the disk is full?); "
                                      "its outcome is kept, trying again until it can be\n")
    assert tries == ["done"] * 3 and (record(jobs)["state"], record(jobs)["exit_code"]) == ("done", 4)
    assert not (Path(jobs.path) / ".1.outcome").exists()


def test_an_interrupted_supervisor_says_one_line_in_the_log_and_exits_130(tmp_path: Path) -> None:
    """`kill -INT` of a supervisor (it has no terminal: nothing else sends it one): no traceback in the log."""
    import subprocess
    import sys

    script = ("import runpy, sys\n"
              "from gpu_launch.jobs import recordfile\n"
              "def interrupted(*_a):\n    raise KeyboardInterrupt\n"
              "recordfile.load = interrupted\n"
              f"sys.argv = [{supervisor.__file__!r}, '1', '0', '0']\n"
              f"runpy.run_path({supervisor.__file__!r}, run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, close_fds=True)
    assert (done.returncode, done.stderr) == (130, "gpulaunch: interrupted\n")


def test_a_status_line_that_arrives_in_pieces_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch's `E<gpus>` line may come in two reads of the pipe (`E2,` then `3`): the GPUs `jobs` shows
    are the whole line's, and an `F` that follows in a later read still means the exec failed."""
    def reads(*pieces: bytes) -> list[bytes]:
        left = list(pieces)
        monkeypatch.setattr(os, "read", lambda fd, n: left.pop(0) if left else b"")
        return left

    for pieces, want in (((b"E2,", b"3\n"), (True, ["2,3"])), ((b"E2,", b"3\n", b"F\n"), (False, ["2,3"])),
                         ((b"E", b"\nF", b"\n"), (False, []))):  # the F came with the E: never shown running
        reads(*pieces)
        seen: list[str] = []
        assert (supervisor.exec_outcome(99, seen.append), seen) == want, pieces
