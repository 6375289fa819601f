"""``gpulaunch jobs [ID]``: your detached jobs, oldest first (waiting, running, done with the exit code,
failed to start, cancelled, lost), or one of them in full; ``--json`` for scripts."""

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
    if inv.get("json"):
        doc = jobs_table.as_json(found, job_dir_path(os.environ), logs)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif inv.positionals:
        sys.stdout.write(jobs_table.detail(found[0], logs[0]))
    elif not found:
        if not inv.get("quiet"):
            print("gpulaunch: no jobs (start one: gpulaunch submit --auto 1 -- COMMAND)", file=sys.stderr)
    else:
        from gpu_launch.views.ls_table import fit_width

        sys.stdout.write(jobs_table.table(found, fit_width(sys.stdout)))
    return 0
