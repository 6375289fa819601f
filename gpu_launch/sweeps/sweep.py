"""The scheduler of a local ``gpulaunch each``: start queued jobs as GPUs free up, each on GPUs reserved for it.

This process is the scheduler. For the next job it selects and locks ``--gpus-per-job`` GPUs exactly
as a launch does (:func:`gpu_launch.reservations.acquire.attempt`: same constraints, reserved GPUs skipped,
first come first served with other waiters through a queue ticket, taken when it must wait or someone
already waits; the GPUs its own jobs hold count as reserved without a look), within the GPUs the sweep may
use (:class:`Scope`: the parent's CUDA_VISIBLE_DEVICES, ``--gpus``), then starts the job with those
lock descriptors passed to it (``pass_fds``). With one job a GPU it writes the job's pid into the
lock files and closes its own copies: from then on the *job* holds its reservation, whatever happens
to this scheduler, and ``gpulaunch ls`` shows the job's pid.

``--jobs-per-gpu K`` (K > 1): the sweep keeps its own copy of each GPU's lock for as long as any of
its jobs runs there (:class:`Shared`), and gives each GPU at most K jobs, each started with the same
descriptor. The GPU stays reserved against everyone else until its last job has ended (the jobs
hold the lock too, so even a killed scheduler leaves it reserved while they run); a job never lands
on a GPU that already has K. A new job takes fresh GPUs first (spreading the jobs out) and a free
place on the sweep's own GPUs only when no fresh one is to be had. ``--max-running K`` caps the jobs
running at once.

The loop sleeps until something happens: a job's end (SIGCHLD) or Ctrl-C wakes it at once through
the interpreter's wake-up pipe, so a GPU is handed to the next job within milliseconds; only GPUs
freed by others are looked for every ``GPULAUNCH_POLL_INTERVAL``. While jobs wait, the view is told
why, in words that tell "all N GPUs in use by this sweep" from "waiting for others' GPUs".
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from gpu_launch.choose import select as gpu_select
from gpu_launch.errors import GpuLaunchError, NotEnoughGpus, ReservationConflict
from gpu_launch.hardware.model import Device, Machine
from gpu_launch.base.records import dataclass, replace
from gpu_launch.reservations import acquire, waiting
from gpu_launch.reservations.holders import current_user
from gpu_launch.sweeps.shared import Shared
from gpu_launch.sweeps.limits import Limits
from gpu_launch.sweeps.jobfile import Job, JobState, open_log

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs ~3 ms of every start
    from typing import Any

__all__ = ["Scheduler", "Scope", "Shared", "Signals"]

_REFRESH_EVERY = 0.25  # seconds between redraws of the live view while nothing else happens


class Signals:
    """Turns SIGINT/SIGTERM into a counter the loop reads, so a signal never lands mid-spawn; and wakes
    the loop the moment one arrives or a job ends (SIGCHLD), through the interpreter's wake-up pipe,
    so finished jobs are reaped at once instead of at the next tick of a polling interval."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._old: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None
        self._old_wakeup = -1

    def __enter__(self) -> Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe = (read_end, write_end)
        # The C-level handler writes the signal's number to the pipe at once, even while this thread
        # blocks in select(): a job that ends between the reap and the wait is never missed.
        self._old_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._old[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._child)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_wakeup)
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def _handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)

    def _child(self, signum: int, frame: object) -> None:
        """A job ended: the wake-up byte is what matters; reaping happens in the loop."""

    def wait(self, timeout: float, also: int | None = None) -> None:
        """Sleep until a signal (a job's end, Ctrl-C), ``also`` readable (``each -``'s stdin) or ``timeout``."""
        import select

        assert self._pipe is not None
        ready, _, _ = select.select([self._pipe[0], *([also] if also is not None else [])], [], [], max(0.0, timeout))
        if self._pipe[0] in ready:
            try:
                while os.read(self._pipe[0], 512):
                    pass
            except BlockingIOError:
                pass


@dataclass(frozen=True)
class Scope:
    """The GPUs a sweep may use: what the parent's view allows, cut to ``--gpus`` (``only``: their UUIDs)."""

    only: frozenset[str] | None = None
    environ: Mapping[str, str] = os.environ

    def narrow(self, machine: Machine) -> Machine:
        """``machine`` with only the ``--gpus`` set (links kept among them)."""
        return machine if self.only is None else _keep(machine, self.only)

    def usable(self, machine: Machine, request: acquire.Request) -> frozenset[str]:
        """The GPUs a job of the sweep could ever be given (the parent's view, ``--gpus``, ``--exclude``)."""
        from gpu_launch.choose import spec, visibility

        seen = self.narrow(visibility.resolve(machine, self.environ).restrict(machine))
        excluded = frozenset(d.uuid for d in spec.resolve(request.exclude, machine, "--exclude")) \
            if request.exclude else frozenset()
        return frozenset(g.uuid for g in seen.gpus if gpu_select.could_ever_be_chosen(g, excluded))

    def chooser(self, chooser: acquire.Chooser) -> acquire.Chooser:
        """``chooser`` choosing within the ``--gpus`` set."""
        if self.only is None:
            return chooser
        return lambda request, machine, constraints: chooser(request, self.narrow(machine), constraints)


