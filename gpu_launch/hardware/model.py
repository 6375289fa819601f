"""The machine as plain data: one immutable snapshot per invocation.

Everything above the NVML adapter (selection, environment, rendering) works on these frozen
records (:mod:`gpu_launch.base.records`, dataclasses without their start-up cost), so it can be tested against snapshot files with no GPU present. A value NVML could
not give is ``None``; a GPU NVML could not read at all has ``available=False`` and an ``error``.
"""

from __future__ import annotations

from functools import cached_property

from gpu_launch.base.records import dataclass, field

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["GpuProcess", "MigDevice", "Gpu", "Device", "Machine", "LINK_CODES", "Needs", "coherent_used"]

#: The codes of `nvidia-smi topo -m`, best first after ``X`` (self). ``NV<k>`` is k bonded NVLinks.
LINK_CODES = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU. ``user``/``command`` are None when the pid is not visible
    from here (another container or PID namespace, or no permission)."""

    pid: int
    used_memory_mib: int | None = None
    user: str | None = None
    command: str | None = None


@dataclass(frozen=True)
class MigDevice:
    """A MIG instance of a GPU in MIG mode; CUDA accepts it only by its ``MIG-`` UUID."""

    uuid: str
    profile: str | None = None  # e.g. "1g.10gb"
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as NVML (and nvidia-smi) numbers it."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    utilization_gpu: int | None = None
    temperature_c: int | None = None
    compute_capability: str | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    processes: tuple[GpuProcess, ...] = ()
    mig_devices: tuple[MigDevice, ...] = ()
    available: bool = True
    error: str | None = None
    #: "enabled", "disabled" or "unknown" (NVML's current MIG mode). A GPU in MIG mode runs CUDA
    #: work only on its MIG devices, and has none until someone creates them.
    mig_mode: str = "unknown"
    #: False when NVML could not list the GPU's processes: ``processes`` is then empty but means
    #: "unknown", never "none".
    processes_known: bool = True
    #: What is wrong with the GPU's health (pending page retirement, row-remapping failure, volatile
    #: uncorrectable ECC errors); empty when nothing was found or nothing could be asked.
    health: tuple[str, ...] = ()
    #: Memory the driver or firmware keeps for itself (NVML's memory v2 ``reserved``), None when
    #: not told (v1, or a snapshot without it). Already out of ``memory_free_mib``.
    memory_reserved_mib: int | None = None
    #: Read for ``ls --wide`` only (None otherwise, and in snapshots that lack them): power draw and
    #: limit in watts, fan speed in percent (None: no fan, e.g. passively cooled), clocks in MHz.
    power_draw_w: int | None = None
    power_limit_w: int | None = None
    fan_percent: int | None = None
    clock_sm_mhz: int | None = None
    clock_memory_mhz: int | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    @property
    def in_mig_mode(self) -> bool:
        """In MIG mode: never handed out whole. Having MIG devices implies it, whatever was read."""
        return self.mig_mode == "enabled" or bool(self.mig_devices)


@dataclass(frozen=True)
class Device:
    """What a job is given: a whole GPU, or one MIG instance of it."""

    gpu: Gpu
    mig: MigDevice | None = None

    @property
    def uuid(self) -> str:
        return self.mig.uuid if self.mig is not None else self.gpu.uuid

    @property
    def memory_free_mib(self) -> int | None:
        return self.mig.memory_free_mib if self.mig is not None else self.gpu.memory_free_mib

    @property
    def memory_total_mib(self) -> int | None:
        return self.mig.memory_total_mib if self.mig is not None else self.gpu.memory_total_mib

    @property
    def label(self) -> str:
        if self.mig is None:
            return self.gpu.label
        return f"{self.gpu.label} MIG {self.mig.profile or self.mig.uuid}"


@dataclass(frozen=True)
class Machine:
    """A snapshot of the machine's GPUs and the links between them.

    ``links[i][j]`` is the `nvidia-smi topo -m` code between ``gpus[i]`` and ``gpus[j]``
    (positions in ``gpus``, not NVML indices), or None when the topology was not read. A GPU whose
    links were not read is SYS to every other: one NVML could not read, or one a launch could not
    choose (``Needs.links_among``), whose pairs nothing compares.
    """

    gpus: tuple[Gpu, ...]
    links: tuple[tuple[str, ...], ...] | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    hostname: str | None = None
    source: str = "nvml"  # "nvml" or the snapshot file / example name it was read from
    #: The GPUs' NVLinks go through NVSwitches: every pair's ``NV<k>`` is then the same k links
    #: of each GPU, not k links of its own for that pair.
    nvswitch: bool = False
    warnings: tuple[str, ...] = field(default=(), compare=False)
    #: Host memory available (MiB) as a snapshot states it, for planning a model partly on the CPU;
    #: None: read this machine's /proc/meminfo when it matters (hardware.host.memory_available).
    host_memory_available_mib: int | None = None

    def by_index(self, index: int) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return None

    @cached_property
    def _positions(self) -> dict[str, int]:
        # Built once per snapshot: a linear scan per lookup made ranking 1000 GPUs take minutes.
        positions: dict[str, int] = {}
        for pos, gpu in enumerate(self.gpus):
            positions.setdefault(gpu.uuid, pos)
        return positions

    def position(self, gpu: Gpu) -> int:
        """Position of ``gpu`` in ``gpus`` (the row/column of ``links``)."""
        return self._positions[gpu.uuid]

    def link(self, a: Gpu, b: Gpu) -> str | None:
        if self.links is None:
            return None
        return self.links[self.position(a)][self.position(b)]

    @cached_property
    def cuda_order(self) -> tuple[Gpu, ...]:
        """The GPUs as CUDA numbers them under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: by PCI bus id.

        That is NVML's own numbering on the drivers seen so far, but NVML does not promise it ("The NVML
        index may not correlate with other APIs, such as the CUDA device index": nvml.h,
        nvmlDeviceGetHandleByIndex_v2), and NVIDIA's mock NVML numbers its L40S profile otherwise (GPU 4
        at bus 18, between GPU 0 at 17 and GPU 1 at 31). Where a bus id is unknown, NVML's order is all
        there is.
        """
        from gpu_launch.hardware.host import parse_bus_id

        by_index = tuple(sorted(self.gpus, key=lambda g: g.index))
        buses = {g.uuid: parse_bus_id(g.pci_bus_id) for g in by_index}
        known = {uuid: bus for uuid, bus in buses.items() if bus is not None}
        if len(known) < len(buses):
            return by_index
        return tuple(sorted(by_index, key=lambda g: known[g.uuid]))  # stable: NVML's order among equal ids

    @property
    def numbered_in_cuda_order(self) -> bool:
        """NVML's indices count the GPUs in :attr:`cuda_order`: an index in ``CUDA_VISIBLE_DEVICES`` then
        names the GPU that `gpulaunch ls` shows under it."""
        return self.cuda_order == tuple(sorted(self.gpus, key=lambda g: g.index))

    def cuda_index(self, gpu: Gpu) -> int:
        """``gpu``'s number in ``CUDA_VISIBLE_DEVICES`` under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``."""
        return next(i for i, g in enumerate(self.cuda_order) if g.uuid == gpu.uuid)


