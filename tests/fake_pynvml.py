"""A hand-written stand-in for the ``pynvml`` module (nvidia-ml-py), passed to ``NvmlBackend(nvml=...)``.

It mimics what the backend relies on in the real bindings (checked against nvidia-ml-py 13.615):
``NVMLError`` whose ``NVMLError(code)`` returns the per-code subclass (``NVMLError_NotSupported``,
...), ``.value`` holding the code and ``str()`` giving NVML's message ("GPU is lost"); the
``NVML_*`` constants with the same values; str results; and the call shapes (handles, structs with
``.total``/``.busId``/... attributes, lists for MIG mode, words for CPU affinity).

Building a machine::

    fake = FakeNvml([make_gpu(0), make_gpu(1, temperature_c=None)])   # None field -> NotSupported
    fake = dgx_h100()            # 8 GPUs, 18 NVSwitch links each, two sockets
    fake = workstation_nvlink()  # 4 GPUs, NVLink bridges 0-2 and 1-3 (NV4), PCIe PIX/PHB
    fake = pcie_dual_socket()    # 8 GPUs, no NVLink: PIX, PXB, PHB, NODE and SYS pairs
    fake = mig_a100()            # GPU 0 in MIG mode with three instances, GPU 1 not
    fake = l40s_out_of_bus_order()  # NVML's indices are not the bus order (NVIDIA's mock L40S profile)
    fake = mock_nvml_default()   # NVIDIA's mock NVML with no config; mock_nvml_a100_nvswitch(): its A100 profile

States real machines are in::

    make_gpu(0, mig_enabled=True)                          # MIG mode on, no MIG device created yet
    make_gpu(0, mig_enabled=True, mig_devices=[mig_a, None, mig_c])  # sparse MIG indices (slot 1 empty)
    make_gpu(0, memory_used_mib=0, memory_free_mib=0)      # memory that does not add up (NVIDIA's mock)
    make_gpu(0, memory_used_mib=600, memory_reserved_mib=583)   # v2: used 17 + reserved 583, v1: used 600
    make_gpu(0, cpu_affinity="960-1023")                   # GPU-local CPUs far above word 0
    make_gpu(0, remapped_rows=(0, 2, False, True), ecc_uncorrected=(2, 2), retired_pages_pending=True)
    FakeNvml(gpus, errors={("nvmlDeviceGetComputeRunningProcesses", 1): NVMLError_NoPermission})
    connect_nvswitch(gpus)                                 # NVLinks whose remote ends are NVSwitches

Failures::

    FakeNvml(gpus, errors={("nvmlInit", None): NVMLError_DriverNotLoaded,        # every call
                           ("nvmlDeviceGetTemperature", 1): NVMLError_NotSupported,   # GPU 1 only
                           ("nvmlDeviceGetTopologyCommonAncestor", (0, 1)): NVMLError_Unknown})
    make_gpu(2, lost_at="nvmlDeviceGetMemoryInfo_v2")  # that call and all later ones: GpuIsLost
    FakeNvml(gpus, reported_count=5)          # count says 5, handle lookup fails past len(gpus)
    FakeNvml(gpus, driver_generation=470)     # no memory v2 / processes v3 (FunctionNotFound)
    FakeNvml(gpus, missing={"nvmlDeviceGetNvLinkRemoteDeviceType"})  # not in these bindings

An error value may be an exception class, an instance, or an NVML error code (int). Calls are
recorded in ``fake.calls`` as ``(name, device)``, where device is the GPU index, a pair for
two-GPU calls, or None; memory with ``version=`` is recorded as ``nvmlDeviceGetMemoryInfo_v2``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

_T = TypeVar("_T")

# --- constants, as in pynvml ---------------------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
nvmlMemory_v2 = 0x02000028

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


# --- errors, as in pynvml ------------------------------------------------------------------
class NVMLError(Exception):
    """``NVMLError(code)`` returns an instance of the subclass for ``code``, as pynvml does."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:  # pynvml defines it (and so is unhashable)
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]


class NVMLLibraryMismatchError(Exception):
    """pynvml raises this (not an NVMLError) when an unversioned call's symbol is missing."""


