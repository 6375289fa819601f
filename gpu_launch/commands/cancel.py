"""``gpulaunch cancel ID...``: a waiting job leaves the queue and never runs; a running one gets SIGTERM
(its whole process group), then SIGKILL once ``--grace`` seconds (default 10) have passed. Returns once
each job has ended, saying how."""

from __future__ import annotations

import os
import sys
import time

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.jobs.store import Job, JobDir
    from gpu_launch.options.args import Invocation

__all__ = ["run"]


def run(inv: Invocation) -> int:
    from gpu_launch.jobs.store import JobDir, check_id
    from gpu_launch.jobs.supervisor import DEFAULT_GRACE

    if not inv.positionals or inv.argv:
        raise UsageError("`cancel` takes the ids of the jobs to cancel", hint="e.g. gpulaunch cancel 3; `gpulaunch jobs` lists them")
    ids = [check_id(word) for word in inv.positionals]
    jobs = JobDir.open(os.environ)
    if jobs is None:
        raise UsageError(f"there is no job {ids[0]}", hint="you have no jobs yet")
    grace = inv.get("grace") or DEFAULT_GRACE
    asked = [job_id for job_id in ids if _ask(jobs, job_id, grace, bool(inv.get("quiet")))]
    for job_id in asked:  # SIGKILL ends it after the grace at the latest; the rest is the supervisor's last write
        _wait_for_end(jobs, job_id, grace + 60, bool(inv.get("quiet")))
    return 0


def _ask(jobs: JobDir, job_id: str, grace: float, quiet: bool) -> bool:
    """Leave the cancel request and tell the supervisor (once /proc shows the pid its record names holds
    the job's lock: :mod:`gpu_launch.jobs.proof`); False when the job is already over, or was lost and
    is ended here."""
    import signal

    from gpu_launch.jobs import proof, status

    now = status.statuses(jobs, [jobs.read(job_id)])[0]
    if now.state == "lost" and status.may_still_run(now):
        _end_lost(jobs, now.job, grace, quiet)
        return False
    if now.over:
        if not quiet:
            print(f"gpulaunch: job {job_id} is not waiting or running ({now.state}): nothing to cancel", file=sys.stderr)
        return False
    if now.note and now.note.startswith("on "):
        raise UsageError(f"job {job_id} runs {now.note.split(':')[0]}", hint="cancel it there")
    jobs.request_cancel(job_id, grace)
    job = jobs.read(job_id)  # after leaving word: a supervisor that is only starting reads it itself
    log = jobs.log_stat(job_id)
    if job.supervisor and log is not None and proof.holds_lock(job.supervisor, log):
        try:
            os.kill(job.supervisor, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    elif job.supervisor and not quiet:  # an edited record, or a pid taken since: never signalled
        print(f"gpulaunch: warning: job {job_id}: its record names pid {job.supervisor} as its supervisor, which "
              "does not hold the job's lock: not signalled (the supervisor reads the request when it starts)",
              file=sys.stderr)
    return True


def _end_lost(jobs: JobDir, job: Job, grace: float, quiet: bool) -> None:
    """A *lost* job (its supervisor was killed) whose command may still run: end the command when /proc
    shows it is the job's (:func:`gpu_launch.jobs.proof.runs_job`), SIGTERM to its process group and
    SIGKILL after ``grace``, and record it cancelled; else say how to end it by hand."""
    import fcntl
    import signal

    from gpu_launch.base.records import replace
    from gpu_launch.errors import JobError
    from gpu_launch.jobs import proof

    pid = job.pid or 0
    log = jobs.log_stat(job.id)
    if log is None or not proof.runs_job(pid, job.id, log):
        raise JobError(f"job {job.id} is lost: its supervisor ended, and pid {pid}, which its record names, cannot "
                       "be shown to be its command (it is not in the job's session with the job's log open)",
                       hint=f"if it is the job's, end it with `kill {pid}`; `gpulaunch jobs --clear {job.id}` then "
                            "removes the record")
    lock = jobs.open_log(job.id)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no supervisor may come back while we record
        except BlockingIOError:
            raise JobError(f"job {job.id} is looked after again", hint="cancel it again") from None
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait
            while proof.runs_job(pid, job.id, log) and time.monotonic() < end:
                time.sleep(0.05)
            if not proof.runs_job(pid, job.id, log):
                break
        jobs.write(replace(job, state="cancelled", ended=time.time(),
                           note=f"cancelled while lost: its command (pid {pid}) was ended by `gpulaunch cancel`; "
                                "its exit status is unknown"))
    finally:
        os.close(lock)
    if not quiet:
        print(f"gpulaunch: job {job.id}: cancelled (it was lost; its command, pid {pid}, was ended)", file=sys.stderr)


def _wait_for_end(jobs: JobDir, job_id: str, limit: float, quiet: bool) -> None:
    from gpu_launch.jobs import status

    end = time.monotonic() + limit
    while jobs.alive(job_id) and time.monotonic() < end:
        time.sleep(0.05)
    now = status.statuses(jobs, [jobs.read(job_id)])[0]
    if not quiet:
        still = "" if now.over else ": it is ending (see `gpulaunch jobs`)"
        print(f"gpulaunch: job {job_id}: {now.state}" + (f" ({now.note})" if now.note else "") + still, file=sys.stderr)
