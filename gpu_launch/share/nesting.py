"""Reservations inside reservations: how a job's GPUs are shared out among the job's own children.

A GPU's machine-wide reservation is an exclusive ``flock`` on its lock file (depth 0,
:mod:`gpu_launch.share.reservations`). A launch's command inherits that lock; so does the rest of a
process that called ``gpu_launch.use()``. Whatever runs *inside* such a job and asks gpulaunch for
GPUs (a nested launch, a job of a nested ``gpulaunch each``, an API call in a started program) may
use the job's GPUs, its *allotment*, but two of those children must never get the same GPU.

The rule: a lock held by this process's own lineage (an inherited descriptor, or an ancestor's
descriptor it hands down through exec, as :func:`~gpu_launch.share.reservations.lineage_holds`
decides from the kernel's records) is the allotment at that depth; within it, a child takes the
*next* depth's lock on the GPU (``UUID.in1.lock``, ``UUID.in2.lock``, … in the lock dir, or a
hardened one's world-writable ``queue/``). Siblings thus exclude each other exactly as unrelated
jobs do at depth 0, and the child's own children share *its* GPU out one level deeper. One lock per
(GPU, depth) exists at a time: depth d + 1 is only ever taken inside the single holder of depth d,
so no key naming the allotment is needed, and a lock left by an orphan only makes its GPU look
taken (never free twice).

What is *not* an allotment: the Python API's own reservations in this very process (``use()``,
``reserve()``: they are this process's, taken for itself), and what the process this one was forked
from holds (a forked worker calling ``use(1)`` gets a GPU of its own, not its parent's).
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from gpu_launch.records import dataclass, field

from gpu_launch.errors import LockDirError
from gpu_launch.share import reservations
from gpu_launch.share.lockdir import MAX_DEPTH, nested_path
from gpu_launch.share.reservations import Holder

__all__ = ["Nesting", "resolve"]


@dataclass(frozen=True)
class Nesting:
    """Where this process stands in the reservations of the GPUs that are held machine-wide."""

    #: GPUs of this job's allotment (its lineage holds their machine-wide lock)
    allotted: frozenset[str] = frozenset()
    #: allotment GPUs free within it -> the depth of the lock a child takes on them
    depth: dict[str, int] = field(default_factory=dict)
    #: allotment GPUs another child of the same job holds -> that holder
    taken: dict[str, Holder] = field(default_factory=dict)


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
    for depth in range(MAX_DEPTH):
        if not level:
            break
        try:
            paths = {(u, depth): nested_path(lock_dir, u, depth) for u in level}
        except LockDirError:
            break  # no place for nested locks (a hardened dir without queue/): nothing is shared out
        own = {u for (u, _d) in reservations.lineage_holds(paths, mine, skip_pids)}
        if depth == 0:
            allotted = frozenset(own)
        else:
            for uuid in level - own:
                taken[uuid] = reservations.probe_at(lock_dir, uuid, depth) or Holder()
        level = set()
        for uuid in own:
            try:
                holder = reservations.probe_at(lock_dir, uuid, depth + 1)
            except LockDirError:
                holder = None  # unusable nested file: locking it says so
            if holder is None:
                free_at[uuid] = depth + 1
            else:
                level.add(uuid)
    for uuid in level:  # nested deeper than MAX_DEPTH: count it as taken
        taken[uuid] = Holder()
    return Nesting(allotted, free_at, taken)
