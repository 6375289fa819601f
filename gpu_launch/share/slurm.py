"""Slurm as the engine of ``gpulaunch each --slurm``: one job array, gpulaunch's placement inside each task.

Submitting: the validated jobs are written, one normalised line each (``shlex.join``, placeholders
as written, which the job file's splitting reads back to the same argv), to a copy of the job file in the log directory, and
``sbatch --array=1-M%K --gres=gpu:N`` gets a fixed batch script on stdin. The script holds no job
line: it execs ``python -m gpu_launch __slurm-task COPY LOGDIR N``, and that task (:func:`task_main`)
reads line ``$SLURM_ARRAY_TASK_ID`` of the copy itself, opens ``LOGDIR/job-N.log`` (never
overwriting), and runs the line through ``gpulaunch --auto N`` as a child, so the allocation's GPUs
are subdivided by topology, the mapping is logged and ``{n}``/``{gpus}`` work. No shell reads a job line.

Following: ``scontrol show job -o`` gives every array task's state, node, times and exit code while
Slurm remembers the job (``MinJobAge``, 300 s by default); ``sacct`` fills in the tasks Slurm has
forgotten when the cluster keeps accounting (it needs slurmdbd). Each task also writes a small JSON
record in ``LOGDIR/.slurm/`` (its log file, its GPUs, its exit code), which is where the log name and
the command's own exit status come from.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_launch.errors import GpuLaunchError, SlurmUnavailable, UsageError
from gpu_launch.run import placeholders
from gpu_launch.share.jobfile import Job, JobState, command_text, open_log, read_jobs
from gpu_launch.text import printable
from gpu_launch.units import MAX_SECONDS, parse_duration

__all__ = ["ArrayRequest", "Submitted", "TaskStatus", "parse_time", "write_job_copy", "sbatch_argv", "batch_script",
           "require", "check_extra", "submit", "query", "cancel", "task_main", "Follower", "RECORDS"]

RECORDS = ".slurm"  # the tasks' records, inside the log directory
_RECORD_GRACE = 10.0  # seconds a running task may take to write its record before it is shown without one
#: Slurm's own forms: days-hours[:minutes[:seconds]], or [hours:]minutes:seconds (ASCII digits: not '٣')
_SLURM_TIME = re.compile(r"^(?:(?P<d>[0-9]+)-(?P<dh>[0-9]+)(?::(?P<dm>[0-9]+)(?::(?P<ds>[0-9]+))?)?"
                         r"|(?P<a>[0-9]+):(?P<b>[0-9]+)(?::(?P<c>[0-9]+))?)$")
MAX_MINUTES = int(MAX_SECONDS // 60)  # the longest --time: a year, as for every duration
_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED", "STOPPED"}
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING"}
_WHY = {"CANCELLED": "cancelled", "TIMEOUT": "time limit reached", "NODE_FAIL": "node failed",
        "OUT_OF_MEMORY": "out of memory", "PREEMPTED": "preempted", "BOOT_FAIL": "node failed to boot",
        "DEADLINE": "deadline reached", "REVOKED": "revoked"}
#: sbatch's words for "no cluster to talk to", as opposed to "this request is wrong"
_UNREACHABLE = ("unable to contact slurm controller", "failed to fetch config", "could not establish a configuration",
                "connection refused", "unable to establish", "slurm.conf")
#: The task's launch chooses among exactly the GPUs Slurm allotted: defaults meant for choosing on a
#: shared machine (a config file's exclude = "0", GPULAUNCH_MIN_FREE=...) would only make it fail.
_NO_CONSTRAINTS = {"GPULAUNCH_CONFIG": "", "GPULAUNCH_MIN_FREE": "", "GPULAUNCH_MAX_UTIL": "", "GPULAUNCH_IDLE": "",
                   "GPULAUNCH_EXCLUDE": "", "GPULAUNCH_MIG": ""}
_NO_SLURM_HINT = ("run it on a Slurm login node (or `module load slurm`); without --slurm, `each` runs the jobs "
                  "on this machine")


def parse_time(text: str, option: str = "--time") -> str:
    """A Slurm time limit from ``30m``/``2h``/``1d`` (rounded up to whole minutes) or Slurm's own ``H:MM:SS``, ``D-HH``.

    At most :data:`MAX_MINUTES`, a year, as every duration gpulaunch takes: Slurm itself takes far more
    and then wraps silently (its limit is minutes in 32 bits, the top two values meaning "unlimited"
    and "not set": ``--time=3000000-00:00:00`` became ``17383-19:44:00`` on Slurm 22.05).
    """
    compact = text.strip()
    slurm_form = _SLURM_TIME.match(compact)
    if slurm_form:
        minutes = _slurm_minutes(slurm_form)
        if minutes is None or minutes > MAX_MINUTES:
            _too_long(text, option)
        return compact
    if compact.isdigit():
        raise UsageError(f"{option}: {text!r} is ambiguous (Slurm reads minutes, gpulaunch seconds)",
                         hint=f"write {compact}m, or {option} 1:30:00")
    try:
        seconds = parse_duration(compact, option)
    except UsageError as exc:
        if "out of range" in exc.message:
            _too_long(text, option)
        raise
    minutes = max(1, -(-int(seconds) // 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:00" if days else f"{hours:02d}:{minutes:02d}:00"


def _slurm_minutes(form: re.Match[str]) -> int | None:
    """Minutes in a ``D-H[:M[:S]]`` or ``[H:]M:S`` limit, seconds rounded up as Slurm does; None when a
    field is too long to be a time (int() of 5000 digits would raise)."""
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
    return (days * 24 + hours) * 60 + minutes + -(-seconds // 60)


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


@dataclass(frozen=True)
class Submitted:
    job_id: str  # the array's job id, as squeue shows it (42 for tasks 42_1, 42_2, ...)
    request: ArrayRequest


def write_job_copy(log_dir: str, jobs: Sequence[Job]) -> str:
    """``LOGDIR/jobs.txt`` (jobs.1.txt, ... if taken): job N on line N, each line read back to the same argv."""
    text = "".join(job.text + "\n" for job in jobs)  # ({n} as written: the task's launch replaces it)
    for attempt in range(1000):
        path = os.path.join(log_dir, "jobs.txt" if attempt == 0 else f"jobs.{attempt}.txt")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path
    raise UsageError(f"log dir {log_dir}: too many job file copies in it", hint="use a fresh --log-dir")


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
    argv = [python, "-m", "gpu_launch", "__slurm-task", req.job_file, req.log_dir, str(req.gpus_per_job)]
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


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no message"
    errors = [line for line in lines if "error" in line.lower()] or lines
    return re.sub(r"^(sbatch|scontrol|scancel): error: ", "", errors[-1])


def submit(req: ArrayRequest, environ: Mapping[str, str]) -> Submitted:
    """Run sbatch; SlurmUnavailable without it, UsageError with sbatch's own message when it refuses."""
    argv = sbatch_argv(req, require("sbatch", environ))
    try:
        proc = subprocess.run(argv, input=batch_script(req), capture_output=True, text=True, timeout=120,
                              env=dict(environ))
    except subprocess.TimeoutExpired:  # (it may have submitted the array all the same: say so)
        raise SlurmUnavailable("sbatch did not answer within 2 minutes; the job array may have been submitted",
                               hint=f"look with `squeue --me -n {req.name}`; is slurmctld up? try `sinfo`") from None
    if proc.returncode != 0:
        message = _one_line(proc.stderr or proc.stdout)
        if any(sign in message.lower() for sign in _UNREACHABLE):
            raise SlurmUnavailable(f"Slurm is not available: sbatch says {message}",
                                   hint="is this machine part of a Slurm cluster? `sinfo` should answer")
        raise UsageError(f"sbatch refused the job array: {message}",
                         hint="check --partition, --time, --gpus-per-job and --sbatch-arg against `sinfo`")
    job_id = proc.stdout.strip().split(";")[0]
    if not (job_id.isascii() and job_id.isdigit()):
        said = printable(repr(proc.stdout.strip()[:60])) if proc.stdout.strip() else \
            f"nothing on stdout ({printable(_one_line(proc.stderr))})"
        raise GpuLaunchError(f"sbatch answered {said}, not a job id: nothing to follow",
                             hint=f"look with `squeue --me -n {req.name}`; submit by hand with sbatch to see what "
                                  "it says")
    return Submitted(job_id, req)


