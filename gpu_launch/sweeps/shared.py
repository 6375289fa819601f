"""The GPUs a ``--jobs-per-gpu K`` sweep holds itself (:class:`Shared`), for :mod:`gpu_launch.sweeps.sweep`."""

from __future__ import annotations

import os
import time

from gpu_launch.reservations.holders import write_holder
from gpu_launch.sweeps.jobfile import JobState

# Annotations only: importing typing costs ~3 ms of every start (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Shared"]


class Shared:
    """The GPUs a ``--jobs-per-gpu K`` sweep holds itself: each GPU's lock descriptor, kept open here while
    any of its jobs runs on it (each job got the same descriptor), and those jobs, at most K."""

    def __init__(self, per_gpu: int) -> None:
        self.per_gpu = per_gpu
        self.fds: dict[str, int] = {}  # uuid -> the locked descriptor
        self.jobs: dict[str, list[JobState]] = {}  # uuid -> its jobs, in start order
        self.lent: set[str] = set()  # the GPUs taken on the word of the head of the queue (backfilled)
        self.limit: float | None = None  # each --time (seconds): the holder line says when the newest job ends

    def keep(self, reservation: Any) -> None:
        """Take over the descriptors of a fresh reservation (no job on them yet)."""
        for uuid in list(reservation.fds):
            self.fds[uuid] = reservation.fds.pop(uuid)
            self.jobs[uuid] = []
            (self.lent.add if reservation.backfilled else self.lent.discard)(uuid)

    def open_places(self) -> dict[str, int]:
        """uuid -> jobs on it, for the GPUs that can take one more."""
        return {u: len(jobs) for u, jobs in self.jobs.items() if len(jobs) < self.per_gpu}

    def join(self, state: JobState) -> None:
        for uuid in state.uuids:
            self.jobs[uuid].append(state)
            write_holder(self.fds[uuid], state.proc.pid, state.holder, uuid in self.lent, self.limit)  # the newest

    def leave(self, state: JobState) -> None:
        """A job ended: a GPU none of its jobs uses any more is given back."""
        for uuid in state.uuids:
            jobs = self.jobs.get(uuid)
            if jobs is None:
                continue
            if state in jobs:
                jobs.remove(state)
            if jobs:  # the newest job's limit, what is left of it (its start: monotonic)
                left = None if self.limit is None else max(0.0, self.limit - (time.monotonic() - jobs[-1].started))
                write_holder(self.fds[uuid], jobs[-1].proc.pid, jobs[-1].holder, uuid in self.lent, left)
        self.drop_idle()

    def drop_idle(self) -> None:
        for uuid in [u for u, jobs in self.jobs.items() if not jobs]:
            os.close(self.fds.pop(uuid))
            del self.jobs[uuid]

    def release_all(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self.jobs.clear()
