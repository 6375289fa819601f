"""Choosing and holding for the Python API: what this process holds, for every thread, and across a fork.

:func:`choose` chooses (and locks) as a launch does, within the environment this process was given;
``MINE`` is every lock the API holds (a reservation never gets a GPU another one of this process
holds), ``HELD`` what ``use()`` holds and the variables it replaced.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

# The variables use() sets in os.environ are those a launch sets for its command.
from gpu_launch.run.environment import LOCK_DIR_VARIABLE, SET_VARIABLES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.in_process.devices import Device
    from gpu_launch.options.args import Invocation
    from gpu_launch.reservations.acquire import Acquired
    from gpu_launch.reservations.reservations import Reservation as Locks

__all__ = ["MINE", "HELD", "choose", "release_held"]


class _Mine:
    """What this process's API holds, for every thread: never this process's allotment, always taken.

    ``keys`` are the (uuid, depth) locks held (a live container :func:`choose` hands to the choice,
    so a reservation another thread takes meanwhile counts too); ``forked_from``, the processes this
    one was forked from (a forked worker's ``use()`` must not land on its parent's GPUs). A key is
    added *before* its descriptor may become inheritable and removed only *after* it is closed, so no
    thread ever sees one of them as an inherited lock (reservations/nesting.py, ``lineage_holds``).
    """

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.keys: set[tuple[str, int]] = set()
        self.locks: weakref.WeakSet[Locks] = weakref.WeakSet()
        self.forked_from: set[int] = set()

    def add(self, locks: Locks) -> None:
        with self.guard:
            self.keys.update(locks.keys)
            self.locks.add(locks)

    def give_back(self, locks: Locks) -> None:
        keys = locks.keys
        locks.release()
        with self.guard:
            self.keys.difference_update(keys)
            self.locks.discard(locks)

    def after_fork_in_child(self) -> None:
        """A forked copy of this process holds none of what the API held: close its copies of the
        descriptors (so the parent's ``release()`` frees the GPUs), and remember the parent, whose
        reservations are its own."""
        self.guard = threading.Lock()  # another thread may have held it at the fork
        self.forked_from.add(os.getppid())
        for locks in list(self.locks):
            locks.release()  # this copy's descriptors only: the parent's locks stay
        self.keys.clear()
        self.locks = weakref.WeakSet()


MINE = _Mine()


def _after_fork_in_child() -> None:
    MINE.after_fork_in_child()
    HELD.guard = threading.RLock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _parent_environ() -> dict[str, str]:
    """The environment this process was given: ``os.environ`` with the variables :func:`use` set put
    back as they were. So this process's own ``use()`` never narrows its later calls as a parent's
    ``CUDA_VISIBLE_DEVICES`` would: what ``use()`` holds is simply taken, as another job's would be."""
    environ = dict(os.environ)
    for name, value in (HELD.saved or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return environ


def choose(inv: Invocation, take: bool, choose_only: bool = False,
           inherit: bool = False) -> tuple[Acquired, dict[str, str]]:
    """Choose (and with ``take`` lock) as a launch does; print what a launch prints. Returns what was
    acquired and the variables to set. ``inherit``: the lock descriptors are handed down to programs
    this process starts (``use()``; ``reserve(inherit=True)``)."""
    from gpu_launch.reservations import acquire
    from gpu_launch.placing import pick

    environ = _parent_environ()
    locking = acquire.Locking.of(inv.get("lock_dir"), environ, take=take and not inv.get("no_lock"),
                                 snapshot=pick.snapshot_source(inv))
    from gpu_launch.base.records import replace

    locking = replace(locking, mine=MINE.keys, skip_pids=MINE.forked_from)
    _machine, vis, got, env = pick.choose(inv, locking, wait=inv.get("wait"), fallback=inv.get("fallback"),
                                          choose_only=choose_only, environ=environ)
    try:
        if got.reservation is not None:
            MINE.add(got.reservation)  # before anything can make its descriptors inheritable
        if got.fallback_reason is not None and not inv.get("quiet"):
            print(f"gpulaunch: {got.fallback_reason}", file=sys.stderr)
            print("gpulaunch: fallback cpu: no GPU visible (CUDA_VISIBLE_DEVICES= empty)", file=sys.stderr)
        if vis is not None:
            pick.tell(inv, vis, got.selection, env, waited=got.waited)
        if got.reservation is not None:
            # `gpulaunch ls` names this process (a notebook's kernel) as the holder.
            got.reservation.record(os.getpid(), _command_line())
            if inherit:
                # Kept across exec, as a launch's are: a program started from here holds them too, and a
                # gpulaunch started from here shares these GPUs out as its job's (reservations/nesting.py).
                got.reservation.make_inheritable()
    except BaseException:
        if got.reservation is not None:
            MINE.give_back(got.reservation)
        raise
    variables = {name: env[name] for name in SET_VARIABLES}
    if inherit and env.get(LOCK_DIR_VARIABLE) != environ.get(LOCK_DIR_VARIABLE):
        variables[LOCK_DIR_VARIABLE] = env[LOCK_DIR_VARIABLE]  # a gpulaunch started from here finds its job's GPUs
    return got, variables


def _command_line() -> list[str]:
    return list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])


class _Held:
    """What ``use()`` holds: the locks, and the variables as they were before it set them."""

    def __init__(self) -> None:
        self.locks: Locks | None = None
        self.devices: tuple[Device, ...] = ()
        self.saved: dict[str, str | None] | None = None  # None: use() has not changed os.environ
        self.guard = threading.RLock()


HELD = _Held()


def release_held() -> None:
    if HELD.locks is not None:
        MINE.give_back(HELD.locks)
        HELD.locks = None
    if HELD.saved is not None:
        for name, value in HELD.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        HELD.saved = None
    HELD.devices = ()
