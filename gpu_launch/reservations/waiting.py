"""Waiting for GPUs (``--wait``) and falling back to the CPU (``--fallback cpu``).

:func:`acquire` is :func:`~gpu_launch.reservations.acquire.attempt` (select and reserve as one step) with
``--wait``: re-read the machine every poll, first come first served through
:mod:`gpu_launch.reservations.waitqueue`, and try again at once when a GPU's lock is freed; and
``--fallback cpu``. Inside a job, a waiter takes no ticket in the machine's queue
(:func:`~gpu_launch.reservations.acquire.inside_allotment` says why). Used by a launch and by ``each``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence

from gpu_launch.choose import select as gpu_select
from gpu_launch.choose import spec as gpu_spec
from gpu_launch.errors import GpuLaunchError, NotEnoughGpus, ReservationConflict, UsageError, WaitTimeout
from gpu_launch.hardware.model import Machine
from gpu_launch.base import units
from gpu_launch.reservations import holders, lockdir
from gpu_launch.reservations.acquire import (UNMET, Acquired, Chooser, Locking, Request, attempt, device_uuids, hopeless,
                                      inside_allotment, plain_chooser)
from gpu_launch.base.units import fmt_duration
from gpu_launch.base.text import printable

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

__all__ = ["acquire", "poll_interval", "Backfiller", "POLL_ENV", "DEFAULT_POLL", "FALLBACKS"]

POLL_ENV = "GPULAUNCH_POLL_INTERVAL"
DEFAULT_POLL = 2.0  # seconds between re-reads of the machine while waiting
MIN_POLL = 0.05  # the shortest GPULAUNCH_POLL_INTERVAL
FALLBACKS = ("cpu",)


def poll_interval(environ: Mapping[str, str]) -> float:
    """Seconds between polls while waiting: ``GPULAUNCH_POLL_INTERVAL``, else 2; from MIN_POLL to 3600.

    The floor keeps a typo (``1e-300``) from turning every waiter into a busy loop on a core.
    """
    text = environ.get(POLL_ENV)
    if not text:
        return DEFAULT_POLL
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{POLL_ENV}={text[:40]!r} is not a number of seconds", hint=f"e.g. {POLL_ENV}=2") from None
    return units.bounded(value, POLL_ENV, MIN_POLL, 3600, as_written=repr(text[:40]),
                         limits=f"from {MIN_POLL} to 3600 seconds", hint=f"e.g. {POLL_ENV}=2")


def _eligible_now(request: Request, machine: Machine, reserved: Mapping[str, str]) -> str:
    seen = request.seen(machine)  # --account-as-free: as the choice sees it
    elig = gpu_select.eligibility(seen, request.constraints(seen, reserved))
    if request.gpus is not None:  # --gpus: only the named GPUs matter, and why each is not ready
        named = {d.uuid for d in gpu_spec.resolve(request.gpus, machine)}
        text = ", ".join(g.label for g in elig.eligible if g.uuid in named) or "none"
        why = gpu_select.grouped((e.gpu.label, e.reason) for e in elig.excluded if e.gpu.uuid in named)
        return text + (f" ({why})" if why else "")
    text = ", ".join(g.label for g in elig.eligible) or "none"
    reasons = {e.gpu.label: gpu_select.held_reason(reserved[e.gpu.uuid]) for e in elig.excluded
               if e.gpu.uuid in reserved}
    held = sum(1 for reason in reasons.values() if reason.startswith("reserved by"))
    notes = [f"{held} reserved by other gpulaunch jobs"] if held else []
    # Not reservations: say which GPU and why (who blocks it), as `ls` does.
    odd = gpu_select.grouped(((label, reason) for label, reason in reasons.items()
                              if not reason.startswith("reserved by")), " is ")
    if odd:
        notes.append(odd)
    busy = [e.gpu.label for e in elig.excluded if e.gpu.uuid not in reserved and "--max-util 100 takes it" in e.reason]
    if busy:
        notes.append(f"{', '.join(busy)} busy or full with others' work")
    return text + (f" ({'; '.join(notes)})" if notes else "")


class _Sleeper:
    """Sleep until something that may matter happens (``wake(timeout) -> bool`` says so) or the time
    is up; the status line's clock is refreshed about once a second meanwhile."""

    def __init__(self, status: object, started: float) -> None:
        self.status = status
        self.started = started

    def sleep(self, seconds: float, what: str, wake: Callable[[float], bool] | None = None) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            step = min(left, 1.0)
            if wake is not None:
                if wake(step):
                    return
            else:
                time.sleep(step)
            self.status.update(time.monotonic() - self.started, what)  # type: ignore[attr-defined]


