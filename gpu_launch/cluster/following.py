"""Following ``gpulaunch each --slurm``'s job array: each task's state, and the same view as a local ``each``.

``scontrol show job -o`` gives every array task's state, node, times and exit code while Slurm
remembers the job (``MinJobAge``, 300 s by default); ``sacct`` fills in the tasks Slurm has forgotten
when the cluster keeps accounting (it needs slurmdbd). Each task also writes a small JSON record in
``LOGDIR/.slurm/`` (:mod:`.task`: its log file, its GPUs, its exit code), which is where the log name
and the command's own exit status come from.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_launch.sweeps.jobfile import Job, JobState
from gpu_launch.cluster.submitting import Submitted, cancel, require
from gpu_launch.cluster.task import read_record

__all__ = ["ENDED", "ENDED_BY_SLURM", "TaskStatus", "parse_scontrol", "parse_sacct", "query", "Follower", "follow"]

_RECORD_GRACE = 10.0  # seconds a running task may take to write its record before it is shown without one
_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED", "STOPPED"}
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING"}
#: A job's statuses once it has ended (``timeout``: Slurm ended it at its time limit)
ENDED = ("done", "failed", "timeout", "not started")
#: Why Slurm ended a job or task, in words (for an array task and for a several-node job alike).
ENDED_BY_SLURM = {"CANCELLED": "cancelled", "TIMEOUT": "time limit reached", "NODE_FAIL": "a node failed",
                  "OUT_OF_MEMORY": "out of memory", "PREEMPTED": "preempted", "BOOT_FAIL": "a node failed to boot",
                  "DEADLINE": "deadline reached", "REVOKED": "revoked"}


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
    limit: str = ""  # its time limit as scontrol says it (TimeLimit=00:01:00), "" when not known


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
                                   _epoch(fields.get("EndTime", "")), fields.get("Reason", ""),
                                   fields.get("TimeLimit", ""))
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
        return all(s.status in ENDED for s in self.states)

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
        if status.state == "TIMEOUT":  # ended at its time limit: a timeout, counted apart, as a local `each` counts it
            state.returncode = _timeout_code(status, record)
            state.note = self._timeout_note(status, state.returncode)
            state.status = "timeout"
            if state in self.running:
                self.running.remove(state)
            self.view.finished(self, state)
            return
        if status.state in ENDED_BY_SLURM or status.state == "UNKNOWN":
            state.returncode = None
            state.note = ENDED_BY_SLURM.get(status.state, status.reason or status.state.lower())
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

    def _timeout_note(self, status: TaskStatus, returncode: int) -> str:
        """``timeout: Slurm ended it at its time limit (00:01:00): SIGTERM, then SIGKILL after the cluster's
        KillWait``: the words of a local ``each`` (:mod:`gpu_launch.sweeps.limits`), the grace Slurm's."""
        limit = status.limit if status.limit not in ("", "UNLIMITED", "Partition_Limit") else \
            (self.submitted.request.time or "")
        shown = f" ({limit})" if limit else ""
        how = "then SIGKILL after the cluster's KillWait" if returncode == -signal.SIGKILL else \
            "then it ended"
        return f"timeout: Slurm ended it at its time limit{shown}: SIGTERM, {how}"

    def _ran(self, state: JobState) -> tuple[str, ...]:
        """The command the task ran: its ``gpulaunch --auto K`` replaced ``{n}`` and ``{gpus}`` for K GPUs."""
        return state.job.command(self.submitted.request.gpus_per_job)


def _timeout_code(status: TaskStatus, record: Mapping[str, Any]) -> int:
    """How a task Slurm ended at its time limit ended: the command's own status from the task's record (-15: it
    died of the SIGTERM), else Slurm's: at the limit slurmd sends SIGTERM to every process of the job, then
    SIGKILL once the cluster's ``KillWait`` is over (slurm.conf(5)), which kills the task entry too, before it
    writes its record (``ExitCode=0:9``, as tests/test_each_slurm.py sees it on Slurm 22.05)."""
    if "returncode" in record:
        return int(record["returncode"])
    if status.signal:
        return -status.signal
    return status.exit_code if status.exit_code is not None else -signal.SIGTERM  # (none known: what came first)


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
        if state.status in ENDED:
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
