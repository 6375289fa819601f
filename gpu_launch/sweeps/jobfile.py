"""The job file and the log files of ``gpulaunch each``, local or on Slurm.

The job file has one command a line. Each line is shell text, run by ``/bin/sh -c`` (redirections,
``cd … &&``, ``VAR=…``, pipes), its placeholders filled in and quoted for the shell
(:func:`gpu_launch.run.placeholders.substitute_shell`); with ``--no-shell`` it is split like a shell
would split it (``shlex``'s rules, in linear time: :func:`gpu_launch.base.text.split_words`) and executed
directly. Either way the line must split (quotes closed); blank lines and ``#`` comments are
skipped, and a UTF-8 byte order mark at the start (Windows editors write one) is not part of the
first command. Each job's output goes to ``DIR/job-N.log`` (N: the job's number, 1-based, in file
order), never overwriting a file.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from gpu_launch.base.records import dataclass, field, replace

from gpu_launch.errors import UsageError
from gpu_launch.base.text import printable, split_words

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs ~3 ms of every start
    from typing import IO, Any

__all__ = ["Job", "JobState", "command_text", "parse_jobs", "parse_line", "read_jobs", "default_log_dir", "open_log"]


#: The shell that runs a job line (as Slurm's ``--wrap`` and simple-gpu-scheduler do)
SHELL = "/bin/sh"


@dataclass(frozen=True)
class Job:
    number: int  # 1-based, in file order
    line: int  # line number in the job file
    argv: tuple[str, ...]  # the line split into words (what runs with --no-shell)
    source: str = ""  # the line as written (what the shell runs), surrounding blanks off
    shell: bool = False  # run through /bin/sh -c (each's default) rather than exec'd as ``argv``
    #: a shell line that is one command (no operator, redirection, assignment or builtin) is run as
    #: ``sh -c 'exec LINE'``, as bash runs ``bash -c LINE``: the job's pid, signals and status are the
    #: command's own, not those of a shell waiting for it (:func:`parse_jobs` decides)
    execs: bool = False

    @property
    def text(self) -> str:
        """The line as written for the shell, or as a shell would read it back to ``argv`` (the Slurm
        copy holds these lines, placeholders unfilled)."""
        return self.source if self.shell else command_text(self.argv)

    def command(self, count: int) -> tuple[str, ...]:
        """What runs for a job on ``count`` GPUs: ``/bin/sh -c LINE`` with ``{n}``/``{gpus}`` filled in and
        quoted, or the words with them filled in."""
        from gpu_launch.run import placeholders

        own = placeholders.job_values(self.number)  # {index}, {index1}
        if self.shell:
            filled = placeholders.substitute_shell(self.source, count, job=own)
            return (SHELL, "-c", f"exec {filled}" if self.execs else filled)
        return placeholders.substitute(self.argv, count, job=own)

    def program(self) -> str | None:
        """The program the line starts, to check that it exists before anything runs; None when only the
        shell knows (a builtin or keyword such as ``cd``/``for``, an assignment, an expansion)."""
        if not self.shell:
            return self.argv[0]
        from gpu_launch.run.shellwords import words

        try:
            first = words(self.source)[:1]
        except ValueError:
            return None
        word = first[0].value if first and first[0].start == 0 else None  # (a line that starts with ( or >: the shell's)
        name, eq, _ = word.partition("=") if word else ("", "", "")
        if not word or word in _SHELL_WORDS or eq and name.isascii() and name.isidentifier():  # (NAME=…: an assignment)
            return None
        return word

    def check(self) -> None:
        """Refuse (exit 2) a placeholder that would not be filled: inside a word, or not one ``each`` fills."""
        from gpu_launch.run import placeholders

        filled = (*placeholders.NAMES, *placeholders.EACH_NAMES)
        if self.shell:
            placeholders.check_shell(self.source, filled)
        else:
            placeholders.check(self.argv, filled)


def command_text(argv: tuple[str, ...]) -> str:
    """``shlex.join(argv)``, except that a whole-argument placeholder stays as written: ``--tp {n}``, not
    ``--tp '{n}'`` (braces mean nothing to a shell's or :func:`split_words`'s word splitting)."""
    return " ".join(arg if _PLACEHOLDER.fullmatch(arg) else shlex.quote(arg) for arg in argv)


@dataclass
class JobState:
    """A job's progress: queued → running → done | failed | timeout (ended at its --time), or failed without
    starting."""

    job: Job
    status: str = "queued"
    gpus: str = ""
    uuids: tuple[str, ...] = ()  # the devices it runs on
    log: str = ""
    started: float | None = None
    ended: float | None = None
    returncode: int | None = None
    note: str = ""
    node: str = ""  # each --slurm: the node it ran on
    argv: tuple[str, ...] | None = None  # what it ran: {n} and {gpus} replaced (None: not started)
    warnings: tuple[str, ...] = ()  # its GPUs someone else computes on (--max-util 100): said even under -q
    notices: tuple[str, ...] = ()  # the choice's other warnings (a partly used GPU): said unless -q
    proc: Any = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The command for the views: as it ran once started, as written before; escaped for a terminal."""
        if self.argv is None:
            return printable(self.job.text)
        if self.job.shell and len(self.argv) == 3:  # the shell text that ran
            return printable(self.argv[2].removeprefix("exec ") if self.job.execs else self.argv[2])
        return printable(command_text(self.argv))

    @property
    def holder(self) -> tuple[str, ...]:
        """The command to name in its lock files (``gpulaunch ls``): a line the shell execs, as its own words."""
        if self.argv is not None and self.job.execs:
            try:
                return tuple(split_words(self.argv[2].removeprefix("exec ")))
            except ValueError:
                pass
        return self.argv if self.argv is not None else self.job.argv

    @property
    def seconds(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    @property
    def outcome(self) -> str:
        """``exit 0``, ``exit 3``, ``killed by SIGKILL``, ``timeout (SIGTERM)`` (ended at its --time: sweeps/limits.py),
        or the note for a job that never ran."""
        if self.returncode is None:
            return self.note
        if self.note.startswith("timeout:"):
            code = self.returncode
            return f"timeout ({signal.Signals(-code).name if -code in signal.valid_signals() else f'exit {code}'})"
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        if self.job.shell and 128 < self.returncode < 128 + signal.NSIG:  # the shell's word for its command's signal
            try:
                return f"exit {self.returncode} ({signal.Signals(self.returncode - 128).name})"
            except ValueError:
                pass
        return f"exit {self.returncode}"


#: POSIX sh's reserved words and special and regular built-ins (and bash's few more): no file to look for
_SHELL_WORDS = frozenset("""! { } case do done elif else esac fi for if in then until while time function select
    . : break continue eval exec exit export readonly return set shift times trap unset
    alias bg cd command false fc fg getopts hash jobs kill newgrp pwd read true type ulimit umask unalias wait
    echo printf test [ local source""".split())

_PLACEHOLDER = re.compile(r"\{+(?:n|gpus|index1?)\}+")  # fullmatch: "{n}\n" is no placeholder

#: A job list is a text file of commands: refuse /dev/zero, a log file given by mistake, or endless stdin.
MAX_JOB_BYTES = 64 * 1024 * 1024


def parse_jobs(text: str, source: str, shell: bool = False) -> list[Job]:
    """The commands in ``text``, one a line (shell text with ``shell``); UsageError naming the line for a bad one.

    Lines end at newlines only (CRLF too): a form feed or other separator that ``str.splitlines``
    would split on stays inside its line, so it can never split a quoted argument in two.
    """
    jobs: list[Job] = []
    text = text[1:] if text.startswith("\ufeff") else text
    for lineno, line in enumerate(text.split("\n"), start=1):
        job = parse_line(line, lineno, len(jobs) + 1, source, shell)
        if job is not None:
            jobs.append(job)
    return jobs


def parse_line(line: str, lineno: int, number: int, source: str, shell: bool = False) -> Job | None:
    """Line ``lineno`` of the job file as job ``number`` (None: blank or a comment); UsageError naming the line.
    (``each -`` reads its lines one at a time as they arrive: :mod:`gpu_launch.sweeps.feed`.)"""
    line = line[:-1] if line.endswith("\r") else line
    if "\0" in line:
        raise UsageError(f"{source}, line {lineno}: the command contains a NUL byte",
                         hint="no program or argument can hold one; is this a text file?")
    try:
        argv = split_words(line, comments=True)
    except ValueError as exc:
        raise UsageError(f"{source}, line {lineno}: cannot split the command ({exc})",
                         hint="check the quotes on that line") from None
    if not argv:
        return None
    job = Job(number, lineno, tuple(argv), line.strip(" \t"), shell)
    return replace(job, execs=True) if shell and _one_command(job) else job


def _one_command(job: Job) -> bool:
    from gpu_launch.run.shellwords import one_command, words

    try:
        return job.program() is not None and one_command(job.source, words(job.source))
    except ValueError:
        return False


def read_jobs(path: str | None, stdin: IO[str] | None, shell: bool = False) -> tuple[list[Job], str]:
    """Read the job file (``-`` or None: stdin), its lines shell text with ``shell``; returns the jobs and
    the source's name.

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
        return parse_jobs(files.decode(raw, "stdin", UsageError), "stdin", shell), "stdin"
    files.check_path(path, "job file", UsageError)
    label = f"job file {path}"
    try:
        raw = files.read_bytes(path, label, UsageError, MAX_JOB_BYTES, pipes=True)
    except FileNotFoundError:
        raise UsageError(f"{label}: no such file") from None
    return parse_jobs(files.decode(raw, label, UsageError), path, shell), path


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