def acquire(request: Request, read: Callable[[], Machine], locking: Locking | None, *,
            wait: float | None = None, fallback: str | None = None, stream: IO[str] | None = None,
            quiet: bool = False, environ: Mapping[str, str] = os.environ, chooser: Chooser = plain_chooser,
            command: Sequence[str] = (), backfill: bool = True, limit: float | None = None) -> Acquired:
    """Select and lock, waiting up to ``wait`` seconds (``math.inf``: for ever), falling back if asked.
    ``limit``: the job's declared ``--time`` in seconds (backfill by Slurm's rule; the holder line says it).

    ``command``: what will run on the GPUs, noted in the waiter's ticket for `ls`. ``backfill``: start
    ahead of earlier waiters on GPUs the head of the queue lends, and lend as the head (False:
    strictly first come, first served; :mod:`gpu_launch.reservations.backfill`). Ctrl-C while
    waiting raises KeyboardInterrupt with nothing held and the queue left.
    """
    try:
        if wait is None:
            machine = read()
            kept, head, how = _kept_for_head(request, locking, machine, limit)
            try:
                return _declared(attempt(request, machine, locking, chooser, kept=kept), limit)
            except UNMET as exc:
                if head and gpu_select.KEPT in exc.message:
                    raise type(exc)(exc.message, hint=f"{head} is first in the queue and keeps them: {how}") from None
                raise
        got = _declared(_wait(request, read, locking, wait, stream, quiet, environ, chooser, command, backfill, limit),
                        limit)
        if got.backfilled and not quiet:
            import sys

            n = got.backfilled
            print(f"gpulaunch: backfilled: started ahead of {n} earlier waiter{'s' if n != 1 else ''}, on GPUs "
                  "the head of the queue does not need yet (it keeps the GPUs that free up)",
                  file=stream or sys.stderr)
        return got
    except (NotEnoughGpus, ReservationConflict, WaitTimeout) as exc:
        if fallback != "cpu":
            raise
        selection = gpu_select.Selection(())
        if request.model is not None:  # --fit MODEL: the plan on no GPU, for {gpu_layers}=0, {ctx}...
            from gpu_launch.fit import plan as fit_plan

            selection = gpu_select.Selection((), plan=fit_plan.Plan(request.model, fit_plan.place(request.model, [])))
        return Acquired(selection, None, {}, exc.message)


