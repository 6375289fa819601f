"""GPU reservations: one ``flock`` per GPU that lives exactly as long as the job.

Every GPU (or MIG device) has one lock file, named by its UUID, in a lock directory shared by all
users of the machine (``--lock-dir`` / ``GPULAUNCH_LOCK_DIR`` / config file, else the hardened
``/var/lib/gpulaunch/locks`` an admin made with ``gpulaunch locks init`` if it exists, else
``/tmp/gpulaunch-locks``).
A job holds an exclusive ``flock`` on the files of its GPUs. The descriptors are made inheritable
just before exec, so the command itself holds them: the kernel drops the locks when the last
process holding them exits, crashes or is killed. No daemon, no stale locks, no cleanup step.
Lock files are never deleted (deleting one while it is locked would let a second job lock a new
file of the same name), so the directory keeps one small file per GPU.

Safety on a directory every user can write to:

* The directory is created mode 1777 (sticky, world-writable, like ``/tmp``) whatever the umask.
  An existing directory owned by another user is used only when it is sticky and world-writable,
  so its owner alone cannot have made it a trap; anything else is a clear error.
* Lock files are opened with ``O_NOFOLLOW``: a symlink planted at a lock path is refused, never
  followed (it could otherwise make gpulaunch create or truncate a file of the victim's).
  Anything that is not a regular file is refused too, as is a file we cannot open read-write:
  that GPU alone becomes *unavailable for reservation* (:class:`Unusable`); the others go on.
* In the sticky /tmp kind, whoever created a lock file can still remove or rename it; only the
  hardened kind (root-owned, 0755, files made by root: share/hardening.py) prevents that. A
  directory is of the hardened kind only when ``locks init`` made it: it bears the root-owned mark
  :data:`HARDENED_MARK` that only root can have put there, never because of who owns it (root's own
  ``mktemp -d`` is a private directory like any user's, and works for everything).
* An existing file is opened without ``O_CREAT`` first, so Linux's ``fs.protected_regular``
  (which forbids ``O_CREAT`` on another user's file in a sticky directory) does not get in the way;
  a new one is created ``O_EXCL`` and ``fchmod``-ed to 0666 so every user can lock it later.

Each lock file holds a JSON line saying who holds it (pid, user, start time, command), written
after the lock is taken. Readers tolerate a partial or stale line: the lock, not the text, is
what counts. Anyone can write that text, so nothing is decided by it: a nested gpulaunch knows its
job's reservations from lock descriptors (:func:`lineage_holds`), and shares them out among the
job's children through locks one level deeper (:func:`nested_path`, :mod:`gpu_launch.share.nesting`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Container, Iterable, Mapping, Sequence

from gpu_launch.errors import LockDirError, UsageError
from gpu_launch.records import dataclass

__all__ = [
    "DEFAULT_LOCK_DIR", "example_lock_dir", "ENV_LOCK_DIR", "HARDENED_LOCK_DIR", "ENV_HARDENED", "QUEUE_SUBDIR", "HARDENED_MARK", "Holder",
    "Reservation", "lock_dir_path", "hardened_default", "is_hardened", "admin_hint", "describe_dir", "shared_by",
    "shared_note", "queue_dir", "prepare_dir",
    "lock_path", "open_shared", "probe", "scan", "LockWatch", "Unusable", "UnusableLockFile", "holders", "ancestors", "own_reservations", "lineage_holds", "nested_path", "probe_at", "try_lock", "lock_all",
    "current_user", "MAX_DEPTH",
]

DEFAULT_LOCK_DIR = "/tmp/gpulaunch-locks"
ENV_LOCK_DIR = "GPULAUNCH_LOCK_DIR"
#: The admin's directory (``sudo gpulaunch locks init``), used when it exists and nothing else is set.
HARDENED_LOCK_DIR = "/var/lib/gpulaunch/locks"
ENV_HARDENED = "GPULAUNCH_HARDENED_LOCK_DIR"  # moves HARDENED_LOCK_DIR (tests; unusual layouts)
QUEUE_SUBDIR = "queue"  # a hardened dir's sticky, world-writable place for waiters' tickets
#: The file ``locks init`` leaves in a directory it set up (root-owned, 0444, written last): the one
#: sign of the hardened kind. In a directory only root can write, only root can have made it.
HARDENED_MARK = ".gpulaunch-locks-init"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
_FILE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: How often a failed non-blocking lock is retried before the GPU counts as taken. Another
#: gpulaunch may hold the lock for microseconds only (a probe, or a set it is about to give back).
_RETRY_DELAYS = (0.005, 0.02)


def hardened_default(environ: Mapping[str, str]) -> str:
    """Where an admin's hardened lock directory lives (``GPULAUNCH_HARDENED_LOCK_DIR`` moves it, for tests)."""
    path = environ.get(ENV_HARDENED) or HARDENED_LOCK_DIR
    if not os.path.isabs(path):
        raise UsageError(f"{ENV_HARDENED}: {path!r} is a relative path: jobs started elsewhere would not see its locks",
                         hint=f"give an absolute path, e.g. {os.path.abspath(path)}")
    return path


