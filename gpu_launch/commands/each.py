"""``gpulaunch each``: run a list of commands, each on its own free GPUs, as GPUs free up.

The job file has one command a line, split like a shell would split it (``shlex``) but never run
through a shell; blank lines and ``#`` comments are skipped; ``-`` or no file reads stdin.

Design: this process is the scheduler. For the next job it selects and locks ``--gpus-per-job``
GPUs exactly as a launch does (only among the GPUs a parent's CUDA_VISIBLE_DEVICES allows) (:func:`gpu_launch.share.acquire.attempt`: same constraints, reserved
GPUs skipped, first come first served with other waiters through a queue ticket), then starts the
job with those lock descriptors passed to it (``pass_fds``), writes the job's pid into the lock
files and closes its own copies. From then on the *job* holds its reservation: it ends when the
job exits, crashes or is killed, whatever happens to this scheduler. So no two jobs (of this
sweep, or anyone's gpulaunch) are ever on one GPU, and ``gpulaunch ls`` shows each job's pid.

A sweep is polite: it waits for GPUs free for its jobs, never putting one on a GPU that is busy or
full with someone's work (``--max-util`` sets the user's own bar instead). Inside a job (``gpulaunch
--gpus 2,3 -- gpulaunch each jobs.txt``, a Slurm step, a process that called ``gpu_launch.use()``),
the job's GPUs are its allotment: whatever their load they are the sweep's, shared out among its jobs
one level deeper (:mod:`gpu_launch.share.nesting`), so two jobs never share one; and it waits without
a ticket in the machine's queue, where it could stand behind someone waiting for its own job's GPUs.

The loop sleeps until something happens: a job's end (SIGCHLD) or Ctrl-C wakes it at once through
the interpreter's wake-up pipe, so a GPU is handed to the next job within milliseconds; only GPUs
freed by others are looked for every ``GPULAUNCH_POLL_INTERVAL``.

Each job runs in its own process group with stdin from /dev/null, and its stdout and stderr go to
``--log-dir``/job-N.log (N is the job's number, 1-based, in file order); an existing file is never
overwritten (job-N.1.log, job-N.2.log, … are used instead). Ctrl-C (or SIGTERM) stops launching,
sends the same signal to every running job's process group and waits for them; a second one sends
SIGKILL. Exit status: 0 when every job exited 0; 9 (``ExitCode.JOBS_FAILED``) when any job failed
or could not start; 130 when interrupted.

With ``--slurm`` the same checked job file becomes one Slurm job array instead (:func:`submit_to_slurm`;
the Slurm side, task entry and following are in :mod:`gpu_launch.cluster`), each task running its
line through ``gpulaunch --auto K`` inside its allocation; ``--follow`` shows it with the same view.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpu_launch.share import acquire, waiting
from gpu_launch.share.jobfile import Job, JobState, default_log_dir, open_log, parse_jobs, read_jobs
from gpu_launch.errors import (GpuLaunchError, Interrupted, JobsFailed, NotEnoughGpus, ReservationConflict,
                               UsageError)
from gpu_launch.hardware.model import Machine

__all__ = ["Job", "JobState", "parse_jobs", "read_jobs", "run", "schedule", "default_log_dir", "open_log"]

_REFRESH_EVERY = 0.25  # seconds between redraws of the live view while nothing else happens


class _Signals:
    """Turns SIGINT/SIGTERM into a counter the loop reads, so a signal never lands mid-spawn; and wakes
    the loop the moment one arrives or a job ends (SIGCHLD), through the interpreter's wake-up pipe,
    so finished jobs are reaped at once instead of at the next tick of a polling interval."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._old: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None
        self._old_wakeup = -1

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe = (read_end, write_end)
        # The C-level handler writes the signal's number to the pipe at once, even while this thread
        # blocks in select(): a job that ends between the reap and the wait is never missed.
        self._old_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._old[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._child)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_wakeup)
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def _handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)

    def _child(self, signum: int, frame: object) -> None:
        """A job ended: the wake-up byte is what matters; reaping happens in the loop."""

    def wait(self, timeout: float) -> None:
        """Sleep until a signal (a job's end, Ctrl-C) arrives or ``timeout`` seconds pass."""
        import select

        assert self._pipe is not None
        ready, _, _ = select.select([self._pipe[0]], [], [], max(0.0, timeout))
        if ready:
            try:
                while os.read(self._pipe[0], 512):
                    pass
            except BlockingIOError:
                pass


