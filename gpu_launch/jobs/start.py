"""Starting a detached job: its record and log, then its supervisor, detached from the terminal.

The supervisor (:mod:`gpu_launch.jobs.supervisor`) gets a session of its own (``setsid``: no
controlling terminal, so neither closing the terminal nor the shell's exit reaches it), stdin from
``/dev/null``, stdout and stderr on the job's log, the job directory (the descriptor checked here) and
the log's lock, taken here first so that the job is looked after from the moment its record exists. Nothing waits for it: ``submit`` returns at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Mapping, Sequence

from gpu_launch.errors import JobError
from gpu_launch.jobs.status import boot_id, host
from gpu_launch.jobs.store import Job, JobDir, disk_error
from gpu_launch.jobs.supervisor import command
from gpu_launch.base.records import replace

__all__ = ["submit"]


def submit(options: Sequence[str], argv: Sequence[str], lock_dir: str, environ: Mapping[str, str],
           limit: float | None = None, grace: float | None = None) -> tuple[Job, str]:
    """Record a new job and start its supervisor; the job and its log's path. ``limit``: its --time (seconds);
    ``grace``: its --grace, seconds from SIGTERM to SIGKILL at the limit (None: the default)."""
    try:
        cwd = os.getcwd()
    except OSError as exc:
        raise JobError(f"the current directory cannot be used for a job ({exc.strerror})",
                       hint="cd to a directory that exists") from None
    jobs = JobDir.open(environ, create=True)
    assert jobs is not None
    try:
        job_id, log = jobs.new_id()
        job = Job(job_id, "waiting", tuple(argv), tuple(options), cwd, host(), boot_id(), lock_dir,
                  round(time.time(), 3), limit=limit, grace=grace)
        try:
            # The log's lock first, then the record: a record no one looks after never exists, even for a
            # moment (`jobs --clear` would take it for lost and remove it under the new job).
            lock = jobs.open_log(job_id)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                _write_new(jobs, job, log)
                try:
                    _spawn(command(job_id, lock, jobs.fd), (lock, jobs.fd), log, cwd, environ)
                except OSError as exc:
                    jobs.write(replace(job, state="failed", ended=time.time(),
                                       note=f"its supervisor could not be started ({exc.strerror})"))
                    raise JobError(f"job {job_id}: could not start its supervisor ({exc.strerror})") from None
            finally:
                os.close(lock)
        finally:
            os.close(log)
        return job, jobs.log_path(job_id)
    finally:
        jobs.close()


def _write_new(jobs: JobDir, job: Job, log: int) -> None:
    """The new job's first record; on a full disk (or no inode left) the job is taken back whole: its
    log removed (the record's temporary file already is), one line, exit 7."""
    try:
        jobs.write(job)
    except OSError as exc:
        for name in (f"{job.id}.json", f"{job.id}.log"):
            try:
                os.unlink(name, dir_fd=jobs.fd)
            except OSError:
                pass
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_error(jobs.path, exc) from None
        raise JobError(f"job {job.id}: cannot write its record ({exc.strerror})") from None


def _spawn(argv: list[str], fds: tuple[int, ...], log: int, cwd: str, environ: Mapping[str, str]) -> None:
    import subprocess

    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=fds, start_new_session=True,
                     cwd=cwd, env=dict(environ))
