"""Submitting ``gpulaunch each --slurm``'s job array: the time limit, the job-file copy, sbatch's arguments.

The validated jobs are written, one line each (shell text as written; with ``--no-shell`` normalised
by ``shlex.join``, which the job file's splitting reads back to the same argv; placeholders as
written either way), to a copy of the job file in the log directory, and ``sbatch --array=1-M%K
--gres=gpu:N`` gets a fixed batch script on stdin. The script holds no job line: it execs
``python -m gpu_launch __slurm-task COPY LOGDIR N [--no-shell]`` (:mod:`.task`); only the task's own
``/bin/sh -c`` ever reads a job line. sbatch arguments that would replace that script or the array, or submit
nothing, are refused before sbatch runs (:func:`check_extra`), so that nothing is ever reported
done that did not run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_launch.errors import GpuLaunchError, SlurmUnavailable, UsageError
from gpu_launch.sweeps.jobfile import Job
from gpu_launch.base.text import printable
from gpu_launch.base.units import MAX_SECONDS, parse_duration

__all__ = ["ArrayRequest", "Submitted", "MAX_MINUTES", "parse_time", "write_job_copy", "sbatch_argv", "batch_script",
           "check_extra", "require", "submit", "run_sbatch", "cancel", "one_line", "write_new"]

#: Slurm's own forms: days-hours[:minutes[:seconds]], or [hours:]minutes:seconds (ASCII digits: not '٣')
_SLURM_TIME = re.compile(r"^(?:(?P<d>[0-9]+)-(?P<dh>[0-9]+)(?::(?P<dm>[0-9]+)(?::(?P<ds>[0-9]+))?)?"
                         r"|(?P<a>[0-9]+):(?P<b>[0-9]+)(?::(?P<c>[0-9]+))?)$")
MAX_MINUTES = int(MAX_SECONDS // 60)  # the longest --time: a year, as for every duration
#: sbatch's words for "no cluster to talk to", as opposed to "this request is wrong"
_UNREACHABLE = ("unable to contact slurm controller", "failed to fetch config", "could not establish a configuration",
                "connection refused", "unable to establish", "slurm.conf")
_NO_SLURM_HINT = ("run it on a Slurm login node (or `module load slurm`); without --slurm, `each` runs the jobs "
                  "on this machine")


def parse_time(text: str, option: str = "--time") -> str:
    """A Slurm time limit from ``30m``/``2h``/``1d`` (rounded up to whole minutes) or Slurm's own ``H:MM:SS``, ``D-HH``.

    At most :data:`MAX_MINUTES`, a year, as every duration gpulaunch takes: Slurm itself takes far more
    and then wraps silently (its limit is minutes in 32 bits, the top two values meaning "unlimited"
    and "not set": ``--time=3000000-00:00:00`` became ``17383-19:44:00`` on Slurm 22.05).
    """
    return limit(text, option)


def limit(text: str, option: str = "--time") -> Limit:
    """:func:`parse_time`'s text (what sbatch gets) with the limit in seconds, unrounded (``.seconds``: what a
    local job is held to: submit's supervisor and a local ``each`` end a job there, 2s included)."""
    compact = text.strip()
    slurm_form = _SLURM_TIME.match(compact)
    if slurm_form:
        seconds = _slurm_seconds(slurm_form)
        if seconds is None or -(-seconds // 60) > MAX_MINUTES:
            _too_long(text, option)
        if not seconds:
            raise UsageError(f"{option}: {text!r} is no limit (Slurm reads 0 as none)", hint=f"leave {option} out for none")
        return Limit(compact, float(seconds))
    if compact.isdigit():
        raise UsageError(f"{option}: {text!r} is ambiguous (Slurm reads minutes, gpulaunch seconds)",
                         hint=f"write {compact}m, or {option} 1:30:00")
    try:
        seconds = parse_duration(compact, option)
    except UsageError as exc:
        if "out of range" in exc.message:
            _too_long(text, option)
        raise
    if not seconds:
        raise UsageError(f"{option}: {text!r} is no limit", hint=f"leave {option} out for none, or give one: {option} 2h")
    minutes = max(1, -(-int(seconds) // 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return Limit(f"{days}-{hours:02d}:{minutes:02d}:00" if days else f"{hours:02d}:{minutes:02d}:00", seconds)


class Limit(str):
    """A ``--time`` value: Slurm's text (``str`` itself, for sbatch, whole minutes) and ``seconds``."""

    seconds: float

    def __new__(cls, text: str, seconds: float) -> Limit:
        made = super().__new__(cls, text)
        made.seconds = seconds
        return made


def _slurm_seconds(form: re.Match[str]) -> int | None:
    """Seconds in a ``D-H[:M[:S]]`` or ``[H:]M:S`` limit (forms of Slurm's ``time_str2secs``,
    src/common/parse_time.c); None when a field is too long to be a time (int() of 5000 digits would raise)."""
    fields = form.groupdict()
    if any(f is not None and len(f) > 12 for f in fields.values()):
        return None

    def number(name: str) -> int:
        return int(fields[name] or 0)

    if fields["d"] is not None:
        days, hours, minutes, seconds = number("d"), number("dh"), number("dm"), number("ds")
    elif fields["c"] is not None:  # H:M:S
        days, hours, minutes, seconds = 0, number("a"), number("b"), number("c")
    else:  # M:S
        days, hours, minutes, seconds = 0, 0, number("a"), number("b")
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _too_long(text: str, option: str) -> None:
    shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "…"
    raise UsageError(f"{option}: {shown} is out of range (at most {MAX_MINUTES // 1440} days)",
                     hint=f"write the job's real limit, e.g. {option} 2d")


@dataclass(frozen=True)
class ArrayRequest:
    """One ``sbatch`` of a job array: what each task needs and how Slurm should run them."""

    job_file: str  # the copy in the log directory, absolute
    log_dir: str  # absolute
    count: int  # M: tasks 1..M
    gpus_per_job: int
    max_running: int | None = None
    partition: str | None = None
    time: str | None = None
    extra: tuple[str, ...] = ()  # --sbatch-arg, last so that they win
    name: str = "gpulaunch-each"
    shell: bool = True  # each line runs through /bin/sh -c (False: --no-shell)


@dataclass(frozen=True)
class Submitted:
    job_id: str  # the array's job id, as squeue shows it (42 for tasks 42_1, 42_2, ...)
    request: ArrayRequest


def write_job_copy(log_dir: str, jobs: Sequence[Job]) -> str:
    """``LOGDIR/jobs.txt`` (jobs.1.txt, ... if taken): job N on line N, each line read back to the same job
    (shell text as written; with --no-shell, words that split back to the same argv)."""
    text = "".join(job.text + "\n" for job in jobs)  # ({n} as written: the task's launch replaces it)
    return write_new(log_dir, "jobs", ".txt", text, 0o644, "job file copies")


def write_new(log_dir: str, stem: str, suffix: str, text: str, mode: int, what: str) -> str:
    """``LOGDIR/STEM.SUFFIX`` (STEM.1.SUFFIX, ... if taken), created for ``text``: nothing there is ever
    overwritten, and a symlink planted at the name is never followed."""
    for attempt in range(1000):
        path = os.path.join(log_dir, f"{stem}{suffix}" if attempt == 0 else f"{stem}.{attempt}{suffix}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path
    raise UsageError(f"log dir {log_dir}: too many {what} in it", hint="use a fresh --log-dir")


def sbatch_argv(req: ArrayRequest, sbatch: str = "sbatch") -> list[str]:
    throttle = f"%{req.max_running}" if req.max_running else ""
    argv = [sbatch, "--parsable", f"--array=1-{req.count}{throttle}", f"--gres=gpu:{req.gpus_per_job}",
            f"--job-name={req.name}", f"--output={os.path.join(req.log_dir, 'slurm-%A_%a.out')}"]
    if req.partition:
        argv.append(f"--partition={req.partition}")
    if req.time:
        argv.append(f"--time={req.time}")
    return argv + list(req.extra)


def batch_script(req: ArrayRequest, python: str = sys.executable) -> str:
    """The batch script: a fixed exec of the task entry; the job lines stay in the copy, unread by any shell."""
    argv = [python, "-m", "gpu_launch", "__slurm-task", req.job_file, req.log_dir, str(req.gpus_per_job),
            *([] if req.shell else ["--no-shell"])]
    return ("#!/bin/sh\n"
            "# gpulaunch each --slurm: array task N runs line N of the job file through `gpulaunch --auto "
            f"{req.gpus_per_job}`\n"
            f"exec {shlex.join(argv)}\n")


#: sbatch options that would make the array something else than gpulaunch's tasks, or submit nothing, so
#: that "done, exit 0" would be reported for work that never ran: the long names (sbatch, like getopt_long,
#: takes any unambiguous prefix: --wra=, --arr=) and the short letters.
_NOT_PASSED_ON = {"--wrap": "it replaces the batch script that runs each job line",
                  "--array": "gpulaunch sets the array: one task a job line (--max-running throttles it)",
                  "--test-only": "it submits nothing",
                  "--wait": "sbatch would wait for the whole array (use --follow)",
                  "--help": "it submits nothing", "--usage": "it submits nothing", "--version": "it submits nothing"}
_NOT_PASSED_ON_ENV = ("SBATCH_WAIT",)  # sbatch's variable for --wait: left out of sbatch's environment
_SHORT_NOT_PASSED_ON = {"a": "--array", "W": "--wait", "h": "--help", "u": "--usage", "V": "--version"}
_SHORT_FLAGS = set("hHIOQsuvVW")  # sbatch's short options that take no value (the rest take the word's rest)


def check_extra(extra: Sequence[str], option: str = "--sbatch-arg") -> None:
    """Refuse sbatch arguments that would replace the batch script or the array, or submit nothing."""
    for arg in extra:
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            hit = next((full for full in _NOT_PASSED_ON if len(name) > 2 and full.startswith(name)), None)
        elif arg.startswith("-") and len(arg) > 1:
            hit = None
            for letter in arg[1:]:
                if letter in _SHORT_NOT_PASSED_ON:
                    hit = _SHORT_NOT_PASSED_ON[letter]
                    break
                if letter not in _SHORT_FLAGS:  # an option with a value: the rest of the word is it
                    break
        else:
            hit = None
        if hit is not None:
            shown = repr(arg) if len(arg) <= 40 else repr(arg[:37]) + "…"
            raise UsageError(f"{option} {printable(shown)}: gpulaunch cannot pass {hit} on to sbatch: "
                             f"{_NOT_PASSED_ON[hit]}", hint="leave it out; `gpulaunch help each` lists what each "
                             "--slurm sets itself")


def require(name: str, environ: Mapping[str, str]) -> str:
    """The path of Slurm's command ``name``; SlurmUnavailable (exit 3) when it is not on PATH."""
    path = shutil.which(name, path=environ.get("PATH", os.defpath))
    if path is None:
        raise SlurmUnavailable(f"Slurm is not available: no {name} on PATH", hint=_NO_SLURM_HINT)
    return path


def one_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no message"
    errors = [line for line in lines if "error" in line.lower()] or lines
    return re.sub(r"^(sbatch|scontrol|scancel): error: ", "", errors[-1])


def submit(req: ArrayRequest, environ: Mapping[str, str]) -> Submitted:
    """Run sbatch; SlurmUnavailable without it, UsageError with sbatch's own message when it refuses."""
    argv = sbatch_argv(req, require("sbatch", environ))
    return Submitted(run_sbatch(argv, batch_script(req), environ, req.name, "the job array",
                                "--gpus-per-job"), req)


def run_sbatch(argv: Sequence[str], script: str | None, environ: Mapping[str, str], name: str, what: str,
               sizes: str) -> str:
    """Run ``argv`` (sbatch ..., the script on stdin when given): the job's id. SlurmUnavailable when no
    cluster answers; UsageError with sbatch's own message (about ``what``) when it refuses."""
    try:
        proc = subprocess.run(list(argv), input=script, capture_output=True, text=True, timeout=120,
                              env={k: v for k, v in environ.items() if k not in _NOT_PASSED_ON_ENV})
    except subprocess.TimeoutExpired:  # (it may have submitted the job all the same: say so)
        raise SlurmUnavailable(f"sbatch did not answer within 2 minutes; {what} may have been submitted",
                               hint=f"look with `squeue --me -n {name}`; is slurmctld up? try `sinfo`") from None
    if proc.returncode != 0:
        message = one_line(proc.stderr or proc.stdout)
        if any(sign in message.lower() for sign in _UNREACHABLE):
            raise SlurmUnavailable(f"Slurm is not available: sbatch says {message}",
                                   hint="is this machine part of a Slurm cluster? `sinfo` should answer")
        raise UsageError(f"sbatch refused {what}: {message}",
                         hint=f"check --partition, --time, {sizes} and --sbatch-arg against `sinfo`")
    job_id = proc.stdout.strip().split(";")[0]
    if not (job_id.isascii() and job_id.isdigit()):
        said = printable(repr(proc.stdout.strip()[:60])) if proc.stdout.strip() else \
            f"nothing on stdout ({printable(one_line(proc.stderr))})"
        raise GpuLaunchError(f"sbatch answered {said}, not a job id: nothing to follow",
                             hint=f"look with `squeue --me -n {name}`; submit by hand with sbatch to see what "
                                  "it says")
    return job_id


def cancel(job_id: str, environ: Mapping[str, str]) -> str | None:
    """scancel the whole array; None, or scancel's complaint in one line (the array exists: never an error
    that would read as "Slurm is not available" for work that was submitted)."""
    try:
        proc = subprocess.run([require("scancel", environ), job_id], capture_output=True, text=True, timeout=60,
                              env=dict(environ))
    except SlurmUnavailable as exc:
        return exc.message
    except (subprocess.TimeoutExpired, OSError) as exc:
        return f"scancel did not run ({exc})"
    return None if proc.returncode == 0 else one_line(proc.stderr)