class Scheduler:
    """Starts queued jobs as GPUs free up; see the module docstring."""

    def __init__(self, jobs: Sequence[Job], request: acquire.Request, locking: acquire.Locking,
                 read: Callable[[], Machine], log_dir: str, view: Any, environ: Mapping[str, str],
                 chooser: acquire.Chooser = acquire.plain_chooser) -> None:
        self.states = [JobState(job) for job in jobs]
        self.pending: deque[JobState] = deque(self.states)
        self.running: list[JobState] = []
        self.request = request
        self.locking = locking
        self.read = read
        self.log_dir = log_dir
        self.view = view
        self.environ = environ
        self.chooser = chooser
        self.interval = waiting.poll_interval(environ)
        self.ticket: Any = None
        #: inside a job's allotment: no ticket in the machine's queue (acquire.inside_allotment says why)
        self.queue = True
        self.stopping = 0  # signals received

    def run(self) -> None:
        next_try = 0.0
        with _Signals() as signals:
            try:
                while self.pending and not self.stopping or self.running:
                    while len(signals.received) > self.stopping:
                        self._stop(signals.received[self.stopping])
                    if self._reap():
                        next_try = 0.0
                    if self.pending and not self.stopping and time.monotonic() >= next_try:
                        self._start_what_fits()
                        # Jobs of ours ending wake us at once; GPUs others free are looked for every interval.
                        next_try = time.monotonic() + self.interval
                    self.view.refresh(self)
                    if not (self.pending and not self.stopping or self.running):
                        break
                    if self._reap():  # ended while we were starting others: no sleep
                        next_try = 0.0
                        continue
                    timeout = next_try - time.monotonic() if self.pending and not self.stopping else 3600.0
                    if getattr(self.view, "_live", None) is not None:
                        timeout = min(timeout, _REFRESH_EVERY)
                    signals.wait(timeout)
            finally:
                self._leave_queue()
        for state in self.pending:
            state.status, state.note = "not started", "interrupted before it started"

    def _leave_queue(self) -> None:
        if self.ticket is not None:
            self.ticket.leave()
            self.ticket = None

    def _stop(self, signum: int) -> None:
        """First signal: stop launching, forward it to the jobs. Later ones: SIGKILL the jobs."""
        self.stopping += 1
        self._leave_queue()
        forward = signum if self.stopping == 1 else signal.SIGKILL
        self.view.stopping(self, signal.Signals(forward).name)
        for state in self.running:
            try:
                os.killpg(state.proc.pid, forward)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self) -> bool:
        finished = [s for s in self.running if s.proc.poll() is not None]
        for state in finished:
            self.running.remove(state)
            state.ended = time.monotonic()
            state.returncode = state.proc.returncode
            state.status = "done" if state.returncode == 0 else "failed"
            self.view.finished(self, state)
        return bool(finished)

    def _start_what_fits(self) -> None:
        from gpu_launch.share.waitqueue import Ticket

        machine = None
        while self.pending:
            if self.ticket is None and self.queue:
                self.ticket = Ticket(self.locking.lock_dir)
                self.ticket.join()
            if self.ticket is not None and self.ticket.ahead() > 0:
                return
            if machine is None:  # once a round: the locks, re-read for every job, say who holds what
                machine = self.read()
            try:
                got = acquire.attempt(self.request, machine, self.locking, self.chooser)
            except (NotEnoughGpus, ReservationConflict):
                self.view.waiting(self, self.request.what(machine))
                return
            self._leave_queue()
            self._spawn(self.pending.popleft(), got)
            elig = got.selection.eligibility
            if self.pending and elig is not None and len(elig.eligible) < 2 * len(got.selection.devices):
                # What was eligible a moment ago, less this job's: not enough for the next. Say so now
                # rather than read the locks again to find it out; a job ending wakes the loop.
                self.view.waiting(self, self.request.what(machine))
                return

    def _spawn(self, state: JobState, got: acquire.Acquired) -> None:
        from gpu_launch.run import environment
        from gpu_launch.run import placeholders
        from gpu_launch.choose import visibility

        assert got.reservation is not None and got.machine is not None
        devices = got.selection.devices
        # Under a parent's narrowed view (a Slurm allocation, CUDA_VISIBLE_DEVICES=...), UUIDs, as a launch writes.
        env = environment.build(devices, self.environ,
                                use_uuid=visibility.resolve(got.machine, self.environ).restricted)
        argv = placeholders.substitute(state.job.argv, len(devices))  # {n}, {gpus}, as for a launch
        state.argv = argv  # what the views show
        state.gpus = ",".join(str(d.gpu.index) for d in devices)
        try:
            log_fd, state.log = open_log(self.log_dir, state.job.number)
        except GpuLaunchError:
            got.reservation.release()
            raise
        try:
            state.proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                pass_fds=tuple(got.reservation.fds.values()), start_new_session=True)
        except OSError as exc:
            state.status, state.note = "failed", f"could not start: {exc.strerror or exc}"
            state.started = state.ended = time.monotonic()
            self.view.finished(self, state)
            return
        finally:
            os.close(log_fd)
            if state.proc is None:
                got.reservation.release()
        # The job now holds the locks too; name it as the holder, then let go of our copies.
        got.reservation.record(state.proc.pid, argv)
        got.reservation.release()
        state.status, state.started = "running", time.monotonic()
        self.running.append(state)
        self.view.started(self, state)


