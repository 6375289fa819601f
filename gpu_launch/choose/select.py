"""Which GPUs may a job get, and which does ``--auto`` give it. Pure functions over the snapshot.

:func:`eligibility` applies the constraints to every GPU and records why each excluded one was
excluded; :func:`choose_auto` hands the eligible ones to :mod:`gpu_launch.choose.ranking` for the best set;
:func:`check_explicit` vets a ``--gpus`` choice (it warns but obeys, except for unusable GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_launch.base.records import dataclass, field
from gpu_launch.choose.availability import BUSY_MIN_USED, BUSY_MIN_UTIL, IDLE_MAX_USED, Availability, availability
from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.hardware.model import Device, Gpu, Machine
from gpu_launch.base.units import Size, fmt_mib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.fit.plan import Plan

__all__ = [
    "Availability", "availability", "Constraints", "Exclusion", "Eligibility", "Selection",
    "eligibility", "min_free_failure", "min_total_failure", "choose_auto", "choose_elastic", "choose_fit",
    "check_explicit", "mig_mode_error", "constraint_failure",
    "could_ever_be_chosen", "largest_total_mib", "could_ever_hold",
    "IDLE_MAX_USED", "BUSY_MIN_UTIL", "BUSY_MIN_USED", "FIT_SIZES", "others_work_warnings",
]

FIT_SIZES = (1, 2, 4, 8)  # the GPU counts tensor parallelism accepts


@dataclass(frozen=True)
class Constraints:
    """What every chosen GPU must satisfy (``--min-free``, ``--max-util``, ``--idle``, ``--exclude``,
    ``--min-total-memory``)."""

    min_free: Size | None = None
    max_util: int | None = None
    idle: bool = False
    exclude: frozenset[str] = frozenset()  # GPU UUIDs
    reserved: dict[str, str] = field(default_factory=dict)  # UUID -> who holds it (reservations)
    #: Where ``exclude`` came from, for messages: ``--exclude``, ``GPULAUNCH_EXCLUDE=0``, ``exclude in FILE:LINE``.
    exclude_source: str = "--exclude"
    #: ``--auto``/``--fit`` and ``each`` (waiting or not) are only given GPUs free for them: not busy or
    #: full with someone's work, unless in ``allotted`` (its own, made by Slurm or a parent job)
    polite: bool = False
    allotted: frozenset[str] = frozenset()  # GPU UUIDs
    min_total: Size | None = None  # --min-total-memory: the card's (or MIG device's) own total memory

    def describe(self) -> str:
        parts = []
        if self.min_total is not None:
            parts.append(f"≥ {self.min_total} total")
        if self.min_free is not None:
            parts.append(f"≥ {self.min_free} free")
        if self.max_util is not None:
            parts.append(f"≤ {self.max_util}% utilisation")
        if self.idle:
            parts.append("nothing running (--idle)")
        return ", ".join(parts)


@dataclass(frozen=True)
class Exclusion:
    gpu: Gpu
    reason: str


@dataclass(frozen=True)
class Eligibility:
    eligible: tuple[Gpu, ...]
    excluded: tuple[Exclusion, ...]


def min_free_failure(free_mib: int, total_mib: int | None, min_free: Size | None) -> str | None:
    """The --min-free phrase when ``free_mib`` falls short (GPUs and MIG devices alike)."""
    if min_free is None:
        return None
    need = min_free.of(total_mib)
    if need is None or free_mib < need:
        return f"{fmt_mib(free_mib)} free < {min_free} asked by --min-free"
    return None


def min_total_failure(total_mib: int | None, min_total: Size | None) -> str | None:
    """The --min-total-memory phrase when a card (or MIG device) has less memory in all than asked."""
    if min_total is None or min_total.mib is None:
        return None
    if total_mib is None:
        return "total memory unknown, so --min-total-memory cannot be checked"
    if total_mib < min_total.mib:
        return f"{fmt_mib(total_mib)} total < {min_total} asked by --min-total-memory"
    return None


#: How a GPU whose lock file cannot be used (planted symlink, someone's read-only file) is described in
#: ``Constraints.reserved``: it is skipped like a reserved one, but is not "reserved by" anyone.
UNRESERVABLE = "unavailable for reservation"
#: How a GPU is described whose lock file someone holds a *shared* lock on: no reservation, but no job
#: can lock it until that process lets go (reservations/holders.py).
BLOCKED = "blocked by a shared lock"
#: How a free GPU kept for the head of the ``--wait`` queue is described (reservations/backfill.py): no
#: one else starts on it, but it is not "reserved by" anyone yet.
KEPT = "kept for the head of the queue"


def grouped(pairs: Iterable[tuple[str, str]], joiner: str = ": ") -> str:
    """``GPU 0-3, GPU 5: reserved by alice (…); GPU 4: excluded by --exclude``: one entry per reason,
    its GPUs together, in first-seen order; so that a holder of eight GPUs is named once, not eight times."""
    by_reason: dict[str, list[str]] = {}
    for label, reason in pairs:
        by_reason.setdefault(reason, []).append(label)
    def join(labels: list[str]) -> str:  # " is " for one GPU, " are " for several
        return " are " if joiner == " is " and len(labels) > 1 else joiner

    return "; ".join(f"{_labels(labels)}{join(labels)}{reason}" for reason, labels in by_reason.items())


def _labels(labels: list[str]) -> str:
    """``GPU 0``, ``GPUs 0-3,5`` for whole GPUs; other labels (MIG devices) listed as they are."""
    numbers = [label[4:] for label in labels if label.startswith("GPU ") and label[4:].isdigit()]
    if len(labels) == 1 or len(numbers) != len(labels):
        return ", ".join(labels)
    values = [int(n) for n in numbers]
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return "GPUs " + ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


def held_reason(who: str) -> str:
    """``reserved by alice (pid 4242, …)``; the lock file's problem for an unreservable GPU; or who
    blocks it with a shared lock."""
    return who if who.startswith((UNRESERVABLE, BLOCKED, KEPT)) else f"reserved by {who}"


def could_ever_be_chosen(gpu: Gpu, exclude: frozenset[str] = frozenset(), min_total: Size | None = None) -> bool:
    """Whether waiting could ever make ``gpu`` eligible for ``--auto``/``--fit``: not when NVML cannot
    read it, it is in MIG mode, unhealthy, excluded or too small for ``--min-total-memory`` (load and
    reservations change; these do not)."""
    return (gpu.available and not gpu.in_mig_mode and not gpu.health and gpu.uuid not in exclude
            and min_total_failure(gpu.memory_total_mib, min_total) is None)


def largest_total_mib(gpus: list[Gpu]) -> int:
    """The total memory of the largest set ``--fit`` may take among ``gpus`` (its biggest size)."""
    return sum(sorted((g.memory_total_mib or 0 for g in gpus), reverse=True)[:max(FIT_SIZES)])


def could_ever_hold(gpu: Gpu, min_free: Size | None) -> bool:
    """Whether ``gpu`` could ever have ``min_free`` free, however long one waits: not when it asks for
    more than the card's total, nor for 100% (NVML counts the driver's own reservation as used)."""
    if min_free is None or gpu.memory_total_mib is None:
        return True
    if min_free.percent is not None:
        return min_free.percent < 100
    need = min_free.of(gpu.memory_total_mib)
    return need is None or need <= gpu.memory_total_mib


def _failed_constraint(gpu: Gpu, c: Constraints) -> str | None:
    """The first constraint ``gpu`` fails, as a phrase, or None when it may be used."""
    return _unusable(gpu, c) or constraint_failure(gpu, c) or _not_free_for_it(gpu, c)


def _not_free_for_it(gpu: Gpu, c: Constraints) -> str | None:
    """The rule for busy GPUs (``Constraints.polite``): a GPU busy or full with others' work is not free
    for ``--auto``/``--fit``, waiting or not; a job waits, or fails, rather than pile onto a colleague's
    run. Its own allotment's GPUs are its own; ``--max-util`` (100 takes them all) is the user's own bar."""
    if not c.polite or gpu.uuid in c.allotted or c.max_util is not None:  # --max-util: the user's own bar
        return None
    level = availability(gpu)
    if level < Availability.BUSY:
        return None
    users = sorted({p.user for p in gpu.processes if p.user})
    who = f" by {', '.join(users)}" if users else ""
    util = gpu.utilization_gpu or 0
    if util >= BUSY_MIN_UTIL or not gpu.memory_total_mib:
        why = f"{util}% utilisation"
    else:  # memory decided it: "busy (0% utilisation; ...)" named the one thing that did not
        used = round(100 * (gpu.memory_used_mib or 0) / gpu.memory_total_mib)
        why = f"{used}% of its memory in use, {util}% utilisation"
    return f"{level.text}{who} ({why}; --max-util 100 takes it anyway)"


def _unusable(gpu: Gpu, c: Constraints) -> str | None:
    """Why ``--auto``/``--fit`` may not give ``gpu`` out whatever the user asked, or None."""
    if not gpu.available:
        return f"unavailable ({gpu.error or 'NVML could not read it'})"
    if gpu.uuid in c.exclude:
        return f"excluded by {c.exclude_source}"
    if gpu.uuid in c.reserved:
        return held_reason(c.reserved[gpu.uuid])
    if gpu.in_mig_mode:
        if gpu.mig_devices:
            return "in MIG mode (use --mig to pick its MIG devices)"
        return "in MIG mode, with no MIG devices yet (CUDA cannot run on it)"
    if gpu.health:  # a job there may lose its memory or crash; --gpus still may use it (with a warning)
        return f"unhealthy ({'; '.join(gpu.health)})"
    return None


def constraint_failure(gpu: Gpu, c: Constraints) -> str | None:
    """The first of the user's constraints (``--min-free``, ``--max-util``, ``--idle``) ``gpu``
    fails, or None. Unlike health or MIG mode, these may change while one waits."""
    small = min_total_failure(gpu.memory_total_mib, c.min_total)
    if small is not None:
        return small
    if gpu.memory_free_mib is None:
        return "free memory unknown (NVML could not read it)"
    short = min_free_failure(gpu.memory_free_mib, gpu.memory_total_mib, c.min_free)
    if short is not None:
        return short
    if c.max_util is not None:
        if gpu.utilization_gpu is None:
            return "utilisation unknown, so --max-util cannot be checked"
        if gpu.utilization_gpu > c.max_util:
            return f"{gpu.utilization_gpu}% utilisation > --max-util {c.max_util}%"
    if c.idle:
        if not gpu.processes_known:
            return "processes unknown (NVML could not list them), so --idle cannot be checked"
        if availability(gpu) is not Availability.IDLE:
            return f"not idle ({availability(gpu).text}; --idle)"
    return None


def eligibility(machine: Machine, constraints: Constraints) -> Eligibility:
    eligible: list[Gpu] = []
    excluded: list[Exclusion] = []
    for gpu in machine.gpus:
        reason = _failed_constraint(gpu, constraints)
        if reason is None:
            eligible.append(gpu)
        else:
            excluded.append(Exclusion(gpu, reason))
    return Eligibility(tuple(eligible), tuple(excluded))


@dataclass(frozen=True)
class Selection:
    """The devices a job gets, in CUDA order (cuda:i = devices[i]), and what to tell the user."""

    devices: tuple[Device, ...]
    warnings: tuple[str, ...] = ()
    eligibility: Eligibility | None = None
    ranking: object | None = None  # ranking.Ranked, for --explain
    plan: Plan | None = None  # when the choice was sized by a model (--fit MODEL)


def _not_enough(n: int, machine: Machine, elig: Eligibility, constraints: Constraints) -> NotEnoughGpus:
    have = len(elig.eligible)
    why = grouped((e.gpu.label, e.reason) for e in elig.excluded)
    total = len(machine.gpus)
    msg = f"need {n} GPU{'s' if n != 1 else ''}, but only {have} of {total} {'is' if have == 1 else 'are'} eligible"
    if why:
        msg += f" ({why})"
    hint = "wait for GPUs with --wait, relax the constraints, or ask for fewer" if n > 1 else \
        "wait for a GPU with --wait, or relax the constraints"  # fewer than one cannot be asked for
    could = sum(1 for g in machine.gpus if could_ever_hold(g, constraints.min_free))
    lasting = [g for g in machine.gpus if could_ever_be_chosen(g, constraints.exclude, constraints.min_total)]
    if could < n:
        hint = (f"no wait can help: {could} of {total} GPUs could ever have --min-free {constraints.min_free} free; "
                "lower --min-free")
    elif len(lasting) < n:
        mig = any(g.mig_devices for g in machine.gpus)  # --mig can use those
        small = "" if constraints.min_total is None else f", smaller than --min-total-memory {constraints.min_total}"
        hint = (f"no wait can help: only {len(lasting)} of {total} GPUs can be given whole (the others are in MIG "
                f"mode, unhealthy, unreadable or excluded{small}); ask for fewer" + (", or use --mig" if mig else ""))
        if not lasting:  # "ask for fewer" than one: say that none can
            hint = (f"no wait can help: none of the {total} GPUs can be given whole (each is in MIG mode, unhealthy, "
                    f"unreadable or excluded{small})" + ("; use --mig" if mig else ""))
        if small:  # "80GiB" for an 80 GB card (79.6 GiB): say what the cards here have
            largest = max((g.memory_total_mib or 0 for g in machine.gpus), default=0)
            hint += (f"; the largest card here has {fmt_mib(largest)} in all (sizes as cards are sold are decimal: "
                     "80GB)")
    if total == 0:
        msg = f"need {n} GPU{'s' if n != 1 else ''}, but this machine shows no GPUs"
        hint = "`nvidia-smi` should list them; or try a bundled example: --snapshot dgx-h100"
    elif n > total:
        msg = f"need {n} GPUs, but this machine has {total}"
        hint = f"ask for at most {total}"
    return NotEnoughGpus(msg, hint=hint)


def choose_auto(machine: Machine, n: int, constraints: Constraints, runner_ups: int = 0) -> Selection:
    """The best ``n`` eligible GPUs (see :mod:`gpu_launch.choose.ranking`); ``runner_ups`` next-best sets
    are kept in ``Selection.ranking`` for ``--explain`` (finding them costs extra search)."""
    from gpu_launch.choose import ranking

    if n < 1:
        raise UsageError(f"--auto: {n} is not a GPU count", hint="ask for 1 or more, e.g. --auto 2")
    elig = eligibility(machine, constraints)
    if len(elig.eligible) < n:
        raise _not_enough(n, machine, elig, constraints)
    ranked = ranking.best_sets(machine, elig.eligible, n, keep=1 + max(runner_ups, 0))
    best = ranked.best
    warnings = _load_warnings(best)
    models = sorted({g.name for g in best})
    if len(models) > 1:
        warnings.append(f"no {n} GPUs of one model were available: the chosen GPUs mix {' and '.join(models)}, "
                        "and the slowest sets the pace")
    return Selection(tuple(Device(g) for g in best), tuple(warnings), elig, ranked)


def choose_elastic(machine: Machine, least: int, most: int | None, constraints: Constraints,
                   runner_ups: int = 0) -> Selection:
    """``--min-count``/``--max-count`` (nvisel's elastic count): as many eligible GPUs as there are, at
    most ``most`` (None: all), the best set of that many; fewer than ``least`` is a shortfall."""
    elig = eligibility(machine, constraints)
    n = min(len(elig.eligible), most if most is not None else len(elig.eligible))
    if n < least:
        raise _not_enough(least, machine, elig, constraints)
    return choose_auto(machine, n, constraints, runner_ups)


def choose_fit(machine: Machine, need: Size, constraints: Constraints, runner_ups: int = 0) -> Selection:
    """The smallest count in 1, 2, 4, 8 whose best set has ``need`` free in total (``--fit``)."""
    if need.mib is None:
        raise UsageError("--fit: give an absolute size like 60GiB, not a percentage")
    elig = eligibility(machine, constraints)
    if not elig.eligible:
        raise _not_enough(1, machine, elig, constraints)
    most, most_n = 0.0, 0
    for n in FIT_SIZES:
        if n > len(elig.eligible):
            break
        selection = choose_auto(machine, n, constraints, runner_ups)
        total = sum(d.memory_free_mib or 0 for d in selection.devices)
        if total >= need.mib:
            return selection
        if total > most:
            most, most_n = total, n
    sizes = ", ".join(str(n) for n in FIT_SIZES if n <= len(elig.eligible))
    biggest = largest_total_mib([g for g in machine.gpus
                                 if could_ever_be_chosen(g, constraints.exclude, constraints.min_total)])
    why = grouped((e.gpu.label, e.reason) for e in elig.excluded)
    raise NotEnoughGpus(
        f"--fit {need}: the best set of {sizes} eligible GPU(s) holds at most {fmt_mib(most)} free "
        f"(on {most_n}; {len(elig.eligible)} of {len(machine.gpus)} GPUs are eligible{': ' + why if why else ''})",
        hint="wait with --wait, or lower the size (quantise, shorter context)" if biggest >= need.mib else
        f"no wait can help: the {min(max(FIT_SIZES), len(machine.gpus))} largest GPUs here have {fmt_mib(biggest)} "
        "in total; lower the size (quantise, shorter context)",
    )


def mig_mode_error(gpu: Gpu) -> UsageError:
    """``--gpus`` named a whole GPU that is in MIG mode: CUDA runs only on its MIG devices, if any."""
    if gpu.mig_devices:
        names = ", ".join(f"{m.uuid} ({m.profile})" if m.profile else m.uuid for m in gpu.mig_devices)
        return UsageError(f"--gpus: {gpu.label} is in MIG mode; CUDA can only use its MIG devices: {names}",
                          hint=f"name one: --gpus {gpu.mig_devices[0].uuid}, or let --mig choose (--auto 1 --mig)")
    return UsageError(f"--gpus: {gpu.label} is in MIG mode but has no MIG devices, so CUDA cannot run on it",
                      hint=f"create them (as root): nvidia-smi mig -i {gpu.index} -cgi <profile> -C "
                           f"(profiles: nvidia-smi mig -i {gpu.index} -lgip), or leave MIG mode: "
                           f"nvidia-smi -i {gpu.index} -mig 0")


def check_explicit(devices: tuple[Device, ...], machine: Machine, constraints: Constraints) -> Selection:
    """Vet a ``--gpus`` choice: unusable GPUs are errors, failed constraints are warnings."""
    if not devices:
        raise NotEnoughGpus("--gpus: no GPUs to run on; this machine shows none",
                            hint="`nvidia-smi` should list them; or try a bundled example: --snapshot dgx-h100")
    warnings = []
    for device in devices:
        gpu = device.gpu
        if not gpu.available:
            raise NotEnoughGpus(f"--gpus: {gpu.label} is unavailable ({gpu.error or 'NVML could not read it'})",
                                hint="pick another GPU; `gpulaunch ls` shows their state")
        if gpu.in_mig_mode and device.mig is None:
            raise mig_mode_error(gpu)
        if device.mig is not None:
            continue
        if gpu.health:
            warnings.append(f"{gpu.label}: unhealthy ({'; '.join(gpu.health)})")
        reason = constraint_failure(gpu, Constraints(constraints.min_free, constraints.max_util, constraints.idle,
                                                     min_total=constraints.min_total))
        if reason is not None:
            warnings.append(f"{gpu.label}: {reason}")
        else:
            warnings += _load_warnings((gpu,), Availability.BUSY)
    return Selection(devices, tuple(warnings))


def others_work_warnings(devices: tuple[Device, ...], me: str | None) -> tuple[str, ...]:
    """The warnings ``-q`` never hides: one per chosen whole GPU that is busy or full with work that is
    not all ``me``'s (someone else computes there, or NVML could not say whose work it is)."""
    def only_mine(gpu: Gpu) -> bool:
        return gpu.processes_known and bool(gpu.processes) and all(p.user == me for p in gpu.processes)

    return tuple(_load_warnings(tuple(d.gpu for d in devices if d.mig is None and not only_mine(d.gpu)),
                                Availability.BUSY))


def _load_warnings(gpus: tuple[Gpu, ...], least: Availability = Availability.PARTLY_USED) -> list[str]:
    """One warning per GPU at ``least`` this loaded: ``--auto``/``--fit`` warn about every chosen GPU
    that is not idle (gpulaunch put the job on someone's GPU), ``--gpus`` about busy and full ones
    (the user chose it); ``-q`` silences those about partly used GPUs, never those about GPUs someone
    else computes on (:func:`others_work_warnings`)."""
    warnings = []
    for gpu in gpus:
        level = availability(gpu)
        if level < least:
            continue
        users = sorted({p.user for p in gpu.processes if p.user})
        who = f" by {', '.join(users)}" if users else ""
        unknown = ", processes unknown" if not gpu.processes_known else ""
        warnings.append(f"{gpu.label} is {level.text}{who} ({gpu.utilization_gpu or 0}% utilisation, "
                        f"{fmt_mib(gpu.memory_free_mib)} free{unknown})")
    return warnings