def cancel(job_id: str, environ: Mapping[str, str]) -> str | None:
    """scancel the whole array; None, or scancel's complaint in one line."""
    proc = subprocess.run([require("scancel", environ), job_id], capture_output=True, text=True, timeout=60,
                          env=dict(environ))
    return None if proc.returncode == 0 else _one_line(proc.stderr)


# --------------------------------------------------------------------------------------------- state

@dataclass(frozen=True)
class TaskStatus:
    """One array task as Slurm reports it."""

    task: int
    state: str  # Slurm's: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    exit_code: int | None = None
    signal: int | None = None
    node: str = ""
    start: float | None = None  # seconds since the epoch
    end: float | None = None
    reason: str = ""


def _task_ids(text: str) -> list[int]:
    """``3`` / ``4-6%3`` / ``1,3-5`` -> the task numbers."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.extend(range(int(low), int(high or low) + 1))
    return out


def _epoch(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # Unknown, None, N/A
        return None


def _exit(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    return (int(code) if code.isdigit() else None), (int(sig) if sig.isdigit() and sig != "0" else None)


def parse_scontrol(output: str) -> dict[int, TaskStatus]:
    """``scontrol show job -o ARRAY`` -> each task's status (a pending range expands to its tasks)."""
    out: dict[int, TaskStatus] = {}
    for line in output.splitlines():
        fields = dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", line))
        if "ArrayTaskId" not in fields:
            continue
        code, sig = _exit(fields.get("ExitCode", ""))
        node = fields.get("NodeList", "")
        for task in _task_ids(fields["ArrayTaskId"]):
            out[task] = TaskStatus(task, fields.get("JobState", "UNKNOWN"), code, sig,
                                   "" if node in ("(null)", "None") else node, _epoch(fields.get("StartTime", "")),
                                   _epoch(fields.get("EndTime", "")), fields.get("Reason", ""))
    return out


