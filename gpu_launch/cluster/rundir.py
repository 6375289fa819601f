"""The run's own directories and small files on a filesystem other users may reach.

A run over several nodes (``LOGDIR/.nodes/JOB.STEP/``) and an ``each --slurm`` array (``LOGDIR/.slurm/``)
publish small JSON files on a filesystem every node sees: often a shared scratch that every user can
write (mode 1777) or a team's directory. Nothing another user wrote is believed there:

* **Directories** are made here with ``mkdir`` (mode 0700; 0750 with ``GPULAUNCH_TEAM_DIR=1``, for a
  team that reads each other's logs) and one that already exists is used only when it is a directory
  (not a symlink) of this user's that no one else can write (group-writable only with
  ``GPULAUNCH_TEAM_DIR=1``). The directory above them must not let another user rename them away:
  this user's or root's, and, when others can write it, sticky (``/tmp``, a 1777 scratch) or, with
  ``GPULAUNCH_TEAM_DIR=1``, writable by the group only.
* **Files** are written ``O_CREAT|O_EXCL|O_NOFOLLOW`` under a random name in that directory, ``fsync``-ed
  and renamed into place: a symlink planted at any name is never followed, a reader never sees half.
* **Read back** only when the name is a regular file of this user's, at most :data:`MAX_FILE` bytes
  (a 300 MB file is refused from its size, never read), and a JSON object; its fields are the caller's
  to check (:func:`gpu_launch.cluster.nodes.head_record`).

Anything else is one line, exit 11 (:class:`~gpu_launch.errors.RendezvousFailed`), naming the path.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping

from gpu_launch.errors import RendezvousFailed

__all__ = ["TEAM_ENV", "MAX_FILE", "team", "make_dirs", "check_top", "check_dir", "write_new", "read_own", "Missing"]

TEAM_ENV = "GPULAUNCH_TEAM_DIR"
MAX_FILE = 64 << 10  # bytes: a head's record is ~150
_HINT = ("use a directory of your own on the shared filesystem (mkdir -m 700 /scratch/$USER/logs; --log-dir); "
         "docs/several-nodes.md says what a shared scratch may be")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Missing(Exception):
    """The file is not there (yet): another node may still be writing it."""


def team(environ: Mapping[str, str]) -> bool:
    """Whether the user asked for a team directory (``GPULAUNCH_TEAM_DIR=1``)."""
    return environ.get(TEAM_ENV, "").strip().lower() in ("1", "yes", "true", "on")


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _own_group(gid: int) -> bool:
    """Whether ``gid`` is this user's private group (Debian's umask 002 makes directories 0775 for it):
    the user's primary group, named as the user, with no other member listed."""
    if gid != os.getgid():
        return False
    try:
        import grp
        import pwd

        group, user = grp.getgrgid(gid), pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return group.gr_name == user.pw_name and not [m for m in group.gr_mem if m != user.pw_name]


def _refuse(path: str, why: str) -> RendezvousFailed:
    return RendezvousFailed(f"{path}: {why}: another user could forge what the nodes of this run tell each other", hint=_HINT)


def check_top(path: str, is_team: bool) -> None:
    """The log directory, which holds the run's directories, must not let another user rename them away
    (see the module docstring)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise RendezvousFailed(f"{path}: cannot use it ({exc.strerror})", hint=_HINT) from None
    sticky = st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o002 and not sticky:
        raise _refuse(path, "every user can write it and it is not sticky (chmod +t)")
    if st.st_mode & 0o020 and not sticky and not is_team and not _own_group(st.st_gid):
        raise _refuse(path, f"its group can write it (set {TEAM_ENV}=1 if it is your team's directory)")
    if st.st_uid not in (os.getuid(), 0) and not is_team:
        raise _refuse(path, f"belongs to {_owner(st.st_uid)}")


def check_dir(path: str, is_team: bool) -> None:
    """``path`` is a directory of this user's that no one else can write (see the module docstring)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RendezvousFailed(f"{path}: cannot use it ({exc.strerror})", hint=_HINT) from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is a symlink" if stat.S_ISLNK(st.st_mode) else "is not a directory")
    if st.st_uid != os.getuid():
        raise _refuse(path, f"was made by {_owner(st.st_uid)}, not by you")
    if st.st_mode & 0o002 or st.st_mode & 0o020 and not is_team:
        raise _refuse(path, f"others can write it (mode {stat.S_IMODE(st.st_mode):o})"
                      + ("" if st.st_mode & 0o002 else f"; set {TEAM_ENV}=1 if it is your team's choice"))


def make_dirs(top: str, parts: tuple[str, ...], environ: Mapping[str, str]) -> str:
    """``top/parts[0]/parts[1]...``: ``top`` (the log directory, made 0755 when missing) checked, then each
    part made with mkdir (0700, or 0750 for a team) or, when it exists, checked (see the module docstring)."""
    is_team = team(environ)
    try:
        os.makedirs(top, 0o755, exist_ok=True)
    except OSError as exc:
        raise RendezvousFailed(f"{top}: cannot create it ({exc.strerror})", hint="pick another --log-dir") from None
    check_top(top, is_team)
    path = top
    old = os.umask(0o027 if is_team else 0o077)
    try:
        for part in parts:
            path = os.path.join(path, part)
            try:
                os.mkdir(path, 0o750 if is_team else 0o700)
            except FileExistsError:
                pass
            except OSError as exc:
                raise RendezvousFailed(f"{path}: cannot create it ({exc.strerror})", hint=_HINT) from None
            check_dir(path, is_team)
    finally:
        os.umask(old)
    return path


def write_new(directory: str, name: str, text: str, environ: Mapping[str, str]) -> str:
    """``text`` as ``directory/name``: written under a random name (``O_EXCL|O_NOFOLLOW``), fsync-ed and
    renamed into place; ``directory`` was made and checked by :func:`make_dirs`. The path written."""
    path = os.path.join(directory, name)
    temp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o640 if team(environ) else 0o600)
    except OSError as exc:
        raise RendezvousFailed(f"{path}: cannot write it ({exc.strerror})", hint=_HINT) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except OSError as exc:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise RendezvousFailed(f"{path}: cannot write it ({exc.strerror})", hint=_HINT) from None
    return path


def read_own(path: str) -> dict[str, object]:
    """The JSON object at ``path`` when it is a regular file of this user's of at most :data:`MAX_FILE`
    bytes; :class:`Missing` when there is none; one line, exit 11, naming the file otherwise."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise Missing(path) from None
    except OSError as exc:
        why = "is a symlink" if os.path.islink(path) else f"cannot be read ({exc.strerror})"
        raise _refuse(path, why) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "is not a regular file")
        if st.st_uid != os.getuid():
            raise _refuse(path, f"was written by {_owner(st.st_uid)}, not by you")
        if st.st_size > MAX_FILE:
            raise _refuse(path, f"is {st.st_size} bytes, more than a rendezvous file's {MAX_FILE}")
        raw = os.read(fd, MAX_FILE + 1)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw) if len(raw) <= MAX_FILE else None
    except ValueError as exc:
        raise RendezvousFailed(f"{path}: not JSON ({exc})", hint="remove it and start the run again") from None
    if not isinstance(data, dict):
        raise RendezvousFailed(f"{path}: not a JSON object", hint="remove it and start the run again")
    return data