def lock_dir_path(option: str | None, environ: Mapping[str, str], example: bool = False) -> str:
    """The lock directory: ``--lock-dir`` (or, through the option layer, ``GPULAUNCH_LOCK_DIR`` and the
    config file), else ``GPULAUNCH_LOCK_DIR``, else the hardened directory if ``locks init`` made it,
    else /tmp's. On a bundled ``example`` machine (``--snapshot dgx-h100``), instead of /tmp's, the
    user's own :func:`example_lock_dir`: the demo GPUs are not real, so nobody else should be kept off
    them. A directory named by the user or set up by the admin (hardened) still wins: it was chosen on purpose.

    A relative path is refused: two jobs started in different directories would each lock files of
    their own, and one GPU would go to both.
    """
    chosen = option or environ.get(ENV_LOCK_DIR)
    if chosen:
        if not os.path.isabs(chosen):
            where = "--lock-dir" if option else ENV_LOCK_DIR
            raise UsageError(f"{where}: {chosen!r} is a relative path: jobs started elsewhere would not see its locks",
                             hint=f"give an absolute path, e.g. {os.path.abspath(chosen)}")
        return chosen
    hardened = hardened_default(environ)
    if is_hardened(hardened):
        return hardened
    return example_lock_dir(environ) if example else DEFAULT_LOCK_DIR


def example_lock_dir(environ: Mapping[str, str]) -> str:
    """Where launches on the bundled example machines reserve: per user, so that one user's demo
    never makes another's fail (their GPUs do not exist; only the user's own jobs share them)."""
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "gpulaunch-example-locks")
    return f"{DEFAULT_LOCK_DIR}-examples-{os.getuid()}"


def _root_only(st: os.stat_result) -> bool:
    """Owned by root and writable by no one else: no other user can add, remove or rename its files."""
    return st.st_uid == 0 and not st.st_mode & 0o022


def is_hardened(path: str) -> bool:
    """A directory ``gpulaunch locks init`` set up: only root can write it, and it bears root's mark.

    Never inferred from ownership alone: root's own private directory (``mktemp -d``) is not one.
    """
    try:
        st = os.lstat(path)
        if not (stat.S_ISDIR(st.st_mode) and _root_only(st)):
            return False
        mark = os.lstat(os.path.join(path, HARDENED_MARK))
    except OSError:
        return False
    return stat.S_ISREG(mark.st_mode) and _root_only(mark)


def admin_hint(lock_dir: str | None = None) -> str:
    """The fix for a hardened directory that needs setting up again, worded for whoever reads it."""
    target = "" if lock_dir is None or lock_dir == HARDENED_LOCK_DIR else f" {lock_dir}"
    if os.geteuid() == 0:
        return f"run `gpulaunch locks init{target}`"
    return f"ask an admin to run `sudo gpulaunch locks init{target}`"


def describe_dir(path: str) -> str:
    """``PATH (hardened: …)`` / ``PATH (not hardened: …)``, for ``config``."""
    if is_hardened(path):
        return f"{path} (hardened by `locks init`: its lock files cannot be removed or renamed)"
    if not os.path.lexists(path):
        return f"{path} (not created yet; not hardened)"
    return f"{path} (not hardened: a lock file's owner can remove it)"


