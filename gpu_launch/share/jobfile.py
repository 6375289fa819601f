"""The job file and the log files of ``gpulaunch each``, local or on Slurm.

The job file has one command a line, split like a shell would split it (``shlex``) but never run
through a shell; blank lines and ``#`` comments are skipped. Each job's output goes to
``DIR/job-N.log`` (N: the job's number, 1-based, in file order), never overwriting a file.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from typing import IO, Any

from gpu_launch.errors import UsageError

__all__ = ["Job", "JobState", "parse_jobs", "read_jobs", "default_log_dir", "open_log"]


@dataclass(frozen=True)
class Job:
    number: int  # 1-based, in file order
    line: int  # line number in the job file
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


@dataclass
class JobState:
    """A job's progress: queued → running → done | failed (or failed without starting)."""

    job: Job
    status: str = "queued"
    gpus: str = ""
    log: str = ""
    started: float | None = None
    ended: float | None = None
    returncode: int | None = None
    note: str = ""
    node: str = ""  # each --slurm: the node it ran on
    proc: Any = field(default=None, repr=False)

    @property
    def seconds(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    @property
    def outcome(self) -> str:
        """``exit 0``, ``exit 3``, ``killed by SIGKILL``, or the note for a job that never ran."""
        if self.returncode is None:
            return self.note
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return f"exit {self.returncode}"


def parse_jobs(text: str, source: str) -> list[Job]:
    """The commands in ``text``, one a line; UsageError naming the line for a bad one."""
    jobs: list[Job] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        try:
            argv = shlex.split(line, comments=True)
        except ValueError as exc:
            raise UsageError(f"{source}, line {lineno}: cannot split the command ({exc})",
                             hint="check the quotes on that line") from None
        if argv:
            jobs.append(Job(len(jobs) + 1, lineno, tuple(argv)))
    return jobs


def read_jobs(path: str | None, stdin: IO[str]) -> tuple[list[Job], str]:
    """Read the job file (``-`` or None: stdin); returns the jobs and the source's name."""
    if path in (None, "-"):
        if path is None and stdin.isatty():
            raise UsageError("`each` needs a job file", hint="gpulaunch each jobs.txt, or pipe the commands in on stdin")
        return parse_jobs(stdin.read(), "stdin"), "stdin"
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UsageError(f"job file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"job file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    return parse_jobs(text, path), path


def default_log_dir(now: float | None = None) -> str:
    return os.path.join("gpulaunch-logs", time.strftime("%Y%m%d-%H%M%S", time.localtime(now)))


def open_log(log_dir: str, number: int) -> tuple[int, str]:
    """Create job-N.log in ``log_dir`` without ever overwriting a file: job-N.1.log, … if taken."""
    for attempt in range(1000):
        name = f"job-{number}.log" if attempt == 0 else f"job-{number}.{attempt}.log"
        path = os.path.join(log_dir, name)
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644), path
        except FileExistsError:
            continue
    raise UsageError(f"log dir {log_dir}: too many existing logs for job {number}", hint="use a fresh --log-dir")
