"""The user's job directory: one record (``ID.json``) and one log (``ID.log``) per job.

Where: ``$XDG_STATE_HOME/gpulaunch/jobs``, else ``~/.local/state/gpulaunch/jobs`` (state that must
outlive a reboot: not ``$XDG_RUNTIME_DIR``). It is made mode 0700 and its files 0600, so another
user can neither read a job's log or record nor signal it through them: the kernel's file modes
decide, not a check of ours. It is written with the care of the lock files
(:mod:`gpu_launch.reservations.lockdir`): the directory is opened once without following a symlink and
must be the user's own; every file is opened relative to it with ``O_NOFOLLOW``; a record is
replaced atomically (written to a new file, ``fsync``-ed, renamed over the old one), so a reader
sees the old record or the new one, never half of one, and a crash or a reboot loses neither.

Ids are small numbers, unique per user: a counter kept under an exclusive lock (``.seq``), and the
log file of a new id is created ``O_EXCL``. A job's supervisor holds a lock on its log for as long as
it lives (:meth:`JobDir.alive`): that, not a pid, says whether a job that is not over is still looked after.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
from collections.abc import Mapping

from gpu_launch.errors import JobError, UsageError
from gpu_launch.jobs import recordfile
from gpu_launch.base.records import dataclass

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Job", "JobDir", "job_dir_path", "FINAL", "ACTIVE", "MAX_ID", "check_id", "disk_error"]

#: States a record can hold. The supervisor writes each; ``lost`` and ``lost at reboot`` are never
#: written, they are what :mod:`gpu_launch.jobs.status` concludes from a record that is not over.
ACTIVE = ("waiting", "running")
FINAL = ("done", "failed", "cancelled", "timeout")
_ID = re.compile(r"^[1-9][0-9]{0,8}$")
MAX_ID = 999_999_999  # the largest id (nine digits): ids are checked against _ID wherever they are read
_FULL = (errno.ENOSPC, errno.EDQUOT)
_RECORD = re.compile(r"^([1-9][0-9]{0,8})\.json$")
_MAX_RECORD = recordfile.MAX_RECORD
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = recordfile.FILE_FLAGS


def job_dir_path(environ: Mapping[str, str]) -> str:
    """``$XDG_STATE_HOME/gpulaunch/jobs`` (an absolute one, as the XDG spec says), else ``~/.local/state/...``."""
    base = environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".local", "state")
    return os.path.join(base, "gpulaunch", "jobs")


def check_id(text: str) -> str:
    """A job id as the user typed it (``3``, ``#3``), checked: digits only, so it can never name another file."""
    word = text[1:] if text.startswith("#") else text
    if not _ID.fullmatch(word):  # (match: "$" would let "1\n" through)
        raise UsageError(f"{text!r} is not a job id", hint="job ids are numbers: `gpulaunch jobs` lists them")
    return word


@dataclass(frozen=True)
class Job:
    """A job's record, as its ``ID.json`` holds it (the keys in this order)."""

    id: str
    state: str  # one of ACTIVE or FINAL, as last recorded
    argv: tuple[str, ...]  # the command
    options: tuple[str, ...]  # the launch's options as given: the launch runs `gpulaunch OPTIONS -- ARGV`
    cwd: str
    host: str
    boot_id: str  # the boot it was submitted in ("" where the kernel does not say)
    lock_dir: str  # where its launch queues and reserves
    submitted: float
    started: float | None = None  # when the command was exec'd
    ended: float | None = None
    pid: int | None = None  # the launch's pid, which the command keeps (exec)
    supervisor: int | None = None
    gpus: str | None = None  # the physical GPUs it got ("2,3"; "" on the CPU fallback)
    exit_code: int | None = None  # the command's exit status (failed: gpulaunch's own)
    signal: str | None = None  # "SIGTERM" when a signal ended it
    note: str | None = None  # why it failed to start, was cancelled, ...
    limit: float | None = None  # its --time, seconds: the supervisor ends it there (state timeout)
    grace: float | None = None  # its --grace, seconds from SIGTERM to SIGKILL at the limit (None: the default, 10)

    def to_json(self) -> dict[str, Any]:
        # "grace" only when --grace was given: a record without it is written as before (the default, 10 s)
        doc: dict[str, Any] = {
               "id": self.id, "state": self.state, "argv": list(self.argv), "options": list(self.options),
               "cwd": self.cwd, "host": self.host, "boot_id": self.boot_id, "lock_dir": self.lock_dir,
               "submitted": self.submitted, "started": self.started, "ended": self.ended, "pid": self.pid,
               "supervisor": self.supervisor, "gpus": self.gpus, "exit_code": self.exit_code,
               "signal": self.signal, "note": self.note, "limit": self.limit}
        if self.grace is not None:
            doc["grace"] = self.grace
        return doc

    @staticmethod
    def from_json(doc: Any) -> Job:
        """The record in ``doc``; ValueError when it is not one (a wrong type, a missing key)."""
        if not isinstance(doc, dict):
            raise ValueError("not an object")

        def get(key: str, kinds: tuple[type, ...], optional: bool = False) -> Any:
            value = doc.get(key)
            if value is None and optional:
                return None
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise ValueError(f"{key}: {type(value).__name__}")
            return value

        def words(key: str) -> tuple[str, ...]:
            value = get(key, (list,))
            if not all(isinstance(w, str) for w in value):
                raise ValueError(f"{key}: not a list of strings")
            return tuple(value)

        state = get("state", (str,))
        if state not in ACTIVE + FINAL:
            raise ValueError(f"state: {state!r}")
        return Job(check_id(get("id", (str,))), state, words("argv"), words("options"), get("cwd", (str,)),
                   get("host", (str,)), get("boot_id", (str,)), get("lock_dir", (str,)),
                   float(get("submitted", (int, float))), _float(get("started", (int, float), True)),
                   _float(get("ended", (int, float), True)), get("pid", (int,), True),
                   get("supervisor", (int,), True), get("gpus", (str,), True), get("exit_code", (int,), True),
                   get("signal", (str,), True), get("note", (str,), True), _float(get("limit", (int, float), True)),
                   _float(get("grace", (int, float), True)))


def _float(value: int | float | None) -> float | None:
    return None if value is None else float(value)


class JobDir:
    """The user's job directory, opened once (a descriptor every file is opened relative to)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, environ: Mapping[str, str], create: bool = False) -> JobDir | None:
        """The directory, checked (or made, with ``create``); None when there is none yet."""
        path = job_dir_path(environ)
        if create:
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError as exc:
                if exc.errno in _FULL:
                    raise disk_error(path, exc) from None
                raise JobError(f"job dir {path}: cannot create it ({exc.strerror})",
                               hint="set XDG_STATE_HOME to a directory of yours") from None
        try:
            fd = os.open(path, _DIR_FLAGS)
        except FileNotFoundError:
            if create:
                raise JobError(f"job dir {path} vanished while being set up") from None
            return None
        except OSError as exc:
            raise _dir_error(path, exc) from None
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            os.close(fd)
            raise JobError(f"job dir {path} belongs to {_owner(st.st_uid)}, not to you",
                           hint="your jobs live in your own XDG_STATE_HOME (default ~/.local/state)")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)  # ours, but readable by others: private again
        return cls(path, fd)

    def close(self) -> None:
        os.close(self.fd)

    # ids and logs

    def new_id(self) -> tuple[str, int]:
        """A new job id and its log, created empty (0600) and open for appending.

        ``.seq`` must be a regular file (anything else: one line, exit 7, saying to remove it); past
        :data:`MAX_ID` nothing is created and the line says how to start again from 1. A full disk or
        no inode left: one line, exit 7 (:func:`disk_error`), nothing left behind."""
        try:
            seq = os.open(".seq", os.O_RDWR | os.O_CREAT | _FILE_FLAGS, 0o600, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in _FULL:
                raise disk_error(self.path, exc) from None
            raise JobError(f"job dir {self.path}: .seq is not a regular file ({exc.strerror})",
                           hint=f"remove {self.path}/.seq: it only counts the ids") from None
        try:
            st = os.fstat(seq)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                raise JobError(f"job dir {self.path}: .seq is not a regular file of yours",
                               hint=f"remove {self.path}/.seq: it only counts the ids")
            fcntl.flock(seq, fcntl.LOCK_EX)
            text = os.pread(seq, 32, 0).decode("ascii", "replace").strip()
            n = max(int(text) if text.isdigit() and len(text) < 10 else 0, *self.ids(), 0) + 1
            while True:
                if n > MAX_ID:
                    raise JobError(f"job dir {self.path}: the job ids are used up (the last is {MAX_ID})",
                                   hint=f"clear the ended jobs (gpulaunch jobs --clear) and remove {self.path}/.seq: "
                                        "ids then start again from 1")
                try:
                    log = os.open(f"{n}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600,
                                  dir_fd=self.fd)
                    break
                except FileExistsError:
                    n += 1
                except OSError as exc:
                    if exc.errno in _FULL:
                        raise disk_error(self.path, exc) from None
                    raise JobError(f"job dir {self.path}: cannot create {n}.log ({exc.strerror})") from None
            try:
                os.ftruncate(seq, 0)
                os.pwrite(seq, f"{n}\n".encode(), 0)
            except OSError as exc:  # the log, created O_EXCL, is the id's; .seq only speeds the next one up
                if exc.errno not in _FULL:
                    os.close(log)
                    os.unlink(f"{n}.log", dir_fd=self.fd)
                    raise JobError(f"job dir {self.path}: cannot write .seq ({exc.strerror})") from None
            return str(n), log
        finally:
            os.close(seq)

    def ids(self) -> list[int]:
        return sorted(int(m.group(1)) for name in os.listdir(self.fd) if (m := _RECORD.fullmatch(name)))

    def log_path(self, job_id: str) -> str:
        return os.path.join(self.path, f"{job_id}.log")

    def open_log(self, job_id: str) -> int:
        """The job's log, open for reading (UsageError when there is no such job)."""
        return self._open(job_id, "log", "log")

    def _open(self, job_id: str, suffix: str, what: str) -> int:
        """``ID.SUFFIX`` open for reading, a regular file of this user's; UsageError when there is no such job."""
        job_id = check_id(job_id)
        try:
            fd = os.open(f"{job_id}.{suffix}", os.O_RDONLY | _FILE_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            raise _no_job(job_id) from None
        except OSError as exc:
            raise JobError(f"job {job_id}: cannot open its {what} ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            os.close(fd)
            raise JobError(f"job {job_id}: its {what} is not a file of yours", hint=f"remove {self.path}/{job_id}.{suffix}")
        return fd

    def log_stat(self, job_id: str) -> os.stat_result | None:
        """The job's log as the kernel knows it (what a process holding it open holds), None without one."""
        try:
            st = os.stat(f"{check_id(job_id)}.log", dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() else None

    def alive(self, job_id: str) -> bool:
        """Whether the job's supervisor still lives (it holds a lock on the log while it does)."""
        try:
            fd = self.open_log(job_id)
        except (UsageError, JobError):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
        return False

    # records

    def write(self, job: Job) -> None:
        """Replace ``job``'s record atomically and durably."""
        recordfile.write(self.fd, job.id, job.to_json())

    def read(self, job_id: str) -> Job:
        """The job's record; UsageError when there is no such job, JobError when it cannot be read."""
        job_id = check_id(job_id)
        fd = self._open(job_id, "json", "record")
        try:
            if os.fstat(fd).st_size > _MAX_RECORD:
                raise JobError(f"job {job_id}: its record is too large", hint=f"remove {self.path}/{job_id}.json")
            raw = os.read(fd, _MAX_RECORD + 1)
        finally:
            os.close(fd)
        try:
            job = Job.from_json(json.loads(raw))
        except (ValueError, UsageError) as exc:
            raise JobError(f"job {job_id}: its record is damaged ({exc})", hint=f"remove {self.path}/{job_id}.json") from None
        if job.id != job_id:
            raise JobError(f"job {job_id}: its record is that of job {job.id}", hint=f"remove {self.path}/{job_id}.json")
        return self._with_outcome(job) if job.state in ACTIVE else job

    def _with_outcome(self, job: Job) -> Job:
        """A record that is not over, read with the outcome its supervisor kept when the disk was too full to
        write the record (:func:`gpu_launch.jobs.recordfile.keep_outcome`), if there is one."""
        kept = recordfile.load_outcome(self.fd, job.id)
        if not kept or kept.get("state") not in FINAL:
            return job
        fields = ("state", "ended", "exit_code", "signal", "note")
        try:
            return Job.from_json({**job.to_json(), **{k: kept[k] for k in fields if k in kept}})
        except (ValueError, UsageError):
            return job

    def all(self) -> tuple[list[Job], list[str]]:
        """Every job in id order, and a line for each record that could not be read."""
        jobs, problems = [], []
        for n in self.ids():
            try:
                jobs.append(self.read(str(n)))
            except (JobError, UsageError) as exc:
                problems.append(exc.message)
        return jobs, problems

    def remove(self, job_id: str) -> int:
        """Remove the job's record, then its log (and a cancel request left behind); returns the bytes
        its log held. The caller has made sure the job is over: nothing here looks."""
        job_id = check_id(job_id)
        try:
            size = os.stat(f"{job_id}.log", dir_fd=self.fd, follow_symlinks=False).st_size
        except OSError:
            size = 0
        for name in (f"{job_id}.json", f"{job_id}.log", f".{job_id}.cancel", f".{job_id}.outcome"):  # the record first: never a record without a log
            try:
                os.unlink(name, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise JobError(f"job {job_id}: cannot remove {self.path}/{name} ({exc.strerror})") from None
        return size

    # cancelling

    def request_cancel(self, job_id: str, grace: float) -> None:
        """Leave word for the job's supervisor: cancel, with ``grace`` seconds between SIGTERM and SIGKILL."""
        fd = os.open(f".{job_id}.cancel", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _FILE_FLAGS, 0o600, dir_fd=self.fd)
        try:
            os.write(fd, f"{grace}\n".encode())
        finally:
            os.close(fd)


def disk_error(path: str, exc: OSError) -> JobError:
    """A full disk (or no inode left, or a quota) under the job directory: one line, exit 7."""
    return JobError(f"job dir {path}: the disk is full ({exc.strerror})",
                    hint="free some space there (or set XDG_STATE_HOME to a disk that has it) and submit again")


def _no_job(job_id: str) -> UsageError:
    return UsageError(f"there is no job {job_id}", hint="`gpulaunch jobs` lists yours")


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _dir_error(path: str, exc: OSError) -> JobError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
        return JobError(f"job dir {path} is a symlink; refusing to follow it", hint="remove it, or set XDG_STATE_HOME")
    if exc.errno == errno.ENOTDIR:
        return JobError(f"job dir {path} is not a directory", hint="remove it, or set XDG_STATE_HOME")
    return JobError(f"job dir {path}: cannot open it ({exc.strerror})",
                    hint="your jobs live in your own XDG_STATE_HOME (default ~/.local/state)")
