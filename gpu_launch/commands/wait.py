"""``gpulaunch wait ID...``: wait until the jobs have ended, then exit with the job's own exit code (the
first failing one's, in the order named, for several), as task-spooler's ``tsp -w`` does; 130 on Ctrl-C
(nothing is cancelled: the jobs go on). Each job's end is said on stderr as it comes (``-q``: nothing).

The codes are :func:`gpu_launch.jobs.status.exit_status`'s: the command's own, 128 + N for a signal,
gpulaunch's own for a job that failed to start, never 0 for a cancelled one, 9 for a lost one."""

from __future__ import annotations

import os
import sys

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation

__all__ = ["run", "WAIT_EVERY"]

WAIT_EVERY = 0.1  # seconds between looks at the jobs' supervisors (a look is one open and one flock)


def run(inv: Invocation) -> int:
    import time

    from gpu_launch.jobs import status
    from gpu_launch.jobs.store import JobDir, check_id

    if not inv.positionals or inv.argv:
        raise UsageError("`wait` takes the ids of the jobs to wait for",
                         hint="e.g. gpulaunch wait 3; `gpulaunch jobs` lists them")
    ids = list(dict.fromkeys(check_id(word) for word in inv.positionals))
    jobs = JobDir.open(os.environ)
    if jobs is None:
        raise UsageError(f"there is no job {ids[0]}", hint="you have no jobs yet: gpulaunch submit -- COMMAND")
    found = {job_id: status.statuses(jobs, [jobs.read(job_id)])[0] for job_id in ids}  # no such job: say so now
    for job_id, now in found.items():
        if not now.over and now.note and now.note.startswith("on "):  # another host's record: not seen from here
            raise UsageError(f"job {job_id} runs {now.note.split(':')[0]}", hint="wait for it there")
    quiet = bool(inv.get("quiet"))
    pending = [job_id for job_id in ids if not found[job_id].over]
    for job_id in ids:
        if job_id not in pending:
            _say(found[job_id], quiet)
    while pending:
        time.sleep(WAIT_EVERY)
        for job_id in list(pending):
            if jobs.alive(job_id):
                continue
            found[job_id] = now = status.statuses(jobs, [jobs.read(job_id)])[0]
            pending.remove(job_id)
            _say(now, quiet)
    codes = [status.exit_status(found[job_id]) or 0 for job_id in ids]
    return next((code for code in codes if code), 0)


def _say(now: object, quiet: bool) -> None:
    if not quiet:
        from gpu_launch.base.text import printable

        note = f" ({printable(now.note)})" if now.note and now.outcome in ("lost", "lost at reboot", "failed to start") \
            else ""  # type: ignore[attr-defined]
        print(f"gpulaunch: job {now.job.id}: {now.label}{note}", file=sys.stderr)  # type: ignore[attr-defined]
