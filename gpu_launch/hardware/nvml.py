"""The NVML adapter: the only module in gpulaunch that imports ``pynvml`` (package nvidia-ml-py).

:class:`NvmlBackend` reads the machine in one pass (init, query, shutdown) and returns a frozen
:class:`~gpu_launch.hardware.model.Machine`; nothing above it sees a handle or an NVML exception.
Every call goes through :class:`~gpu_launch.hardware.nvml_calls.NvmlCalls`, the chokepoint this
class is built on, and what NVML's answers mean is in :mod:`gpu_launch.hardware.nvml_answers`.
Failures come in three sizes (STYLE.md §5 rule 4):

- a field NVML cannot give (NotSupported, FunctionNotFound, NoPermission, Unknown, ...) is ``None``;
- a GPU that cannot be read (no handle, no UUID, GpuIsLost or ResetRequired on any call) becomes a
  ``Gpu(available=False, error=<NVML's message>)`` row with whatever identity was read;
- NVML itself failing (no library, no driver, version mismatch, no permission) raises
  :class:`~gpu_launch.errors.NvmlUnavailable` with a hint.

Newer calls are probed once and the answer is cached on the instance: ``nvmlDeviceGetMemoryInfo``
with ``version=nvmlMemory_v2`` (driver >= 510; CUDA-FACTS B11), then v1; running processes v3, then
v2. v2 reports the driver's reserved memory apart: total = reserved + used + free, as nvidia-smi
shows it and NVIDIA's mock NVML profiles model it (free = total - reserved on an idle GPU); v1's used
is all that is not free. Either way a triple that does not add up is made coherent (free trusted).
"""

from __future__ import annotations

import math
import os

from gpu_launch.base.records import dataclass
from gpu_launch.errors import NvmlUnavailable
from gpu_launch.hardware import host
from gpu_launch.hardware import nvml_topology
from gpu_launch.hardware.model import Needs, Gpu, GpuProcess, Machine, MigDevice, coherent_used
from gpu_launch.hardware.nvml_answers import (ARGUMENT_VERSION_MISMATCH, EXAMPLES_HINT, FUNCTION_NOT_FOUND,
                                              GPU_FATAL, INVALID_ARGUMENT, MIB, NOT_AVAILABLE, NOT_FOUND, GpuFailed,
                                              as_capability, as_int, as_text, bounded, debug, error_code, to_mib)
from gpu_launch.hardware.nvml_calls import NvmlCalls

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NvmlBackend"]

_MIN_CPU_WORDS = 1024 // 64  # CPU affinity words asked of NVML: CPUs 0-1023 at least
#: A MIG device's profile in its name ("... MIG 1g.10gb", "MIG 1c.2g.20gb", "MIG 1g.10gb+me"); compiled
#: on first use, so that a machine without MIG devices never imports ``re``.
_PROFILE_PATTERN = r"\b((?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z0-9]+)*)"


