"""First come, first served among gpulaunch waiters on one machine.

A waiter (``--wait``, or a job of ``gpulaunch each`` that cannot start yet) takes a *ticket*: a
file ``ticket-<seq>-<pid>`` in the lock directory that it holds an exclusive ``flock`` on for as
long as it waits. Only the waiter whose ticket is the lowest *live* one (head of line) may select
and lock GPUs; the others re-check every poll. A ticket whose lock no one holds belongs to a waiter
that died (killed, crashed): it is skipped, and removed when its owner's permissions allow.

The guarantee: tickets are numbered and published while holding the ``queue.lock`` file's
exclusive lock, so a waiter that published its ticket before another one started waiting is
always ahead of it; a waiter only leaves the queue (removes its ticket) after it holds its GPUs,
gives up (timeout, Ctrl-C) or dies. A ticket is created under a temporary name, locked, then
renamed into place, so no one ever sees an unlocked live ticket and takes it for a dead one.

What it does not cover: a launch *without* ``--wait`` does not queue; it takes what is free at
that moment, or fails at once. The order is strict: a waiter that needs 4 GPUs holds back one
behind it that needs 1, even while 1 is free (no backfilling), so a big job is never starved.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from dataclasses import dataclass

from gpu_launch.share.reservations import open_shared, queue_dir

__all__ = ["Ticket", "QUEUE_LOCK"]

QUEUE_LOCK = "queue.lock"
_TICKET = re.compile(r"^ticket-(\d{12})-(\d+)$")


@dataclass(frozen=True)
class _Entry:
    seq: int
    name: str


def _entries(lock_dir: str) -> list[_Entry]:
    found = []
    for name in os.listdir(lock_dir):
        m = _TICKET.match(name)
        if m:
            found.append(_Entry(int(m.group(1)), name))
    return sorted(found, key=lambda e: (e.seq, e.name))


def _alive(path: str) -> bool:
    """Whether the waiter of the ticket at ``path`` still holds it (a vanished ticket is not alive)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class Ticket:
    """A place in the queue; use as a context manager (leaving it leaves the queue)."""

    def __init__(self, lock_dir: str) -> None:
        self.lock_dir = lock_dir
        self.dir = queue_dir(lock_dir)  # the tickets: the lock dir, or a hardened one's queue/
        self.fd: int | None = None
        self.name = ""
        self.seq = -1

    def __enter__(self) -> Ticket:
        self.join()
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()

    def join(self) -> None:
        queue_fd = open_shared(os.path.join(self.lock_dir, QUEUE_LOCK))
        assert queue_fd is not None
        try:
            fcntl.flock(queue_fd, fcntl.LOCK_EX)  # held for microseconds: number and publish
            entries = _entries(self.dir)
            self.seq = entries[-1].seq + 1 if entries else 0
            self.name = f"ticket-{self.seq:012d}-{os.getpid()}"
            temp = os.path.join(self.dir, f".{self.name}.{secrets.token_hex(4)}")
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(temp, os.path.join(self.dir, self.name))
            self.fd = fd
        finally:
            os.close(queue_fd)

    def ahead(self) -> int:
        """How many live waiters are ahead of this one (0: head of line). Cleans up dead tickets."""
        count = 0
        for entry in _entries(self.dir):
            if (entry.seq, entry.name) >= (self.seq, self.name):
                break
            path = os.path.join(self.dir, entry.name)
            if _alive(path):
                count += 1
            else:
                try:
                    os.unlink(path)  # works for our own user's dead tickets (sticky directory)
                except OSError:
                    pass
        return count

    def leave(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(os.path.join(self.dir, self.name))
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
