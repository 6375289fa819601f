"""Who holds a reservation: the holder record in each lock file, and looking at locks without taking them.

Each lock file holds a JSON line saying who holds it (pid, user, start time, command), written
after the lock is taken. Readers tolerate a partial or stale line: the lock, not the text, is
what counts. Anyone can write that text, so nothing is decided by it: a nested gpulaunch knows its
job's reservations from lock descriptors (:func:`~gpu_launch.reservations.nesting.lineage_holds`), and
shares them out among the job's children through locks one level deeper
(:func:`~gpu_launch.reservations.lockdir.nested_path`, :mod:`gpu_launch.reservations.nesting`).

A *shared* ``flock`` on a lock file is no reservation (gpulaunch takes one only for an instant, to
look), but it keeps every job from locking the file, and no file mode can refuse it: such a GPU is
shown *blocked*, naming the process that holds it where ``/proc/locks`` shows it (:func:`lock_state`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterable, Sequence

from gpu_launch.errors import LockDirError
from gpu_launch.base.records import dataclass
from gpu_launch.reservations.lockdir import (MAX_DEPTH, Unusable, UnusableLockFile, is_hardened, lock_path, nested_path,
                                      open_error, open_shared, prepare_dir)

__all__ = ["Holder", "current_user", "write_holder", "probe", "probe_at", "nested_holder", "scan", "holders",
           "lock_state", "LockWatch"]

#: Looks again before a shared lock seen counts as one: other gpulaunches look at locks the same way,
#: each holding a shared lock for microseconds (76 ms in all, so a burst of launches never shows one).
_LOOK_AGAIN = (0.001, 0.005, 0.02, 0.05)


def current_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())


@dataclass(frozen=True)
class Holder:
    """Who holds a reservation, as its lock file says. Fields are None when the text was unreadable."""

    pid: int | None = None
    user: str | None = None
    started: float | None = None  # seconds since the epoch
    command: str | None = None
    host: str | None = None
    #: not a reservation but a shared ``flock`` on the lock file, which blocks every job's (the fields
    #: say which process took it, from /proc/locks, where this PID namespace shows it)
    shared: bool = False
    #: it started ahead of earlier waiters, on GPUs the head of the queue lent (backfill.py): display only
    backfilled: bool = False
    #: when its declared limit (--time) ends, seconds since the epoch: what the head of the queue expects (backfill.py)
    ends: float | None = None

    def describe(self, now: float | None = None, age: bool = True) -> str:
        """``alice (pid 4242, 1h02m: python train.py)``, or a neutral phrase when unknown; for a shared
        lock, ``blocked by a shared lock held by bob (pid 4242: flock -s ...)``."""
        if self.shared:
            from gpu_launch.choose.select import BLOCKED

            who = Holder(self.pid, self.user, None, self.command).describe() if self.pid is not None else \
                "a process not visible here"
            return f"{BLOCKED} held by {who}"
        if self.pid is None and self.user is None:
            return "another gpulaunch job"
        bits = []
        if self.pid is not None:
            bits.append(f"pid {self.pid}")
        if self.started is not None and age:
            from gpu_launch.base.units import fmt_duration

            bits.append(f"for {fmt_duration(max(0.0, (now or time.time()) - self.started))}")
        if self.backfilled:
            bits.append("backfilled")
        from gpu_launch.base.text import printable  # another user's text: escaped, never raw on a terminal

        detail = ", ".join(bits)
        if self.command:
            words = self.command.split()
            if words and "/" in words[0] and words[0][0] not in "'\"":  # the program by its name: in 40 characters a
                words[0] = words[0].rsplit("/", 1)[1] or words[0]  # conda or venv path left nothing of its script
            command = printable(" ".join(words))  # one line, and no raw escapes
            command = command if len(command) <= 40 else command[:39] + "…"
            detail += f": {command}"
        who = printable(self.user) if self.user else "?"
        return f"{who} ({detail})" if detail else who  # a record with a user alone: no empty "()"


def _read_holder(fd: int) -> Holder:
    try:
        raw = os.pread(fd, 4096, 0)
        doc = json.loads(raw.decode("utf-8", "replace").splitlines()[0])
    except (OSError, ValueError, IndexError):
        return Holder()
    if not isinstance(doc, dict):
        return Holder()

    def pick(key: str, kind: type) -> object:
        value = doc.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    started = pick("started", (int, float))  # type: ignore[arg-type]
    pid = pick("pid", int)
    # Someone else's text: a number of 4000 digits is no time (float() overflows) and no pid.
    started = started if started is not None and 0 <= started <= 1e11 else None  # type: ignore[operator]
    pid = pid if pid is not None and 0 < pid < 2**32 else None  # type: ignore[operator]
    ends = pick("ends", (int, float))  # type: ignore[arg-type]
    ends = float(ends) if ends is not None and 0 <= ends <= 1e11 else None  # type: ignore[operator,arg-type]
    return Holder(pid, pick("user", str), float(started) if started is not None else None,  # type: ignore[arg-type]
                  pick("command", str), pick("host", str), backfilled=doc.get("backfilled") is True,  # type: ignore[arg-type]
                  ends=ends)


def write_holder(fd: int, pid: int, argv: Sequence[str], backfilled: bool = False, limit: float | None = None) -> None:
    """``limit``: the job's declared --time, in seconds from now (the holder line says when it ends)."""
    import shlex

    now = time.time()
    doc = {"pid": pid, "user": current_user(), "uid": os.getuid(), "started": round(now, 3),
           "command": shlex.join(argv), "host": os.uname().nodename}
    if backfilled:  # `ls` says so (display only: anyone can write this text)
        doc["backfilled"] = True
    if limit is not None:  # what a waiting head expects of it (a job that overstays only delays the head)
        doc["ends"] = round(now + limit, 3)
    data = (json.dumps(doc) + "\n").encode("utf-8")
    try:
        # Written first, then cut to its length: ext4 flushes a file truncated to zero when it is closed
        # (auto_da_alloc), and the next holder's truncate waited for that flush, ~3.5 ms a job of `each`.
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError:
        pass  # the lock is what counts; a missing note only makes `ls` say "another gpulaunch job"


