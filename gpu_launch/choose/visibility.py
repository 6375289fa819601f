"""What the parent lets us use: an inherited ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES``.

A scheduler (Slurm gres, Kubernetes, an outer gpulaunch, a user's shell) may already have narrowed
the GPUs this process may use. gpulaunch then only ever chooses among those. Pure functions over the
snapshot and a copy of the environment; nothing here touches ``os.environ``.

How the parent's ``CUDA_VISIBLE_DEVICES`` (CVD) is read — CUDA's rules (CUDA Programming Guide,
"CUDA Environment Variables"; nvitop's model of them in ``nvitop/api/device.py``):

* unset: everything NVML shows; ``""``: nothing (gpulaunch does not widen it);
* entries are integer indices, ``GPU-`` UUIDs (or an unambiguous prefix), ``MIG-`` UUIDs or the
  legacy ``MIG-GPU-<uuid>/<GI>/<CI>``; the first entry fixes index-vs-UUID mode and an entry of the
  other kind ends the list; the list ends at the first invalid, out-of-range or ambiguous entry
  (``0,2,-1,1`` means 0 and 2); a duplicate makes CUDA see no device at all;
* integer entries count the GPUs this process can access, in CUDA's order. They are resolved against
  what NVML shows, in PCI bus order (``Machine.cuda_order``; NVML's own, as a rule): under a Slurm cgroup (``ConstrainDevices``) NVML shows only
  the allocation, renumbered from 0 exactly as CUDA numbers it, and outside one NVML shows every GPU.
  If the parent set ``CUDA_DEVICE_ORDER=FASTEST_FIRST`` (CUDA's default when unset) the parent's
  indices may have meant other GPUs on a mixed-model machine; gpulaunch warns.

What the child's CVD must then contain: the child's value *replaces* the parent's (CVD does not
nest; CUDA reads it once, against the devices the process can access). Physical NVML indices would
be right only where NVML in this process sees exactly the devices CUDA does, in the same order —
true outside cgroups with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, but fragile wherever something narrowed
the view (cgroups, containers, MPS). UUIDs name the same GPU in every one of those views, so whenever
the parent restricted visibility, or NVML numbers the GPUs otherwise than by bus id (then no index
names the GPU `ls` shows under it), :attr:`Visibility.child_uuids` asks the environment for UUIDs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpu_launch.base.records import dataclass, field
from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.hardware.model import Device, Gpu, Machine, MigDevice
from gpu_launch.base.text import printable

__all__ = ["CvdReading", "Visibility", "read_cvd", "read_nvd", "resolve", "describe_devices"]

# ASCII digits only: CUDA stops at '٣' or '²', so reading them as 3 or 2 would widen the parent's view.
_INT_RE = re.compile(r"^[+-]?[0-9]+")
_LEGACY_MIG_RE = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/([0-9]+)/([0-9]+)$")
_NVD_INDEX_RE = re.compile(r"^[0-9]+$")
_NVD_MIG_RE = re.compile(r"^([0-9]+):([0-9]+)$")


def _number(digits: str) -> int:
    """``int(digits)`` for ASCII digits with an optional sign, any length: a number too long to be any
    index (Python refuses over 4300 digits) comes back as a huge one with its sign, out of every range."""
    sign = -1 if digits.startswith("-") else 1
    body = digits.lstrip("+-").lstrip("0") or "0"
    return sign * (10 ** 18 if len(body) > 18 else int(body))


@dataclass(frozen=True)
class CvdReading:
    """A CVD value read the way CUDA reads it.

    ``devices`` are the entries CUDA accepts, in order (the parent's ``cuda:i`` is ``devices[i]``);
    ``problems`` are the lint findings, one sentence each (``gpulaunch check`` prints them).
    """

    value: str
    devices: tuple[Device, ...]
    problems: tuple[str, ...] = ()
    index_mode: bool = False


def _by_position(machine: Machine) -> list[Gpu]:
    # By PCI bus id: CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID, and NVML's own as a rule, not always.
    return list(machine.cuda_order)


def _uuid_matches(token: str, machine: Machine) -> list[Device]:
    """Devices whose UUID ``token`` names: exact, legacy MIG form, or a prefix (CUDA accepts prefixes)."""
    legacy = _LEGACY_MIG_RE.match(token)
    if legacy:
        gpu_uuid, gi, ci = legacy.group(1).lower(), _number(legacy.group(2)), _number(legacy.group(3))
        return [Device(g, m) for g in machine.gpus if g.uuid.lower() == gpu_uuid for m in g.mig_devices
                if m.gpu_instance_id == gi and m.compute_instance_id == ci]
    low = token.lower()
    exact: list[Device] = []
    prefix: list[Device] = []
    for gpu in machine.gpus:
        candidates = [Device(gpu)] + [Device(gpu, m) for m in gpu.mig_devices]
        for device in candidates:
            uuid = device.uuid.lower()
            if uuid == low:
                exact.append(device)
            elif uuid.startswith(low):
                prefix.append(device)
    return exact or prefix


def read_cvd(value: str, machine: Machine) -> CvdReading:
    """Read a ``CUDA_VISIBLE_DEVICES`` value against ``machine`` (NVML's view) by CUDA's rules."""
    if not value.strip():
        return CvdReading(value, (), ("the value is empty, which hides every GPU",))
    ordered = _by_position(machine)
    devices: list[Device] = []
    problems: list[str] = []
    mode: str | None = None
    tokens = value.split(",")
    for pos, raw in enumerate(tokens):
        token = raw.strip()
        rest = ",".join(tokens[pos + 1:])
        cut = f"; CUDA ignores it and everything after it ({rest!r})" if rest else "; CUDA ignores it"
        match = _INT_RE.match(token)
        kind = "index" if match else "uuid" if token.upper().startswith(("GPU-", "MIG-")) else None
        if kind is None:
            problems.append(f"entry {pos + 1} {token!r} is neither an index nor a GPU-/MIG- UUID{cut}")
            break
        if mode is not None and kind != mode:
            what = "a UUID into a list of indices" if mode == "index" else "an index into a list of UUIDs"
            problems.append(f"entry {pos + 1} {token!r} mixes {what}{cut}")
            break
        mode = kind
        if match:
            if match.group(0) != token:
                problems.append(f"entry {pos + 1} {token!r} is read as {match.group(0)!r} (CUDA keeps the leading digits)")
            index = _number(match.group(0))
            if index < 0 or index >= len(ordered):
                problems.append(f"entry {pos + 1} {token!r} is out of range (this process can see "
                                f"{len(ordered)} GPU{'s' if len(ordered) != 1 else ''}: 0-{len(ordered) - 1}){cut}"
                                if index >= 0 else f"entry {pos + 1} {token!r} is negative{cut}")
                break
            found = [Device(ordered[index])]
        else:
            found = _uuid_matches(token, machine)
            if not found:
                problems.append(f"entry {pos + 1} {token!r} matches no GPU or MIG device here{cut}")
                break
            if len(found) > 1:
                names = ", ".join(d.label for d in found[:4])
                problems.append(f"entry {pos + 1} {token!r} is an ambiguous UUID prefix ({names}){cut}")
                break
        device = found[0]
        if any(d.uuid == device.uuid for d in devices):
            problems.append(f"entry {pos + 1} {token!r} names {device.label} a second time; "
                            "with a duplicate CUDA sees no device at all")
            return CvdReading(value, (), tuple(problems), mode == "index")
        devices.append(device)
    migs = [d for d in devices if d.mig is not None or d.gpu.mig_devices]
    if len(migs) > 1 or (migs and len(devices) > 1):
        problems.append("CUDA enumerates only one MIG device per process: in the parent itself only the "
                        f"first ({migs[0].label}) is usable")
    return CvdReading(value, tuple(devices), tuple(problems), mode == "index")


def read_nvd(value: str | None, machine: Machine) -> tuple[tuple[Device, ...] | None, tuple[str, ...]]:
    """Read ``NVIDIA_VISIBLE_DEVICES`` (NVIDIA Container Toolkit): the devices it allows, or None.

    ``all``, ``void``, empty or unset narrow nothing; ``none`` allows no GPU. A list narrows only
    where NVML shows more than the container was given (a privileged container, docker inside a
    Slurm job): UUIDs are matched by UUID, host indices only when NVML shows the host's GPUs
    (more GPUs than listed), since otherwise the runtime has already renumbered them.
    """
    if value is None or value.strip().lower() in ("", "all", "void"):
        return None, ()
    text = value.strip()
    if text.lower() == "none":
        return (), ()
    entries = [e.strip() for e in text.split(",") if e.strip()]
    host_view = len(machine.gpus) > len(entries)
    devices: list[Device] = []
    warnings: list[str] = []
    for entry in entries:
        nvd_mig = _NVD_MIG_RE.match(entry)
        if _NVD_INDEX_RE.match(entry) or nvd_mig:
            if not host_view:
                return None, ()  # the runtime already gave us exactly these; NVML's view is the container's
            gpu = machine.by_index(_number(nvd_mig.group(1) if nvd_mig else entry))
            if gpu is None:
                warnings.append(f"NVIDIA_VISIBLE_DEVICES entry {entry!r}: there is no such GPU here")
                continue
            if nvd_mig:
                j = _number(nvd_mig.group(2))
                if j >= len(gpu.mig_devices):
                    warnings.append(f"NVIDIA_VISIBLE_DEVICES entry {entry!r}: {gpu.label} has no MIG device {j}")
                    continue
                devices.append(Device(gpu, gpu.mig_devices[j]))
            else:
                devices.append(Device(gpu))
            continue
        found = _uuid_matches(entry, machine)
        if len(found) != 1:
            warnings.append(f"NVIDIA_VISIBLE_DEVICES entry {entry!r} matches {'no' if not found else 'more than one'} GPU here")
            continue
        devices.append(found[0])
    if len(devices) >= len(machine.gpus) + sum(len(g.mig_devices) for g in machine.gpus) and not warnings:
        return None, ()
    return tuple(devices), tuple(warnings)


def describe_devices(devices: tuple[Device, ...]) -> str:
    return ", ".join(d.label for d in devices) if devices else "no GPU"


@dataclass(frozen=True)
class Visibility:
    """The devices the parent allows (``allowed``; None when nothing narrows) and how it said so."""

    allowed: tuple[Device, ...] | None
    source: str = ""  # e.g. "CUDA_VISIBLE_DEVICES=2,3", for messages
    parent_cvd: bool = False  # the parent set CUDA_VISIBLE_DEVICES (its cuda:i numbering applies)
    warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # lint findings on the inherited CVD
    slurm: str | None = None  # "Slurm job 42, SLURM_JOB_GPUS=4,5"
    parent_numbers: tuple[tuple[str, int], ...] = field(default=(), compare=False)  # uuid -> parent cuda:i
    renumbered: bool = False  # NVML's indices are not CUDA's here (Machine.numbered_in_cuda_order)

    @property
    def restricted(self) -> bool:
        """True when the parent narrowed the GPUs."""
        return self.allowed is not None

    @property
    def child_uuids(self) -> bool:
        """The child's CVD is written as UUIDs: the parent narrowed the GPUs, or no index would name the
        GPU that `ls` numbers so."""
        return self.restricted or self.renumbered

    def parent_label(self, device: Device) -> str | None:
        for uuid, number in self.parent_numbers:
            if uuid in (device.uuid, device.gpu.uuid):
                return f"parent cuda:{number}"
        return None

    def labels(self, devices: tuple[Device, ...]) -> dict[str, str]:
        """``{uuid: "(parent cuda:1)"}`` for the mapping table (empty when the parent set no CVD)."""
        out = {}
        for device in devices:
            label = self.parent_label(device)
            if label:
                out[device.uuid] = f"({label})"
        return out

    def header(self) -> str | None:
        """The line above the mapping table that says which set gpulaunch chose from."""
        if self.allowed is None and self.slurm is None:
            return None
        bits = []
        if self.allowed is not None:
            bits.append(f"choosing among {describe_devices(self.allowed)}, as the parent's {self.source} allows")
        if self.slurm:
            bits.append(f"({self.slurm})" if bits else self.slurm)
        return " ".join(bits)

    def _allows(self, device: Device) -> bool:
        if self.allowed is None:
            return True
        for a in self.allowed:
            if a.uuid == device.uuid or (a.mig is None and a.gpu.uuid == device.gpu.uuid):
                return True
        return False

    def lift_hint(self) -> str:
        """How the user lifts the parent's limit, worded so that it is right whoever set it.

        An inherited CUDA_VISIBLE_DEVICES is either a parent job's allotment (a gpulaunch launch, Slurm:
        those GPUs are really all this job may use) or a leftover of ``eval "$(gpulaunch env ...)"`` or an
        ``export`` in this shell, which ``unset`` undoes. The environment cannot tell the two apart, so
        the hint names both. NVIDIA_VISIBLE_DEVICES is the container's own: nothing in it can widen it.
        """
        if not self.parent_cvd:
            return f"the container was started with {self.source}: only those GPUs exist in it"
        return ("inside a gpulaunch job or a Slurm step, those are the GPUs it was given; if this shell set it "
                '(eval "$(gpulaunch env ...)", export), `unset CUDA_VISIBLE_DEVICES` or a new shell lifts the limit')

    def require_some(self) -> None:
        """Raise NotEnoughGpus when the parent allows no GPU at all (never widen it)."""
        if self.allowed is not None and not self.allowed:
            first = self.problems[0] if self.problems else "it names no GPU this process can use"
            fix = ("fix it to name GPUs that exist (`gpulaunch ls` numbers them), or `unset CUDA_VISIBLE_DEVICES` "
                   "to choose among all GPUs" if self.parent_cvd else self.lift_hint())
            raise NotEnoughGpus(
                f"the parent's {self.source} allows no GPU ({first}), and gpulaunch does not widen it",
                hint=fix,
            )

    def check_allowed(self, devices: tuple[Device, ...], option: str = "--gpus") -> None:
        """``--gpus`` may only name devices the parent allows; say what it allowed otherwise."""
        for device in devices:
            if not self._allows(device):
                assert self.allowed is not None
                raise UsageError(
                    f"{option}: {device.label} is outside what the parent allows "
                    f"({self.source}: {describe_devices(self.allowed)})",
                    hint=f"name one of those, or use --auto to choose among them; {self.lift_hint()}",
                )

    def restrict(self, machine: Machine) -> Machine:
        """``machine`` cut down to the allowed devices (links kept for the GPUs that stay)."""
        if self.allowed is None:
            return machine
        whole = {d.gpu.uuid for d in self.allowed if d.mig is None}
        migs = {d.mig.uuid for d in self.allowed if d.mig is not None}
        keep: list[int] = []
        gpus: list[Gpu] = []
        for pos, gpu in enumerate(machine.gpus):
            if gpu.uuid in whole:
                keep.append(pos)
                gpus.append(gpu)
            elif any(m.uuid in migs for m in gpu.mig_devices):
                keep.append(pos)
                gpus.append(_with_migs(gpu, tuple(m for m in gpu.mig_devices if m.uuid in migs)))
        links = None
        if machine.links is not None:
            links = tuple(tuple(machine.links[i][j] for j in keep) for i in keep)
        from gpu_launch.base.records import replace

        return replace(machine, gpus=tuple(gpus), links=links)  # the rest (nvswitch, warnings, ...) kept


def _with_migs(gpu: Gpu, migs: tuple[MigDevice, ...]) -> Gpu:
    from gpu_launch.base.records import replace

    return replace(gpu, mig_devices=migs)


def _slurm(env: Mapping[str, str]) -> str | None:
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        return None
    bits = [f"Slurm job {printable(job)}"]  # (the variables' text is shown escaped, as all foreign text)
    if env.get("SLURM_STEP_ID"):
        bits[0] += f" step {printable(env['SLURM_STEP_ID'])}"
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if env.get(name):
            bits.append(f"{name}={printable(env[name])}")
            break
    return ", ".join(bits)


def _order_warning(env: Mapping[str, str], reading: CvdReading, machine: Machine) -> str | None:
    if not reading.index_mode or not reading.devices:
        return None
    order = env.get("CUDA_DEVICE_ORDER", "").strip().upper()
    models = {g.name for g in machine.gpus}
    if order == "FASTEST_FIRST" or (not order and len(models) > 1):
        said = "CUDA_DEVICE_ORDER=FASTEST_FIRST" if order else "no CUDA_DEVICE_ORDER (CUDA's default is FASTEST_FIRST)"
        return (f"the parent set {said} with an index list ({printable(reading.value)}): its indices count the GPUs fastest "
                "first, gpulaunch reads them in PCI bus order (nvidia-smi's), so they may have meant other GPUs; "
                "use UUIDs, or CUDA_DEVICE_ORDER=PCI_BUS_ID (gpulaunch sets it for the command)")
    return None


def resolve(machine: Machine, env: Mapping[str, str]) -> Visibility:
    """What the parent environment ``env`` lets a job use on ``machine`` (NVML's view)."""
    slurm = _slurm(env)
    nvd_devices, nvd_warnings = read_nvd(env.get("NVIDIA_VISIBLE_DEVICES"), machine)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    renumbered = not machine.numbered_in_cuda_order
    if cvd is None:
        if nvd_devices is None:
            return Visibility(None, slurm=slurm, renumbered=renumbered)
        return Visibility(nvd_devices, f"NVIDIA_VISIBLE_DEVICES={printable(env['NVIDIA_VISIBLE_DEVICES'])}",
                          warnings=nvd_warnings, slurm=slurm, renumbered=renumbered)
    reading = read_cvd(cvd, machine)
    warnings = list(nvd_warnings)
    order = _order_warning(env, reading, machine)
    if order:
        warnings.append(order)
    allowed = reading.devices
    source = f"CUDA_VISIBLE_DEVICES={printable(cvd)}"
    if nvd_devices is not None:
        nvd_vis = Visibility(nvd_devices)
        outside = [d for d in allowed if not nvd_vis._allows(d)]
        if outside:
            warnings.append(f"{describe_devices(tuple(outside))} in CUDA_VISIBLE_DEVICES "
                            f"{'is' if len(outside) == 1 else 'are'} not in NVIDIA_VISIBLE_DEVICES; left out")
        allowed = tuple(d for d in allowed if nvd_vis._allows(d))
        source += f" and NVIDIA_VISIBLE_DEVICES={printable(env['NVIDIA_VISIBLE_DEVICES'])}"
    numbers = tuple((d.uuid, i) for i, d in enumerate(reading.devices))
    return Visibility(allowed, source, True, tuple(warnings), reading.problems, slurm, numbers, renumbered)
