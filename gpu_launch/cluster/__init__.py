"""Slurm as the engine of ``gpulaunch each --slurm``: one job array, gpulaunch's placement inside each task.

Three parts, one module each: :mod:`.submitting` (the time limit, the copy of the job file, sbatch's
arguments and the fixed batch script), :mod:`.task` (what each array task runs: its job line through
``gpulaunch --auto N`` inside its allocation, and its record), :mod:`.following` (each task's state
from scontrol/sacct and the records, shown with the view of a local ``each``).
"""

from __future__ import annotations

from gpu_launch.cluster.following import Follower, TaskStatus, follow, parse_sacct, parse_scontrol, query
from gpu_launch.cluster.submitting import (MAX_MINUTES, ArrayRequest, Submitted, batch_script, cancel, check_extra,
                                               parse_time, require, sbatch_argv, submit, write_job_copy)
from gpu_launch.cluster.task import RECORDS, read_record, record_path, task_main

__all__ = ["ArrayRequest", "Submitted", "TaskStatus", "MAX_MINUTES", "parse_time", "write_job_copy", "sbatch_argv",
           "batch_script", "require", "check_extra", "submit", "query", "cancel", "task_main", "Follower", "follow",
           "parse_scontrol", "parse_sacct", "read_record", "record_path", "RECORDS"]
