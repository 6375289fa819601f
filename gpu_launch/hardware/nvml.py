"""The NVML adapter: the only module in gpulaunch that imports ``pynvml`` (package nvidia-ml-py).

:class:`NvmlBackend` reads the machine in one pass (init, query, shutdown) and returns a frozen
:class:`~gpu_launch.hardware.model.Machine`; nothing above it sees a handle or an NVML exception.
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

import contextlib
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from gpu_launch.hardware import host
from gpu_launch.hardware import nvml_topology
from gpu_launch.errors import NvmlUnavailable
from gpu_launch.hardware.model import Needs, Gpu, GpuProcess, Machine, MigDevice, coherent_used

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NvmlBackend"]


def _debug(message: str, *args: object) -> None:
    """Log at DEBUG without importing logging (~3 ms of every NVML read): if nothing imported
    logging, nothing configured a handler for it, and the record would go nowhere anyway."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(__name__).debug(message, *args)


# nvmlReturn_t codes (nvml.h). They are ABI, identical in every binding; pynvml raises one
# NVMLError subclass per code, with the code in ``.value``.
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_ARGUMENT_VERSION_MISMATCH = 25

_GPU_FATAL = frozenset({_GPU_IS_LOST, _RESET_REQUIRED})  # the GPU is gone, not just one field
_MIB = 1024 * 1024
_MIN_CPU_WORDS = 1024 // 64  # CPU affinity words asked of NVML: CPUs 0-1023 at least
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong (older pynvml passes it through)
_PROFILE_RE = re.compile(r"\b((?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z0-9]+)*)", re.IGNORECASE)

_EXAMPLES_HINT = "no NVIDIA driver here? try the bundled examples: gpulaunch --snapshot dgx-h100 ls"
_INIT_FAILURES: dict[int, tuple[str, str]] = {
    _LIBRARY_NOT_FOUND: ("the NVML library libnvidia-ml.so.1 was not found; is the NVIDIA driver installed?",
                         _EXAMPLES_HINT),
    _DRIVER_NOT_LOADED: ("the NVIDIA kernel driver is not loaded",
                         ("load it (sudo modprobe nvidia) or reboot; " + _EXAMPLES_HINT)),
    _LIB_RM_VERSION_MISMATCH: ("the NVML library and the NVIDIA kernel driver have different versions",
                               ("the driver was upgraded without reloading the kernel module: "
                                "reboot or reload nvidia modules")),
    _NO_PERMISSION: ("no permission to use NVML",
                     "check access to /dev/nvidiactl and /dev/nvidia* (group, container device mounts)"),
}


class _GpuFailed(Exception):
    """The GPU at hand cannot be read at all; its row becomes ``available=False``."""


