"""``gpulaunch locks init``: the lock directory a lab admin sets up once, which no user can tamper with.

In the /tmp default every user may create files in the lock directory, and whoever created a lock
file first may remove or rename it (the sticky bit protects it from everyone else, not from its
owner): that user could take a GPU from under another user's running job. A *hardened* directory is
owned by root and writable by root alone (mode 0755), with one root-owned 0666 lock file per GPU and
MIG device of the machine, for every nesting depth (``UUID.lock``, ``UUID.in1.lock`` … up to
:data:`~gpu_launch.reservations.lockdir.MAX_DEPTH`: a launch nested in a job locks one level deeper).
Everyone can open and lock them; only root can add, remove or rename anything, so no user can take
away or plant a file another user's reservation relies on, at any depth. Waiters' tickets go in its
``queue/`` subdirectory (sticky and world-writable, like /tmp: a ticket is not a reservation, so its
owner removing it only gives up their own place); the queue needs no lock file every user can hold
(:mod:`gpu_launch.reservations.waitqueue`), so it has none (a ``queue.lock`` an older gpulaunch made is left
alone: nothing uses it). Last, it leaves its mark (:data:`~gpu_launch.reservations.lockdir.HARDENED_MARK`),
the one thing that makes gpulaunch treat a directory as hardened.

Running it again is safe while jobs hold GPUs: existing lock files are kept (their locks stay valid)
and only have owner and mode put right; files for new GPUs are added. A root-owned 0666 lock file is
kept even when a user has hard-linked it elsewhere (anyone may link a file they can read and write):
replacing it would let a second job lock a new file while a running job holds the old one.

Root works here in directories users may have prepared, so nothing is done by path after a check:
the directory is reached from ``/`` one ``openat(O_DIRECTORY|O_NOFOLLOW)`` at a time, changed
through its descriptor (``fchown``/``fchmod``) and its files opened relative to it, each checked with
``fstat`` before root changes it. A symlink is never followed, a hard link never chmod-ed (its
target may be any file). And a hardened directory is refused under a parent another user can write:
that user could rename it away and put one of their own in its place.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_launch.errors import LockDirError
from gpu_launch.reservations.lockdir import HARDENED_MARK, MAX_DEPTH, QUEUE_SUBDIR, nested_path

__all__ = ["InitReport", "init_dir"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MARK_TEXT = b"made by `gpulaunch locks init`: root-owned lock files no user can remove or rename\n"


@dataclass(frozen=True)
class InitReport:
    path: str
    created: tuple[str, ...]  # lock files made now (names in the directory, every depth)
    kept: tuple[str, ...]  # lock files that were there already (owner and mode put right)
    replaced: tuple[str, ...]  # things at a lock path that were not plain files (symlinks, hard links, ...): removed


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _may_guard(parent: os.stat_result) -> bool:
    """Whether ``parent`` can keep users from renaming its entries: root's, and writable by root alone
    or sticky (like /tmp, where only an entry's owner may rename it). Checked before making anything.
    Mode bits only: a POSIX ACL that lets a user write there is not seen."""
    return parent.st_uid == 0 and (not parent.st_mode & 0o022 or bool(parent.st_mode & stat.S_ISVTX))


def _guards(parent: os.stat_result, child: os.stat_result) -> bool:
    """Whether no user but root can rename ``child`` (an entry of ``parent``) away."""
    return _may_guard(parent) and (not parent.st_mode & 0o022 or child.st_uid == 0)


def _refuse_parent(parent_path: str, parent: os.stat_result, path: str) -> LockDirError:
    who = _owner(parent.st_uid) if parent.st_uid != 0 else "users other than root"
    return LockDirError(f"locks init: {parent_path} can be written by {who} (mode {stat.S_IMODE(parent.st_mode):04o}), "
                        f"who could rename {path} away and put their own in its place",
                        hint="choose a directory under parents only root can write, e.g. the default "
                             "/var/lib/gpulaunch/locks")


def _open_dir(parent_fd: int, name: str, path: str, mode: int) -> int:
    """Open the directory ``name`` in ``parent_fd`` (made with ``mode`` if absent), never through a symlink."""
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise LockDirError(f"locks init: {path} is a symlink; refusing to follow it",
                               hint="remove it, or give the real directory: gpulaunch locks init DIR") from None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise LockDirError(f"locks init: {path} exists and is not a directory",
                               hint="remove it, or give another directory: gpulaunch locks init DIR") from None
        raise LockDirError(f"locks init: cannot open {path} ({exc.strerror})") from None


def _walk_to_parent(parent_path: str, path: str) -> int:
    """A descriptor of ``parent_path`` reached from ``/`` one component at a time (missing ones made
    root's, 0755); refused where a user other than root could rename a component away."""
    fd = os.open("/", _DIR_FLAGS)
    here = "/"
    try:
        st = os.fstat(fd)
        for name in [p for p in parent_path.split("/") if p]:
            if not _may_guard(st):
                raise _refuse_parent(here, st, path)
            child_path = os.path.join(here, name)
            child = _open_dir(fd, name, child_path, 0o755)
            child_st = os.fstat(child)
            if not _guards(st, child_st):
                os.close(child)
                raise _refuse_parent(here, st, path)
            os.close(fd)
            fd, st, here = child, child_st, child_path
    except BaseException:
        os.close(fd)
        raise
    return fd


def _a_lock_file(st: os.stat_result) -> bool:
    """A lock file ``locks init`` made: regular, root's, 0666. Any number of links: a user may have
    hard-linked it elsewhere (it is theirs to read and write), which gives them nothing they lacked."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o666


def _clear(dir_fd: int, name: str) -> bool:
    """Remove what sits at ``name`` unless it is a plain file (regular, one link) or one of our lock
    files (kept: a job may hold it): True if it did."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(st.st_mode) and (st.st_nlink == 1 or _a_lock_file(st)):
        return False
    if stat.S_ISDIR(st.st_mode):
        raise LockDirError(f"locks init: {name} in the lock dir is a directory",
                           hint="remove it, then run `gpulaunch locks init` again")
    # A planted symlink, fifo, or a hard link to some file elsewhere (chmod-ing it would change that
    # file): removing the name touches nothing else, and only root can put things here from now on.
    os.unlink(name, dir_fd=dir_fd)
    return True


def _ensure_file(dir_fd: int, name: str, mode: int = 0o666, text: bytes | None = None) -> str:
    """Make ``name`` a root-owned regular file of ``mode``: "created", "kept" or "replaced"."""
    replaced = _clear(dir_fd, name)
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        outcome = "kept"
    except FileNotFoundError:
        fd = os.open(name, _FILE_FLAGS | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
        outcome = "created"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_nlink != 1 and not _a_lock_file(st)):  # only root writes here now
            raise LockDirError(f"locks init: {name} in the lock dir changed while being set up",
                               hint="run `gpulaunch locks init` again")
        os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
        if text is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text, 0)
    finally:
        os.close(fd)
    return "replaced" if replaced else outcome


def _ensure_queue(dir_fd: int, path: str) -> None:
    """The sticky, world-writable ``queue/`` for waiters' tickets."""
    try:
        st = os.stat(QUEUE_SUBDIR, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(QUEUE_SUBDIR, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    fd = _open_dir(dir_fd, QUEUE_SUBDIR, os.path.join(path, QUEUE_SUBDIR), 0o700)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o1777)
    finally:
        os.close(fd)


def init_dir(path: str, uuids: Sequence[str]) -> InitReport:
    """Create or repair the hardened lock directory at ``path`` for these device UUIDs (as root)."""
    if os.geteuid() != 0:
        raise LockDirError("locks init: only root can set up a hardened lock directory (its files must be root's)",
                           hint="run it as root: sudo gpulaunch locks init")
    absolute = os.path.abspath(path)
    parent_path, name = os.path.split(absolute)
    if not name:
        raise LockDirError("locks init: give a directory below /, not / itself",
                           hint="e.g. gpulaunch locks init /var/lib/gpulaunch/locks")
    # Symlinks above the directory are an admin's layout (/var/run -> /run): resolved once, then
    # walked with O_NOFOLLOW, so one swapped in meanwhile is refused rather than followed.
    parent_path = os.path.realpath(parent_path)
    try:
        return _init_at(os.path.join(parent_path, name), parent_path, name, uuids)
    except OSError as exc:  # a read-only or full file system, ...: one line, never a traceback
        where = f" {exc.filename}" if exc.filename else ""
        raise LockDirError(f"locks init: {absolute}:{where} {exc.strerror}",
                           hint="fix that, then run `gpulaunch locks init` again") from None


def _init_at(path: str, parent_path: str, name: str, uuids: Sequence[str]) -> InitReport:
    parent_fd = _walk_to_parent(parent_path, path)
    try:
        parent_st = os.fstat(parent_fd)
        if not _may_guard(parent_st):
            raise _refuse_parent(parent_path, parent_st, path)
        dir_fd = _open_dir(parent_fd, name, path, 0o700)
        try:
            os.fchown(dir_fd, 0, 0)  # first: from now on no user can add, remove or rename anything in it
            os.fchmod(dir_fd, 0o755)
            st = os.fstat(dir_fd)
            parent_st = os.fstat(parent_fd)
            if not _guards(parent_st, st):
                raise _refuse_parent(parent_path, parent_st, path)
            now = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise LockDirError(f"locks init: {path} was replaced while being set up",
                                   hint="find out who did it; then run `gpulaunch locks init` again")
            return _fill(dir_fd, path, uuids)
        finally:
            os.close(dir_fd)
    finally:
        os.close(parent_fd)


def _fill(dir_fd: int, path: str, uuids: Sequence[str]) -> InitReport:
    done: dict[str, list[str]] = {"created": [], "kept": [], "replaced": []}
    for uuid in dict.fromkeys(uuids):
        for depth in range(MAX_DEPTH):  # the machine-wide lock file and one per nesting depth
            name = os.path.basename(nested_path(path, uuid, depth))
            done[_ensure_file(dir_fd, name)].append(name)
    _ensure_queue(dir_fd, path)
    _ensure_file(dir_fd, HARDENED_MARK, 0o444, _MARK_TEXT)  # last: a half-made directory is not hardened
    return InitReport(path, tuple(done["created"]), tuple(done["kept"]), tuple(done["replaced"]))
