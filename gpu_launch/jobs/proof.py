"""Proof, from ``/proc``, that a pid a job's record names is really that job's, before it is signalled.

A record is the user's own file: anything in it may have been edited, and a pid may have been taken
by another process since. So ``cancel`` signals a pid only on the kernel's word:

* **the supervisor** (:func:`holds_lock`): the process has the job's log open on a descriptor that holds
  the log's ``flock`` (``/proc/PID/fdinfo/FD`` lists a ``lock:`` line for it; ``/proc/locks`` names
  only the process that took the lock, ``submit``, which has exited by then);
* **the command of a lost job** (:func:`runs_job`), whose supervisor was killed: a process of this user,
  in its own session (the launch's ``setsid``), with the job's log as its stdout or stderr and
  ``GPULAUNCH_JOB_ID`` set to the job's id in its environment, as the supervisor started it.
"""

from __future__ import annotations

import os

__all__ = ["holds_lock", "runs_job"]


def _same_file(path: str, target: os.stat_result) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino)


def _ours(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def holds_lock(pid: int, log: os.stat_result) -> bool:
    """Whether process ``pid`` (this user's) holds the exclusive flock of the file ``log``."""
    if pid <= 0 or not _ours(pid):
        return False
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        if not _same_file(f"/proc/{pid}/fd/{name}", log):
            continue
        try:
            with open(f"/proc/{pid}/fdinfo/{name}", encoding="ascii", errors="replace") as fh:
                info = fh.read(1 << 16)
        except OSError:
            continue
        for line in info.splitlines():
            words = line.split()
            if words[:1] == ["lock:"] and "FLOCK" in words and "WRITE" in words:
                return True
    return False


def runs_job(pid: int, job_id: str, log: os.stat_result) -> bool:
    """Whether process ``pid`` is job ``job_id``'s launch or command (see the module docstring)."""
    if pid <= 0 or not _ours(pid):
        return False
    try:
        if os.getsid(pid) != pid:
            return False
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read(1 << 20).split(b"\0")
    except OSError:
        return False
    if f"GPULAUNCH_JOB_ID={job_id}".encode() not in environ:
        return False
    return any(_same_file(f"/proc/{pid}/fd/{fd}", log) for fd in (1, 2))