def shared_by(lock_dir: str) -> frozenset[int]:
    """The users (uids) who could remove or rename a lock file another user holds here: this user, the
    owners of its lock files and, unless root, the directory's owner. Empty for a hardened directory
    (no one can) and for one that is not there or cannot be listed (nothing known)."""
    if is_hardened(lock_dir):
        return frozenset()
    try:
        st = os.lstat(lock_dir)
        names = [n for n in os.listdir(lock_dir) if n.endswith(".lock")]
    except OSError:
        return frozenset()
    users = {os.getuid()} | ({st.st_uid} if st.st_uid != 0 else set())
    for name in names[:4096]:  # one small file per GPU: a directory of thousands is not ours to read through
        try:
            users.add(os.lstat(os.path.join(lock_dir, name)).st_uid)
        except OSError:
            continue
    return frozenset(users)


def shared_note(lock_dir: str) -> str | None:
    """One line for ``ls`` and ``--explain`` when users share a lock dir of the /tmp kind (a lock file's
    owner could remove it while another user's job holds it); None when there is nothing to tell."""
    users = len(shared_by(lock_dir))
    if users < 2:
        return None
    return f"lock dir: {users} users can remove each other's locks (fix: sudo gpulaunch locks init)"


def queue_dir(lock_dir: str) -> str:
    """Where waiters' tickets live: the lock dir itself, or the world-writable ``queue/`` of a hardened one."""
    if not is_hardened(lock_dir):
        return lock_dir
    sub = os.path.join(lock_dir, QUEUE_SUBDIR)
    try:
        st = os.lstat(sub)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode) or (st.st_mode & 0o1002) != 0o1002:
        raise LockDirError(f"the hardened lock dir {lock_dir} has no usable {QUEUE_SUBDIR}/ for waiters",
                           hint=admin_hint(lock_dir) + " again")
    return sub


def current_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def prepare_dir(path: str, create: bool = True) -> bool:
    """Make sure ``path`` is a safe lock directory; False when it does not exist and ``create`` is off.

    Raises LockDirError, naming the problem and the fix, when it is unsafe or cannot be made.
    """
    if create:
        # Born 1777 (umask cleared for the mkdir): a root-made dir must never look hardened, even for a moment.
        old_umask = os.umask(0)
        try:
            os.mkdir(path, 0o1777)
        except FileExistsError:
            pass
        except FileNotFoundError:
            raise LockDirError(f"lock dir {path}: its parent directory does not exist",
                               hint=f"create it, or point --lock-dir / {ENV_LOCK_DIR} elsewhere") from None
        except OSError as exc:
            raise LockDirError(f"lock dir {path}: cannot create it ({exc.strerror})",
                               hint=f"point --lock-dir / {ENV_LOCK_DIR} at a directory you can write") from None
        else:
            # chmod as well, in case the file system dropped the sticky bit at mkdir.
            os.chmod(path, 0o1777)
        finally:
            os.umask(old_umask)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            raise LockDirError(f"lock dir {path} vanished while being set up") from None
        return False
    except OSError as exc:
        raise LockDirError(f"lock dir {path}: cannot read it ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise LockDirError(f"lock dir {path} is a symlink; refusing to follow it",
                           hint=f"remove it, or point --lock-dir / {ENV_LOCK_DIR} at a real directory")
    if not stat.S_ISDIR(st.st_mode):
        raise LockDirError(f"lock dir {path} exists but is not a directory",
                           hint=f"remove it, or point --lock-dir / {ENV_LOCK_DIR} elsewhere")
    if st.st_uid != os.getuid() and (st.st_mode & 0o1002) != 0o1002 and not is_hardened(path):
        raise LockDirError(
            f"lock dir {path} belongs to {_owner(st.st_uid)} and is not sticky and world-writable "
            f"(mode {stat.S_IMODE(st.st_mode):04o})",
            hint=f"ask an admin to run `sudo gpulaunch locks init {path}`, or use your own with --lock-dir"
            if st.st_uid == 0 else f"ask {_owner(st.st_uid)} to run `chmod 1777 {path}`, or use your own with --lock-dir",
        )
    return True


def lock_path(lock_dir: str, uuid: str) -> str:
    """The lock file of the device ``uuid`` (characters outside ``[A-Za-z0-9._-]`` become ``_``)."""
    return os.path.join(lock_dir, _SAFE_NAME.sub("_", uuid) + ".lock")


#: How deep launches may nest inside one another's reservations (a job, a sweep in it, a launch in that, ...).
MAX_DEPTH = 16


