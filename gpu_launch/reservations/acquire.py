"""Select GPUs and reserve them as one step: the request, where reservations live, the outcome.

:func:`attempt` reads who holds which GPU, selects among the rest, and locks the chosen set. A
lock lost to a race (another gpulaunch locked the GPU between our read and our lock) releases
everything taken, counts that GPU as reserved, and selects again, a bounded number of times.
Waiting for GPUs (``--wait``) and ``--fallback cpu`` build on it (:mod:`gpu_launch.reservations.waiting`).
Both are used by a launch and by ``each``.

Inside a job, the job's GPUs (its allotment) are shared out among its children by locks one level
deeper (:mod:`gpu_launch.reservations.nesting`); such a waiter takes no ticket in the machine's queue.
``--auto``/``--fit`` and ``each``, waiting or not, are polite (``Request.polite``): they take only GPUs
not busy or full with others' work, except their allotment's.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Container, Mapping

from gpu_launch.base.records import dataclass, field
from gpu_launch.reservations import holders, lockdir, reservations
from gpu_launch.choose import select as gpu_select
from gpu_launch.choose import spec as gpu_spec
from gpu_launch.errors import GpuLaunchError, LockDirError, NotEnoughGpus, ReservationConflict
from gpu_launch.hardware.model import Machine
from gpu_launch.base.units import Size, fmt_mib

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.fit.plan import Sizing
    from gpu_launch.hardware.model import Device

__all__ = ["Request", "Acquired", "Locking", "Chooser", "plain_chooser", "attempt", "hopeless", "inside_allotment",
           "device_uuids", "UNMET"]

#: The errors of a request that cannot be met now (a wait may help)
UNMET = (NotEnoughGpus, ReservationConflict)

#: Chooses the devices for a request among a machine's GPUs under the given constraints (which
#: carry the reservations seen). The CLI passes one that knows the parent's visibility and MIG.
Chooser = Callable[["Request", Machine, gpu_select.Constraints], gpu_select.Selection]


@dataclass(frozen=True)
class Request:
    """What a job asks for: exactly one of ``auto``/``fit``/``gpus``, and the constraints."""

    auto: int | None = None
    fit: Size | None = None
    gpus: tuple[gpu_spec.Item, ...] | None = None
    min_free: Size | None = None
    max_util: int | None = None
    idle: bool = False
    exclude: tuple[gpu_spec.Item, ...] | None = None
    share: bool = False  # --gpus: use reserved GPUs anyway
    runner_ups: int = 0  # next-best sets to keep, for --explain
    mig: bool = False  # --mig: one MIG device rather than whole GPUs
    #: --fit MODEL: the model, its engine and settings; the choice is then sized by it
    model: Sizing | None = None
    #: --gpus with --wait: a named GPU that fails --min-free/--max-util/--idle is not ready yet (it is
    #: waited for), instead of being used at once with a warning.
    strict: bool = False
    exclude_source: str = "--exclude"  # where --exclude came from (the config file, GPULAUNCH_EXCLUDE), for messages
    #: --auto/--fit and ``each``, waiting or not, get only GPUs free for them: none busy or full with
    #: others' work (``--max-util`` sets the user's own bar instead; ``--gpus`` obeys, with a warning).
    polite: bool = True
    #: --min-count/--max-count (nvisel's elastic count): as many eligible GPUs as there are, in this range
    min_count: int | None = None
    max_count: int | None = None
    min_total: Size | None = None  # --min-total-memory
    #: --account-as-free: the users whose processes count as gone when choosing (choose/accounting.py)
    free_accounts: frozenset[str] = frozenset()

    @property
    def elastic(self) -> bool:
        return self.min_count is not None or self.max_count is not None

    def seen(self, machine: Machine) -> Machine:
        """The machine as this request judges it (``--account-as-free``: without those users' processes)."""
        if not self.free_accounts:
            return machine
        from gpu_launch.choose import accounting

        return accounting.as_free(machine, self.free_accounts)

    def constraints(self, machine: Machine, reserved: Mapping[str, str],
                    allotted: frozenset[str] = frozenset()) -> gpu_select.Constraints:
        excluded = frozenset(d.uuid for d in gpu_spec.resolve(self.exclude, machine, "--exclude")) \
            if self.exclude else frozenset()
        return gpu_select.Constraints(self.min_free, self.max_util, self.idle, excluded, dict(reserved),
                                      self.exclude_source, polite=self.polite and self.gpus is None,
                                      allotted=allotted, min_total=self.min_total)

    def what(self, machine: Machine) -> str:
        """The request in words: ``need 2 GPUs with ≥ 20 GiB free``."""
        desc = self.constraints(machine, {}).describe()
        with_desc = f" with {desc}" if desc else ""
        if self.polite and self.gpus is None and self.max_util is None:
            with_desc += "," if desc else ""
            with_desc += " not busy or full with others' work"
        if self.gpus is not None:
            labels = ", ".join(d.label for d in gpu_spec.resolve(self.gpus, machine))
            return f"need {labels}{with_desc if self.strict else ''}"
        if self.fit is not None:
            return f"need {self.fit} free on 1, 2, 4 or 8 GPUs{with_desc}"
        if self.model is not None:
            return f"need GPUs that hold {self.model.model.source}{with_desc}"
        n = self.auto or 1
        if self.mig:
            return f"need a MIG device{with_desc}"
        if self.elastic:
            least = self.min_count or 1
            if self.max_count is None:
                return f"need at least {least} GPU{'s' if least != 1 else ''}{with_desc}"
            return f"need {least} to {self.max_count} GPUs{with_desc}"
        return f"need {n} GPU{'s' if n != 1 else ''}{with_desc}"


@dataclass(frozen=True)
class Locking:
    """Where reservations live and whether this job takes one (``--no-lock``, ``--dry-run``: no)."""

    lock_dir: str
    take: bool = True
    #: (uuid, depth) locks this very process's Python API holds (``use()``, ``reserve()``): never this
    #: job's allotment, always taken (:mod:`gpu_launch.reservations.nesting`). A live container (threads add to it).
    mine: Container[object] = field(default=frozenset(), compare=False)
    #: the processes this one was forked from: what they hold is not its allotment
    skip_pids: Container[int] = field(default=frozenset(), compare=False)
    #: look for this job's allotment among the held GPUs (off: every held GPU counts as reserved, the
    #: safe side; ``each`` turns it off once it knows it runs inside no job, to spare the /proc walk)
    nested: bool = True

    def for_child(self, environ: Mapping[str, str]) -> str | None:
        """The lock dir to hand down to a command holding a reservation taken here (``GPULAUNCH_LOCK_DIR``
        in its environment), so a gpulaunch inside it finds its job's GPUs however this one was told
        (``--lock-dir``, the config file). None without a reservation, or for a bundled example
        machine's own directory, which every launch on an example finds by itself."""
        if not self.take or self.lock_dir == lockdir.example_lock_dir(environ):
            return None
        return self.lock_dir

    @staticmethod
    def of(option: str | None, environ: Mapping[str, str], take: bool, snapshot: str | None = None) -> Locking:
        """``snapshot``: the ``--snapshot`` in use; a bundled example machine reserves in the user's own directory."""
        from gpu_launch.hardware.snapshot import is_example

        return Locking(lockdir.lock_dir_path(option, environ, example=is_example(snapshot)), take)


@dataclass
class Acquired:
    """The outcome: the selection (no devices on CPU fallback), the locks held, and why a fallback."""

    selection: gpu_select.Selection
    reservation: reservations.Reservation | None = None
    reserved: dict[str, str] = field(default_factory=dict)  # uuid -> holder, as seen
    fallback_reason: str | None = None
    machine: Machine | None = None  # the snapshot the selection was made on
    waited: float | None = None  # seconds spent waiting for the GPUs (--wait), when they were not free at once
    backfilled: int = 0  # started ahead of this many earlier waiters, on GPUs the head lent (backfill.py)


def device_uuids(machine: Machine) -> list[str]:
    uuids = []
    for gpu in machine.gpus:
        uuids.append(gpu.uuid)
        uuids.extend(m.uuid for m in gpu.mig_devices)
    return uuids


def plain_chooser(request: Request, machine: Machine, constraints: gpu_select.Constraints) -> gpu_select.Selection:
    """``--gpus``, ``--fit`` or ``--auto`` on the whole machine."""
    if request.gpus is not None:
        return gpu_select.check_explicit(gpu_spec.resolve(request.gpus, machine), machine, constraints)
    if request.model is not None:
        from gpu_launch.choose import by_model

        return by_model.choose_by_model(machine, request.model, constraints, request.runner_ups)
    if request.fit is not None:
        return gpu_select.choose_fit(machine, request.fit, constraints, request.runner_ups)
    if request.elastic:
        return gpu_select.choose_elastic(machine, request.min_count or 1, request.max_count, constraints,
                                         request.runner_ups)
    return gpu_select.choose_auto(machine, request.auto or 1, constraints, request.runner_ups)


def _choose(request: Request, real: Machine, reserved: Mapping[str, str], chooser: Chooser,
            unusable: Mapping[str, lockdir.Unusable] | None = None,
            allotted: frozenset[str] = frozenset()) -> gpu_select.Selection:
    """The selection, made on the machine as the request sees it (``--account-as-free``), of the real
    machine's devices: what is shown of them (free memory, load) is what is there."""
    machine = request.seen(real)
    selection = _choose_seen(request, machine, reserved, chooser, unusable, allotted)
    if machine is real:
        return selection
    from gpu_launch.hardware.model import Device
    from gpu_launch.base.records import replace

    by_uuid = {g.uuid: g for g in real.gpus}
    return replace(selection, devices=tuple(Device(by_uuid.get(d.gpu.uuid, d.gpu), d.mig) for d in selection.devices))


def _choose_seen(request: Request, machine: Machine, reserved: Mapping[str, str], chooser: Chooser,
                 unusable: Mapping[str, lockdir.Unusable] | None = None,
                 allotted: frozenset[str] = frozenset()) -> gpu_select.Selection:
    constraints = request.constraints(machine, reserved, allotted)
    if request.gpus is not None:
        devices = gpu_spec.resolve(request.gpus, machine)
        for device in devices:
            bad = (unusable or {}).get(device.uuid)
            if bad is not None and not request.share:
                raise LockDirError(f"--gpus: {device.label} is {bad.describe()}", hint=bad.hint)
        taken = [d for d in devices if d.uuid in reserved]
        who = gpu_select.grouped(((d.label, gpu_select.held_reason(reserved[d.uuid])) for d in taken), " is ")
        if taken and not request.share:
            raise ReservationConflict(f"--gpus: {who}",
                                      hint="wait for it with --wait, pick another GPU, or use it anyway with --share")
        selection = chooser(request, machine, constraints)
        unmet = _unmet(request, machine, devices) if request.strict else []
        if unmet:
            raise NotEnoughGpus(f"--gpus: {'; '.join(unmet)}",
                                hint="wait longer, relax --min-free/--max-util/--idle, or name other GPUs")
        if taken:
            selection = gpu_select.Selection(selection.devices, (*selection.warnings, f"{who}: using it anyway"),
                                             selection.eligibility, selection.ranking)
        return selection
    return chooser(request, machine, constraints)


def _unmet(request: Request, machine: Machine, devices: tuple[Device, ...]) -> list[str]:
    """The named whole GPUs that fail the request's --min-free/--max-util/--idle, each with why."""
    plain = gpu_select.Constraints(request.min_free, request.max_util, request.idle, min_total=request.min_total)
    if not plain.describe():
        return []  # no constraints: a named GPU is ready as soon as no one else reserves it
    # Only what may change while waiting: an unhealthy GPU gets the --gpus warning, not a wait for ever.
    failing = {d.uuid: gpu_select.constraint_failure(d.gpu, plain) for d in devices if d.mig is None}
    return [f"{d.label}: {failing[d.uuid]}" for d in devices if failing.get(d.uuid)]


def attempt(request: Request, machine: Machine, locking: Locking | None, chooser: Chooser = plain_chooser,
            own: Mapping[str, str] | None = None, kept: Mapping[str, str] | None = None) -> Acquired:
    """Select and (with ``locking.take``) lock, as one step. Raises NotEnoughGpus/ReservationConflict.

    ``locking`` None ignores reservations altogether. ``own``: GPUs the caller's own jobs hold (uuid ->
    how to say so; a sweep's, outside any job): reserved as they are, without looking at their locks
    again (each look at a held lock yields the CPU once). Ignored where ``locking.nested`` (inside a
    job, who holds a GPU machine-wide decides what may be used). ``kept``: GPUs the head of the queue
    keeps (uuid -> how to say so), skipped like reserved ones while nobody holds them.
    """
    reserved: dict[str, str] = {}
    if locking is None:
        return Acquired(_choose(request, machine, reserved, chooser), machine=machine)
    now = time.time()
    uuids = device_uuids(machine)
    looked = uuids
    if own and not locking.nested:
        reserved.update(own)
        looked = [u for u in uuids if u not in own]
    if locking.take:
        lockdir.prepare_dir(locking.lock_dir)
    found, unusable = holders.scan(locking.lock_dir, looked)
    if locking.take:
        # A shared lock seen is a sign, not proof: other gpulaunches hold one for an instant to look.
        # Locking tells (a GPU lost to it is looked at again below, and skipped).
        found = {u: h for u, h in found.items() if not h.shared}
    # A gpulaunch run inside a job (a script started by gpulaunch calls gpulaunch) may use the GPUs that
    # job holds, as its lock descriptors (not the files' text) prove, and shares them out among the
    # job's children: it locks them one level deeper, so two children never get the same one.
    depth: dict[str, int] = {}  # a GPU of our job's, free within it -> the depth of the lock to take
    allotted: frozenset[str] = frozenset()
    if found and locking.nested:
        from gpu_launch.reservations import nesting  # only when something is held: a lone launch does without

        nest = nesting.resolve(locking.lock_dir, found, locking.mine, locking.skip_pids)
        depth, allotted = nest.depth, nest.allotted
        reserved.update((u, f"{h.describe(now)} within this job's reservation") for u, h in nest.taken.items())
        reserved.update((u, f"this job, and launches nest at most {lockdir.MAX_DEPTH - 1} deep in a job")
                        for u in nest.too_deep)
        unusable.update(nest.unusable)
    reserved.update((u, h.describe(now)) for u, h in found.items()
                    if u not in depth and u not in reserved and u not in unusable)
    # A GPU whose lock file cannot be used is skipped like a reserved one; the others work as usual.
    reserved.update((u, bad.describe()) for u, bad in unusable.items())
    reserved.update((u, why) for u, why in (kept or {}).items() if u not in found and u not in reserved)
    for _ in range(len(uuids) + 2):
        try:
            selection = _choose(request, machine, reserved, chooser, unusable, allotted)
        except UNMET as exc:
            _fail_if_missing(exc, request, machine, locking.lock_dir, unusable, allotted)
            raise
        if not locking.take:
            return Acquired(selection, None, reserved, machine=machine)
        # Reserved ones are only chosen with --share (and not locked); our job's are locked a level deeper.
        wanted = [d.uuid for d in selection.devices if d.uuid not in reserved]
        try:
            got = reservations.lock_all(locking.lock_dir, wanted, depth)
        except lockdir.UnusableLockFile as exc:
            # Became unusable since the scan (planted just now): skip that GPU too, or say so for --gpus.
            unusable[exc.uuid] = exc.unusable  # type: ignore[attr-defined]
            reserved[exc.uuid] = exc.unusable.describe()  # type: ignore[attr-defined]
            continue
        if isinstance(got, reservations.Reservation):
            gone = _allotment_gone(locking, got, depth)
            if not gone:
                return Acquired(selection, got, reserved, machine=machine)
            got.release()
            for uuid in gone:  # its job ended, and someone else took it meanwhile
                try:
                    holder = holders.probe(locking.lock_dir, uuid)
                except lockdir.UnusableLockFile:
                    holder = None
                reserved[uuid] = holder.describe(now) if holder is not None else "another gpulaunch job"
            continue
        # Lost a race for ``got``: someone locked it after we read the locks (or holds a shared lock on it).
        # Select again without it.
        try:
            holder = holders.probe_at(locking.lock_dir, got, depth.get(got, 0))
        except lockdir.UnusableLockFile as exc:
            unusable[got] = exc.unusable
            reserved[got] = exc.unusable.describe()
            continue
        reserved[got] = holder.describe(now) if holder is not None else "another gpulaunch job"
    raise NotEnoughGpus("lost the race for GPUs to other gpulaunch jobs too many times",
                        hint="try again, or queue with --wait")


def _allotment_gone(locking: Locking, got: reservations.Reservation, depth: Mapping[str, int]) -> list[str]:
    """The GPUs locked one level deeper whose allotment this job's lineage no longer holds.

    Checked after locking (the lock first): the job holding the level above may have ended since the
    allotment was read, and someone else have taken the GPU machine-wide meanwhile, who checked the
    deeper locks before ours was there (reservations.try_lock). One of the two always sees the other.
    """
    deeper = {u: d for u, d in depth.items() if d > 0 and u in got.fds}
    if not deeper:
        return []
    from gpu_launch.reservations import nesting

    above = {(u, d - 1): lockdir.nested_path(locking.lock_dir, u, d - 1) for u, d in deeper.items()}
    still = nesting.lineage_holds(above, locking.mine, locking.skip_pids)
    return [u for u, d in deeper.items() if (u, d - 1) not in still]


def inside_allotment(locking: Locking | None, machine: Machine) -> bool:
    """Whether this process runs inside a job that holds some of ``machine``'s GPUs (its allotment).

    Such a process waits without a ticket in the machine's queue: a ticket would put it behind
    outside waiters, who may be waiting for the very GPUs its own job holds until it is done.
    """
    if locking is None:
        return False
    found, _unusable = holders.scan(locking.lock_dir, device_uuids(machine))
    if not found:
        return False
    from gpu_launch.reservations import nesting

    return bool(nesting.resolve(locking.lock_dir, found, locking.mine, locking.skip_pids).allotted)


def _fail_if_missing(exc: GpuLaunchError, request: Request, machine: Machine, lock_dir: str,
                     unusable: Mapping[str, lockdir.Unusable], allotted: frozenset[str] = frozenset()) -> None:
    """Raise LockDirError when the request is unmet for want of lock files only root can add to a
    hardened lock dir (GPUs changed since ``locks init``, or nested lock files an older ``locks init``
    did not make): no wait can help, only an admin. Inside a job, the job's GPUs are all there is."""
    missing = frozenset(u for u, bad in unusable.items() if bad.missing)
    if not missing:
        return
    if not (allotted and allotted <= missing) and hopeless(request, machine, missing) is None:
        return
    from gpu_launch.hardware.model import Device

    labels = [Device(g, m).label for g in machine.gpus for m in (None, *g.mig_devices)
              if (m.uuid if m is not None else g.uuid) in missing]
    have = "has" if len(labels) == 1 else "have"
    raise LockDirError(f"{exc.message}; {', '.join(labels)} {have} no lock file in the hardened lock dir {lock_dir} "
                       "(GPUs changed, or set up by an older gpulaunch, since `locks init`?), so waiting cannot help",
                       hint=lockdir.admin_hint(lock_dir) + " again") from None


def hopeless(request: Request, machine: Machine, unlockable: frozenset[str] = frozenset()) -> str | None:
    """Why the request can never be met on this machine, however long one waits; None if it can.

    ``unlockable``: devices that can never be reserved (no lock file in a hardened lock dir).
    """
    excluded = frozenset(d.uuid for d in gpu_spec.resolve(request.exclude, machine, "--exclude")) \
        if request.exclude else frozenset()
    excluded |= unlockable
    usable = [g for g in machine.gpus if gpu_select.could_ever_be_chosen(g, excluded, request.min_total)]
    if request.gpus is not None:
        for device in gpu_spec.resolve(request.gpus, machine):
            if not device.gpu.available:
                return f"{device.gpu.label} is unavailable"
            if device.mig is None and not gpu_select.could_ever_hold(device.gpu, request.min_free):
                return f"{device.gpu.label} could never have --min-free {request.min_free} free"
            if request.strict and gpu_select.min_total_failure(device.memory_total_mib, request.min_total):
                return f"{device.label} will never have more memory in all"
        return None
    if request.mig:
        return None  # the MIG chooser says what is impossible
    if request.model is not None:
        from gpu_launch.choose import by_model

        return by_model.hopeless(by_model.for_machine(request.model, machine), usable)
    if request.fit is not None:
        biggest = gpu_select.largest_total_mib(usable)
        if request.fit.mib is not None and biggest < request.fit.mib:
            return f"--fit {request.fit}: all usable GPUs together have {fmt_mib(biggest)}"
        return None
    n = request.auto or request.min_count or 1
    if n > len(usable):
        if n > len(machine.gpus):
            return "the machine has too few GPUs"  # the error itself already says how many
        return f"only {len(usable)} of {len(machine.gpus)} GPUs could ever be eligible"
    holding = [g for g in usable if gpu_select.could_ever_hold(g, request.min_free)]
    if n > len(holding):  # --min-free above every card's total, or 100%
        return f"only {len(holding)} of {len(machine.gpus)} GPUs could ever have --min-free {request.min_free} free"
    return None
