"""GPU-to-GPU links from NVML, as the codes of `nvidia-smi topo -m` (see CUDA-FACTS B12-B14).

NVLink first: count enabled links whose remote PCI bus id is the peer (direct bridges), or, when
the remote end is an NVSwitch, count the GPU's switch links; two GPUs on the switch fabric get
``NV<min(a, b)>``, which is what `nvidia-smi topo -m` prints on HGX boards (HAMi PR #2103).
Without NVLink, the PCIe common ancestor decides (PIX/PXB/PHB/NODE/SYS).

This module never imports pynvml: it reads constants from the ``nvml`` object it is given and
calls NVML only through ``try_call``, the backend's chokepoint, which returns ``(value, None)`` or
``(None, reason)`` and never raises for an NVML error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from gpu_launch.base.records import dataclass, field
from gpu_launch.hardware.host import parse_bus_id
from gpu_launch.hardware.model import Gpu

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Links", "NvLinkCensus", "TryCall", "link_matrix", "normalise_bus_id"]

#: ``try_call(function_name, *args) -> (value, None) | (None, reason)``.
TryCall = Callable[..., "tuple[Any, str | None]"]

# nvmlGpuTopologyLevel_t (nvml.h) → topo -m code. INTERNAL (one board, e.g. K80) would be PSB in
# the old DCGM legend; `topo -m` has no such code any more, and PIX is the closest it prints.
_LEVEL_NAMES = {
    "NVML_TOPOLOGY_INTERNAL": "PIX",
    "NVML_TOPOLOGY_SINGLE": "PIX",
    "NVML_TOPOLOGY_MULTIPLE": "PXB",
    "NVML_TOPOLOGY_HOSTBRIDGE": "PHB",
    "NVML_TOPOLOGY_NODE": "NODE",
    "NVML_TOPOLOGY_CPU": "NODE",  # the name of NODE in older bindings
    "NVML_TOPOLOGY_SYSTEM": "SYS",
}


@dataclass
class NvLinkCensus:
    """One GPU's enabled NVLinks: per remote PCI bus id (direct), and to NVSwitches."""

    direct: Counter[str] = field(default_factory=Counter)
    switch: int = 0


def normalise_bus_id(bus_id: Any) -> str | None:
    """A comparable form of a PCI bus id (bytes or str, any domain width or case), or None."""
    parts = parse_bus_id(bus_id)
    return None if parts is None else "{:08x}:{:02x}:{:02x}.{}".format(*parts)


def nvlink_census(nvml: Any, handle: Any, try_call: TryCall) -> NvLinkCensus:
    """Walk the GPU's NVLinks; links NVML rejects (NotSupported, InvalidArgument) are skipped."""
    census = NvLinkCensus()
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        state, _ = try_call("nvmlDeviceGetNvLinkState", handle, link)
        if state != enabled:
            continue
        remote_type, _ = try_call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if remote_type == switch_type:
            census.switch += 1
            continue
        info, _ = try_call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        remote = normalise_bus_id(getattr(info, "busId", None)) if info is not None else None
        if remote is not None:
            census.direct[remote] += 1
    return census


@dataclass(frozen=True)
class Links:
    """What :func:`link_matrix` found: the topo codes, warnings, and whether NVLinks go through NVSwitches."""

    matrix: tuple[tuple[str, ...], ...]
    warnings: list[str]
    nvswitch: bool  # some pair's NV<k> is the GPUs' links to the switch fabric, not links of its own


def link_matrix(nvml: Any, gpus: Sequence[Gpu], handles: Sequence[Any | None], try_call: TryCall) -> Links:
    """The symmetric N×N matrix of topo codes for ``gpus`` (positions), any warnings, and whether
    the NVLinks run through NVSwitches (a remote end whose device type is a switch).

    ``handles[i]`` is None for a GPU that could not be read; it is SYS to every other GPU.
    """
    n = len(gpus)
    censuses = [nvlink_census(nvml, h, try_call) if h is not None else None for h in handles]
    buses = [normalise_bus_id(g.pci_bus_id) for g in gpus]
    unanswered: list[tuple[str, str, str]] = []
    rows = [["X" if i == j else "SYS" for j in range(n)] for i in range(n)]
    nvswitch = False
    for i in range(n):
        for j in range(i + 1, n):
            if handles[i] is None or handles[j] is None:
                continue
            code, switched = _nvlink_code(nvml, (handles[i], handles[j]), (censuses[i], censuses[j]),
                                          (buses[i], buses[j]), try_call)
            nvswitch = nvswitch or switched
            if code is None:
                code, why = _pcie_code(nvml, handles[i], handles[j], try_call)
                if why is not None:
                    unanswered.append((gpus[i].label, gpus[j].label, why))
            rows[i][j] = rows[j][i] = code
    return Links(tuple(tuple(row) for row in rows), _warnings(unanswered), nvswitch)


def _warnings(unanswered: list[tuple[str, str, str]], most: int = 3) -> list[str]:
    """One warning per pair NVML could not place; one summary when there are many (e.g. in a VM)."""
    if len(unanswered) > most:
        reasons = ", ".join(sorted({why for _, _, why in unanswered}))
        return [f"NVML could not tell how {len(unanswered)} GPU pairs are connected ({reasons}); "
                f"treating them as SYS"]
    return [f"NVML could not tell how {a} and {b} are connected ({why}); treating the pair as SYS"
            for a, b, why in unanswered]


def _nvlink_code(nvml: Any, handles: tuple[Any, Any], censuses: tuple[Any, Any],
                 buses: tuple[str | None, str | None], try_call: TryCall) -> tuple[str | None, bool]:
    """The pair's ``NV<k>`` (None without NVLink between them), and whether it is over NVSwitches."""
    a, b = censuses
    if a is None or b is None:
        return None, False
    # Both ends count the same bridge; take the larger in case one side's walk was cut short.
    direct = max(a.direct.get(buses[1], 0) if buses[1] else 0, b.direct.get(buses[0], 0) if buses[0] else 0)
    if direct:
        return f"NV{direct}", False
    if a.switch and b.switch and _switch_p2p_ok(nvml, handles, try_call):
        return f"NV{min(a.switch, b.switch)}", True
    return None, False


def _switch_p2p_ok(nvml: Any, handles: tuple[Any, Any], try_call: TryCall) -> bool:
    """Confirm NVLink P2P across the switch when NVML can say; trust the link count when it cannot."""
    index = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    status, _ = try_call("nvmlDeviceGetP2PStatus", handles[0], handles[1], index)
    return status is None or status == getattr(nvml, "NVML_P2P_STATUS_OK", 0)


def _pcie_code(nvml: Any, a: Any, b: Any, try_call: TryCall) -> tuple[str, str | None]:
    """The PCIe code of the pair, or ``("SYS", reason)`` when NVML cannot answer."""
    level, why = try_call("nvmlDeviceGetTopologyCommonAncestor", a, b)
    if level is None:
        return "SYS", why or "no answer"
    for name, code in _LEVEL_NAMES.items():
        if getattr(nvml, name, None) == level:
            return code, None
    return "SYS", f"unknown topology level {level!r}"
