"""Reservations inside reservations: how a job's GPUs are shared out among the job's own children.

A GPU's machine-wide reservation is an exclusive ``flock`` on its lock file (depth 0,
:mod:`gpu_launch.reservations.reservations`). A launch's command inherits that lock; so does the rest of a
process that called ``gpu_launch.use()``. Whatever runs *inside* such a job and asks gpulaunch for
GPUs (a nested launch, a job of a nested ``gpulaunch each``, an API call in a started program) may
use the job's GPUs, its *allotment*, but two of those children must never get the same GPU.

The rule: a lock held by this process's own lineage (an inherited descriptor, or an ancestor's
descriptor it hands down through exec, as :func:`lineage_holds`
decides from the kernel's records) is the allotment at that depth; within it, a child takes the
*next* depth's lock on the GPU (``UUID.in1.lock``, ``UUID.in2.lock``, … beside ``UUID.lock`` in the
lock dir; a hardened one has them all, root's, made by ``locks init``). Siblings thus exclude each
other exactly as unrelated jobs do at depth 0, and the child's own children share *its* GPU out one
level deeper. One lock per (GPU, depth) exists at a time: depth d + 1 is only ever taken inside the
single holder of depth d, so no key naming the allotment is needed, and a lock left by an orphan
only makes its GPU look taken (never free twice). Launches nest at most ``MAX_DEPTH - 1`` deep.

What is *not* an allotment: the Python API's own reservations in this very process (``use()``,
``reserve()``: they are this process's, taken for itself), and what the process this one was forked
from holds (a forked worker calling ``use(1)`` gets a GPU of its own, not its parent's).
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Container, Iterable, Mapping

from gpu_launch.base.records import dataclass, field

from gpu_launch.reservations.holders import Holder, probe_at
from gpu_launch.reservations.lockdir import MAX_DEPTH, Unusable, UnusableLockFile, nested_path

__all__ = ["Nesting", "resolve", "lineage_holds", "ancestors"]


@dataclass(frozen=True)
class Nesting:
    """Where this process stands in the reservations of the GPUs that are held machine-wide."""

    #: GPUs of this job's allotment (its lineage holds their machine-wide lock)
    allotted: frozenset[str] = frozenset()
    #: allotment GPUs free within it -> the depth of the lock a child takes on them
    depth: dict[str, int] = field(default_factory=dict)
    #: allotment GPUs another child of the same job holds -> that holder
    taken: dict[str, Holder] = field(default_factory=dict)
    #: allotment GPUs whose lock file one level deeper cannot be used (a planted symlink, ...)
    unusable: dict[str, Unusable] = field(default_factory=dict)
    #: allotment GPUs this process is already nested MAX_DEPTH - 1 launches deep in
    too_deep: frozenset[str] = frozenset()


def resolve(lock_dir: str, held: Iterable[str], mine: Container[object] = (),
            skip_pids: Container[int] = ()) -> Nesting:
    """The allotment among the machine-wide ``held`` GPUs, and for each the depth free within it.

    ``mine``: (uuid, depth) locks this process's API holds for itself; ``skip_pids``: the processes
    this one was forked from (see the module docstring).
    """
    level = set(held)
    allotted: frozenset[str] = frozenset()
    free_at: dict[str, int] = {}
    taken: dict[str, Holder] = {}
    unusable: dict[str, Unusable] = {}
    too_deep: set[str] = set()

    def look(uuid: str, depth: int) -> Holder | None:
        try:
            return probe_at(lock_dir, uuid, depth)
        except UnusableLockFile as exc:
            unusable[uuid] = exc.unusable
            return None

    for depth in range(MAX_DEPTH):
        if not level:
            break
        paths = {(u, depth): nested_path(lock_dir, u, depth) for u in level}
        own = {u for (u, _d) in lineage_holds(paths, mine, skip_pids)}
        if depth == 0:
            allotted = frozenset(own)
        else:
            for uuid in level - own:
                holder = look(uuid, depth)
                if uuid not in unusable:
                    taken[uuid] = holder or Holder()
        level = set()
        for uuid in own:
            if depth + 1 == MAX_DEPTH:
                too_deep.add(uuid)
                continue
            holder = look(uuid, depth + 1)
            if uuid in unusable:
                continue
            if holder is None:
                free_at[uuid] = depth + 1
            else:
                level.add(uuid)
    return Nesting(allotted, free_at, taken, unusable, frozenset(too_deep))


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