def probe(lock_dir: str, uuid: str) -> Holder | None:
    """Who holds ``uuid``'s reservation, or None when it is free. Creates nothing, takes nothing.

    A GPU whose machine-wide lock is free but on which a job nested in a job that has ended still
    runs (:func:`nested_holder`) is held by that job.
    """
    path = lock_path(lock_dir, uuid)
    fd = open_shared(path, create=False)
    if fd is None:
        if os.geteuid() != 0 and is_hardened(lock_dir):  # we could not create it: say so now, not at lock time
            raise open_error(path, OSError(errno.EACCES, "Permission denied"))
        return None
    return _held_by(fd) or nested_holder(lock_dir, uuid)


def nested_holder(lock_dir: str, uuid: str) -> Holder | None:
    """Who holds ``uuid`` one level or more deeper than machine-wide, or None.

    A job nested in a job holds only the deeper lock when it was started with its parent's
    descriptors closed (Python's ``subprocess``, a nested ``each``'s jobs): once the parent job ends,
    its machine-wide lock is free while the nested job still runs on the GPU. Such a GPU is not
    free: it is taken until the last job on it ends. (A deeper lock is only ever taken inside the
    machine-wide holder, so a held one without it is such an orphan.) Every depth is looked at: the
    job one level down may have ended while one further down still runs.

    A deeper lock file that cannot be used (a planted symlink, another user's 0644 file) raises
    UnusableLockFile: the GPU is unavailable, as for a bad machine-wide one, and ``ls`` names the file.
    """
    for depth in range(1, MAX_DEPTH):
        fd = open_shared(nested_path(lock_dir, uuid, depth), create=False)
        if fd is None:
            return None  # no deeper file without this one
        holder = _held_by(fd)
        if holder is not None:
            return holder
    return None


def probe_at(lock_dir: str, uuid: str, depth: int) -> Holder | None:
    """Who holds ``uuid`` at nesting ``depth`` (None: free, or no such file yet). Takes nothing."""
    if depth == 0:
        return probe(lock_dir, uuid)
    fd = open_shared(nested_path(lock_dir, uuid, depth), create=False)
    return None if fd is None else _held_by(fd)


def _held_by(fd: int) -> Holder | None:
    """The holder of the lock file open on ``fd`` (None: free), and ``fd`` closed."""
    try:
        state = lock_state(fd, _LOOK_AGAIN)
        if state == "exclusive":
            return _read_holder(fd)
        return _shared_holder(fd) if state == "shared" else None
    finally:
        os.close(fd)


