"""``gpulaunch locks init``: the lock directory a lab admin sets up once, which no user can tamper with.

In the /tmp default every user may create files in the lock directory, and whoever created a lock
file first may remove or rename it (the sticky bit protects it from everyone else, not from its
owner): that user could take a GPU from under another user's running job. A *hardened* directory is
owned by root and writable by root alone (mode 0755), with one root-owned 0666 lock file per GPU and
MIG device of the machine and the queue's files made in advance. Everyone can open and lock them;
only root can add, remove or rename anything. Waiters' tickets go in its ``queue/`` subdirectory
(sticky and world-writable, like /tmp: a ticket is not a reservation, so its owner removing it only
gives up their own place).

Running it again is safe while jobs hold GPUs: existing lock files are kept (their locks stay valid)
and only have owner and mode put right; files for new GPUs are added.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_launch.errors import LockDirError
from gpu_launch.share.reservations import QUEUE_SUBDIR, lock_path
from gpu_launch.share.waitqueue import QUEUE_LOCK

__all__ = ["InitReport", "init_dir"]

@dataclass(frozen=True)
class InitReport:
    path: str
    created: tuple[str, ...]  # lock files made now
    kept: tuple[str, ...]  # lock files that were there already (owner and mode put right)
    replaced: tuple[str, ...]  # things at a lock path that were not regular files (symlinks, ...): removed


def _ensure_dir(path: str, mode: int) -> None:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LockDirError(f"locks init: cannot create {path} ({exc.strerror})") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise LockDirError(f"locks init: {path} exists and is not a directory",
                           hint="remove it, or give another directory: gpulaunch locks init DIR")
    os.chown(path, 0, 0, follow_symlinks=False)
    os.chmod(path, mode)


def _ensure_file(path: str) -> str:
    """Make ``path`` a root-owned 0666 regular file: "created", "kept" or "replaced"."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    outcome = "kept"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise LockDirError(f"locks init: {path} is a directory", hint="remove it, then run `gpulaunch locks init` again")
        os.unlink(path)  # a planted symlink, fifo, ...: only root can put things here from now on
        st, outcome = None, "replaced"
    if st is None:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
        outcome = "created" if outcome == "kept" else outcome
    else:
        fd = os.open(path, flags)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o666)
    finally:
        os.close(fd)
    return outcome


def init_dir(path: str, uuids: Sequence[str]) -> InitReport:
    """Create or repair the hardened lock directory at ``path`` for these device UUIDs (as root)."""
    if os.geteuid() != 0:
        raise LockDirError("locks init: only root can set up a hardened lock directory (its files must be root's)",
                           hint="run it as root: sudo gpulaunch locks init")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, mode=0o755, exist_ok=True)
    _ensure_dir(path, 0o755)
    done: dict[str, list[str]] = {"created": [], "kept": [], "replaced": []}
    for uuid in dict.fromkeys(uuids):
        done[_ensure_file(lock_path(path, uuid))].append(uuid)
    _ensure_file(os.path.join(path, QUEUE_LOCK))
    _ensure_dir(os.path.join(path, QUEUE_SUBDIR), 0o1777)
    return InitReport(path, tuple(done["created"]), tuple(done["kept"]), tuple(done["replaced"]))
