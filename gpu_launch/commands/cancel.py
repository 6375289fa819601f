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
    from gpu_launch.jobs.store import JobDir
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
    """Leave the cancel request and tell the supervisor; False when the job is already over."""
    import signal

    from gpu_launch.jobs import status

    now = status.statuses(jobs, [jobs.read(job_id)])[0]
    if now.over:
        if not quiet:
            print(f"gpulaunch: job {job_id} is not waiting or running ({now.state}): nothing to cancel", file=sys.stderr)
        return False
    if now.note and now.note.startswith("on "):
        raise UsageError(f"job {job_id} runs {now.note.split(':')[0]}", hint="cancel it there")
    jobs.request_cancel(job_id, grace)
    job = jobs.read(job_id)  # after leaving word: a supervisor that is only starting reads it itself
    if job.supervisor and jobs.alive(job_id):
        try:
            os.kill(job.supervisor, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    return True


def _wait_for_end(jobs: JobDir, job_id: str, limit: float, quiet: bool) -> None:
    from gpu_launch.jobs import status

    end = time.monotonic() + limit
    while jobs.alive(job_id) and time.monotonic() < end:
        time.sleep(0.05)
    now = status.statuses(jobs, [jobs.read(job_id)])[0]
    if not quiet:
        still = "" if now.over else ": it is ending (see `gpulaunch jobs`)"
        print(f"gpulaunch: job {job_id}: {now.state}" + (f" ({now.note})" if now.note else "") + still, file=sys.stderr)