def _look(fd: int) -> str | None:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "exclusive"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # converts ours: fails while anyone else holds a shared one
    except BlockingIOError:
        return "shared"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def lock_state(fd: int, again: tuple[float, ...] = ()) -> str | None:
    """How the lock file open on ``fd`` (a descriptor of its own) is held: None (free), ``"exclusive"``
    (a reservation) or ``"shared"`` (a shared ``flock``, which blocks every reservation). Takes nothing.

    A shared non-blocking lock succeeds exactly when no one holds the exclusive one; converted to an
    exclusive one, it succeeds exactly when no one else holds a shared one; both are dropped at once.
    Since other gpulaunches look the same way, a shared lock is looked at again after each delay in
    ``again`` before it counts; an exclusive one only after a yield (a look holds it for an instant).
    """
    for delay in (*again, None):
        state = _look(fd)
        if state == "exclusive":
            os.sched_yield()  # another gpulaunch's look at a free file, on the other core, ends now
            state = _look(fd)
        if state != "shared" or delay is None:
            return state
        time.sleep(delay)
    return None  # not reached


def _shared_holder(fd: int) -> Holder:
    """Who holds a shared lock on the file open on ``fd``, as /proc/locks says (Linux lists there the
    ``flock`` locks of the processes this /proc's PID namespace sees): pid, user, command; else unknown."""
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", "rb") as fh:
            lines = fh.read(1 << 20).decode("ascii", "replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        # "7: FLOCK  ADVISORY  READ 4242 fd:01:1234 0 EOF"; a process waiting for a lock has "->" after the number
        words = line.split()
        if len(words) >= 6 and words[1:4] == ["FLOCK", "ADVISORY", "READ"] and words[5] == where:
            pid = int(words[4]) if words[4].isdigit() and len(words[4]) < 10 else 0
            if pid > 0 and pid != os.getpid():
                return Holder(pid, _proc_user(pid), command=_proc_command(pid), shared=True)
    return Holder(shared=True)


def _proc_user(pid: int) -> str | None:
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
    except OSError:
        return None


def _proc_command(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read(4096).split(b"\0")
    except OSError:
        return None
    return " ".join(w.decode("utf-8", "replace") for w in words if w) or None


def scan(lock_dir: str, uuids: Iterable[str]) -> tuple[dict[str, Holder], dict[str, Unusable]]:
    """The reserved ones among ``uuids`` with their holders, and those whose lock file cannot be used."""
    if not prepare_dir(lock_dir, create=False):
        return {}, {}
    found: dict[str, Holder] = {}
    unusable: dict[str, Unusable] = {}
    for uuid in uuids:
        try:
            holder = probe(lock_dir, uuid)
        except UnusableLockFile as exc:
            unusable[uuid] = exc.unusable
            continue
        if holder is not None:
            found[uuid] = holder
    return found, unusable


class LockWatch:
    """Tells cheaply whether a lock among some devices' has been released since the last look.

    For the head of the wait queue: one non-blocking shared ``flock`` per device every tick, on
    descriptors opened once, instead of re-reading the machine. A file that does not exist yet has
    never been locked: nothing to watch. ``nested``: the locks one level deeper too (a waiter inside a
    job, waiting for a sibling to give back one of the job's GPUs). A file someone holds a shared lock
    on (which blocks its GPU) is watched with :func:`lock_state`, so its release wakes the waiter too.
    """

    def __init__(self, lock_dir: str, uuids: Iterable[str], nested: bool = False) -> None:
        self.fds: dict[object, int] = {}
        for uuid in uuids:
            for depth in range(MAX_DEPTH if nested else 1):
                try:
                    fd = open_shared(nested_path(lock_dir, uuid, depth), create=False)
                except LockDirError:
                    break
                if fd is None:
                    break  # no deeper file without this one
                self.fds[(uuid, depth)] = fd
        self.shared: frozenset[object] = frozenset()
        self.held = self._held(everything=True)

    def _held(self, everything: bool = False) -> frozenset[object]:
        held, shared = set(), set()
        for key, fd in self.fds.items():
            try:
                if everything or key in self.shared:
                    state = lock_state(fd)
                else:  # a shared lock only ever appearing is no release: the cheap look will do
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    state = None
            except BlockingIOError:
                state = "exclusive"
            except OSError:
                continue
            if state is not None:
                held.add(key)
            if state == "shared":
                shared.add(key)
        self.shared = frozenset(shared)
        return frozenset(held)

    def freed(self) -> bool:
        """Whether a lock held at the last look is free now."""
        now = self._held()
        gone = self.held - now
        self.held = now
        return bool(gone)

    def wait(self, timeout: float, tick: float) -> bool:
        """Check every ``tick`` seconds for up to ``timeout``: True as soon as a lock was freed."""
        end = time.monotonic() + timeout
        while True:
            if self.freed():
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(tick, left))

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def holders(lock_dir: str, uuids: Iterable[str]) -> dict[str, Holder]:
    """The reserved ones among ``uuids``, with their holders (an absent lock dir: none)."""
    return scan(lock_dir, uuids)[0]