@dataclass
class _Identity:
    """What is known of a GPU so far: enough for an ``available=False`` row if reading fails."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None

    def identified(self) -> Gpu:
        """The GPU as far as its identity: its state was not asked for, so processes are unknown."""
        assert self.uuid is not None
        return Gpu(index=self.index, uuid=self.uuid, name=self.name or "unknown GPU", pci_bus_id=self.pci_bus_id,
                   processes_known=False)

    def unavailable(self, error: str) -> Gpu:
        return Gpu(index=self.index, uuid=self.uuid or f"GPU-unavailable-{self.index}",
                   name=self.name or "unknown GPU", pci_bus_id=self.pci_bus_id, available=False, error=error)


class NvmlBackend(NvmlCalls):
    """Reads the machine from NVML in one pass: init, the queries ``needs`` asks for, shutdown.

    ``nvml`` is the pynvml module (imported on first use when None) or an object with the same
    names (tests pass a fake). ``timings`` receives seconds per query kind; ``sysfs_root`` is where
    PCI NUMA nodes and local CPU lists are read.
    """

    def __init__(self, nvml: Any = None, needs: Needs = Needs(), timings: dict[str, float] | None = None,
                 sysfs_root: str = "/sys") -> None:
        super().__init__(nvml, timings)
        self.needs = needs
        self.sysfs_root = sysfs_root
        self._memory_versions: set[str] = set()
        self._memory_v2_absent = False  # probe result: the v2 memory call cannot work here
        self._processes_function: str | None = None  # probe result: v3, else v2
        self._cpu_words: int | None = None
        self._warnings: list[str] = []

    @property
    def memory_api(self) -> str | None:
        """Which nvmlDeviceGetMemoryInfo the last read used: ``"v2"``, ``"v1"``, ``"v1+v2"`` or None."""
        return "+".join(sorted(self._memory_versions)) or None

    def read_machine(self) -> Machine:
        """Read every GPU once.

        Raises:
            NvmlUnavailable: pynvml missing, no NVML library, driver not loaded, library/driver
                version mismatch, no permission, or NVML cannot count the GPUs.
        """
        nvml = self._load()
        self._warnings = []
        self._memory_versions = set()
        with self._session(nvml):
            return self._read(nvml)

    def _recheck(self, gpus: tuple[Gpu, ...], handles: list[Any], suspects: set[int]) -> tuple[Gpu, ...]:
        """A GPU can be lost after its own fields were read (a race): ask the suspects once more, so
        that one which is gone becomes unavailable instead of being offered to ``--auto``."""
        out = list(gpus)
        for i in sorted(suspects):
            try:
                self._identity_call("nvmlDeviceGetUUID", handles[i])
            except GpuFailed as exc:
                gpu = gpus[i]
                out[i] = _Identity(gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id).unavailable(str(exc))
        return tuple(out)

    # -- the machine -------------------------------------------------------------------------

    def _read(self, nvml: Any) -> Machine:
        driver = cuda = None
        with self._timed("devices"):
            if self.needs.display:
                driver = as_text(self._try_quiet("nvmlSystemGetDriverVersion")[0])
                cuda = self._cuda_driver_version()
            count = self._device_count(nvml)
        pids: dict[int, tuple[str | None, str | None]] = {}
        rows = [self._read_gpu(index, pids) for index in range(count)]
        gpus = tuple(gpu for gpu, _ in rows)
        links, nvswitch = None, False
        if self.needs.topology:
            suspects: set[int] = set()
            among = self.needs.links_among
            handles = [h if among is None or among(gpu) else None for gpu, h in rows]
            with self._timed("topology"):
                found = nvml_topology.link_matrix(nvml, gpus, handles, self._pair_call(handles, suspects))
            links, nvswitch = found.matrix, found.nvswitch  # a skipped GPU is SYS to all: never compared
            self._warnings.extend(found.warnings)
            gpus = self._recheck(gpus, handles, suspects)
        return Machine(gpus=gpus, links=links, driver_version=driver, cuda_driver_version=cuda,
                       hostname=os.uname().nodename, source="nvml", nvswitch=nvswitch,
                       warnings=tuple(self._warnings))

    def _device_count(self, nvml: Any) -> int:
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable: it cannot count the GPUs (NVML: {exc})",
                                  hint="check `nvidia-smi`; " + EXAMPLES_HINT) from exc

    def _cuda_driver_version(self) -> str | None:
        """``12040`` → ``"12.4"`` (the CUDA version the driver supports)."""
        for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            value = self._try_quiet(name)[0]
            if isinstance(value, int) and value > 0:
                return f"{value // 1000}.{value % 1000 // 10}"
        return None

    def _read_gpu(self, index: int, pids: dict[int, tuple[str | None, str | None]]) -> tuple[Gpu, Any]:
        """The GPU at NVML ``index`` and its handle (None when it is unavailable)."""
        ident = _Identity(index)
        try:
            with self._timed("devices"):
                handle = self._identity_call("nvmlDeviceGetHandleByIndex", index)
                uuid = as_text(self._identity_call("nvmlDeviceGetUUID", handle))
                if not uuid or not uuid.startswith("GPU-"):
                    raise GpuFailed(f"NVML gave no usable UUID ({uuid!r})")
                ident.uuid = uuid
                ident.pci_bus_id = self._bus_id(handle)
                ident.name = as_text(self._query("nvmlDeviceGetName", handle))
            if self.needs.state_of is not None and index not in self.needs.state_of:
                return ident.identified(), handle  # not asked about: who it is is enough
            return self._read_details(handle, ident, pids), handle
        except GpuFailed as exc:
            debug("GPU %d unavailable: %s", index, exc)
            return ident.unavailable(str(exc)), None

    def _read_details(self, handle: Any, ident: _Identity, pids: dict[int, tuple[str | None, str | None]]) -> Gpu:
        nvml = self._nvml
        capability = temperature = None
        if self.needs.display:
            with self._timed("devices"):
                capability = self._query("nvmlDeviceGetCudaComputeCapability", handle)
                temperature = self._query("nvmlDeviceGetTemperature", handle,
                                          getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        with self._timed("memory"):
            total, used, free, reserved = self._memory(handle)
        with self._timed("utilization"):
            utilization = getattr(self._query("nvmlDeviceGetUtilizationRates", handle), "gpu", None)
        with self._timed("affinity"):
            numa_node = self._numa_node(handle, ident.pci_bus_id)
            cpu_affinity = self._cpu_affinity(handle, ident.pci_bus_id)
        with self._timed("health"):
            health = self._health(handle)
        processes: tuple[GpuProcess, ...] | None = None  # None: not asked, or NVML could not list them
        if self.needs.processes:
            with self._timed("processes"):
                processes = self._processes(handle, pids)
        mig_mode = "unknown"
        mig_devices: tuple[MigDevice, ...] = ()
        if self.needs.mig:
            with self._timed("mig"):
                mig_mode, mig_devices = self._mig(handle)
        draw, limit, fan, sm, memory = self._extras(handle) if self.needs.extras else (None,) * 5
        assert ident.uuid is not None
        return Gpu(
            index=ident.index, uuid=ident.uuid, name=ident.name or "unknown GPU", pci_bus_id=ident.pci_bus_id,
            memory_total_mib=total, memory_used_mib=used, memory_free_mib=free, memory_reserved_mib=reserved,
            utilization_gpu=bounded(utilization, 0, 100), temperature_c=bounded(temperature, -50, 200),
            compute_capability=as_capability(capability), numa_node=numa_node, cpu_affinity=cpu_affinity,
            processes=processes or (), processes_known=processes is not None,
            mig_devices=mig_devices, mig_mode=mig_mode, health=health, power_draw_w=draw, power_limit_w=limit,
            fan_percent=fan, clock_sm_mhz=sm, clock_memory_mhz=memory,
        )

    def _extras(self, handle: Any) -> tuple[int | None, ...]:
        """``ls --wide`` only: power draw and limit (NVML: milliwatts), fan speed, SM and memory clocks.
        Five cheap calls per GPU that nothing else needs; None for each NVML cannot give (no fan)."""
        nvml = self._nvml
        with self._timed("extras"):
            draw = self._query("nvmlDeviceGetPowerUsage", handle)
            limit = self._query("nvmlDeviceGetEnforcedPowerLimit", handle)
            fan = self._query("nvmlDeviceGetFanSpeed", handle)
            sm = self._query("nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
            memory = self._query("nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_MEM", 2))

        def watts(milliwatts: Any) -> int | None:
            return bounded(round(milliwatts / 1000), 0, 100_000) if isinstance(milliwatts, int) else None

        return (watts(draw), watts(limit), bounded(fan, 0, 255), bounded(sm, 0, 100_000),
                bounded(memory, 0, 100_000))

    # -- fields ------------------------------------------------------------------------------

    def _bus_id(self, handle: Any) -> str | None:
        """The bus id in NVML's own form, ``00000000:07:00.0``."""
        info = self._query("nvmlDeviceGetPciInfo", handle)
        parts = host.parse_bus_id(getattr(info, "busId", None)) or host.parse_bus_id(getattr(info, "busIdLegacy", None))
        return None if parts is None else "{:08X}:{:02X}:{:02X}.{}".format(*parts)

    def _memory(self, handle: Any) -> tuple[int | None, int | None, int | None, int | None]:
        """Total, used, free, reserved MiB: v2 (which tells reserved) where the driver has it, else
        v1 (reserved None). Used is made coherent with the rest (:func:`coherent_used`)."""
        info = None if self._memory_v2_absent else self._memory_v2(handle)
        if info is not None:
            self._memory_versions.add("v2")
        else:
            info = self._query("nvmlDeviceGetMemoryInfo", handle)
            if info is not None:
                self._memory_versions.add("v1")
        total = to_mib(getattr(info, "total", None))
        if not total:  # 0: unified memory (Grace, Jetson), NVML reports no framebuffer
            return None, None, None, None
        free, reserved = to_mib(getattr(info, "free", None)), to_mib(getattr(info, "reserved", None))
        return total, coherent_used(total, to_mib(getattr(info, "used", None)), free, reserved), free, reserved

    def _memory_v2(self, handle: Any) -> Any:
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        if version is None:
            self._memory_v2_absent = True
            debug("memory: these bindings have no nvmlMemory_v2; using v1")
            return None
        try:
            return self._nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except TypeError:  # bindings older than the version= keyword
            self._memory_v2_absent = True
        except self._nvml.NVMLError as exc:
            if error_code(exc) in GPU_FATAL:
                raise GpuFailed(str(exc)) from exc
            # FunctionNotFound (driver < 510) holds for every GPU; NotSupported may be just this one.
            self._memory_v2_absent = error_code(exc) in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH)
            debug("memory v2: %s; falling back to v1", exc)
        return None

    def _numa_node(self, handle: Any, bus_id: str | None) -> int | None:
        """The host NUMA node of a PCIe GPU from sysfs; NVML's node where sysfs has none (B15)."""
        node = host.pci_numa_node(bus_id, self.sysfs_root)
        if node is None:
            value = self._query("nvmlDeviceGetNumaNodeId", handle)
            node = value if isinstance(value, int) and value >= 0 else None
        return node

    def _cpu_affinity(self, handle: Any, bus_id: str | None) -> str | None:
        """The GPU's ideal CPUs (NVML's 64-CPU bitmask words), else sysfs ``local_cpulist``.

        NVML is asked for words enough for every CPU the GPU may be local to: at least 1024 CPUs'
        worth, not just the CPUs this host (or container) says are possible, since the GPU's CPUs
        can lie above those (a cpuset, a VM with fewer vCPUs than the board's sockets): too few
        words cut its CPUs off and left it with none.
        """
        if self._cpu_words is None:
            self._cpu_words = max(_MIN_CPU_WORDS, math.ceil(host.possible_cpu_count(self.sysfs_root) / 64))
        words = self._query("nvmlDeviceGetCpuAffinity", handle, self._cpu_words)
        cpus = host.cpulist_from_mask(words) if words is not None else None
        return cpus or host.pci_local_cpulist(bus_id, self.sysfs_root)

    def _health(self, handle: Any) -> tuple[str, ...]:
        """What is wrong with the GPU's memory, as NVML reports it; no peer launcher checks this.

        Pages pending retirement (pre-Ampere) and row remapping pending or failed (Ampere on) need a
        GPU reset before the memory is whole again; volatile uncorrectable ECC errors (since the
        driver loaded) mean data was lost. A query NVML cannot answer (NotSupported on GPUs without
        ECC or without the feature, no permission, ...) finds nothing: unknown is never unhealthy.
        """
        nvml, problems = self._nvml, []
        if self._query("nvmlDeviceGetRetiredPagesPendingStatus", handle) == getattr(nvml, "NVML_FEATURE_ENABLED", 1):
            problems.append("pages pending retirement")
        rows = self._query("nvmlDeviceGetRemappedRows", handle)
        if isinstance(rows, (tuple, list)) and len(rows) == 4:  # correctable, uncorrectable, pending, failure
            if rows[3]:
                problems.append("row remapping failed")
            if rows[2]:
                problems.append("row remapping pending")
        errors = as_int(self._query("nvmlDeviceGetTotalEccErrors", handle,
                                  getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                  getattr(nvml, "NVML_VOLATILE_ECC", 0)))
        if errors is not None and 0 < errors < NOT_AVAILABLE:
            problems.append(f"{errors} volatile uncorrectable ECC error{'s' if errors != 1 else ''}")
        return tuple(problems)

    def _processes(self, handle: Any, pids: dict[int, tuple[str | None, str | None]]) -> tuple[GpuProcess, ...] | None:
        """The GPU's compute processes, or None when NVML cannot list them (any error, NotSupported
        included: none of them means "no processes", and a GPU whose processes are unknown must not
        look idle). Users and commands come from psutil only when ``needs.process_details``; with
        ``needs.process_users`` the user alone is read from /proc, which costs no import."""
        running = self._running_processes(handle)
        if running is None:
            return None
        out = []
        for proc in running:
            pid = int(proc.pid)
            if pid not in pids:
                if self.needs.process_details:
                    pids[pid] = host.process_user_and_command(pid)
                else:
                    pids[pid] = (host.process_user(pid) if self.needs.process_users else None, None)
            used = getattr(proc, "usedGpuMemory", None)
            mib = None if used is None or int(used) >= NOT_AVAILABLE else int(used) // MIB
            out.append(GpuProcess(pid=pid, used_memory_mib=mib, user=pids[pid][0], command=pids[pid][1]))
        return tuple(out)

    def _running_processes(self, handle: Any) -> Any:
        """Compute processes via the v3 call, or v2 on drivers older than 510 (cached once known)."""
        candidates = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
        for name in (self._processes_function,) if self._processes_function else candidates:
            value, why = self._try(name, handle)
            if name in self.missing_functions:
                debug("processes: %s unusable (%s)", name, why)
                continue
            self._processes_function = name
            return value
        return None

    def _mig(self, handle: Any) -> tuple[str, tuple[MigDevice, ...]]:
        """The GPU's current MIG mode and its MIG devices.

        A GPU whose mode NVML cannot give because it has no MIG (NotSupported, or a driver or
        bindings without the call) is ``"disabled"``. A GPU in MIG mode may have no MIG devices at
        all (switched on, no instance created yet), and its device indices may be sparse (an
        instance in the middle destroyed): every index up to the maximum is asked, and empty slots
        (NotFound, InvalidArgument) are skipped, as NVIDIA's go-nvlib does.
        """
        mode = self._mig_call("nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != getattr(self._nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return "disabled", ()
        count = self._mig_call("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not isinstance(count, int):
            raise GpuFailed("MIG mode is on, but NVML cannot count its MIG devices")
        out = []
        for i in range(count):
            mig = self._mig_call("nvmlDeviceGetMigDeviceHandleByIndex", handle, i,
                                 absent=frozenset({NOT_FOUND, INVALID_ARGUMENT}))
            if mig is None:  # no instance at this index; a later one may still exist
                continue
            device = self._mig_device(mig)
            if device is not None:
                out.append(device)
        return "enabled", tuple(out)

    def _mig_device(self, mig: Any) -> MigDevice | None:
        uuid = as_text(self._query("nvmlDeviceGetUUID", mig))
        if not uuid or not uuid.startswith("MIG-"):
            return None
        # NVML names a MIG device after its profile: "NVIDIA A100-SXM4-80GB MIG 1g.10gb".
        import re

        match = re.search(_PROFILE_PATTERN, as_text(self._query("nvmlDeviceGetName", mig)) or "", re.IGNORECASE)
        total, used, free, _ = self._memory(mig)
        return MigDevice(
            uuid=uuid, profile=match.group(1).lower() if match else None,
            memory_total_mib=total, memory_used_mib=used, memory_free_mib=free,
            gpu_instance_id=as_int(self._query("nvmlDeviceGetGpuInstanceId", mig)),
            compute_instance_id=as_int(self._query("nvmlDeviceGetComputeInstanceId", mig)),
        )

