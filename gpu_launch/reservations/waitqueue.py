"""First come, first served among gpulaunch waiters on one machine.

A waiter (``--wait``, or a job of ``gpulaunch each`` that cannot start yet) takes a *ticket*: a
file ``ticket-<seq>-<pid>-<random>`` in the lock directory (a hardened one's ``queue/``) that it
holds an exclusive ``flock`` on for as long as it waits. Only the waiter whose ticket is the lowest
*live* one (head of line) may select and lock GPUs.

The guarantee: tickets are ordered by the time the kernel stamped on each when it was put in place
(its ``ctime``), then by the sequence number in its name, then by the name. A joining waiter numbers
its ticket one above every live ticket it sees and, once its ticket is in place, makes its ``ctime``
strictly later than every one of theirs (:func:`_later_than`), so a waiter whose ticket was in place
before another one started joining is always ahead of it. Two waiters that join at the same moment
are put in one order that every waiter sees alike. Nothing a user can write sets that order: a
``ctime`` can only be moved *later* (by the file's owner), and the sequence number in a name, which
anyone can plant, only breaks ties (a planted ticket numbered at the very top no longer makes every
later waiter share one number and be served in pid-text order); a waiter only leaves the queue
(removes its ticket) after it holds its GPUs, gives up (timeout, Ctrl-C) or dies. A ticket is created
under a temporary name that only its waiter can open (mode 0600), locked, then made readable and
renamed into place, so no one ever sees an unlocked live ticket and takes it for a dead one, and no
one can lock it first.

No lock is shared by all users: joining takes none (an older design published tickets under a
``queue.lock`` every user could open, and anyone holding that file's ``flock`` stopped every new
waiter from queueing, past its timeout, with no word), and never blocks: every ``flock`` it takes is
non-blocking, and the ``ctime`` nudge is bounded.

Only tickets whose lock is held count. A file whose name does not parse, or whose lock no one holds
(its waiter died, or someone planted it), is ignored, both for the order and for numbering the next
ticket: it is removed when the permissions allow, and one that cannot be removed (another user's, in
a sticky directory) is simply skipped for ever. The random part of a name means no planted file can
sit where a waiter's ticket will go.

Hand-over is quick: a waiter behind others blocks (in a thread) on a shared ``flock`` of the live
ticket just ahead of its own, which the kernel grants the moment that waiter leaves or dies, so a
waiter whose turn comes wakes at once; the head of line leaves the queue as soon as it has reserved
its GPUs, and checks the GPUs' locks every :data:`TICK` seconds while it waits for them.

What it does not cover: a launch *without* ``--wait`` does not queue; it takes what is free at
that moment, or fails at once. Backfill (:mod:`gpu_launch.reservations.backfill`): a later waiter may
start on GPUs the head of line lends (it writes which, beside its ticket); with ``--no-backfill``,
or behind a head that lends nothing, the order is strict: a waiter that needs 4 GPUs holds back one
behind it that needs 1, even while 1 is free.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from gpu_launch.base.records import dataclass  # not dataclasses: ~6 ms of every --wait launch
from gpu_launch.reservations.lockdir import queue_dir

__all__ = ["Ticket", "Waiter", "waiters", "someone_waits", "TICK"]

#: Seconds between the head of line's cheap checks of the GPUs' locks (did one free?).
TICK = 0.02
_TICKET = re.compile(r"^ticket-(\d{1,30})-(\d{1,10})(?:-[0-9a-f]{1,32})?$")
_SEQ_MAX = 10 ** 30 - 1  # the most digits a name may have; numbering never goes past it
_NOTE_MAX = 2048  # bytes of a ticket's note that are written, and read back


@dataclass(frozen=True)
class _Entry:
    seq: int
    name: str
    ctime_ns: int = 0  # when the kernel put it in place (set for live tickets)

    @property
    def order(self) -> tuple[int, int, str]:
        return (self.ctime_ns, self.seq, self.name)


def _entries(directory: str) -> list[_Entry]:
    """The ticket files whose names parse, in queue order (others are ignored)."""
    found = []
    try:
        names = os.listdir(directory)
    except OSError as exc:  # e.g. a 1733 directory: others may create files in it but not list it
        from gpu_launch.errors import LockDirError

        raise LockDirError(f"lock dir {directory}: cannot list it to queue for GPUs ({exc.strerror})",
                           hint=f"its owner can run `chmod 1777 {directory}`, or use --lock-dir DIR") from None
    for name in names:
        m = _TICKET.match(name)
        if m:
            found.append(_Entry(int(m.group(1)), name))
    return sorted(found, key=lambda e: (e.seq, e.name))


def _alive(path: str) -> int | None:
    """The ``ctime`` (ns) of the ticket at ``path`` if a waiter holds it; None if not (a vanished,
    unreadable or special file is not alive)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return st.st_ctime_ns
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def _block_until_gone(path: str, done: Any) -> None:
    """In a thread: block in ``flock`` until the ticket's waiter leaves or dies, then set ``done``.

    A shared lock: taken for an instant, it never makes the ticket look alive to others' checks.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        done.set()
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        pass
    finally:
        os.close(fd)
        done.set()


def _later_than(fd: int, latest: int) -> int:
    """Make our ticket's ``ctime`` strictly later than ``latest`` (the clock the kernel stamps with may be
    coarse: a few ms); returns it. A ``fchmod`` to the same mode is a change of metadata: a new ctime."""
    import time

    ctime = os.fstat(fd).st_ctime_ns
    for _ in range(100):  # bounded: a clock set back must not stall the queue (the number then orders it)
        if ctime > latest:
            break
        time.sleep(0.001)
        os.fchmod(fd, 0o644)
        ctime = os.fstat(fd).st_ctime_ns
    return ctime


def _forget(path: str) -> None:
    """Remove a dead ticket if we may (our own user's, in a sticky dir); otherwise leave it: it is ignored.
    Its waiter's lends file (backfill.py) goes with it."""
    for gone in (path, os.path.join(os.path.dirname(path), "lends-" + os.path.basename(path))):
        try:
            os.unlink(gone)
        except OSError:
            pass


class Ticket:
    """A place in the queue; use as a context manager (leaving it leaves the queue)."""

    def __init__(self, lock_dir: str, note: str = "") -> None:
        self.lock_dir = lock_dir
        self.note = note  # what it waits for (a JSON line), for `ls`: written before the ticket is in place
        self.dir = queue_dir(lock_dir)  # the tickets: the lock dir, or a hardened one's queue/
        self.fd: int | None = None
        self.name = ""
        self.seq = -1
        self.ctime_ns = 0
        self._ahead: str | None = None  # the live ticket just ahead of ours, watched for wait_turn()
        self._turn: Any = None  # threading.Event, set once that ticket's lock is gone

    def __enter__(self) -> Ticket:
        self.join()
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()

    def _live(self) -> list[_Entry]:
        """The live tickets, in queue order (ours included once joined)."""
        live = []
        for entry in _entries(self.dir):
            path = os.path.join(self.dir, entry.name)
            ctime = self.ctime_ns if entry.name == self.name else _alive(path)
            if ctime is not None:
                live.append(_Entry(entry.seq, entry.name, ctime))
            else:
                _forget(path)
        return sorted(live, key=lambda e: e.order)

    def join(self) -> None:
        """Put a ticket in the queue, behind every live one. Takes no shared lock and never blocks."""
        live = self._live()
        self.seq = min(max(e.seq for e in live) + 1, _SEQ_MAX) if live else 0
        # the random part as secrets.token_hex(4) makes it (os.urandom), without importing secrets (~4 ms)
        self.name = f"ticket-{self.seq:012d}-{os.getpid()}-{os.urandom(4).hex()}"
        temp = os.path.join(self.dir, f".{self.name}")
        fd = None
        try:
            # 0600 until it is locked: no one else can open it, so no one can lock it before we do.
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours alone: none but root can hold it
            if self.note:
                os.write(fd, self.note.encode("utf-8")[:_NOTE_MAX] + b"\n")
            os.fchmod(fd, 0o644)  # readable now, for the others' liveness checks and for `ls`
            os.rename(temp, os.path.join(self.dir, self.name))
        except OSError as exc:
            if fd is not None:
                os.close(fd)
                _forget(temp)
            from gpu_launch.errors import LockDirError

            raise LockDirError(f"lock dir {self.dir}: cannot put a ticket in the queue for GPUs ({exc.strerror})",
                               hint="check that the directory is writable and its disk not full, "
                                    "or use --lock-dir DIR") from None
        self.fd = fd
        self.ctime_ns = _later_than(fd, max((e.ctime_ns for e in live), default=0))

    def ahead(self) -> int:
        """How many live waiters are ahead of this one (0: head of line). Cleans up dead tickets."""
        count = 0
        nearest = None
        for entry in self._live():
            if entry.order >= (self.ctime_ns, self.seq, self.name):
                break
            count += 1
            nearest = entry.name
        self._watch(nearest)
        return count

    def _watch(self, name: str | None) -> None:
        """Start watching the live ticket just ahead (a new one only when it changed)."""
        if name == self._ahead and self._turn is not None and not self._turn.is_set():
            return  # already watching it (a set event for a ticket still live: the watch failed, watch again)
        import threading  # only waiters pay for it

        self._ahead = name
        self._turn = threading.Event()
        if name is None:
            self._turn.set()
            return
        threading.Thread(target=_block_until_gone, args=(os.path.join(self.dir, name), self._turn),
                         daemon=True).start()

    def head(self) -> tuple[str, int] | None:
        """The live ticket first in line, if it is not ours: its name and its owner (the kernel's word)."""
        for entry in self._live():
            if entry.name == self.name:
                return None
            try:
                return entry.name, os.lstat(os.path.join(self.dir, entry.name)).st_uid
            except OSError:
                continue
        return None

    def wait_turn(self, timeout: float) -> bool:
        """Sleep until the waiter just ahead (as of the last :meth:`ahead`) has left or died: True; or
        ``timeout`` seconds: False. Then ask :meth:`ahead` again. Wakes as soon as its lock is gone."""
        return self._turn is None or self._turn.wait(timeout)

    def leave(self) -> None:
        if self.fd is None:
            return
        for gone in (f"lends-{self.name}", self.name):  # the lends first: never a lends file without its ticket
            try:
                os.unlink(os.path.join(self.dir, gone))
            except OSError:
                pass
        os.close(self.fd)
        self.fd = None


def someone_waits(lock_dir: str) -> bool:
    """Whether a live ticket is in ``lock_dir``'s queue (True where the queue cannot be listed: a ticket
    will say why). Only looks. A sweep that finds none tries for GPUs at once, as a launch without
    ``--wait`` does, and takes a ticket only when it must wait: not one a job."""
    directory = queue_dir(lock_dir)
    try:
        names = os.listdir(directory)
    except OSError:
        return True
    return any(_TICKET.match(name) and _alive(os.path.join(directory, name)) is not None for name in names)


@dataclass(frozen=True)
class Waiter:
    """A live ticket as ``ls`` shows it. ``uid`` and ``since_ns`` are the kernel's (the file's owner and
    ctime); ``pid`` comes from the name and ``note`` from the contents, which the waiter wrote: display only."""

    position: int  # 1: head of line
    pid: int
    uid: int
    since_ns: int
    note: str  # the JSON line the waiter wrote ("" for a ticket of an older gpulaunch)
    kept: tuple[str, ...] | None = None  # the head of line's: GPUs kept for it (None: it lends nothing, or not head)
    lends: tuple[str, ...] | None = None  # the head of line's: GPUs it lends to later waiters (uuids)
    relevant: tuple[str, ...] | None = None  # the head of line's: GPUs it may use (uuids); kept: these less lends
    shadow: float | None = None  # the head of line's: when it expects to start, from declared limits (backfill.py)
    free: tuple[str, ...] | None = None  # the head of line's: GPUs free for it at its last look (uuids)
    strict: bool = False  # the head of line waits strictly first come, first served (--no-backfill): it keeps all


def waiters(lock_dir: str) -> list[Waiter]:
    """The live waiters of ``lock_dir``'s queue, in queue order. Only looks: removes and keeps nothing."""
    found = []
    directory = queue_dir(lock_dir)
    if not os.path.isdir(directory):
        return []
    for entry in _entries(directory):
        try:
            fd = os.open(os.path.join(directory, entry.name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: a live waiter
                note = os.pread(fd, _NOTE_MAX, 0).decode("utf-8", "replace").split("\n", 1)[0]
                pid = int(_TICKET.match(entry.name).group(2))  # type: ignore[union-attr]
                found.append((_Entry(entry.seq, entry.name, st.st_ctime_ns), pid, st.st_uid, note))
        except OSError:
            continue
        finally:
            os.close(fd)
    found.sort(key=lambda item: item[0].order)
    out = [Waiter(i, pid, uid, e.ctime_ns, note) for i, (e, pid, uid, note) in enumerate(found, 1)]
    if found:
        from gpu_launch.reservations import backfill

        head = backfill.read_lends(directory, found[0][0].name, out[0].uid)
        if head is not None:
            import dataclasses

            out[0] = dataclasses.replace(out[0], kept=tuple(head[1]), lends=tuple(sorted(head[0].lends)),
                                         relevant=tuple(sorted(head[0].relevant)), shadow=head[0].shadow,
                                         free=tuple(sorted(head[0].free)), strict=head[0].strict)
    return out
