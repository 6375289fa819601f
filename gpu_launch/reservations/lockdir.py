"""The lock directory, its kinds, and its lock files opened safely.

Every GPU (or MIG device) has one lock file, named by its UUID, in a lock directory shared by all
users of the machine (``--lock-dir`` / ``GPULAUNCH_LOCK_DIR`` / config file, else the hardened
``/var/lib/gpulaunch/locks`` an admin made with ``gpulaunch locks init`` if it exists, else
``/tmp/gpulaunch-locks``). Lock files are never deleted (deleting one while it is locked would let a
second job lock a new file of the same name), so the directory keeps one small file per GPU.

Safety on a directory every user can write to:

* The directory is created mode 1777 (sticky, world-writable, like ``/tmp``) whatever the umask.
  An existing directory owned by another user is used only when it is sticky and world-writable,
  so its owner alone cannot have made it a trap; anything else is a clear error.
* Lock files are opened with ``O_NOFOLLOW``: a symlink planted at a lock path is refused, never
  followed (it could otherwise make gpulaunch create or truncate a file of the victim's).
  Anything that is not a regular file is refused too, as is a file we cannot open read-write:
  that GPU alone becomes *unavailable for reservation* (:class:`Unusable`); the others go on.
* In the sticky /tmp kind, whoever created a lock file can still remove or rename it; only the
  hardened kind (root-owned, 0755, files made by root: reservations/hardening.py) prevents that, at every
  nesting depth: ``locks init`` makes the nested lock files too (:func:`nested_path`). A
  directory is of the hardened kind only when ``locks init`` made it: it bears the root-owned mark
  :data:`HARDENED_MARK` that only root can have put there, never because of who owns it (root's own
  ``mktemp -d`` is a private directory like any user's, and works for everything).
* An existing file is opened without ``O_CREAT`` first, so Linux's ``fs.protected_regular``
  (which forbids ``O_CREAT`` on another user's file in a sticky directory) does not get in the way;
  a new one is created ``O_EXCL`` and ``fchmod``-ed to 0666 so every user can lock it later.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping

from gpu_launch.errors import LockDirError, UsageError
from gpu_launch.base.records import dataclass

__all__ = [
    "DEFAULT_LOCK_DIR", "ENV_LOCK_DIR", "HARDENED_LOCK_DIR", "ENV_HARDENED", "QUEUE_SUBDIR", "HARDENED_MARK",
    "MAX_DEPTH", "lock_dir_path", "hardened_default", "example_lock_dir", "is_hardened", "admin_hint",
    "describe_dir", "shared_by", "shared_note", "queue_dir", "prepare_dir",
    "lock_path", "nested_path", "open_shared", "open_error", "Unusable", "UnusableLockFile",
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
    """What protects ``path``'s locks, for ``config``: hardened, or not (and why)."""
    if is_hardened(path):
        return "hardened by `locks init`: its lock files cannot be removed or renamed"
    if not os.path.lexists(path):
        return "not created yet; not hardened"
    return "not hardened: a lock file's owner can remove it"


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


#: How deep reservations nest: depth 0 is the machine-wide one (a job), depths 1 to MAX_DEPTH - 1 are
#: launches nested one inside another (a sweep in a job, a launch in that, ...). ``locks init`` makes
#: the files of every depth, so the limit is documented (docs/sharing.md, "Nested launches").
MAX_DEPTH = 8


def nested_path(lock_dir: str, uuid: str, depth: int) -> str:
    """The lock file of ``uuid`` at nesting ``depth``: 0 is the machine-wide reservation (:func:`lock_path`);
    depth d + 1 shares out, among the children of the job that holds depth d, that job's GPU
    (:mod:`gpu_launch.reservations.nesting`). They live beside it, in the lock dir itself: in a hardened one
    ``locks init`` made them root's, like the machine-wide ones, so no user can remove, replace or
    plant one that a nested job relies on."""
    if depth == 0:
        return lock_path(lock_dir, uuid)
    return os.path.join(lock_dir, f"{_SAFE_NAME.sub('_', uuid)}.in{depth}.lock")


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
            raise open_error(path, exc) from None
        try:
            fd = os.open(path, _FILE_FLAGS | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue  # someone created it between our two opens: open theirs
        except OSError as exc:
            raise open_error(path, exc) from None
        os.fchmod(fd, mode)  # umask-independent, so other users can open it read-write later
        break
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _unusable(path, "is not a regular file; refusing to use it as a lock")
    return fd


def open_error(path: str, exc: OSError) -> LockDirError:
    directory = os.path.dirname(path)
    if exc.errno in (errno.EACCES, errno.EPERM) and not os.path.lexists(path) and is_hardened(directory):
        return UnusableLockFile(Unusable(path, "is missing from the hardened lock dir (set up before this GPU was "
                                         "added, or by an older gpulaunch?), and only root may create it",
                                         "root, the directory's",
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