def nested_path(lock_dir: str, uuid: str, depth: int) -> str:
    """The lock file of ``uuid`` at nesting ``depth``: 0 is the machine-wide reservation (:func:`lock_path`);
    depth d + 1 shares out, among the children of the job that holds depth d, that job's GPU
    (:mod:`gpu_launch.share.nesting`). Those live where every user may create files (the lock dir, or a
    hardened one's ``queue/``)."""
    if depth == 0:
        return lock_path(lock_dir, uuid)
    return os.path.join(queue_dir(lock_dir), f"{_SAFE_NAME.sub('_', uuid)}.in{depth}.lock")


@dataclass(frozen=True)
class Unusable:
    """A lock file that cannot be used (a planted symlink, another user's read-only file, ...).

    Its GPU is *unavailable for reservation*: skipped by --auto/--fit, an error for --gpus; every
    other GPU works as usual.
    """

    path: str
    problem: str  # "is a symlink"
    owner: str
    hint: str
    #: Absent from a hardened directory, which only root can add to: no wait can make it usable.
    missing: bool = False

    def describe(self) -> str:
        from gpu_launch.choose.select import UNRESERVABLE

        return f"{UNRESERVABLE}: its lock file {self.path} {self.problem} (owner: {self.owner})"

    def short(self) -> str:
        """For `ls`'s RESERVED BY column."""
        return f"unavailable: lock file {self.problem} (owner: {self.owner})"


class UnusableLockFile(LockDirError):
    """A lock file that is there but cannot be used: its GPU alone is unavailable for reservation."""

    def __init__(self, unusable: Unusable) -> None:
        super().__init__(f"{unusable.path} {unusable.problem} (owner: {unusable.owner})", hint=unusable.hint)
        self.unusable = unusable


def _unusable(path: str, problem: str) -> UnusableLockFile:
    """The error for an unusable lock file, with a hint its reader can act on (whose file, which command)."""
    try:
        uid = os.lstat(path).st_uid
    except OSError:
        uid = None
    owner = _owner(uid) if uid is not None else "nobody known"
    hardened = is_hardened(os.path.dirname(path))
    if uid == os.getuid() and not hardened:
        hint = f"it is yours: remove it (rm {path})"
    elif hardened:
        hint = admin_hint(os.path.dirname(path)) + ", which puts it right"
    elif uid == 0:
        hint = f"it is root's: remove it (rm {path})" if os.geteuid() == 0 else \
            "ask an admin to remove it, or to run `sudo gpulaunch locks init`"
    else:
        hint = f"ask {owner} to remove it, or an admin to run `sudo gpulaunch locks init`"
    return UnusableLockFile(Unusable(path, problem, owner, hint))


