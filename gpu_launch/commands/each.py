"""``gpulaunch each``: run a list of commands, each on its own free GPUs, as GPUs free up.

The job file has one command a line, run through ``/bin/sh -c`` as Slurm's ``--wrap`` and
simple-gpu-scheduler do (redirections, ``cd … &&``, ``VAR=…``, pipes), ``{n}`` and ``{gpus}`` filled in
and quoted for the shell; ``--no-shell`` splits it like a shell would (``shlex``) and execs the words.
Blank lines and ``#`` comments are skipped; ``-`` or no file reads stdin. Before anything is reserved,
every line is checked: quotes closed, its program found (127/126 naming the line), every placeholder
one that will be filled (exit 2: :mod:`gpu_launch.run.placeholders`).

Locally this process is the scheduler (:mod:`gpu_launch.sweeps.sweep`): each job on GPUs selected and
locked exactly as a launch does, within ``--gpus``, at most ``--max-running`` at once, up to
``--jobs-per-gpu`` on one GPU. A sweep is polite: it waits for GPUs free for its jobs, never putting
one on a GPU that is busy or full with someone's work (``--max-util`` sets the user's own bar
instead). Inside a job (``gpulaunch --gpus 2,3 -- gpulaunch each jobs.txt``, a Slurm step, a process
that called ``gpu_launch.use()``), the job's GPUs are its allotment: whatever their load they are the
sweep's, shared out among its jobs one level deeper (:mod:`gpu_launch.reservations.nesting`); and it waits
without a ticket in the machine's queue, where it could stand behind someone waiting for its own
job's GPUs.

Each job runs in its own process group with stdin from /dev/null, and its stdout and stderr go to
``--log-dir``/job-N.log (N is the job's number, 1-based, in file order); an existing file is never
overwritten (job-N.1.log, job-N.2.log, … are used instead). Ctrl-C (or SIGTERM) stops launching,
sends the same signal to every running job's process group and waits for them; a second one sends
SIGKILL. Exit status: 0 when every job exited 0; 9 (``ExitCode.JOBS_FAILED``) when any job failed, timed out
(its --time) or could not start; 130 when interrupted.

With ``--slurm`` the same checked job file becomes one Slurm job array instead (:func:`submit_to_slurm`;
the Slurm side, task entry and following are in :mod:`gpu_launch.cluster`), each task running its
line through ``gpulaunch --auto K`` inside its allocation; ``--follow`` shows it with the same view.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from gpu_launch.reservations import acquire, waiting
from gpu_launch.sweeps.jobfile import Job, JobState, default_log_dir, open_log, parse_jobs, read_jobs
from gpu_launch.sweeps.limits import Limits
from gpu_launch.sweeps.sweep import Scheduler, Scope
from gpu_launch.errors import GpuLaunchError, Interrupted, JobsFailed, NotEnoughGpus, UsageError
from gpu_launch.hardware.model import Machine

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs ~3 ms of every start
    from typing import Any

__all__ = ["Job", "JobState", "parse_jobs", "read_jobs", "run", "schedule", "default_log_dir", "open_log"]


#: options that only mean something to Slurm, and those only to the scheduler on this machine
SLURM_ONLY = ("partition", "sbatch_arg", "follow", "cancel_on_interrupt", "wait")
LOCAL_ONLY = ("min_free", "max_util", "idle", "exclude", "lock_dir", "gpus", "jobs_per_gpu", "min_total_memory",
              "account_as_free", "min_count", "max_count")

#: ``--grace`` with ``--slurm``: Slurm has no grace of a job's own. At the limit slurmd sends SIGTERM, then SIGKILL
#: once the cluster's KillWait is over (slurm.conf(5)). sbatch's ``--signal=SIG@SECONDS`` (sbatch(1)) is no grace
#: either: a signal *before* the limit (up to 60 s earlier than asked), to the job's steps only, none of which
#: each --slurm runs (without ``B:``), or with ``B:`` to the batch shell alone: the task entry, which passes
#: SIGUSR1/SIGUSR2/SIGINT on to the command (cluster/task.py) and ignores SIGTERM (the limit's reaches every process).
GRACE_ON_SLURM = ("--grace does not apply to `each --slurm`: at a job's time limit Slurm sends SIGTERM, then SIGKILL "
                  "after the cluster's KillWait")
GRACE_ON_SLURM_HINT = ("`scontrol show config | grep KillWait` shows it; to warn a job before its limit, "
                       "--sbatch-arg=--signal=B:USR1@SECONDS: the command gets SIGUSR1 about that long before it")


def run(inv: Any) -> int:
    """``gpulaunch each``: the machine is read and GPUs chosen as a launch does (:mod:`gpu_launch.placing.pick`)."""
    if inv.get("slurm"):
        return submit_to_slurm(inv)
    _refuse(inv, SLURM_ONLY, "is for `each --slurm`", "add --slurm to submit the jobs to Slurm")
    from gpu_launch.placing import pick

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
    if len(inv.positionals) > 1:
        raise UsageError(f"`each` takes one job file, got {len(inv.positionals)} arguments",
                         hint="put all the commands in one file, one a line")
    jobs, source = read_jobs(inv.positionals[0] if inv.positionals else None, sys.stdin, not inv.get("no_shell"))
    if not jobs:
        raise UsageError(f"{source}: no commands in it", hint="one command a line; # starts a comment")
    found: set[str] = set()  # programs already found (48 lines of `python train.py` look it up once)
    for job in jobs:
        check_job(job, found, source)
    return jobs, source


def check_job(job: Job, found: set[str], source: str) -> None:
    """Its program exists (127/126), its placeholders will be filled (2); the error names the line."""
    from gpu_launch.run.execute import resolve_command

    try:
        program = job.program()
        if program is not None and program not in found:
            resolve_command((program, *job.argv[1:]), os.environ)
            found.add(program)
        job.check()  # placeholders: refused now, before anything is reserved or waited for
    except GpuLaunchError as exc:
        raise type(exc)(f"{source}, line {job.line}: {exc.message}", hint=exc.hint) from None


def _streamed(inv: Any) -> tuple[list[Job], str, Any]:
    """The jobs known now, their source, and the stdin feed (:mod:`gpu_launch.sweeps.feed`) while more may come:
    ``each -`` from a pipe starts each line as it arrives; a job file (or stdin from a file) is read whole."""
    import stat

    path = inv.positionals[0] if inv.positionals else None
    try:
        fd = sys.stdin.fileno() if sys.stdin is not None and path in (None, "-") and len(inv.positionals) < 2 else -1
        mode = os.fstat(fd).st_mode if fd >= 0 else 0
    except (OSError, ValueError):
        mode = 0
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) and path == "-"):
        jobs, source = checked_jobs(inv)
        return jobs, source, None
    from gpu_launch.sweeps.feed import Feed

    feed = Feed(fd, "stdin", not inv.get("no_shell"))
    found: set[str] = set()
    feed.check = lambda job: check_job(job, found, "stdin")
    jobs = [job for job, _ in feed.take(feed.check, block=True, strict=True)]
    if feed.open:  # input all written at once (a pipe from echo) ends a moment later: then it is a job file
        import select

        select.select([fd], [], [], 0.05)
        jobs += [job for job, _ in feed.take(feed.check, strict=True)]
    if not jobs:
        raise UsageError("stdin: no commands in it", hint="one command a line; # starts a comment")
    return jobs, "stdin", feed if feed.open else None


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
    from gpu_launch.base.units import fmt_duration
    from gpu_launch.views.each_view import View

    _refuse(inv, LOCAL_ONLY, "does not apply to `each --slurm`: Slurm allocates the GPUs",
            "ask Slurm through --sbatch-arg (e.g. --sbatch-arg=--constraint=a100)")
    if "grace" in inv.flags:  # (a default from the config file or GPULAUNCH_GRACE is for local jobs: unused here)
        raise UsageError(GRACE_ON_SLURM, hint=GRACE_ON_SLURM_HINT)
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
                                 inv.get("time"), tuple(extra), shell=not inv.get("no_shell"))
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
    failed = _unsuccessful(follower.states)
    if outcome == "timeout":
        raise WaitTimeout(f"Slurm job array {job_id} is still running after {fmt_duration(inv.get('wait'))} "
                          f"(it goes on: squeue -j {job_id})", hint=f"logs in {log_dir}; scancel {job_id} stops it")
    if outcome == "detached":
        raise Interrupted(f"stopped following; Slurm job array {job_id} goes on (squeue -j {job_id})",
                          hint=f"logs in {log_dir}; scancel {job_id} stops it")
    if outcome == "cancelled":
        raise Interrupted(f"interrupted: cancelled Slurm job array {job_id}: {_tally(follower, log_dir)}")
    if failed:
        raise _jobs_failed(failed, jobs, f"their logs are in {log_dir}; Slurm job array {job_id}")
    return 0


def schedule(inv: Any, read_machine: Callable[..., Machine], chooser: acquire.Chooser = acquire.plain_chooser) -> int:
    """``gpulaunch each [FILE] --gpus-per-job K ...``; returns 0, or raises JobsFailed/Interrupted."""
    from gpu_launch.views.each_view import View

    jobs, source, feed = _streamed(inv)
    k = inv.get("gpus_per_job") or 1
    least, most = inv.get("min_count"), inv.get("max_count")  # an elastic count per job (as a launch's)
    if (least is not None or most is not None) and "gpus_per_job" in inv.flags:
        raise UsageError("--gpus-per-job and --min-count/--max-count cannot be used together",
                         hint="a fixed count: --gpus-per-job K; as many as are free for each job: --max-count K")
    elastic = least is not None or most is not None
    from gpu_launch.placing.pick import free_accounts

    # A sweep waits for GPUs free for its jobs rather than pile onto others' work (``--max-util`` decides instead).
    request = acquire.Request(auto=None if elastic else k, min_free=inv.get("min_free"), max_util=inv.get("max_util"),
                              idle=bool(inv.get("idle")), exclude=inv.get("exclude"), polite=True, min_count=least,
                              max_count=most, min_total=inv.get("min_total_memory"), free_accounts=free_accounts(inv))

    def read() -> Machine:
        return read_machine(inv, processes=True, topology=k > 1 or (elastic and most != 1))

    machine = read()
    scope = _scope(inv, machine)
    sweepable = scope.narrow(machine)
    why = acquire.hopeless(request, sweepable)
    if why is not None:
        asked = f"--gpus-per-job {k}" if not elastic else f"--min-count {least or 1}"
        if scope.only is not None:
            why = f"--gpus gives the sweep {len(sweepable.gpus)} GPU{'s' if len(sweepable.gpus) != 1 else ''}"
        raise NotEnoughGpus(f"{asked}: {why}", hint=f"ask for at most {len(sweepable.gpus)} GPUs per job")
    from gpu_launch.placing.pick import snapshot_source

    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=True, snapshot=snapshot_source(inv))
    from gpu_launch.reservations.lockdir import prepare_dir

    prepare_dir(locking.lock_dir)
    log_dir = _make_log_dir(inv.get("log_dir") or default_log_dir())
    view = View(sys.stderr, sys.stdout, quiet=bool(inv.get("quiet")), total=len(jobs) if feed is None else None,
                log_dir=log_dir, json=bool(inv.get("json")))
    if not acquire.inside_allotment(locking, machine):
        from gpu_launch.base.records import replace

        # Inside no job: GPUs held later are others' or our own jobs', never an allotment of ours.
        locking = replace(locking, nested=False)
    scheduler = Scheduler(jobs, request, locking, read, log_dir, view, os.environ, chooser, scope,
                          max_running=inv.get("max_running"), per_gpu=inv.get("jobs_per_gpu") or 1, machine=machine)
    scheduler.queue = not locking.nested
    scheduler.feed = feed
    scheduler.backfill = not inv.get("no_backfill")
    scheduler.limits = Limits(getattr(inv.get("time"), "seconds", None), inv.get("grace"))
    with view:
        scheduler.run()
    view.summary(scheduler)
    failed = _unsuccessful(scheduler.states)
    if scheduler.stopping:
        raise Interrupted(f"interrupted: {_tally(scheduler, log_dir)}")
    if failed:
        raise _jobs_failed(failed, [s.job for s in scheduler.states], f"their logs are in {log_dir}")
    return 0


def _unsuccessful(states: list[Any]) -> list[Any]:
    """The tasks that ended without success: failed, or stopped at their time limit."""
    return [s for s in states if s.status in ("failed", "timeout")]


def _scope(inv: Any, machine: Machine) -> Scope:
    """``--gpus SPEC``: the set of whole GPUs the sweep may use, within what the parent allows."""
    items = inv.get("gpus")
    if items is None:
        return Scope(environ=os.environ)
    from gpu_launch.choose import spec, visibility

    devices = spec.resolve(items, machine, "--gpus")
    if any(d.mig is not None for d in devices):
        raise UsageError("each --gpus takes whole GPUs, not MIG devices",
                         hint="name the GPUs by index or GPU- UUID (gpulaunch ls)")
    visibility.resolve(machine, os.environ).check_allowed(devices)
    return Scope(frozenset(d.uuid for d in devices), os.environ)


def _tally(run: Any, log_dir: str) -> str:
    """``2 jobs not started, 1 failed (logs in DIR)``, ``, 1 timeout`` too when one ended at its --time: what an
    interrupted sweep (a local scheduler or a Slurm follower: their ``states``) left, as the summary counts it."""
    from gpu_launch.views.each_view import counts

    c = counts(run)
    not_started = c["not_started"]
    timed = f", {c['timeout']} timeout" if c["timeout"] else ""
    return f"{not_started} job{'s' if not_started != 1 else ''} not started, {c['failed']} failed{timed} (logs in {log_dir})"


def _jobs_failed(failed: Sequence[JobState], jobs: Sequence[Job], hint: str) -> JobsFailed:
    numbers = ", ".join(f"{s.job.number}{' (timeout)' if s.status == 'timeout' else ''}" for s in failed)
    return JobsFailed(f"{len(failed)} of {len(jobs)} job{'s' if len(jobs) != 1 else ''} failed: {numbers}", hint=hint)