#: options that only mean something to Slurm, and those only to the scheduler on this machine
SLURM_ONLY = ("partition", "time", "max_running", "sbatch_arg", "follow", "cancel_on_interrupt", "wait")
LOCAL_ONLY = ("min_free", "max_util", "idle", "exclude", "lock_dir", "min_total_memory", "account_as_free",
              "min_count", "max_count")


def run(inv: Any) -> int:
    """``gpulaunch each``: the machine is read and GPUs chosen as a launch does (:mod:`gpu_launch.share.pick`)."""
    if inv.get("slurm"):
        return submit_to_slurm(inv)
    _refuse(inv, SLURM_ONLY, "is for `each --slurm`", "add --slurm to submit the jobs to Slurm")
    from gpu_launch.share import pick

    pick.require_rereadable(inv, "`each`")
    return schedule(inv, pick.read_machine, pick.choose_within_parent)


def _refuse(inv: Any, dests: Sequence[str], why: str, hint: str) -> None:
    """Options given on the command line (config defaults are not) that make no sense here."""
    for dest in dests:
        if dest in inv.flags:
            name = "--" + dest.replace("_", "-")
            raise UsageError(f"{name} {why}", hint=hint)


def checked_jobs(inv: Any) -> tuple[list[Job], str]:
    """The job file's jobs, every command checked for existence (127/126 naming the line)."""
    from gpu_launch.run.execute import resolve_command

    if len(inv.positionals) > 1:
        raise UsageError(f"`each` takes one job file, got {len(inv.positionals)} arguments",
                         hint="put all the commands in one file, one a line")
    jobs, source = read_jobs(inv.positionals[0] if inv.positionals else None, sys.stdin)
    if not jobs:
        raise UsageError(f"{source}: no commands in it", hint="one command a line; # starts a comment")
    for job in jobs:
        try:
            resolve_command(job.argv, os.environ)
        except GpuLaunchError as exc:
            raise type(exc)(f"{source}, line {job.line}: {exc.message}", hint=exc.hint) from None
    return jobs, source


def _make_log_dir(log_dir: str) -> str:
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"log dir {log_dir}: cannot create it ({exc.strerror})", hint="pick another --log-dir") from None
    if not os.access(log_dir, os.W_OK | os.X_OK):  # found now, not when the first job's GPUs are reserved
        raise UsageError(f"log dir {log_dir}: cannot write in it (permission denied)",
                         hint="pick a --log-dir you can write to")
    return log_dir


