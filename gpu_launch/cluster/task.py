"""The array task's side of ``gpulaunch each --slurm``: ``python -m gpu_launch __slurm-task COPY LOGDIR N [--no-shell]``.

Each task reads line ``$SLURM_ARRAY_TASK_ID`` of the copy itself, opens ``LOGDIR/job-N.log`` (never
overwriting), and runs the line through ``gpulaunch --auto N`` as a child, so the allocation's GPUs
are subdivided by topology, the mapping is logged and ``{n}``/``{gpus}`` work. A shell line goes
after gpulaunch: ``gpulaunch --auto N -- /bin/sh -c LINE``, LINE with ``{n}`` and ``{gpus}`` already
filled in for N GPUs and quoted for the shell (and any literal ``{n}`` left in it escaped once more,
:func:`~gpu_launch.run.placeholders.protect`, so that the launch's own filling gives it back); with
``--no-shell`` the line's words go after ``--`` and the launch fills them. It writes a small JSON
record in ``LOGDIR/.slurm/`` (where it ran, its GPUs, its exit code) for the follower to read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_launch.errors import UsageError
from gpu_launch.run import placeholders
from gpu_launch.sweeps.jobfile import JobState, open_log, read_jobs
from gpu_launch.base.text import printable

__all__ = ["RECORDS", "record_path", "read_record", "task_main"]

RECORDS = ".slurm"  # the tasks' records, inside the log directory
#: The task's launch chooses among exactly the GPUs Slurm allotted: defaults meant for choosing on a
#: shared machine (a config file's exclude = "0", GPULAUNCH_MIN_FREE=...) would only make it fail.
_NO_CONSTRAINTS = {"GPULAUNCH_CONFIG": "", "GPULAUNCH_MIN_FREE": "", "GPULAUNCH_MAX_UTIL": "", "GPULAUNCH_IDLE": "",
                   "GPULAUNCH_EXCLUDE": "", "GPULAUNCH_MIG": ""}


def record_path(log_dir: str, job_id: str, task: int) -> str:
    return os.path.join(log_dir, RECORDS, f"{job_id}_{task}.json")


def _write_record(path: str, record: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """The task's record in ``LOGDIR/.slurm`` (a directory of this user's alone), written under a random
    name without following a symlink and renamed into place (:mod:`gpu_launch.cluster.rundir`)."""
    from gpu_launch.cluster import rundir

    directory = os.path.dirname(path)
    rundir.make_dirs(os.path.dirname(directory), (os.path.basename(directory),), environ)
    rundir.write_new(directory, os.path.basename(path), json.dumps(record), environ)


def read_record(log_dir: str, job_id: str, task: int) -> dict[str, Any]:
    """The task's record: only a small regular file of this user's (else {}: not believed)."""
    from gpu_launch.cluster import rundir
    from gpu_launch.errors import GpuLaunchError

    try:
        return rundir.read_own(record_path(log_dir, job_id, task))
    except (rundir.Missing, GpuLaunchError):
        return {}


def _small_number(text: str) -> int | None:
    """``text`` as a number when it is ASCII digits of a sane length ('²'.isdigit() is True, int('²') fails)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def task_main(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """``python -m gpu_launch __slurm-task COPY LOGDIR N``, the batch script of each array task.

    Reads job ``$SLURM_ARRAY_TASK_ID`` of COPY, sends this process's output to LOGDIR/job-N.log,
    records where and on which GPUs it runs, runs ``gpulaunch --auto N -- ARGV`` as a child and waits:
    the child chooses within the allocation (the CUDA_VISIBLE_DEVICES slurmd set), reserves, tells the
    mapping (into the log) and execs the command. The child's status becomes this task's.
    """
    shell = list(argv[3:]) != ["--no-shell"]
    if len(argv) not in (3, 4) or len(argv) == 4 and shell or _small_number(argv[2]) is None:
        raise UsageError("__slurm-task needs JOBFILE LOGDIR GPUS [--no-shell]",
                         hint="it is run by `gpulaunch each --slurm`")
    job_file, log_dir, gpus = argv[:3]
    task_text = environ.get("SLURM_ARRAY_TASK_ID", "")
    number = _small_number(task_text)
    if number is None:
        shown = repr(task_text[:40]) if task_text else "none"
        raise UsageError(f"__slurm-task runs inside a Slurm job array task (SLURM_ARRAY_TASK_ID: {shown})",
                         hint="it is run by `gpulaunch each --slurm`")
    jobs, _ = read_jobs(job_file, None, shell)  # the copy written at submission, read like any job file
    if not 1 <= number <= len(jobs):
        raise UsageError(f"{job_file}: no job {number} (it has {len(jobs)})")
    job = jobs[number - 1]
    fd, log = open_log(log_dir, job.number)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    job_id = environ.get("SLURM_ARRAY_JOB_ID") or environ.get("SLURM_JOB_ID", "0")
    where = record_path(log_dir, job_id, number)
    allocation = environ.get("SLURM_JOB_GPUS") or environ.get("CUDA_VISIBLE_DEVICES", "")
    record: dict[str, Any] = {"job": number, "log": log, "node": environ.get("SLURMD_NODENAME", os.uname().nodename),
                              "gpus": allocation, "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
                              "started": time.time()}
    _write_record(where, record, environ)
    command = job.command(int(gpus))  # as the child's launch fills them for N GPUs
    ran = JobState(job, argv=command).text  # (printable already)
    print(f"gpulaunch each --slurm: job {number}/{len(jobs)} as Slurm job {printable(job_id)}_{number} on "
          f"{printable(record['node'])}, allocation GPUs {printable(allocation) or '(none)'}: {ran}",
          file=sys.stderr, flush=True)
    # The shell after gpulaunch, its line filled in; the words as written, for the launch to fill.
    # {index}/{index1} are the task's own (SLURM_ARRAY_TASK_ID is job N's N): filled here, the rest by the launch.
    words = (*command[:2], placeholders.protect(command[2])) if job.shell else \
        placeholders.fill_only(job.argv, placeholders.job_values(job.number))
    child = [sys.executable, "-m", "gpu_launch", "--auto", gpus, "--", *words]
    def forward(signum: int, frame: object) -> None:
        """``scancel --batch --signal=USR1``, sbatch's ``--signal=B:...``: only this shell's stand-in gets them."""
        try:
            proc.send_signal(signum)
        except (ProcessLookupError, NameError):
            pass

    for sig in (signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    # A cancellation or time limit sends SIGTERM to every process of the job, the command included:
    # not passed on a second time; this process only outlives it to record how the command ended.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    proc = subprocess.Popen(child, stdin=subprocess.DEVNULL, env={**environ, **_NO_CONSTRAINTS})
    returncode = proc.wait()
    record.update(ended=time.time(), returncode=returncode)
    _write_record(where, record, environ)
    if returncode < 0:  # die of the same signal, so that Slurm reports it as the command's
        if -returncode not in (signal.SIGKILL, signal.SIGSTOP):  # (no handler can be set for these: always default)
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return returncode
