"""GPU reservations: one ``flock`` per GPU that lives exactly as long as the job.

Every GPU (or MIG device) has one lock file in the lock directory (:mod:`gpu_launch.reservations.lockdir`:
where it is, what kind it is, and how its files are opened safely); who holds one is written in it
(:mod:`gpu_launch.reservations.holders`). A job holds an exclusive ``flock`` on the files of its GPUs. The
descriptors are made inheritable just before exec, so the command itself holds them: the kernel
drops the locks when the last process holding them exits, crashes or is killed. No daemon, no stale
locks, no cleanup step.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Mapping, Sequence

from gpu_launch.errors import LockDirError
from gpu_launch.reservations.holders import nested_holder, write_holder
from gpu_launch.reservations.lockdir import nested_path, open_shared

__all__ = ["Reservation", "try_lock", "lock_all"]

#: How often a failed non-blocking lock is retried before the GPU counts as taken. Another
#: gpulaunch may hold the lock for microseconds only (a probe, or a set it is about to give back).
_RETRY_DELAYS = (0.005, 0.02)


def try_lock(lock_dir: str, uuid: str, depth: int = 0) -> int | None:
    """Take ``uuid``'s reservation (at nesting ``depth``): the locked descriptor, or None when someone else holds it."""
    fd = open_shared(nested_path(lock_dir, uuid, depth))
    assert fd is not None
    try:
        for delay in (*_RETRY_DELAYS, None):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if delay is None:
                    break
                time.sleep(delay)
                continue
            # Taken machine-wide, checked deeper only now (the lock first): a job nested in a job that
            # has ended may still run on it (holders.nested_holder), and it is not free until that ends.
            # Looked at again like a lock: another gpulaunch looking at a deeper lock holds it an instant.
            if depth == 0 and nested_holder(lock_dir, uuid) is not None:
                if delay is None:
                    break
                time.sleep(delay)
                continue
            return fd
    except BaseException:  # interrupted (Ctrl-C) between the open and the return: hold nothing
        os.close(fd)
        raise
    os.close(fd)
    return None


class Reservation:
    """Locks held on some devices. Close them with :meth:`release`, or hand them to the command."""

    def __init__(self, lock_dir: str, fds: Mapping[str, int], depths: Mapping[str, int] | None = None) -> None:
        self.lock_dir = lock_dir
        self.fds = dict(fds)  # uuid -> locked descriptor
        #: uuid -> nesting depth of the lock held (0: machine-wide; absent: 0)
        self.depths = {u: d for u, d in (depths or {}).items() if u in self.fds and d}
        self.backfilled = False  # got ahead of earlier waiters (backfill.py): the holder record says so
        self.limit: float | None = None  # the job's declared --time (seconds): the holder record says when it ends

    @property
    def keys(self) -> tuple[tuple[str, int], ...]:
        """(uuid, depth) of every lock held."""
        return tuple((u, self.depths.get(u, 0)) for u in self.fds)

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(self.fds)

    def record(self, pid: int, argv: Sequence[str]) -> None:
        """Write who holds these locks into their files (after locking: truncate, then write)."""
        for fd in self.fds.values():
            write_holder(fd, pid, argv, self.backfilled, self.limit)

    def make_inheritable(self) -> tuple[int, ...]:
        """Let the descriptors survive exec, so the command holds the locks; returns them."""
        for fd in self.fds.values():
            os.set_inheritable(fd, True)
        return tuple(self.fds.values())

    def release(self) -> None:
        """Close our descriptors (the locks end once no other process shares them)."""
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


def lock_all(lock_dir: str, uuids: Sequence[str], depths: Mapping[str, int] | None = None) -> Reservation | str:
    """Lock every one of ``uuids`` (each at its nesting depth in ``depths``, default 0) or none: the
    Reservation, or the UUID that was lost to someone."""
    taken: dict[str, int] = {}
    depths = depths or {}
    try:
        for uuid in uuids:
            if uuid in taken:
                continue
            try:
                fd = try_lock(lock_dir, uuid, depths.get(uuid, 0))
            except LockDirError as exc:
                exc.uuid = uuid  # type: ignore[attr-defined]  # which device's file, for the caller
                raise
            if fd is None:
                Reservation(lock_dir, taken).release()
                return uuid
            taken[uuid] = fd
    except BaseException:
        # An unusable lock file, Ctrl-C (a notebook's kernel interrupt) or any error half-way: give
        # back what was taken.
        Reservation(lock_dir, taken).release()
        raise
    return Reservation(lock_dir, taken, depths)