def submit_to_slurm(inv: Any) -> int:
    """``gpulaunch each FILE --slurm``: one job array (:mod:`gpu_launch.cluster`); with --follow/--wait, follow it."""
    from gpu_launch.errors import SlurmUnavailable, WaitTimeout
    from gpu_launch import cluster as slurm
    from gpu_launch.units import fmt_duration
    from gpu_launch.views.each_view import View

    _refuse(inv, LOCAL_ONLY, "does not apply to `each --slurm`: Slurm allocates the GPUs",
            "ask Slurm through --sbatch-arg (e.g. --sbatch-arg=--constraint=a100)")
    jobs, source = checked_jobs(inv)
    k = inv.get("gpus_per_job") or 1
    extra = inv.get("sbatch_arg") or ()  # (a default from the config file or GPULAUNCH_SBATCH_ARG: split there)
    slurm.check_extra(extra)
    slurm.require("sbatch", os.environ)  # before anything is written
    following = bool(inv.get("follow")) or "wait" in inv.flags
    if following:  # what following needs, found missing now rather than once the array has run
        slurm.require("scontrol", os.environ)
        interval = waiting.poll_interval(os.environ)
    log_dir = os.path.abspath(inv.get("log_dir") or default_log_dir())
    existed = os.path.isdir(log_dir)
    _make_log_dir(log_dir)
    copy = slurm.write_job_copy(log_dir, jobs)
    request = slurm.ArrayRequest(copy, log_dir, len(jobs), k, inv.get("max_running"), inv.get("partition"),
                                 inv.get("time"), tuple(extra))
    try:
        # A --snapshot on the command line reaches the tasks as the variable (sbatch exports the environment).
        environ = {**os.environ, "GPULAUNCH_SNAPSHOT": inv.get("snapshot")} if inv.get("snapshot") else os.environ
        submitted = slurm.submit(request, environ)
    except GpuLaunchError:  # nothing was submitted: leave no trace of it
        os.unlink(copy)
        if not existed:
            try:
                os.rmdir(log_dir)
            except OSError:
                pass
        raise
    quiet, as_json = bool(inv.get("quiet")), bool(inv.get("json"))
    job_id = submitted.job_id
    if quiet and not as_json:  # the one thing -q prints: the id that squeue and scancel need (as sbatch --parsable)
        print(job_id, flush=True)
    elif not quiet:
        at_most = f", at most {request.max_running} at once" if request.max_running else ""
        print(f"gpulaunch each: submitted {len(jobs)} job{'s' if len(jobs) != 1 else ''} from {source} as Slurm job "
              f"array {job_id} (tasks 1-{len(jobs)}, {k} GPU{'s' if k != 1 else ''} each{at_most}); logs in {log_dir}",
              file=sys.stderr)
    view = View(sys.stderr, sys.stdout, quiet=quiet, total=len(jobs), log_dir=log_dir, intro=False, json=as_json)
    if not following:
        if not quiet:
            print(f"gpulaunch each: follow it with `squeue -j {job_id}` and `tail -f {log_dir}/job-*.log`; "
                  f"cancel it with `scancel {job_id}`", file=sys.stderr)
        if as_json:  # every job queued, and the array's id
            view.summary(slurm.Follower(submitted, jobs, view, os.environ, 0.0))
        return 0
    follower = slurm.Follower(submitted, jobs, view, os.environ, interval)
    with view:
        try:
            outcome = slurm.follow(follower, inv.get("wait") if "wait" in inv.flags else None,
                                   bool(inv.get("cancel_on_interrupt")), sys.stdin.isatty())
        except SlurmUnavailable as exc:  # (scontrol went away): the array was submitted all the same
            raise SlurmUnavailable(f"submitted Slurm job array {job_id}, then could not follow it: {exc.message}",
                                   hint=f"it goes on: squeue -j {job_id}; logs in {log_dir}") from None
    view.summary(follower)
    failed = [s for s in follower.states if s.status == "failed"]
    if outcome == "timeout":
        raise WaitTimeout(f"Slurm job array {job_id} is still running after {fmt_duration(inv.get('wait'))} "
                          f"(it goes on: squeue -j {job_id})", hint=f"logs in {log_dir}; scancel {job_id} stops it")
    if outcome == "detached":
        raise Interrupted(f"stopped following; Slurm job array {job_id} goes on (squeue -j {job_id})",
                          hint=f"logs in {log_dir}; scancel {job_id} stops it")
    if outcome == "cancelled":
        raise Interrupted(f"interrupted: cancelled Slurm job array {job_id}: {_tally(follower.states, log_dir)}")
    if failed:
        raise _jobs_failed(failed, jobs, f"their logs are in {log_dir}; Slurm job array {job_id}")
    return 0