def _kept_for_head(request: Request, locking: Locking | None, machine: Machine,
                   limit: float | None = None) -> tuple[dict[str, str], str, str]:
    """The GPUs the head of the queue keeps that this request could use (uuid -> how to say so), who
    waits there, and what would help, for a launch that does not wait: it may not start on them either
    (nobody else starts on a kept GPU; backfill.py), unless its declared ``limit`` (--time, seconds) ends
    by the head's expected start (Slurm's rule, :func:`~gpu_launch.reservations.backfill.by_shadow`); behind
    a strict head (``--no-backfill``) on none it may use. Empty when nobody waits, or the head wrote no
    lends (an older gpulaunch)."""
    if locking is None:
        return {}, "", ""
    try:  # a listing: all a launch pays when nobody waits (waitqueue is imported only when a ticket is there)
        if not any(name.startswith("ticket-") for name in os.listdir(lockdir.queue_dir(locking.lock_dir))):
            return {}, "", ""
    except OSError:
        return {}, "", ""
    from gpu_launch.reservations import backfill, waitqueue

    queue = waitqueue.waiters(locking.lock_dir)
    if not queue or queue[0].relevant is None or queue[0].lends is None:
        return {}, "", ""
    from gpu_launch.views.queue_table import as_json

    first, shown = queue[0], as_json(queue[:1])[0]
    lends = backfill.Lends(frozenset(first.relevant or ()), frozenset(first.lends or ()), need=1,
                           free=frozenset(first.free or ()), shadow=first.shadow, strict=first.strict)
    kept = set(lends.relevant) if lends.strict else set(lends.relevant - lends.lends)
    now = time.time()
    if kept and limit is not None and not lends.strict:
        kept -= backfill.by_shadow(lends, now + limit, _free_for(request, machine, locking)[0])
    how = _what_helps(lends, limit, now)
    seen = request.seen(machine)  # said only of GPUs it could use but for that (not of busy ones)
    elig = gpu_select.eligibility(seen, request.constraints(seen, {}))
    could = {g.uuid for g in elig.eligible} | {m.uuid for g in machine.gpus for m in g.mig_devices}
    why = f"{gpu_select.KEPT} ({printable(shown['user'])}, pid {first.pid})"
    wants = f" for {printable(shown['request'][:120])}" if shown["request"] else ""
    who = f"{printable(shown['user'])}'s job waiting{wants} (pid {first.pid})"
    return {u: why for u in device_uuids(machine) if u in kept and u in could}, who, how


def _what_helps(lends: Any, limit: float | None, now: float) -> str:
    """The hint's advice to a launch refused a GPU the head keeps: queue; with an expected start, a --time that
    ends by it (Slurm's rule); fewer GPUs, unless the head is strict (it keeps every GPU it may use)."""
    if lends.strict:
        return "it waits strictly first come, first served (--no-backfill) and keeps every GPU it may use: queue " \
               "behind it with --wait"
    if lends.shadow is not None and lends.shadow > now:
        left = fmt_duration(lends.shadow - now)
        time_hint = f"a --time that ends within {left}" if limit is None \
            else f"a --time that ends within {left} (yours, {fmt_duration(limit)}, ends after it)"
        return f"it expects to start in {left} (declared limits): declare {time_hint}, queue behind it with " \
               "--wait, or ask for fewer"
    return "queue behind it with --wait, or ask for fewer (a --time helps only once it has an expected start: " \
           "the GPUs it waits for are held without a declared --time)"


def _declared(got: Acquired, limit: float | None) -> Acquired:
    if got.reservation is not None:
        got.reservation.limit = limit
    return got


def _ticket_note(request: Request, machine: Machine, command: Sequence[str]) -> str:
    """What a waiter's ticket says it waits for (``ls`` shows it): the request, and the command."""
    import json
    import shlex

    what = request.what(machine)
    doc = {"request": what[5:] if what.startswith("need ") else what}
    if command:
        doc["command"] = shlex.join(command)[:500]
    return json.dumps(doc, ensure_ascii=False)


def _free_for(request: Request, machine: Machine, locking: Locking) -> tuple[set[str], dict[str, float]]:
    """The GPUs free for ``request`` now (eligible, nobody's reservation), and when the held ones' declared
    limits end (those that declared one)."""
    found, unusable = holders.scan(locking.lock_dir, device_uuids(machine))
    reserved = {**{u: h.describe(age=False) for u, h in found.items()},
                **{u: bad.describe() for u, bad in unusable.items()}}
    seen = request.seen(machine)
    elig = gpu_select.eligibility(seen, request.constraints(seen, reserved))
    return {g.uuid for g in elig.eligible}, {u: h.ends for u, h in found.items() if h.ends is not None}


def _relevant(request: Request, machine: Machine) -> frozenset[str]:
    """The GPUs the request may ever use: the named ones (--gpus), else all but --exclude's."""
    if request.gpus is not None:
        return frozenset(d.uuid for d in gpu_spec.resolve(request.gpus, machine))
    out = set(device_uuids(machine))
    if request.exclude:
        try:
            out -= {d.uuid for d in gpu_spec.resolve(request.exclude, machine)}
        except GpuLaunchError:
            pass
    return frozenset(out)