def open_shared(path: str, create: bool = True, mode: int = 0o666) -> int | None:
    """Open a file shared by all users, never following a symlink; None if absent and not ``create``.

    The descriptor is close-on-exec. Raises LockDirError for a symlink, a non-regular file, or
    a file that cannot be opened read-write.
    """
    while True:
        try:
            fd = os.open(path, _FILE_FLAGS)
            break
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            raise _open_error(path, exc) from None
        try:
            fd = os.open(path, _FILE_FLAGS | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue  # someone created it between our two opens: open theirs
        except OSError as exc:
            raise _open_error(path, exc) from None
        os.fchmod(fd, mode)  # umask-independent, so other users can open it read-write later
        break
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _unusable(path, "is not a regular file; refusing to use it as a lock")
    return fd


def _open_error(path: str, exc: OSError) -> LockDirError:
    directory = os.path.dirname(path)
    if exc.errno in (errno.EACCES, errno.EPERM) and not os.path.lexists(path) and is_hardened(directory):
        return UnusableLockFile(Unusable(path, "is missing from the hardened lock dir (a GPU added since it was set "
                                         "up?), and only root may create it", "root, the directory's",
                                         admin_hint(directory) + " again", missing=True))
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if exc.errno == errno.ELOOP or (st is not None and stat.S_ISLNK(st.st_mode)):
        return _unusable(path, "is a symlink; refusing to follow it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "special"
        return _unusable(path, f"is not a regular file ({kind}); refusing to use it as a lock")
    if st is not None and exc.errno in (errno.EACCES, errno.EPERM):
        return _unusable(path, f"cannot be opened read-write by you (mode {stat.S_IMODE(st.st_mode):04o}; "
                               "lock files must be 0666)")
    if st is not None:
        return _unusable(path, f"cannot be opened ({exc.strerror})")
    return LockDirError(f"cannot open lock file {path} ({exc.strerror})",
                        hint="check its owner and mode (it should be 0666), or use your own --lock-dir")


@dataclass(frozen=True)
class Holder:
    """Who holds a reservation, as its lock file says. Fields are None when the text was unreadable."""

    pid: int | None = None
    user: str | None = None
    started: float | None = None  # seconds since the epoch
    command: str | None = None
    host: str | None = None

    def describe(self, now: float | None = None, age: bool = True) -> str:
        """``alice (pid 4242, 1h02m: python train.py)``, or a neutral phrase when unknown."""
        if self.pid is None and self.user is None:
            return "another gpulaunch job"
        bits = []
        if self.pid is not None:
            bits.append(f"pid {self.pid}")
        if self.started is not None and age:
            from gpu_launch.units import fmt_duration

            bits.append(f"for {fmt_duration(max(0.0, (now or time.time()) - self.started))}")
        from gpu_launch.text import printable  # another user's text: escaped, never raw on a terminal

        detail = ", ".join(bits)
        if self.command:
            command = printable(" ".join(self.command.split()))  # one line, and no raw escapes
            command = command if len(command) <= 40 else command[:39] + "…"
            detail += f": {command}"
        return f"{printable(self.user) if self.user else '?'} ({detail})"


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
    return Holder(pid, pick("user", str), float(started) if started is not None else None,  # type: ignore[arg-type]
                  pick("command", str), pick("host", str))  # type: ignore[arg-type]


def _write_holder(fd: int, pid: int, argv: Sequence[str]) -> None:
    import shlex

    doc = {"pid": pid, "user": current_user(), "uid": os.getuid(), "started": round(time.time(), 3),
           "command": shlex.join(argv), "host": os.uname().nodename}
    data = (json.dumps(doc) + "\n").encode("utf-8")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the lock is what counts; a missing note only makes `ls` say "another gpulaunch job"


def probe(lock_dir: str, uuid: str) -> Holder | None:
    """Who holds ``uuid``'s reservation, or None when it is free. Creates nothing, takes nothing.

    A shared non-blocking lock on a separate descriptor succeeds exactly when no one holds the
    exclusive one; it is dropped at once.
    """
    path = lock_path(lock_dir, uuid)
    fd = open_shared(path, create=False)
    if fd is None:
        if os.geteuid() != 0 and is_hardened(lock_dir):  # we could not create it: say so now, not at lock time
            raise _open_error(path, OSError(errno.EACCES, "Permission denied"))
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def probe_at(lock_dir: str, uuid: str, depth: int) -> Holder | None:
    """Who holds ``uuid`` at nesting ``depth`` (None: free, or no such file yet). Takes nothing."""
    if depth == 0:
        return probe(lock_dir, uuid)
    fd = open_shared(nested_path(lock_dir, uuid, depth), create=False)
    if fd is None:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


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
    job, waiting for a sibling to give back one of the job's GPUs).
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
        self.held = self._held()

    def _held(self) -> frozenset[object]:
        held = set()
        for uuid, fd in self.fds.items():
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                held.add(uuid)
                continue
            except OSError:
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
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


def ancestors(skip: Container[int] = ()) -> tuple[int, ...]:
    """The pids of this process's parent, grandparent, … as this PID namespace's /proc says (Linux; empty
    where unreadable). Kernel facts, not the pid text of a lock file, which anyone can write. Those in
    ``skip`` are passed over (walked through, not listed)."""
    found: list[int] = []
    seen: set[int] = set()
    pid = os.getppid()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        if pid not in skip:
            found.append(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat_line = fh.read()
            pid = int(stat_line[stat_line.rindex(b")") + 2:].split()[1])  # field 4: ppid
        except (OSError, ValueError, IndexError):
            break
    return tuple(found)


def _fd_numbers(pid: str) -> list[int]:
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/fd") if name.isdigit()]
    except OSError:
        try:
            return [int(name) for name in os.listdir("/dev/fd") if name.isdigit()] if pid == "self" else []
        except OSError:
            return []


def _file_keys(paths: Mapping[tuple[str, int], str]) -> dict[tuple[int, int], tuple[str, int]]:
    """(device, inode) of each existing regular lock file -> its key."""
    keys: dict[tuple[int, int], tuple[str, int]] = {}
    for key, path in paths.items():
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            keys[(st.st_dev, st.st_ino)] = key
    return keys


def _ancestor_holds(pid: int, fd: int) -> bool:
    """Whether ``pid``'s descriptor ``fd`` holds an exclusive flock and is handed down through exec.

    ``/proc/PID/fdinfo/FD`` lists the locks held by that very open file description (``lock:`` lines,
    Linux ≥ 4.1). A close-on-exec descriptor is not counted: it is a gpulaunch's own working copy
    (``each`` keeps one for a job it is about to start), not its job's reservation.
    """
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as fh:
            info = fh.read(65536).decode("ascii", "replace")
    except OSError:
        return False
    flags = next((line.split()[1] for line in info.splitlines() if line.startswith("flags:")), None)
    try:
        if flags is None or int(flags, 8) & os.O_CLOEXEC:
            return False
    except ValueError:
        return False
    return any(line.startswith("lock:") and " FLOCK " in line and " WRITE " in line for line in info.splitlines())


def own_reservations(lock_dir: str, held: Iterable[str]) -> frozenset[str]:
    """Which of the ``held`` devices this process's job holds machine-wide (depth 0): see :func:`lineage_holds`."""
    return frozenset(uuid for uuid, _ in lineage_holds({(uuid, 0): lock_path(lock_dir, uuid) for uuid in held}))


def lineage_holds(paths: Mapping[tuple[str, int], str], mine: Container[object] = (),
                  skip_pids: Container[int] = ()) -> set[tuple[str, int]]:
    """Which of the held lock files ``paths`` ((uuid, depth) -> path) this process's job holds, decided by the locks.

    A gpulaunch run inside a job (a script started by gpulaunch calls gpulaunch) may use its job's
    GPUs. It knows them from lock descriptors, never from the pid written in the file (anyone can
    write it, and a pid means nothing across PID namespaces):

    * an inherited descriptor (not close-on-exec) on the same file (device and inode): ``flock``
      on an open file description that already holds the lock succeeds, so a non-blocking
      exclusive ``flock`` on it proves it is ours (the file is held, so it cannot be a fresh lock);
    * or one of this process's real ancestors (``/proc``, this PID namespace) holds the lock through
      a descriptor it hands down through exec, as shown by ``/proc/PID/fdinfo`` (for a job that
      started us with its descriptors closed, e.g. Python's ``subprocess``, which closes them).

    Keys in ``mine`` are never the job's: they are this very process's own reservations (the Python
    API's), taken for itself, not handed down to it. They are checked after the descriptors, so a
    reservation another thread registers and then makes inheritable is never mistaken for an inherited
    one. Ancestors in ``skip_pids`` (the processes this one was forked from, without an exec) are
    passed over: what they hold through the API is theirs; what they had when they forked, this
    process holds too, as inherited descriptors.
    """
    keys = _file_keys(paths)
    if not keys:
        return set()
    own: set[tuple[str, int]] = set()
    for fd in _fd_numbers("self"):
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not os.get_inheritable(fd):
                continue
        except OSError:
            continue
        key = keys.get((st.st_dev, st.st_ino))
        if key is None or key in own:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue
        own.add(key)
    if len(own) < len(keys):
        for pid in ancestors(skip_pids):
            for fd in _fd_numbers(str(pid)):
                try:
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                key = keys.get((st.st_dev, st.st_ino))
                if key is not None and key not in own and _ancestor_holds(pid, fd):
                    own.add(key)
    return {key for key in own if key not in mine}


def try_lock(lock_dir: str, uuid: str, depth: int = 0) -> int | None:
    """Take ``uuid``'s reservation (at nesting ``depth``): the locked descriptor, or None when someone else holds it."""
    fd = open_shared(nested_path(lock_dir, uuid, depth))
    assert fd is not None
    try:
        for delay in (*_RETRY_DELAYS, None):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if delay is None:
                    break
                time.sleep(delay)
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
            _write_holder(fd, pid, argv)

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