def schedule(inv: Any, read_machine: Callable[..., Machine], chooser: acquire.Chooser = acquire.plain_chooser) -> int:
    """``gpulaunch each [FILE] --gpus-per-job K ...``; returns 0, or raises JobsFailed/Interrupted."""
    from gpu_launch.views.each_view import View

    jobs, source = checked_jobs(inv)
    k = inv.get("gpus_per_job") or 1
    least, most = inv.get("min_count"), inv.get("max_count")  # an elastic count per job (as a launch's)
    if (least is not None or most is not None) and "gpus_per_job" in inv.flags:
        raise UsageError("--gpus-per-job and --min-count/--max-count cannot be used together",
                         hint="a fixed count: --gpus-per-job K; as many as are free for each job: --max-count K")
    elastic = least is not None or most is not None
    from gpu_launch.share.pick import free_accounts

    # A sweep waits for GPUs free for its jobs rather than pile onto others' work (``--max-util`` decides instead).
    request = acquire.Request(auto=None if elastic else k, min_free=inv.get("min_free"), max_util=inv.get("max_util"),
                              idle=bool(inv.get("idle")), exclude=inv.get("exclude"), polite=True, min_count=least,
                              max_count=most, min_total=inv.get("min_total_memory"), free_accounts=free_accounts(inv))

    def read() -> Machine:
        return read_machine(inv, processes=True, topology=k > 1 or (elastic and most != 1))

    machine = read()
    why = acquire.hopeless(request, machine)
    if why is not None:
        asked = f"--gpus-per-job {k}" if not elastic else f"--min-count {least or 1}"
        raise NotEnoughGpus(f"{asked}: {why}", hint=f"ask for at most {len(machine.gpus)} GPUs per job")
    from gpu_launch.share.pick import snapshot_source

    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=True, snapshot=snapshot_source(inv))
    from gpu_launch.share.lockdir import prepare_dir

    prepare_dir(locking.lock_dir)
    log_dir = _make_log_dir(inv.get("log_dir") or default_log_dir())
    view = View(sys.stderr, sys.stdout, quiet=bool(inv.get("quiet")), total=len(jobs), log_dir=log_dir,
                json=bool(inv.get("json")))
    if not acquire.inside_allotment(locking, machine):
        from gpu_launch.records import replace

        # Inside no job: GPUs held later are others' or our own jobs', never an allotment of ours.
        locking = replace(locking, nested=False)
    scheduler = Scheduler(jobs, request, locking, read, log_dir, view, os.environ, chooser)
    scheduler.queue = not locking.nested
    with view:
        scheduler.run()
    view.summary(scheduler)
    failed = [s for s in scheduler.states if s.status == "failed"]
    if scheduler.stopping:
        raise Interrupted(f"interrupted: {_tally(scheduler.states, log_dir)}")
    if failed:
        raise _jobs_failed(failed, jobs, f"their logs are in {log_dir}")
    return 0


def _tally(states: Sequence[JobState], log_dir: str) -> str:
    """``2 jobs not started, 1 failed (logs in DIR)``: what an interrupted sweep left."""
    not_started = sum(1 for s in states if s.status == "not started")
    failed = sum(1 for s in states if s.status == "failed")
    return f"{not_started} job{'s' if not_started != 1 else ''} not started, {failed} failed (logs in {log_dir})"


def _jobs_failed(failed: Sequence[JobState], jobs: Sequence[Job], hint: str) -> JobsFailed:
    numbers = ", ".join(str(s.job.number) for s in failed)
    return JobsFailed(f"{len(failed)} of {len(jobs)} job{'s' if len(jobs) != 1 else ''} failed: {numbers}", hint=hint)