def _need(request: Request, machine: Machine) -> int:
    """How many GPUs the request needs at least (--fit: 1, so it stops lending as soon as it could start)."""
    if request.gpus is not None:
        return len(_relevant(request, machine))
    return request.auto or request.min_count or 1


class Backfiller:
    """A waiter's part in backfill: as head, what it lends (published beside its ticket); behind the
    head, an attempt on what the head lends (:mod:`gpu_launch.reservations.backfill`)."""

    def __init__(self, request: Request, locking: Locking, ticket: Any, chooser: Chooser,
                 limit: float | None = None, strict: bool = False) -> None:
        from gpu_launch.reservations import backfill

        self.mod = backfill
        self.request, self.locking, self.ticket, self.chooser = request, locking, ticket, chooser
        self.head: Any = None
        self.candidate = backfill.Candidate()
        self.kept: list[str] = []
        self.limit = limit  # its declared --time, seconds
        self.strict = strict  # --no-backfill: as head it keeps every GPU it may use; behind, it never jumps ahead

    def lend(self, machine: Machine) -> None:
        """As head, after an attempt that failed: say what it lends now."""
        free, ends = _free_for(self.request, machine, self.locking)
        if self.head is None:
            self.head = self.mod.Head(_need(self.request, machine), _relevant(self.request, machine))
        lends = self.head.look(free, time.time(), ends)
        if self.strict:
            from dataclasses import replace

            lends = replace(lends, lends=frozenset(), frozen=True, strict=True)
        self.mod.publish(self.ticket.dir, self.ticket.name, lends, {g.uuid: g.label for g in machine.gpus})

    def try_ahead(self, machine: Machine, ahead: int, mine: Mapping[str, str] | None = None) -> Acquired | None:
        """Behind the head: reserve GPUs it lends, if that meets the request; None if not. ``mine``: the
        GPUs the caller's own jobs hold (a sweep's; acquire.attempt's ``own``)."""
        if self.strict:
            return None
        head = self.ticket.head()
        free, _ = _free_for(self.request, machine, self.locking)
        self.candidate.look(free)
        ends_by = time.time() + self.limit if self.limit is not None else None
        got = self.mod.read_lends(self.ticket.dir, head[0], head[1]) if head is not None else None
        if got is None:
            self.kept = []
            return None
        lends, self.kept = got
        usable = self.candidate.usable(lends, device_uuids(machine), ends_by, free)
        if not usable & free:
            return None
        own = {**{u: self.mod.KEPT for u in device_uuids(machine) if u not in usable}, **(mine or {})}
        try:
            acquired = attempt(self.request, machine, self.locking, self.chooser, own)
        except UNMET:
            return None
        acquired.backfilled = ahead
        if acquired.reservation is not None:
            acquired.reservation.backfilled, acquired.reservation.limit = True, self.limit
        return acquired


def _wake_either(ticket: Any, watch: holders.LockWatch) -> Callable[[float], bool]:
    """Wake when the waiter ahead leaves, or a GPU's lock frees (then the waiter may backfill)."""
    from gpu_launch.reservations.waitqueue import TICK

    def wake(timeout: float) -> bool:
        end = time.monotonic() + timeout
        while True:
            if watch.freed():
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            if ticket.wait_turn(min(TICK, left)):  # wakes the moment the waiter ahead leaves
                return True

    return wake


