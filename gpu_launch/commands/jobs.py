"""``gpulaunch jobs [ID]``: your detached jobs, oldest first (waiting, running, done with the exit code,
failed to start, cancelled, lost), or one of them in full; ``--json`` for scripts. ``jobs --clear
[ID...]`` removes the records and logs of ended jobs (as task-spooler's ``ts -C``), never a waiting
or running one."""

from __future__ import annotations

import json
import os
import sys

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation

__all__ = ["run"]


def run(inv: Invocation) -> int:
    from gpu_launch.jobs import status
    from gpu_launch.jobs.store import Job, JobDir, job_dir_path
    from gpu_launch.views import jobs_table

    if inv.get("clear"):
        return _clear(inv)
    if len(inv.positionals) > 1 or inv.argv:
        raise UsageError("`jobs` takes at most one job id", hint="gpulaunch jobs, or gpulaunch jobs ID")
    jobs = JobDir.open(os.environ)
    records: list[Job] = []
    problems: list[str] = []
    if inv.positionals:
        if jobs is None:
            raise UsageError(f"there is no job {inv.positionals[0]}", hint="you have no jobs yet: gpulaunch submit -- COMMAND")
        records = [jobs.read(inv.positionals[0])]
    elif jobs is not None:
        records, problems = jobs.all()
    logs = [jobs.log_path(j.id) for j in records] if jobs is not None else []
    for problem in problems:
        print(f"gpulaunch: warning: {problem}", file=sys.stderr)
    found = status.statuses(jobs, records) if jobs is not None else []
    # its launch's own line, from the head of its log: only for jobs that started
    lent = frozenset(s.job.id for s in found if jobs is not None and s.job.started is not None
                     and status.backfilled(jobs, s.job.id) is not None)
    if inv.get("json"):
        doc = jobs_table.as_json(found, job_dir_path(os.environ), logs, lent)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif inv.positionals:
        sys.stdout.write(jobs_table.detail(found[0], logs[0], backfilled=status.backfilled(jobs, found[0].job.id)))
    elif not found:
        if not inv.get("quiet"):
            print("gpulaunch: no jobs (start one: gpulaunch submit --auto 1 -- COMMAND)", file=sys.stderr)
    else:
        from gpu_launch.views.ls_table import fit_width
        from gpu_launch.views.render import use_color

        sys.stdout.write(jobs_table.table(found, fit_width(sys.stdout), colour=use_color(sys.stdout), backfilled=lent))
    return 0


def _clear(inv: Invocation) -> int:
    """``jobs --clear [ID...]``: remove ended jobs (all of them, or the ones named); print what went.

    A job named that waits or runs is refused before anything is removed. Without ids, a *lost* job
    whose command may still run (its pid is a process of yours that started after it was submitted)
    is kept, and said so: its log is where that command still writes.
    """
    from gpu_launch.jobs import status
    from gpu_launch.jobs.store import JobDir, check_id, job_dir_path
    from gpu_launch.base.units import fmt_mib
    from gpu_launch.views import jobs_table

    if inv.argv:
        raise UsageError("`jobs --clear` takes job ids only", hint="gpulaunch jobs --clear, or gpulaunch jobs --clear ID...")
    named = list(dict.fromkeys(check_id(word) for word in inv.positionals))
    jobs = JobDir.open(os.environ)
    if jobs is None and named:
        raise UsageError(f"there is no job {named[0]}", hint="you have no jobs yet: gpulaunch submit -- COMMAND")
    records, problems = ([jobs.read(job_id) for job_id in named], []) if named else jobs.all() if jobs else ([], [])
    for problem in problems:
        print(f"gpulaunch: warning: {problem} (kept)", file=sys.stderr)
    found = status.statuses(jobs, records) if jobs is not None else []
    busy = [s for s in found if not s.over]
    if named and busy:
        s = busy[0]
        raise UsageError(f"job {s.job.id} is {s.state}: only jobs that have ended are cleared",
                         hint=f"cancel it first with `gpulaunch cancel {s.job.id}`, or wait until it ends")
    kept = [] if named else [s for s in found if status.may_still_run(s)]
    gone = [s for s in found if s.over and s not in kept]
    logs = [jobs.log_path(s.job.id) for s in gone] if jobs is not None else []
    freed = sum(jobs.remove(s.job.id) for s in gone) if jobs is not None else 0
    quiet = inv.get("quiet")
    for s in kept if not quiet else ():
        print(f"gpulaunch: kept job {s.job.id} ({s.state}): its command may still run as pid {s.job.pid} "
              f"(`gpulaunch jobs --clear {s.job.id}` removes it anyway)", file=sys.stderr)
    if inv.get("json"):
        sys.stdout.write(json.dumps(jobs_table.as_json(gone, job_dir_path(os.environ), logs), indent=2) + "\n")
    elif gone and not quiet:
        from gpu_launch.views.ls_table import fit_width

        sys.stdout.write(jobs_table.table(gone, fit_width(sys.stdout)))
    if not quiet and not inv.get("json"):
        size = fmt_mib(freed / 2**20) if freed >= 2**20 else f"{freed / 1024:.1f} KiB"
        print(f"gpulaunch: removed {len(gone)} ended job{'s and their logs' if len(gone) != 1 else ' and its log'} ({size})"
              if gone else "gpulaunch: no ended jobs to remove", file=sys.stderr)
    return 0
