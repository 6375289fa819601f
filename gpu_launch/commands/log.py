"""``gpulaunch log ID [-f]``: a detached job's output (stdout and stderr, and the launch's own lines);
``-f`` follows it as it grows, until the job ends, and then exits with the job's own exit code (as
``gpulaunch wait ID`` does: :func:`gpu_launch.jobs.status.exit_status`)."""

from __future__ import annotations

import os
import sys

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation

__all__ = ["run", "FOLLOW_EVERY"]

FOLLOW_EVERY = 0.2  # seconds between looks at a followed log


def run(inv: Invocation) -> int:
    from gpu_launch.jobs.store import JobDir, check_id

    if len(inv.positionals) != 1 or inv.argv:
        raise UsageError("`log` takes one job id", hint="e.g. gpulaunch log 3 -f; `gpulaunch jobs` lists them")
    job_id = check_id(inv.positionals[0])
    jobs = JobDir.open(os.environ)
    if jobs is None:
        raise UsageError(f"there is no job {job_id}", hint="you have no jobs yet: gpulaunch submit -- COMMAND")
    jobs.read(job_id)  # no such job: say so
    fd = jobs.open_log(job_id)
    out = sys.stdout.buffer
    try:
        _copy(fd, out)
        if not inv.get("follow"):
            return 0
        import time

        while True:
            over = not jobs.alive(job_id)  # looked at before the last copy: nothing written after is missed
            _copy(fd, out)
            if over:
                break
            time.sleep(FOLLOW_EVERY)
    finally:
        os.close(fd)
    from gpu_launch.jobs import status

    code = status.exit_status(status.statuses(jobs, [jobs.read(job_id)])[0])
    return 0 if code is None else code  # None: a record of another host's job, which is not followed from here


def _copy(fd: int, out: object) -> None:
    while chunk := os.read(fd, 1 << 16):
        out.write(chunk)  # type: ignore[attr-defined]
    out.flush()  # type: ignore[attr-defined]
