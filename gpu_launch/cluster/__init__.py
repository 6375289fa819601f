"""Handing work to a Slurm cluster: ``each --slurm``'s job array and a ``--nodes`` run over several nodes.

``each --slurm``, one module each: :mod:`.submitting` (the time limit, the copy of the job file, sbatch's
arguments and the fixed batch script), :mod:`.task` (what each array task runs: its job line through
``gpulaunch --auto N`` inside its allocation, and its record), :mod:`.following` (each task's state
from scontrol/sacct and the records, shown with the view of a local ``each``).

``--nodes``: :mod:`.nodes` (the node task a launch conducts on every node), :mod:`.rendezvous` (the head's
address and port, published and waited for) and :mod:`.nodejob` (``--nodes N --slurm``: the batch script,
sbatch, following). Each engine's multi-node flags are written beside its command-line table, which sizing
reads too (:mod:`gpu_launch.fit.cmdline`).

The names below are imported on first use, so that a node task does not pay for the sweep's modules.
"""

from __future__ import annotations

import importlib

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WHERE = {
    "Follower": "following", "TaskStatus": "following", "follow": "following", "parse_sacct": "following",
    "parse_scontrol": "following", "query": "following",
    "MAX_MINUTES": "submitting", "ArrayRequest": "submitting", "Submitted": "submitting",
    "batch_script": "submitting", "cancel": "submitting", "check_extra": "submitting", "parse_time": "submitting",
    "require": "submitting", "sbatch_argv": "submitting", "submit": "submitting", "write_job_copy": "submitting",
    "RECORDS": "task", "read_record": "task", "record_path": "task", "task_main": "task",
}

__all__ = ["ArrayRequest", "Submitted", "TaskStatus", "MAX_MINUTES", "parse_time", "write_job_copy", "sbatch_argv",
           "batch_script", "require", "check_extra", "submit", "query", "cancel", "task_main", "Follower", "follow",
           "parse_scontrol", "parse_sacct", "read_record", "record_path", "RECORDS"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_launch.cluster' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gpu_launch.cluster.{module}"), name)
    globals()[name] = value
    return value