def parse_sacct(output: str, job_id: str) -> dict[int, TaskStatus]:
    """``sacct -n -P -X -o JobID,State,ExitCode,NodeList,Start,End`` lines of the array's tasks."""
    out: dict[int, TaskStatus] = {}
    for line in output.splitlines():
        parts = line.split("|")
        if len(parts) < 6 or not parts[0].startswith(f"{job_id}_"):
            continue
        code, sig = _exit(parts[2])
        for task in _task_ids(parts[0].split("_", 1)[1].strip("[]")):
            out[task] = TaskStatus(task, parts[1].split()[0] if parts[1] else "UNKNOWN", code, sig,
                                   "" if parts[3] in ("None assigned", "") else parts[3], _epoch(parts[4]),
                                   _epoch(parts[5]))
    return out


def query(job_id: str, environ: Mapping[str, str], missing: Sequence[int] = ()) -> dict[int, TaskStatus] | None:
    """The array's tasks that Slurm knows; ``sacct`` is asked (when it works) for ``missing`` ones that scontrol lost.

    None when slurmctld did not answer (a timeout, a restart): ask again later rather than conclude anything.
    """
    env = dict(environ)
    try:
        proc = subprocess.run([require("scontrol", environ), "show", "job", "-o", job_id], capture_output=True,
                              text=True, timeout=60, env=env)
    except (subprocess.TimeoutExpired, OSError):  # (OSError: it went away since `which` found it)
        return None
    if proc.returncode != 0 and "invalid job id" not in proc.stderr.lower():
        return None
    found = parse_scontrol(proc.stdout) if proc.returncode == 0 else {}
    lost = [t for t in missing if t not in found]
    if lost and shutil.which("sacct", path=environ.get("PATH", os.defpath)):
        try:
            acct = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o",
                                   "JobID,State,ExitCode,NodeList,Start,End"], capture_output=True, text=True,
                                  timeout=60, env=env)
        except (subprocess.TimeoutExpired, OSError):
            return found
        if acct.returncode == 0:
            for task, status in parse_sacct(acct.stdout, job_id).items():
                found.setdefault(task, status)
    return found


# ------------------------------------------------------------------------------------- the task side

def record_path(log_dir: str, job_id: str, task: int) -> str:
    return os.path.join(log_dir, RECORDS, f"{job_id}_{task}.json")


