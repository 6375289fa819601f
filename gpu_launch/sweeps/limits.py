"""``each --time LIMIT``: a job that has run its limit is ended, as Slurm ends a job at its time limit (SIGTERM to
its process group, then SIGKILL once the grace is over; Slurm's ``KillWait``). Its status is ``timeout`` (its note
starts with ``timeout:``): the summary counts it apart from the failures, as `jobs` does, and ``each`` exits 9.

Pure bookkeeping over the running jobs' start times (:class:`gpu_launch.sweeps.jobfile.JobState`, monotonic);
the scheduler's loop calls :meth:`Limits.enforce` and sleeps no longer than it says.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

# Annotations only: importing typing costs ~3 ms of every start (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Limits", "GRACE"]

#: Seconds between SIGTERM and SIGKILL at the limit (as ``gpulaunch cancel``'s default grace, and a job's supervisor's).
GRACE = 10.0


class Limits:
    """Every job of the sweep held to ``seconds`` (None: no limit) of run time; ``grace``: seconds from SIGTERM to
    SIGKILL (``--grace``, Slurm's ``KillWait``)."""

    def __init__(self, seconds: float | None, grace: float | None = None) -> None:
        self.seconds = seconds
        self.grace = GRACE if grace is None else grace
        self.termed: dict[int, float] = {}  # id(state) -> when it got SIGTERM
        self.killed: set[int] = set()

    def enforce(self, running: Iterable[Any], now: float | None = None) -> float:
        """Signal the jobs that are due; the seconds until the next one is (a long time when none will be)."""
        if self.seconds is None:
            return 3600.0
        now = time.monotonic() if now is None else now
        soonest = 3600.0
        for state in running:
            if state.started is None or state.proc is None:
                continue
            termed = self.termed.get(id(state))
            if termed is None:
                due = state.started + self.seconds
                if now >= due:
                    self.termed[id(state)] = now
                    _signal(state.proc.pid, signal.SIGTERM)
                    soonest = min(soonest, self.grace)
                else:
                    soonest = min(soonest, due - now)
            elif id(state) not in self.killed:
                if now >= termed + self.grace:
                    self.killed.add(id(state))
                    _signal(state.proc.pid, signal.SIGKILL)
                else:
                    soonest = min(soonest, termed + self.grace - now)
        return max(soonest, 0.0)

    def note(self, state: Any) -> str | None:
        """For a job that has ended: why, if its limit ended it (None if not)."""
        if id(state) not in self.termed:
            return None
        self.termed.pop(id(state))
        how = f"then SIGKILL after the {self.grace:g}s grace" if id(state) in self.killed else "then it ended"
        self.killed.discard(id(state))
        assert self.seconds is not None
        shown = f"{self.seconds:g}s" if self.seconds < 120 else f"{self.seconds / 60:g} min"
        return f"timeout: ended at its --time limit ({shown}): SIGTERM, {how}"


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # each job leads a process group of its own (as Ctrl-C is forwarded)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