def _wait(request: Request, read: Callable[[], Machine], locking: Locking | None, wait: float,
          stream: IO[str] | None, quiet: bool, environ: Mapping[str, str], chooser: Chooser,
          command: Sequence[str] = (), backfill: bool = True, limit: float | None = None) -> Acquired:
    from gpu_launch.views.status_line import StatusLine
    from gpu_launch.reservations.waitqueue import Ticket

    interval = poll_interval(environ)
    started = time.monotonic()
    deadline = started + wait if math.isfinite(wait) else math.inf
    ticket = None
    machine: Machine | None = None
    inside = False
    if locking is not None and locking.take:
        lockdir.prepare_dir(locking.lock_dir)
        machine = read()
        inside = inside_allotment(locking, machine)
        if not inside:
            ticket = Ticket(locking.lock_dir, _ticket_note(request, machine, command))
    with StatusLine(stream, quiet) as status:
        sleeper = _Sleeper(status, started)
        watch: holders.LockWatch | None = None
        try:
            if ticket is not None:
                ticket.join()
            filling = Backfiller(request, locking, ticket, chooser, limit, strict=not backfill) \
                if ticket is not None and locking is not None else None
            last: GpuLaunchError | None = None
            slept = False
            fresh = machine is not None
            while True:
                ahead = ticket.ahead() if ticket is not None else 0
                wake: Callable[[float], bool] | None = None
                if (ahead == 0 or machine is None or (filling is not None and not filling.strict)) and not fresh:
                    machine = read()  # only the head of line (and a backfiller) re-reads the machine (NVML is not free)
                fresh = False
                assert machine is not None
                if ahead == 0:
                    if watch is not None:
                        watch.close()
                    # Watch the locks from before the attempt on, so a GPU freed meanwhile is not missed.
                    watch = holders.LockWatch(locking.lock_dir, device_uuids(machine), nested=inside) \
                        if locking is not None else None
                    try:
                        got = attempt(request, machine, locking, chooser)
                        if slept:  # it did wait: the launch says for how long
                            got.waited = time.monotonic() - started
                        return got
                    except UNMET as exc:
                        last = exc
                        why = hopeless(request, machine)
                        if why is not None and getattr(exc, "final", False):
                            raise exc from None  # the line says why no wait helps, and what would
                        if why is not None:
                            raise type(exc)(f"{exc.message}; waiting cannot help: {why}",
                                             hint="relax the constraints, or ask for fewer GPUs") from None
                    found, unusable = ({}, {}) if locking is None else holders.scan(locking.lock_dir,
                                                                                      device_uuids(machine))
                    # No ages in the line: in plain mode a new line is printed only when it changes.
                    reserved = {**{u: h.describe(age=False) for u, h in found.items()},
                                **{u: bad.describe() for u, bad in unusable.items()}}
                    taken = [d for d in gpu_spec.resolve(request.gpus, machine) if d.uuid in reserved] \
                        if request.gpus is not None else []
                    if taken:
                        what = gpu_select.grouped(((d.label, gpu_select.held_reason(reserved[d.uuid])) for d in taken),
                                                  " is ")
                    else:
                        what = f"{request.what(machine)}; eligible now: {_eligible_now(request, machine, reserved)}"
                    if watch is not None:  # a GPU's lock freed: try again at once
                        from gpu_launch.reservations.waitqueue import TICK

                        wake = lambda timeout, w=watch: w.wait(timeout, TICK)  # noqa: E731
                    if filling is not None:
                        filling.lend(machine)
                else:
                    what = f"{ahead} waiter{'s' if ahead != 1 else ''} ahead in the queue; {request.what(machine)}"
                    assert ticket is not None
                    wake = ticket.wait_turn  # the waiter just ahead left: count again at once
                    if filling is not None and not filling.strict and locking is not None:
                        if watch is not None:
                            watch.close()
                        watch = holders.LockWatch(locking.lock_dir, device_uuids(machine))
                        ahead_got = filling.try_ahead(machine, ahead)
                        if ahead_got is not None:
                            ahead_got.waited = time.monotonic() - started if slept else None
                            return ahead_got
                        if filling.kept:
                            what += f"; kept for the head: {', '.join(filling.kept)}"
                        wake = _wake_either(ticket, watch)
                now = time.monotonic()
                if now >= deadline:
                    reason = last.message if last is not None else what
                    raise WaitTimeout(f"waited {fmt_duration(wait)}, and the request still cannot be met: {reason}",
                                      hint="wait longer (e.g. --wait 2h), ask for less, or run anyway with --fallback cpu")
                status.update(now - started, what)
                sleeper.sleep(min(interval, deadline - now), what, wake)
                slept = True
        finally:
            if watch is not None:
                watch.close()
            if ticket is not None:
                ticket.leave()