def coherent_used(total: int | None, used: int | None, free: int | None, reserved: int | None = None) -> int | None:
    """``used``, raised to ``total - free - reserved`` when the numbers do not add up to ``total``.

    Used, free and reserved memory make up the total, and NVML's contract does not rule out a
    triple that falls short (NVIDIA's mock NVML returns used 0, free 0 of 40 GiB by default). Free
    memory is what a new job can have, so it is the number trusted: the rest is in use, and a GPU
    with no free memory never looks idle.
    """
    if total is None or free is None:
        return used
    rest = max(total - free - (reserved or 0), 0)
    return rest if used is None else max(used, rest)


@dataclass(frozen=True)
class Needs:
    """What the command at hand needs from NVML; the rest is not queried (keeps launches fast).

    ``ls`` without ``--topo`` needs no links; only what shows processes (``ls``) needs their user and
    command, which costs psutil's import. A launch counts processes (they decide whether a GPU is
    idle) and, unless ``-q``, names their users in its warnings ("GPU 0 is busy by alice"), which
    /proc tells without psutil.
    """

    processes: bool = True
    topology: bool = False
    mig: bool = True
    process_details: bool = True  # user and command of each pid (psutil)
    process_users: bool = False  # the user alone (from /proc, no psutil), when process_details is off
    #: What only `ls` and snapshots show, never a choice: temperature, compute capability, the
    #: driver's and CUDA's versions. A launch does not ask for them.
    display: bool = True
    #: NVML indices of the GPUs whose state is read (memory, utilization, processes, health, MIG,
    #: CPU affinity); the others are read for their identity alone (index, UUID, name, bus id).
    #: None: every GPU's. ``--gpus 2`` needs GPU 2's state only.
    state_of: frozenset[int] | None = None
    #: With ``topology``: the GPUs whose links are read, once their state is known (a launch: those
    #: it could choose); the others are SYS to every GPU in ``Machine.links``, as a GPU NVML could
    #: not read is: no choice compares their pairs. None: every GPU's links.
    links_among: Callable[[Gpu], bool] | None = None
    extras: bool = False  # ls --wide: power, fan, clocks (a few NVML calls per GPU that nothing else needs)
