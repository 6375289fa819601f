"""The job file and the log files of ``gpulaunch each``, local or on Slurm.

The job file has one command a line, split like a shell would split it (``shlex``'s rules, in linear
time: :func:`gpu_launch.text.split_words`) but never run through a shell; blank lines and ``#``
comments are skipped, and a UTF-8 byte order mark at the start (Windows editors write one) is not
part of the first command. Each job's output goes to
``DIR/job-N.log`` (N: the job's number, 1-based, in file order), never overwriting a file.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from dataclasses import dataclass, field
from typing import IO, Any

from gpu_launch.errors import UsageError
from gpu_launch.text import printable, split_words

__all__ = ["Job", "JobState", "command_text", "parse_jobs", "read_jobs", "default_log_dir", "open_log"]


@dataclass(frozen=True)
class Job:
    number: int  # 1-based, in file order
    line: int  # line number in the job file
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        """The line as a shell would read it back to ``argv`` (the Slurm copy holds these lines)."""
        return command_text(self.argv)


def command_text(argv: tuple[str, ...]) -> str:
    """``shlex.join(argv)``, except that a whole-argument placeholder stays as written: ``--tp {n}``, not
    ``--tp '{n}'`` (braces mean nothing to a shell's or :func:`split_words`'s word splitting)."""
    return " ".join(arg if _PLACEHOLDER.fullmatch(arg) else shlex.quote(arg) for arg in argv)


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
    argv: tuple[str, ...] | None = None  # what it ran: {n} and {gpus} replaced (None: not started)
    proc: Any = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The command for the views: as it ran once started, as written before; escaped for a terminal."""
        return printable(command_text(self.argv if self.argv is not None else self.job.argv))

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


_PLACEHOLDER = re.compile(r"\{+(?:n|gpus)\}+")  # fullmatch: "{n}\n" is no placeholder

#: A job list is a text file of commands: refuse /dev/zero, a log file given by mistake, or endless stdin.
MAX_JOB_BYTES = 64 * 1024 * 1024


def parse_jobs(text: str, source: str) -> list[Job]:
    """The commands in ``text``, one a line; UsageError naming the line for a bad one.

    Lines end at newlines only (CRLF too): a form feed or other separator that ``str.splitlines``
    would split on stays inside its line, so it can never split a quoted argument in two.
    """
    jobs: list[Job] = []
    text = text[1:] if text.startswith("\ufeff") else text
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line[:-1] if line.endswith("\r") else line
        if "\0" in line:
            raise UsageError(f"{source}, line {lineno}: the command contains a NUL byte",
                             hint="no program or argument can hold one; is this a text file?")
        try:
            argv = split_words(line, comments=True)
        except ValueError as exc:
            raise UsageError(f"{source}, line {lineno}: cannot split the command ({exc})",
                             hint="check the quotes on that line") from None
        if argv:
            jobs.append(Job(len(jobs) + 1, lineno, tuple(argv)))
    return jobs


def read_jobs(path: str | None, stdin: IO[str] | None) -> tuple[list[Job], str]:
    """Read the job file (``-`` or None: stdin); returns the jobs and the source's name.

    Read as bytes with a bound (hardware/files.py) and decoded as UTF-8 whichever it is, so the
    same bytes give the same outcome from a file and from stdin.
    """
    from gpu_launch.hardware import files

    if path in (None, "-"):
        if stdin is None:
            raise UsageError("`each`: stdin is closed, so there are no commands to read",
                             hint="give a job file: gpulaunch each jobs.txt")
        if path is None and stdin.isatty():
            raise UsageError("`each` needs a job file", hint="gpulaunch each jobs.txt, or pipe the commands in on stdin")
        try:
            fd = stdin.fileno()
        except (OSError, ValueError):
            raise UsageError("`each`: stdin cannot be read", hint="give a job file: gpulaunch each jobs.txt") from None
        raw = files.read_fd(fd, "stdin", UsageError, MAX_JOB_BYTES)
        return parse_jobs(files.decode(raw, "stdin", UsageError), "stdin"), "stdin"
    files.check_path(path, "job file", UsageError)
    label = f"job file {path}"
    try:
        raw = files.read_bytes(path, label, UsageError, MAX_JOB_BYTES, pipes=True)
    except FileNotFoundError:
        raise UsageError(f"{label}: no such file") from None
    return parse_jobs(files.decode(raw, label, UsageError), path), path


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
        except OSError as exc:
            raise UsageError(f"log dir {log_dir}: cannot create {name} ({exc.strerror})",
                             hint="pick a --log-dir you can write to") from None
    raise UsageError(f"log dir {log_dir}: too many existing logs for job {number}", hint="use a fresh --log-dir")