def _write_record(path: str, record: Mapping[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def read_record(log_dir: str, job_id: str, task: int) -> dict[str, Any]:
    try:
        with open(record_path(log_dir, job_id, task), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _small_number(text: str) -> int | None:
    """``text`` as a number when it is ASCII digits of a sane length ('²'.isdigit() is True, int('²') fails)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def task_main(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """``python -m gpu_launch __slurm-task COPY LOGDIR N``, the batch script of each array task.

    Reads job ``$SLURM_ARRAY_TASK_ID`` of COPY, sends this process's output to LOGDIR/job-N.log,
    records where and on which GPUs it runs, runs ``gpulaunch --auto N -- ARGV`` as a child and waits:
    the child chooses within the allocation (the CUDA_VISIBLE_DEVICES slurmd set), reserves, tells the
    mapping (into the log) and execs the command. The child's status becomes this task's.
    """
    if len(argv) != 3 or _small_number(argv[2]) is None:
        raise UsageError("__slurm-task needs JOBFILE LOGDIR GPUS", hint="it is run by `gpulaunch each --slurm`")
    job_file, log_dir, gpus = argv
    task_text = environ.get("SLURM_ARRAY_TASK_ID", "")
    number = _small_number(task_text)
    if number is None:
        shown = repr(task_text[:40]) if task_text else "none"
        raise UsageError(f"__slurm-task runs inside a Slurm job array task (SLURM_ARRAY_TASK_ID: {shown})",
                         hint="it is run by `gpulaunch each --slurm`")
    jobs, _ = read_jobs(job_file, None)  # the copy written at submission, read like any job file
    if not 1 <= number <= len(jobs):
        raise UsageError(f"{job_file}: no job {number} (it has {len(jobs)})")
    job = jobs[number - 1]
    fd, log = open_log(log_dir, job.number)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    job_id = environ.get("SLURM_ARRAY_JOB_ID") or environ.get("SLURM_JOB_ID", "0")
    os.makedirs(os.path.join(log_dir, RECORDS), exist_ok=True)
    where = record_path(log_dir, job_id, number)
    allocation = environ.get("SLURM_JOB_GPUS") or environ.get("CUDA_VISIBLE_DEVICES", "")
    record: dict[str, Any] = {"job": number, "log": log, "node": environ.get("SLURMD_NODENAME", os.uname().nodename),
                              "gpus": allocation, "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
                              "started": time.time()}
    _write_record(where, record)
    ran = command_text(placeholders.substitute(job.argv, int(gpus)))  # as the child's launch replaces them
    print(f"gpulaunch each --slurm: job {number}/{len(jobs)} as Slurm job {printable(job_id)}_{number} on "
          f"{printable(record['node'])}, allocation GPUs {printable(allocation) or '(none)'}: {printable(ran)}",
          file=sys.stderr, flush=True)
    child = [sys.executable, "-m", "gpu_launch", "--auto", gpus, "--", *job.argv]
    def forward(signum: int, frame: object) -> None:
        """``scancel --batch --signal=USR1``, sbatch's ``--signal=B:...``: only this shell's stand-in gets them."""
        try:
            proc.send_signal(signum)
        except (ProcessLookupError, NameError):
            pass

    for sig in (signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    # A cancellation or time limit sends SIGTERM to every process of the job, the command included:
    # not passed on a second time; this process only outlives it to record how the command ended.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    proc = subprocess.Popen(child, stdin=subprocess.DEVNULL, env={**environ, **_NO_CONSTRAINTS})
    returncode = proc.wait()
    record.update(ended=time.time(), returncode=returncode)
    _write_record(where, record)
    if returncode < 0:  # die of the same signal, so that Slurm reports it as the command's
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return returncode


# -------------------------------------------------------------------------------------- following

class Follower:
    """Polls the array and keeps one :class:`JobState` a job, for the same view as the local ``each``."""

    def __init__(self, submitted: Submitted, jobs: Sequence[Job], view: Any, environ: Mapping[str, str],
                 interval: float) -> None:
        self.submitted = submitted
        self.states = [JobState(job) for job in jobs]
        self.view = view
        self.environ = environ
        self.interval = interval
        self.running: list[JobState] = []
        self.stopping = 0
        self._gone = 0  # polls in a row in which Slurm knew none of the unfinished tasks

    @property
    def finished(self) -> bool:
        return all(s.status in ("done", "failed", "not started") for s in self.states)

    def poll(self) -> None:
        job_id = self.submitted.job_id
        unfinished = [s.job.number for s in self.states if s.status in ("queued", "running")]
        statuses = query(job_id, self.environ, missing=unfinished)
        if statuses is None:
            return
        if unfinished and not any(n in statuses for n in unfinished):
            self._gone += 1
        else:
            self._gone = 0
        for state in self.states:
            if state.status not in ("queued", "running"):
                continue
            status = statuses.get(state.job.number)
            record = read_record(self.submitted.request.log_dir, job_id, state.job.number)
            if status is None:
                if "returncode" in record:
                    status = TaskStatus(state.job.number, "COMPLETED" if record["returncode"] == 0 else "FAILED")
                elif self._gone >= 3:
                    status = TaskStatus(state.job.number, "UNKNOWN", reason="Slurm no longer knows this task")
                else:
                    continue
            self._update(state, status, record)
        self.view.refresh(self)

    def _update(self, state: JobState, status: TaskStatus, record: Mapping[str, Any]) -> None:
        state.node = status.node or record.get("node", "") or state.node
        state.gpus = record.get("gpus", "") or state.gpus
        state.log = record.get("log", "") or state.log
        if status.state in _PENDING:  # (its StartTime is only Slurm's guess)
            return
        now_wall, now_mono = time.time(), time.monotonic()
        start = record.get("started") or status.start
        if start is not None:
            state.started = now_mono - max(0.0, now_wall - start)
        if status.state in _RUNNING and "returncode" not in record:
            if not record and status.start is not None and now_wall - status.start < _RECORD_GRACE:
                return  # the task is starting up: announce it with its log and GPUs, from its record
            if state.status != "running":
                state.argv = self._ran(state)
                state.status = "running"
                self.running.append(state)
                self.view.started(self, state)
            return
        # Ended: the command's own status from the task's record, else Slurm's.
        if status.state == "CANCELLED" and not record and state.status == "queued":
            state.status, state.note = "not started", "cancelled before it started"
            state.started = None
            self.view.finished(self, state)
            return
        state.argv = self._ran(state)
        if state.status == "queued" and state.started is not None:
            state.status = "running"
            self.running.append(state)
            self.view.started(self, state)
        end = record.get("ended") or status.end or now_wall
        state.ended = now_mono - max(0.0, now_wall - end)
        if state.started is None:
            state.started = state.ended
        if status.state in _WHY or status.state == "UNKNOWN":
            state.returncode = None
            state.note = _WHY.get(status.state, status.reason or status.state.lower())
        elif "returncode" in record:
            state.returncode = int(record["returncode"])
        elif status.signal:
            state.returncode = -status.signal
        else:
            state.returncode = status.exit_code if status.exit_code is not None else 1
        state.status = "done" if state.returncode == 0 else "failed"
        if state in self.running:
            self.running.remove(state)
        self.view.finished(self, state)


    def _ran(self, state: JobState) -> tuple[str, ...]:
        """The command the task ran: its ``gpulaunch --auto K`` replaced ``{n}`` and ``{gpus}`` for K GPUs."""
        return placeholders.substitute(state.job.argv, self.submitted.request.gpus_per_job)


def follow(follower: Follower, timeout: float | None, cancel_on_interrupt: bool, can_ask: bool) -> str:
    """Poll until every task has ended: ``"ended"``; or ``"timeout"`` (``--wait TIMEOUT`` ran out),
    ``"cancelled"`` (Ctrl-C, and the array was scancelled) or ``"detached"`` (Ctrl-C, the jobs go on).

    Ctrl-C (or SIGTERM) asks whether to cancel when ``can_ask`` (stdin is a terminal) and
    ``--cancel-on-interrupt`` was not given; with it, cancels; otherwise leaves the jobs running.
    """
    received: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: received.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = time.monotonic() + timeout if timeout is not None and timeout != float("inf") else None
    outcome = "ended"
    try:
        while True:
            follower.poll()
            if follower.finished:
                return outcome
            if received and outcome == "ended":
                outcome = _interrupted(follower, received, cancel_on_interrupt, can_ask)
                if outcome == "detached":
                    return outcome
                deadline = time.monotonic() + 90  # cancelled: wait for Slurm to end the tasks, not for ever
                received.clear()
            elif received:  # a second Ctrl-C while cancelling: stop waiting
                return outcome
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout" if outcome == "ended" else outcome
            until = time.monotonic() + follower.interval
            while time.monotonic() < until and not received:
                time.sleep(min(0.1, follower.interval))
                follower.view.refresh(follower)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        _tidy(follower)


def _tidy(follower: Follower) -> None:
    """Remove the ended tasks' empty ``slurm-ID_N.out`` (Slurm's own messages: a cancellation, a time limit)."""
    req = follower.submitted.request
    for state in follower.states:
        if state.status in ("done", "failed", "not started"):
            path = os.path.join(req.log_dir, f"slurm-{follower.submitted.job_id}_{state.job.number}.out")
            try:
                if os.path.getsize(path) == 0:
                    os.unlink(path)
            except OSError:
                pass


def _interrupted(follower: Follower, received: list[int], cancel_on_interrupt: bool, can_ask: bool) -> str:
    job_id = follower.submitted.job_id
    left = sum(1 for s in follower.states if s.status in ("queued", "running"))
    if cancel_on_interrupt:
        wanted = True
    elif can_ask and received[-1] == signal.SIGINT:
        wanted = follower.view.ask(f"cancel Slurm job array {job_id} ({left} job{'s' if left != 1 else ''} "
                                   "not finished)? [y/N] ")
    else:
        wanted = False
    if not wanted:
        return "detached"
    follower.stopping = 1
    complaint = cancel(job_id, follower.environ)
    if complaint is not None:
        follower.view.say(f"scancel {job_id} failed: {complaint}")
        return "detached"
    follower.view.say(f"cancelled Slurm job array {job_id} (scancel {job_id}); waiting for its tasks to end")
    return "cancelled"