@dataclass
class _Identity:
    """What is known of a GPU so far: enough for an ``available=False`` row if reading fails."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None

    def unavailable(self, error: str) -> Gpu:
        return Gpu(index=self.index, uuid=self.uuid or f"GPU-unavailable-{self.index}",
                   name=self.name or "unknown GPU", pci_bus_id=self.pci_bus_id, available=False, error=error)


class NvmlBackend:
    """Reads the machine from NVML in one pass: init, the queries ``needs`` asks for, shutdown.

    ``nvml`` is the pynvml module (imported on first use when None) or an object with the same
    names (tests pass a fake). ``timings`` receives seconds per query kind; ``sysfs_root`` is where
    PCI NUMA nodes and local CPU lists are read.
    """

    def __init__(self, nvml: Any = None, needs: Needs = Needs(), timings: dict[str, float] | None = None,
                 sysfs_root: str = "/sys") -> None:
        self._nvml: Any = nvml
        self.needs = needs
        self.timings = timings
        self.sysfs_root = sysfs_root
        #: NVML functions these bindings or this driver lack (FunctionNotFound), for ``-v``.
        self.missing_functions: set[str] = set()
        self._memory_versions: set[str] = set()
        self._memory_v2_absent = False  # probe result: the v2 memory call cannot work here
        self._processes_function: str | None = None  # probe result: v3, else v2
        self._cpu_words: int | None = None
        self._library_mismatch: tuple[type[BaseException], ...] = ()
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

    # -- session -----------------------------------------------------------------------------

    def _load(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise NvmlUnavailable(f"NVML unavailable: cannot import pynvml ({exc})",
                                      hint="pip install nvidia-ml-py; " + _EXAMPLES_HINT) from exc
            self._nvml = pynvml
        mismatch = getattr(self._nvml, "NVMLLibraryMismatchError", None)
        self._library_mismatch = (mismatch,) if isinstance(mismatch, type) else ()
        return self._nvml

    @contextlib.contextmanager
    def _session(self, nvml: Any) -> Iterator[None]:
        with self._timed("init"):
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                cause, hint = _INIT_FAILURES.get(_code(exc), ("NVML failed to initialize", _EXAMPLES_HINT))
                failed = NvmlUnavailable(f"NVML unavailable: {cause} (NVML: {exc})", hint=hint)
                failed.no_driver = _code(exc) in (_LIBRARY_NOT_FOUND, _DRIVER_NOT_LOADED)
                raise failed from exc
        try:
            yield
        finally:
            with self._timed("shutdown"):
                try:
                    nvml.nvmlShutdown()
                except nvml.NVMLError as exc:  # the data is read; a failed shutdown changes nothing
                    _debug("nvmlShutdown failed: %s", exc)

    @contextlib.contextmanager
    def _timed(self, kind: str) -> Iterator[None]:
        if self.timings is None:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[kind] = self.timings.get(kind, 0.0) + time.perf_counter() - start

    # -- the chokepoint ----------------------------------------------------------------------

    def _try(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """Call NVML function ``name``: ``(value, None)``, or ``(None, reason)`` when NVML cannot
        give it (NotSupported, FunctionNotFound, NoPermission, Unknown, ...).

        Raises:
            _GpuFailed: GpuIsLost or ResetRequired: the whole GPU is gone, not just this field.
        """
        function = getattr(self._nvml, name, None)
        if function is None:
            self.missing_functions.add(name)
            return None, f"{name} is not in these NVML bindings"
        try:
            return function(*args), None
        except self._nvml.NVMLError as exc:
            if _code(exc) in _GPU_FATAL:
                raise _GpuFailed(str(exc)) from exc
            if _code(exc) == _FUNCTION_NOT_FOUND:
                self.missing_functions.add(name)
            _debug("%s: %s", name, exc)
            return None, str(exc)
        except self._library_mismatch as exc:  # pynvml: unversioned call newer than the driver
            self.missing_functions.add(name)
            return None, str(exc)

    def _query(self, name: str, *args: Any) -> Any:
        """The value of NVML function ``name``, or None when NVML cannot give it (see ``_try``)."""
        return self._try(name, *args)[0]

    def _try_quiet(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """``_try`` where a lost GPU is just one more unanswered call (system and pair queries)."""
        try:
            return self._try(name, *args)
        except _GpuFailed as exc:
            return None, str(exc)

    def _pair_call(self, handles: list[Any], suspects: set[int]) -> Any:
        """``_try_quiet`` for the topology queries that also notes which GPUs a lost-GPU error involved."""
        positions = {id(h): i for i, h in enumerate(handles) if h is not None}

        def call(name: str, *args: Any) -> tuple[Any, str | None]:
            try:
                return self._try(name, *args)
            except _GpuFailed as exc:
                suspects.update(positions[id(a)] for a in args if id(a) in positions)
                return None, str(exc)
        return call

    def _recheck(self, gpus: tuple[Gpu, ...], handles: list[Any], suspects: set[int]) -> tuple[Gpu, ...]:
        """A GPU can be lost after its own fields were read (a race): ask the suspects once more, so
        that one which is gone becomes unavailable instead of being offered to ``--auto``."""
        out = list(gpus)
        for i in sorted(suspects):
            try:
                self._identity_call("nvmlDeviceGetUUID", handles[i])
            except _GpuFailed as exc:
                gpu = gpus[i]
                out[i] = _Identity(gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id).unavailable(str(exc))
        return tuple(out)

    def _mig_call(self, name: str, *args: Any, absent: frozenset[int] = frozenset()) -> Any:
        """A MIG query: None when the GPU or driver has no MIG (NotSupported, FunctionNotFound, or
        a code in ``absent``). Any other failure leaves the GPU's MIG state unknown, and a GPU that
        might be in MIG mode must not be handed out whole, so it raises _GpuFailed."""
        function = getattr(self._nvml, name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self._nvml.NVMLError as exc:
            if _code(exc) in _GPU_FATAL:
                raise _GpuFailed(str(exc)) from exc
            if _code(exc) in {_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, *absent}:
                return None
            raise _GpuFailed(f"its MIG state is unknown ({name}: {exc})") from exc
        except self._library_mismatch:
            return None

    def _identity_call(self, name: str, *args: Any) -> Any:
        """A call the GPU's identity depends on: any NVML error makes the GPU unavailable."""
        try:
            return getattr(self._nvml, name)(*args)
        except self._nvml.NVMLError as exc:
            if name == "nvmlDeviceGetHandleByIndex" and _code(exc) == _INVALID_ARGUMENT:
                raise _GpuFailed(f"GPU disappeared after it was counted ({exc})") from exc
            raise _GpuFailed(str(exc)) from exc

    # -- the machine -------------------------------------------------------------------------

    def _read(self, nvml: Any) -> Machine:
        with self._timed("devices"):
            driver = _text(self._try_quiet("nvmlSystemGetDriverVersion")[0])
            cuda = self._cuda_driver_version()
            count = self._device_count(nvml)
        pids: dict[int, tuple[str | None, str | None]] = {}
        rows = [self._read_gpu(index, pids) for index in range(count)]
        gpus = tuple(gpu for gpu, _ in rows)
        links, nvswitch = None, False
        if self.needs.topology:
            suspects: set[int] = set()
            with self._timed("topology"):
                found = nvml_topology.link_matrix(nvml, gpus, [h for _, h in rows],
                                                  self._pair_call([h for _, h in rows], suspects))
            links, nvswitch = found.matrix, found.nvswitch
            self._warnings.extend(found.warnings)
            gpus = self._recheck(gpus, [h for _, h in rows], suspects)
        return Machine(gpus=gpus, links=links, driver_version=driver, cuda_driver_version=cuda,
                       hostname=os.uname().nodename, source="nvml", nvswitch=nvswitch,
                       warnings=tuple(self._warnings))

    def _device_count(self, nvml: Any) -> int:
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable: it cannot count the GPUs (NVML: {exc})",
                                  hint="check `nvidia-smi`; " + _EXAMPLES_HINT) from exc

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
                uuid = _text(self._identity_call("nvmlDeviceGetUUID", handle))
                if not uuid or not uuid.startswith("GPU-"):
                    raise _GpuFailed(f"NVML gave no usable UUID ({uuid!r})")
                ident.uuid = uuid
                ident.pci_bus_id = self._bus_id(handle)
                ident.name = _text(self._query("nvmlDeviceGetName", handle))
            return self._read_details(handle, ident, pids), handle
        except _GpuFailed as exc:
            _debug("GPU %d unavailable: %s", index, exc)
            return ident.unavailable(str(exc)), None

    def _read_details(self, handle: Any, ident: _Identity, pids: dict[int, tuple[str | None, str | None]]) -> Gpu:
        nvml = self._nvml
        with self._timed("devices"):
            capability = self._query("nvmlDeviceGetCudaComputeCapability", handle)
            temperature = self._query("nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
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
            utilization_gpu=_bounded(utilization, 0, 100), temperature_c=_bounded(temperature, -50, 200),
            compute_capability=_capability(capability), numa_node=numa_node, cpu_affinity=cpu_affinity,
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
            return _bounded(round(milliwatts / 1000), 0, 100_000) if isinstance(milliwatts, int) else None

        return (watts(draw), watts(limit), _bounded(fan, 0, 255), _bounded(sm, 0, 100_000),
                _bounded(memory, 0, 100_000))

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
        total = _mib(getattr(info, "total", None))
        if not total:  # 0: unified memory (Grace, Jetson), NVML reports no framebuffer
            return None, None, None, None
        free, reserved = _mib(getattr(info, "free", None)), _mib(getattr(info, "reserved", None))
        return total, coherent_used(total, _mib(getattr(info, "used", None)), free, reserved), free, reserved

    def _memory_v2(self, handle: Any) -> Any:
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        if version is None:
            self._memory_v2_absent = True
            _debug("memory: these bindings have no nvmlMemory_v2; using v1")
            return None
        try:
            return self._nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except TypeError:  # bindings older than the version= keyword
            self._memory_v2_absent = True
        except self._nvml.NVMLError as exc:
            if _code(exc) in _GPU_FATAL:
                raise _GpuFailed(str(exc)) from exc
            # FunctionNotFound (driver < 510) holds for every GPU; NotSupported may be just this one.
            self._memory_v2_absent = _code(exc) in (_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH)
            _debug("memory v2: %s; falling back to v1", exc)
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
        errors = _int(self._query("nvmlDeviceGetTotalEccErrors", handle,
                                  getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                  getattr(nvml, "NVML_VOLATILE_ECC", 0)))
        if errors is not None and 0 < errors < _NOT_AVAILABLE:
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
            mib = None if used is None or int(used) >= _NOT_AVAILABLE else int(used) // _MIB
            out.append(GpuProcess(pid=pid, used_memory_mib=mib, user=pids[pid][0], command=pids[pid][1]))
        return tuple(out)

    def _running_processes(self, handle: Any) -> Any:
        """Compute processes via the v3 call, or v2 on drivers older than 510 (cached once known)."""
        candidates = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
        for name in (self._processes_function,) if self._processes_function else candidates:
            value, why = self._try(name, handle)
            if name in self.missing_functions:
                _debug("processes: %s unusable (%s)", name, why)
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
            raise _GpuFailed("MIG mode is on, but NVML cannot count its MIG devices")
        out = []
        for i in range(count):
            mig = self._mig_call("nvmlDeviceGetMigDeviceHandleByIndex", handle, i,
                                 absent=frozenset({_NOT_FOUND, _INVALID_ARGUMENT}))
            if mig is None:  # no instance at this index; a later one may still exist
                continue
            device = self._mig_device(mig)
            if device is not None:
                out.append(device)
        return "enabled", tuple(out)

    def _mig_device(self, mig: Any) -> MigDevice | None:
        uuid = _text(self._query("nvmlDeviceGetUUID", mig))
        if not uuid or not uuid.startswith("MIG-"):
            return None
        # NVML names a MIG device after its profile: "NVIDIA A100-SXM4-80GB MIG 1g.10gb".
        match = _PROFILE_RE.search(_text(self._query("nvmlDeviceGetName", mig)) or "")
        total, used, free, _ = self._memory(mig)
        return MigDevice(
            uuid=uuid, profile=match.group(1).lower() if match else None,
            memory_total_mib=total, memory_used_mib=used, memory_free_mib=free,
            gpu_instance_id=_int(self._query("nvmlDeviceGetGpuInstanceId", mig)),
            compute_instance_id=_int(self._query("nvmlDeviceGetComputeInstanceId", mig)),
        )


def _code(exc: BaseException) -> int:
    """The nvmlReturn_t code of an NVMLError (``.value``), or -1."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else -1


def _text(value: Any) -> str | None:
    """NVML strings: str in current bindings, bytes in older ones; NULs and blanks stripped."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    return value.strip().strip("\x00").strip() or None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _mib(value: Any) -> int | None:
    number = _int(value)
    return None if number is None or number < 0 or number >= _NOT_AVAILABLE else number // _MIB


def _bounded(value: Any, lo: int, hi: int) -> int | None:
    """``value`` if it is an int within the snapshot schema's range, else None."""
    number = _int(value)
    return number if number is not None and lo <= number <= hi else None


def _capability(value: Any) -> str | None:
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}.{value[1]}"
    return None