def _error_class(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, code)

    cls = type(name, (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_Timeout = _error_class("NVMLError_Timeout", NVML_ERROR_TIMEOUT)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_ResetRequired = _error_class("NVMLError_ResetRequired", NVML_ERROR_RESET_REQUIRED)
NVMLError_LibRmVersionMismatch = _error_class("NVMLError_LibRmVersionMismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH)
NVMLError_ArgumentVersionMismatch = _error_class("NVMLError_ArgumentVersionMismatch",
                                                 NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


# --- the machine ---------------------------------------------------------------------------
@dataclass
class FakeLink:
    """One NVLink of a GPU: its remote end is a GPU (bridge) or an NVSwitch."""

    remote_bus_id: str
    remote_type: int = NVML_NVLINK_DEVICE_TYPE_GPU
    enabled: bool = True


@dataclass
class FakeProcess:
    pid: int
    used_memory_mib: int | None = 1024
    raw_sentinel: bool = False  # report None as 2**64-1, as bindings before 11.515 did


@dataclass
class FakeMig:
    uuid: str
    profile: str = "1g.10gb"
    memory_total_mib: int = 9984
    memory_used_mib: int = 13
    gpu_instance_id: int = 1
    compute_instance_id: int = 0


@dataclass
class FakeGpu:
    """One GPU. A field set to None makes its NVML function raise NotSupported."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = "00000000:18:00.0"
    memory_total_mib: int | None = 81559
    memory_used_mib: int = 4  # all that is not free: what v1 reports as used (reserved included)
    memory_reserved_mib: int = 0  # v2 reports it apart, and used without it (as nvidia-smi shows)
    memory_free_mib: int | None = None  # None: total - used; else reported as is (incoherent memory)
    utilization_gpu: int | None = 0
    temperature_c: int | None = 31
    compute_capability: tuple[int, int] | None = (9, 0)
    numa_node: int | None = None  # nvmlDeviceGetNumaNodeId; None: NotSupported (PCIe GPUs)
    cpu_affinity: str | None = None  # cpulist served as 64-bit words by nvmlDeviceGetCpuAffinity ("": none)
    processes: list[FakeProcess] | None = field(default_factory=list)
    nvlinks: list[FakeLink] | None = None  # None: no NVLink (NotSupported on every link)
    pcie: tuple[int, int, int, int] = (0, 0, 0, 0)  # socket, host bridge, switch, leaf switch
    mig_enabled: bool | None = False  # None: MIG not supported
    mig_devices: list[FakeMig | None] = field(default_factory=list)  # None: an empty slot (sparse indices)
    mig_max: int = 7  # nvmlDeviceGetMaxMigDeviceCount
    mig_empty_slot: int = NVML_ERROR_NOT_FOUND  # what an empty slot raises (NotFound or InvalidArgument)
    # Health. None: NotSupported (retired pages on Ampere and later; ECC on GPUs without it).
    retired_pages_pending: bool | None = None
    remapped_rows: tuple[int, int, bool, bool] | None = (0, 0, False, False)  # corr, unc, pending, failure
    ecc_uncorrected: tuple[int, int] | None = (0, 0)  # (volatile, aggregate) uncorrectable ECC errors
    # ls --wide: power (mW), fan (%), clocks (MHz); None: NotSupported (no fan on an SXM board)
    power_usage_mw: int | None = 250_000
    power_limit_mw: int | None = 700_000
    fan_speed: int | None = None
    clocks_mhz: tuple[int, int] | None = (1980, 2619)  # SM, memory
    lost_at: str | None = None  # NVML function from which on every call on this GPU is GpuIsLost
    lost: bool = False


@dataclass(frozen=True)
class FakeHandle:
    index: int
    mig: int | None = None


def make_gpu(index: int, **fields: Any) -> FakeGpu:
    """A GPU with a UUID and bus id derived from ``index``; ``fields`` override FakeGpu's defaults."""
    fields.setdefault("uuid", f"GPU-{index:08x}-aaaa-4bbb-8ccc-{0xd00d0000 + index:012x}")
    fields.setdefault("bus_id", f"00000000:{0x18 + 0x10 * index:02X}:00.0")
    return FakeGpu(**fields)


def connect_nvlink(gpus: list[FakeGpu], a: int, b: int, links: int = 1) -> None:
    """Bridge ``gpus[a]`` and ``gpus[b]`` with ``links`` direct NVLinks."""
    for src, dst in ((a, b), (b, a)):
        gpus[src].nvlinks = (gpus[src].nvlinks or []) + [FakeLink(gpus[dst].bus_id) for _ in range(links)]


def connect_nvswitch(gpus: Iterable[FakeGpu], links: int = 18, switches: int = 4) -> None:
    """Give each GPU ``links`` NVLinks whose remote ends are ``switches`` NVSwitches."""
    for gpu in gpus:
        gpu.nvlinks = (gpu.nvlinks or []) + [
            FakeLink(f"00000000:{0xC0 + link % switches:02X}:00.0", NVML_NVLINK_DEVICE_TYPE_SWITCH)
            for link in range(links)
        ]


def _cpulist_words(cpulist: str, words: int) -> list[int]:
    mask = [0] * words
    for part in filter(None, cpulist.split(",")):  # "": an empty mask, as NVML gives in some VMs
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            if cpu // 64 < words:
                mask[cpu // 64] |= 1 << (cpu % 64)
    return mask


_OLD_DRIVER_SYMBOLS = {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3"}


class FakeNvml:
    """Looks like the ``pynvml`` module to NvmlBackend; see the module docstring."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        errors: Mapping[tuple[str, Any], Any] | None = None,
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        driver_generation: int = 550,
        reported_count: int | None = None,
        missing: Iterable[str] = (),
        absent_symbols: Iterable[str] = (),
        legacy_bytes: bool = False,
        topology: Mapping[tuple[int, int], int] | None = None,
        nvlink_p2p: Mapping[tuple[int, int], int] | None = None,
    ) -> None:
        self.gpus = gpus
        self.errors = dict(errors or {})
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.reported_count = reported_count
        self.missing = set(missing)  # names these "bindings" lack: getattr raises AttributeError
        # C symbols this "driver" lacks: their calls raise FunctionNotFound (R510 added memory v2).
        self.absent_symbols = set(absent_symbols) | (_OLD_DRIVER_SYMBOLS if driver_generation < 510 else set())
        self.legacy_bytes = legacy_bytes  # strings as bytes, as pynvml before 11.5 returned them
        self.topology = {frozenset(k): v for k, v in (topology or {}).items()}
        self.nvlink_p2p = {frozenset(k): v for k, v in (nvlink_p2p or {}).items()}
        self.calls: list[tuple[str, Any]] = []
        self.initialized = 0

    # -- module-like attribute access --------------------------------------------------------
    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:  # constants and error classes, like module globals
        if name in self.missing:
            raise AttributeError(name)
        if name.startswith(("NVML", "nvmlMemory_")) and name in globals():
            return globals()[name]
        raise AttributeError(name)

    # -- bookkeeping -------------------------------------------------------------------------
    def called(self, name: str, device: Any = ...) -> int:
        """How many calls of ``name`` (for ``device`` if given) were made."""
        return sum(1 for n, d in self.calls if n == name and (device is ... or d == device))

    def _enter(self, name: str, *handles: FakeHandle) -> None:
        indices = tuple(h.index for h in handles)
        key = indices[0] if len(indices) == 1 else (indices or None)
        self.calls.append((name, key))
        if not self.initialized and name not in ("nvmlInit",):
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        for index in indices:
            if index >= len(self.gpus):
                continue
            gpu = self.gpus[index]
            if gpu.lost or gpu.lost_at == name:
                gpu.lost = True
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        for (fn, where), error in self.errors.items():
            if fn == name and (where is None or where in indices
                               or (isinstance(where, tuple) and set(where) == set(indices))):
                raise _as_exception(error)
        if name in self.absent_symbols:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

    def _str(self, text: str) -> str | bytes:
        return text.encode() if self.legacy_bytes else text

    def _gpu(self, handle: FakeHandle) -> FakeGpu:
        return self.gpus[handle.index]

    def _mig(self, handle: FakeHandle) -> FakeMig | None:
        return None if handle.mig is None else self.gpus[handle.index].mig_devices[handle.mig]

    # -- system ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._enter("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus) if self.reported_count is None else self.reported_count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        handle = FakeHandle(index)
        self._enter("nvmlDeviceGetHandleByIndex", handle)
        if index >= len(self.gpus):  # the GPU went away after it was counted
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle

    # -- identity and fields -----------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:
        self._enter("nvmlDeviceGetUUID", handle)
        mig = self._mig(handle)
        return self._str(mig.uuid if mig else self._gpu(handle).uuid)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        self._enter("nvmlDeviceGetName", handle)
        mig = self._mig(handle)
        name = self._gpu(handle).name
        return self._str(f"{name} MIG {mig.profile}" if mig else name)

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetPciInfo", handle)
        bus_id = self._gpu(handle).bus_id
        return SimpleNamespace(busId=self._str(bus_id), busIdLegacy=self._str(bus_id[4:]))

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo", handle)
        gpu, mig, mib = self._gpu(handle), self._mig(handle), 1024 * 1024
        if mig is not None:
            total, used, reserved, free = mig.memory_total_mib, mig.memory_used_mib, 0, None
        else:
            total, used, reserved = _supported(gpu.memory_total_mib), gpu.memory_used_mib, gpu.memory_reserved_mib
            free = gpu.memory_free_mib
        free = total - used if free is None else free
        if version:
            return SimpleNamespace(version=version, total=total * mib, reserved=reserved * mib,
                                   used=max(used - reserved, 0) * mib, free=free * mib)
        return SimpleNamespace(total=total * mib, used=used * mib, free=free * mib)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        return _supported(self._gpu(handle).power_usage_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        return _supported(self._gpu(handle).power_limit_mw)

    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetFanSpeed", handle)
        return _supported(self._gpu(handle).fan_speed)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle)
        clocks = _supported(self._gpu(handle).clocks_mhz)
        if clock not in (1, 2):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return clocks[clock - 1]

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=_supported(self._gpu(handle).utilization_gpu), memory=0)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _supported(self._gpu(handle).temperature_c)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeHandle) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        return _supported(self._gpu(handle).compute_capability)

    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetNumaNodeId", handle)
        return _supported(self._gpu(handle).numa_node)

    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, cpuSetSize: int) -> list[int]:
        self._enter("nvmlDeviceGetCpuAffinity", handle)
        return _cpulist_words(_supported(self._gpu(handle).cpu_affinity), cpuSetSize)

    # -- health ------------------------------------------------------------------------------
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return int(_supported(self._gpu(handle).retired_pages_pending))

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", handle)
        corr, unc, pending, failure = _supported(self._gpu(handle).remapped_rows)
        return corr, unc, int(pending), int(failure)  # pynvml passes the C uints through

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, errorType: int, counterType: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", handle)
        volatile, aggregate = _supported(self._gpu(handle).ecc_uncorrected)
        if errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        return volatile if counterType == NVML_VOLATILE_ECC else aggregate

    # -- processes ---------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        try:
            self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
            if "nvmlDeviceGetComputeRunningProcesses_v3" in self.absent_symbols:
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        except NVMLError_FunctionNotFound:  # pynvml's @throwOnVersionMismatch
            raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version "
                                           "does not match the NVML lib version.") from None
        return self._processes(handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses_v2", handle)
        return self._processes(handle)

    def _processes(self, handle: FakeHandle) -> list[SimpleNamespace]:
        out = []
        for proc in _supported(self._gpu(handle).processes):
            used: int | None = None if proc.used_memory_mib is None else proc.used_memory_mib * 1024 * 1024
            if used is None and proc.raw_sentinel:
                used = 2**64 - 1
            out.append(SimpleNamespace(pid=proc.pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                                       computeInstanceId=0xFFFFFFFF))
        return out

    # -- MIG ---------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        mode = int(_supported(self._gpu(handle).mig_enabled))
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        _supported(self._gpu(handle).mig_enabled)
        return self._gpu(handle).mig_max

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        gpu = self._gpu(handle)
        if index >= gpu.mig_max:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if not gpu.mig_enabled or index >= len(gpu.mig_devices) or gpu.mig_devices[index] is None:
            raise NVMLError(gpu.mig_empty_slot)
        return FakeHandle(handle.index, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        mig = self._mig(handle)
        if mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        mig = self._mig(handle)
        if mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance_id

    # -- topology ----------------------------------------------------------------------------
    def _link(self, handle: FakeHandle, link: int) -> FakeLink:
        links = _supported(self._gpu(handle).nvlinks)
        if link >= len(links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", handle)
        return NVML_FEATURE_ENABLED if self._link(handle, link).enabled else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> SimpleNamespace:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", handle)
        return SimpleNamespace(busId=self._str(self._link(handle, link).remote_bus_id))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType", handle)
        return self._link(handle, link).remote_type

    def nvmlDeviceGetP2PStatus(self, a: FakeHandle, b: FakeHandle, index: int) -> int:
        self._enter("nvmlDeviceGetP2PStatus", a, b)
        override = self.nvlink_p2p.get(frozenset((a.index, b.index)))
        if index != NVML_P2P_CAPS_INDEX_NVLINK:
            return NVML_P2P_STATUS_OK
        if override is not None:
            return override
        links_a, links_b = self._gpu(a).nvlinks or [], self._gpu(b).nvlinks or []
        direct = any(link.remote_bus_id == self._gpu(b).bus_id for link in links_a)
        switched = all(any(link.remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH for link in links)
                       for links in (links_a, links_b))
        return NVML_P2P_STATUS_OK if direct or switched else NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeHandle, b: FakeHandle) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor", a, b)
        override = self.topology.get(frozenset((a.index, b.index)))
        if override is not None:
            return override
        pa, pb = self._gpu(a).pcie, self._gpu(b).pcie
        levels = (NVML_TOPOLOGY_SYSTEM, NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_MULTIPLE)
        for depth, level in enumerate(levels):
            if pa[depth] != pb[depth]:
                return level
        return NVML_TOPOLOGY_SINGLE


def _supported(value: _T | None) -> _T:
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def _as_exception(error: Any) -> BaseException:
    if isinstance(error, int):
        return NVMLError(error)
    if isinstance(error, type) and issubclass(error, BaseException):
        return error()
    if isinstance(error, BaseException):
        return error
    raise TypeError(f"not an error to inject: {error!r}")


# --- machine shapes ------------------------------------------------------------------------
def dgx_h100(**options: Any) -> FakeNvml:
    """8× H100 SXM on NVSwitch (18 links each; `topo -m` shows NV18), GPUs 0-3 on socket 0."""
    gpus = [make_gpu(i, numa_node=None, pcie=(i // 4, i // 2, 0, 0),
                     cpu_affinity="0-55,112-167" if i < 4 else "56-111,168-223") for i in range(8)]
    connect_nvswitch(gpus, links=18)
    return FakeNvml(gpus, **options)


def workstation_nvlink(**options: Any) -> FakeNvml:
    """4× RTX A6000 with NVLink bridges 0-2 and 1-3 (4 links each); 0,1 and 2,3 share a switch."""
    gpus = [make_gpu(i, name="NVIDIA RTX A6000", memory_total_mib=49140, compute_capability=(8, 6),
                     pcie=(0, 0, i // 2, 0), cpu_affinity="0-31") for i in range(4)]
    connect_nvlink(gpus, 0, 2, links=4)
    connect_nvlink(gpus, 1, 3, links=4)
    return FakeNvml(gpus, **options)


def pcie_dual_socket(**options: Any) -> FakeNvml:
    """8× L40S, no NVLink. 0-1 PIX, 0-2 PXB, 0-3 PHB, 4-6 NODE, 4-5 and 6-7 PIX, across sockets SYS."""
    paths = [(0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
             (1, 0, 0, 0), (1, 0, 0, 0), (1, 1, 0, 0), (1, 1, 0, 0)]
    gpus = [make_gpu(i, name="NVIDIA L40S", memory_total_mib=46068, compute_capability=(8, 9), pcie=path,
                     cpu_affinity="0-31,64-95" if i < 4 else "32-63,96-127") for i, path in enumerate(paths)]
    return FakeNvml(gpus, **options)


def mig_a100(**options: Any) -> FakeNvml:
    """2× A100 80GB: GPU 0 in MIG mode (3g.40gb, 2g.20gb, 1g.10gb), GPU 1 not."""
    migs = [
        FakeMig("MIG-0a0a0a0a-0000-5000-8000-000000000001", "3g.40gb", 40192, 25, gpu_instance_id=2),
        FakeMig("MIG-0a0a0a0a-0000-5000-8000-000000000002", "2g.20gb", 19968, 13, gpu_instance_id=3),
        FakeMig("MIG-0a0a0a0a-0000-5000-8000-000000000003", "1g.10gb", 9728, 7, gpu_instance_id=9),
    ]
    gpus = [make_gpu(i, name="NVIDIA A100-SXM4-80GB", memory_total_mib=81920, compute_capability=(8, 0),
                     utilization_gpu=None if i == 0 else 0, mig_enabled=(i == 0),
                     mig_devices=migs if i == 0 else []) for i in range(2)]
    return FakeNvml(gpus, **options)


#: The bus ids of NVIDIA's mock NVML L40S profile (k8s-test-infra, pkg/gpu/mocknvml/configs/
#: mock-nvml-config-l40s.yaml), in NVML's order: GPU 4 sits at bus 18, between GPU 0 (17) and GPU 1 (31).
MOCK_L40S_BUSES = (0x17, 0x31, 0xB1, 0xCA, 0x18, 0x32, 0xB2, 0xCB)


def l40s_out_of_bus_order(**options: Any) -> FakeNvml:
    """8× L40S that NVML numbers otherwise than by PCI bus id, as the mock's L40S profile does: CUDA
    under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` counts them GPU 0, 4, 1, 5, 2, 6, 3, 7."""
    gpus = [make_gpu(i, name="NVIDIA L40S", memory_total_mib=46068, compute_capability=(8, 9),
                     bus_id=f"00000000:{bus:02X}:00.0") for i, bus in enumerate(MOCK_L40S_BUSES)]
    return FakeNvml(gpus, **options)


def mock_nvml_default(**options: Any) -> FakeNvml:
    """NVIDIA's mock NVML with no config: 8 A100s reporting used 0 and free 0 of 40 GiB, no temperature, NUMA
    node or CPU affinity (NotSupported), every pair's common ancestor SINGLE, and 12 links a GPU that are
    all disabled, with remote device type unknown (0xFF)."""
    gpus = [make_gpu(i, name="Mock NVIDIA A100-SXM4-40GB", uuid=f"GPU-4d4f434b-0000-0000-0000-{i:012d}",
                     bus_id=f"00000000:{i + 1:02X}:00.0", memory_total_mib=40960, memory_used_mib=0,
                     memory_free_mib=0, temperature_c=None, compute_capability=(8, 0),
                     nvlinks=[FakeLink("", NVML_NVLINK_DEVICE_TYPE_UNKNOWN, enabled=False)] * 12)
            for i in range(8)]
    return FakeNvml(gpus, **options)


def mock_nvml_a100_nvswitch(**options: Any) -> FakeNvml:
    """The mock's DGX A100 profile: 12 links a GPU to six NVSwitches, each link's remote PCI reported as
    FFFFFFFF:FF:FF.0 (as a real GB200 reports it), GPUs 0-3 on NUMA node 0 (CPUs 0-63), 4-7 on node 1."""
    buses = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
    gpus = [make_gpu(i, name="NVIDIA A100-SXM4-40GB", bus_id=f"00000000:{bus:02X}:00.0", memory_total_mib=40960,
                     memory_used_mib=583, memory_reserved_mib=583, compute_capability=(8, 0), numa_node=i // 4,
                     cpu_affinity="0-63" if i < 4 else "64-127", pcie=(i // 4, 0, 0, 0),
                     nvlinks=[FakeLink("FFFFFFFF:FF:FF.0", NVML_NVLINK_DEVICE_TYPE_SWITCH)] * 12)
            for i, bus in enumerate(buses)]
    return FakeNvml(gpus, **options)