def _keep(machine: Machine, uuids: frozenset[str]) -> Machine:
    from gpu_launch.choose.visibility import Visibility

    return Visibility(tuple(Device(g) for g in machine.gpus if g.uuid in uuids)).restrict(machine)


class Scheduler:
    """Starts queued jobs as GPUs free up; see the module docstring."""

    def __init__(self, jobs: Sequence[Job], request: acquire.Request, locking: acquire.Locking,
                 read: Callable[[], Machine], log_dir: str, view: Any, environ: Mapping[str, str],
                 chooser: acquire.Chooser = acquire.plain_chooser, scope: Scope | None = None,
                 max_running: int | None = None, per_gpu: int = 1, machine: Machine | None = None) -> None:
        self.states = [JobState(job) for job in jobs]
        self.pending: deque[JobState] = deque(self.states)
        self.running: list[JobState] = []
        self.request = request
        self.locking = locking
        self.read = read
        self.log_dir = log_dir
        self.view = view
        self.environ = dict(environ)  # copied once: each job's environment is a copy of it (os.environ's decodes)
        self.scope = scope or Scope(environ=environ)
        self.chooser = self.scope.chooser(chooser)
        self.max_running = max_running
        self.shared = Shared(per_gpu) if per_gpu > 1 else None
        self.interval = waiting.poll_interval(environ)
        self._just_read = machine  # the machine as the caller just read it: the first round's, not read twice
        self.ticket: Any = None
        self.backfill = True  # while the sweep waits behind others (reservations/backfill.py); False: strict FIFO
        self.limits = Limits(None)  # each --time: a job that has run that long is ended (sweeps/limits.py)
        self.filling: waiting.Backfiller | None = None
        #: inside a job's allotment: no ticket in the machine's queue (acquire.inside_allotment says why)
        self.queue = True
        self.stopping = 0  # signals received
        self.me = current_user()  # whose work on a GPU is the sweep's own
        #: ``each -`` from a pipe: the lines still to come (:class:`gpu_launch.sweeps.feed.Feed`), None once ended
        self.feed: Any = None

    def _busy(self) -> bool:
        """Jobs to start (or input that may bring some) and no Ctrl-C, or jobs still running."""
        return (bool(self.pending) or self.feed is not None) and not self.stopping or bool(self.running)

    def _more(self) -> bool:
        """The job lines that have arrived on ``each -``'s stdin, queued (a line that cannot run: that job
        failed); True when some were."""
        if self.feed is None or self.stopping:
            return False
        arrived = self.feed.take(self.feed.check)
        for job, why in arrived:
            state = JobState(job)
            self.states.append(state)
            if why:
                state.status, state.note = "failed", why
                self.view.finished(self, state)
            else:
                self.pending.append(state)
        if not self.feed.open:
            self.feed = None
            self.view.total = len(self.states)  # every job known now: "job 3/12"
        return any(not why for _, why in arrived)

    def run(self) -> None:
        next_try = 0.0
        with Signals() as signals:
            try:
                while self._busy():
                    while len(signals.received) > self.stopping:
                        self._stop(signals.received[self.stopping])
                    if self._reap() | self._more():
                        next_try = 0.0
                    if self.pending and not self.stopping and time.monotonic() >= next_try:
                        self._start_what_fits()
                        # Jobs of ours ending wake us at once; GPUs others free are looked for every interval.
                        next_try = time.monotonic() + self.interval
                    self.view.refresh(self)
                    if not self._busy():
                        break
                    if self._reap():  # ended while we were starting others: no sleep
                        next_try = 0.0
                        continue
                    timeout = next_try - time.monotonic() if self.pending and not self.stopping else 3600.0
                    timeout = min(timeout, self.limits.enforce(self.running))
                    if getattr(self.view, "_live", None) is not None:
                        timeout = min(timeout, _REFRESH_EVERY)
                    signals.wait(timeout, self.feed.fd if self.feed is not None and not self.stopping else None)
            finally:
                self._leave_queue()
                if self.shared is not None:
                    self.shared.release_all()
        for state in self.pending:
            state.status, state.note = "not started", "interrupted before it started"

    def _join_queue(self) -> None:
        from gpu_launch.reservations.waitqueue import Ticket

        self.ticket = Ticket(self.locking.lock_dir)
        self.ticket.join()
        # --no-backfill: strict, it never jumps ahead, and as head it keeps every GPU it may use (backfill.py)
        self.filling = waiting.Backfiller(self.request, self.locking, self.ticket, self.chooser,
                                          self.limits.seconds, strict=not self.backfill)

    def _own(self) -> dict[str, str]:
        """The GPUs this sweep's jobs hold, as reserved (acquire.attempt's ``own``: not looked at again)."""
        own = {u: f"reserved by job {s.job.number} of this sweep (pid {s.proc.pid})"
               for s in self.running for u in s.uuids}
        if self.shared is not None:
            own.update((u, "reserved by this sweep") for u in self.shared.fds if u not in own)
        return own

    def _leave_queue(self) -> None:
        if self.ticket is not None:
            self.ticket.leave()
            self.ticket = None
        self.filling = None

    def _stop(self, signum: int) -> None:
        """First signal: stop launching, forward it to the jobs. Later ones: SIGKILL the jobs."""
        self.stopping += 1
        self._leave_queue()
        forward = signum if self.stopping == 1 else signal.SIGKILL
        self.view.stopping(self, signal.Signals(forward).name)
        for state in self.running:
            try:
                os.killpg(state.proc.pid, forward)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self) -> bool:
        finished = [s for s in self.running if s.proc.poll() is not None]
        for state in finished:
            state.ended = time.monotonic()
            self.running.remove(state)
            if self.shared is not None:
                self.shared.leave(state)
            state.returncode = state.proc.returncode
            state.note = self.limits.note(state) or state.note
            # ended at its --time (limits.py): a timeout, counted apart from the failures, as `jobs` does, whatever
            # its exit status (one that exits 0 on the SIGTERM too: as Slurm's TIMEOUT and `jobs`, each --slurm)
            state.status = "timeout" if state.note.startswith("timeout:") else "done" if state.returncode == 0 \
                else "failed"
            self.view.finished(self, state)
        return bool(finished)

    def _start_what_fits(self) -> None:
        machine: Machine | None = None
        fresh = True  # GPUs no job of ours holds may still be had this round
        while self.pending:
            if self.max_running is not None and len(self.running) >= self.max_running:
                self.view.waiting(self, lambda: f"waiting: {len(self.running)} jobs running, as many as "
                                                f"--max-running {self.max_running} allows")
                return
            behind = 0
            if fresh:
                if self.ticket is None and self.queue:
                    from gpu_launch.reservations import waitqueue

                    if waitqueue.someone_waits(self.locking.lock_dir):  # else: a ticket only if we must wait
                        self._join_queue()
                behind = self.ticket.ahead() if self.ticket is not None else 0
            jumps = self.filling is not None and not self.filling.strict  # it may start ahead of the head
            if machine is None and (not behind or self.shared is not None or jumps):
                # Once a round (the locks, re-read for every job, say who holds what).
                machine, self._just_read = self._just_read or self.read(), None
            if fresh and not behind and machine is not None:
                try:
                    got = acquire.attempt(self.request, machine, self.locking, self.chooser, self._own())
                except (NotEnoughGpus, ReservationConflict):
                    fresh = False
                    if self.ticket is None and self.queue:
                        self._join_queue()  # we wait from now on: in turn with anyone who comes later
                    if self.filling is not None and not self.ticket.ahead():
                        self.filling.lend(machine)  # the head of the queue: say what it lends
                else:
                    self._leave_queue()
                    assert got.reservation is not None and got.machine is not None
                    self._start(self.pending.popleft(), got.selection.devices, got.machine, got.reservation,
                                got.selection.warnings)
                    elig = got.selection.eligibility
                    # What was eligible, less this job's, not enough for the next: said without reading the locks again.
                    fresh = elig is None or len(elig.eligible) >= 2 * len(got.selection.devices)
                    continue
            if fresh and behind and jumps and machine is not None:
                got = self.filling.try_ahead(machine, behind, self._own())  # backfill, on what the head lends
                if got is not None:
                    assert got.reservation is not None and got.machine is not None
                    self._start(self.pending.popleft(), got.selection.devices, got.machine, got.reservation)
                    machine = None  # read again: the locks now say this job holds its GPUs
                    continue
            devices = self._shared_place(machine) if machine is not None else None
            if devices is not None:
                assert machine is not None
                self._start(self.pending.popleft(), devices, machine, None)
                continue
            self.view.waiting(self, lambda: self._why(machine, behind))
            return

    def _why(self, machine: Machine | None, behind: int) -> str:
        """Why the next job waits: the sweep's own jobs fill every GPU it may use, or others hold some."""
        if behind or machine is None:
            return f"waiting for others' GPUs: behind {behind} earlier waiter{'s' if behind != 1 else ''} in the queue"
        usable = self.scope.usable(machine, self.request)
        ours = {u for s in self.running for u in s.uuids} & usable
        n = len(usable)
        if usable and ours == usable:
            per = f", up to {self.shared.per_gpu} jobs each" if self.shared is not None else ""
            return f"waiting: all {n} GPU{'s' if n != 1 else ''} in use by this sweep{per}"
        mine = f"; {len(ours)} of {n} in use by this sweep" if ours else ""
        return f"waiting for others' GPUs: {self.request.what(machine)}{mine}"

    def _shared_place(self, machine: Machine) -> tuple[Device, ...] | None:
        """GPUs the sweep holds with room for one more job (``--jobs-per-gpu``), the emptiest first, chosen as
        ``--auto`` chooses (links, memory: ``--min-free`` still applies); None when there are not enough."""
        if self.shared is None:
            return None
        places = self.shared.open_places()
        k = self.request.auto or 1
        if len(places) < k:
            return None
        fewest = min(places.values())
        emptiest = frozenset(u for u, n in places.items() if n == fewest)
        candidates = emptiest if len(emptiest) >= k else frozenset(places)
        constraints = gpu_select.Constraints(self.request.min_free, allotted=candidates)
        try:
            # Its own GPUs, busy with its own jobs: not a polite waiter's concern, nor --idle's or --max-util's.
            return self.chooser(replace(self.request, polite=False), _keep(machine, candidates), constraints).devices
        except GpuLaunchError:
            return None

    def _start(self, state: JobState, devices: tuple[Device, ...], machine: Machine, fresh: Any,
               notices: tuple[str, ...] = ()) -> None:
        """Start ``state`` on ``devices``: with a ``fresh`` reservation, or on the sweep's own GPUs; ``notices``:
        the choice's warnings (a partly used GPU), which a launch prints too."""
        if self.shared is not None and fresh is not None:
            self.shared.keep(fresh)  # the sweep holds them now, for this job and the next on them
            fresh = None
        fds = {d.uuid: self.shared.fds[d.uuid] for d in devices} if self.shared is not None else dict(fresh.fds)
        try:
            self._spawn(state, devices, machine, fds, notices)
        finally:
            if fresh is not None:
                if state.proc is not None:  # the job holds the locks too; name it, then let go of our copies
                    fresh.limit = self.limits.seconds
                    fresh.record(state.proc.pid, state.holder)
                fresh.release()
            elif self.shared is not None:
                if state.proc is not None:
                    self.shared.limit = self.limits.seconds
                    self.shared.join(state)
                self.shared.drop_idle()
        if state.proc is not None:
            self.running.append(state)
            self.view.started(self, state)
        else:
            self.view.finished(self, state)

    def _spawn(self, state: JobState, devices: tuple[Device, ...], machine: Machine, fds: Mapping[str, int],
               notices: tuple[str, ...] = ()) -> None:
        from gpu_launch.choose import visibility
        from gpu_launch.run import environment

        # Under a parent's narrowed view (Slurm, CUDA_VISIBLE_DEVICES=...) or NVML's own numbers, UUIDs, as a launch.
        env = environment.build(devices, self.environ, use_uuid=visibility.resolve(machine, self.environ).child_uuids,
                                lock_dir=self.locking.for_child(self.environ))
        state.argv = state.job.command(len(devices))  # {n}, {gpus} filled; what the views show
        state.gpus = ",".join(str(d.gpu.index) for d in devices)
        state.uuids = tuple(d.uuid for d in devices)
        state.warnings = gpu_select.others_work_warnings(devices, self.me)  # as a launch warns (pick.tell)
        state.notices = tuple(w for w in notices if w not in state.warnings)  # (-q hides these, as a launch's)
        log_fd, state.log = open_log(self.log_dir, state.job.number)
        try:
            state.started = time.monotonic()  # before the fork: a job's time is never shorter than its run
            state.proc = subprocess.Popen(
                state.argv, env=env, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                pass_fds=tuple(fds.values()), start_new_session=True)
        except OSError as exc:
            state.status, state.note = "failed", f"could not start: {exc.strerror or exc}"
            state.ended = time.monotonic()
            return
        finally:
            os.close(log_fd)
        state.status = "running"
