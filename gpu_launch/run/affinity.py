"""``--bind``: pin the command to the CPUs local to its GPUs before exec.

A data loader on the far socket pays the SMP interconnect for every batch; binding the command to
the CPUs near its GPUs avoids that. The CPUs are the union of the chosen GPUs' ``cpu_affinity``
(NVML's ideal set, ``nvmlDeviceGetCpuAffinity``, or sysfs ``local_cpulist``) intersected with the
CPUs this process may already use (``os.sched_getaffinity(0)``: a Slurm job's or container's
cpuset). NVML's set need not lie inside that cpuset, and an empty intersection would make
``sched_setaffinity`` fail with EINVAL (nvidia-cosmos/cosmos-predict1 #11), so an empty result skips
binding with a warning instead. The affinity set before exec is inherited by the command.

Modes: ``auto`` (default) binds when every chosen GPU sits on one known NUMA node; ``on`` binds to
the union even across nodes; ``off`` never binds. :func:`plan` decides (pure); :func:`apply` acts.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from gpu_launch.base.records import dataclass
from gpu_launch.errors import UsageError
from gpu_launch.hardware.host import format_cpulist, parse_cpulist
from gpu_launch.hardware.model import Device

__all__ = ["MODES", "Binding", "parse_mode", "plan", "apply", "current_cpus"]

MODES = ("auto", "on", "off")


def parse_mode(text: str, option: str = "--bind") -> str:
    mode = text.strip().lower()
    if mode not in MODES:
        raise UsageError(f"{option}: {text!r} is not one of auto, on, off", hint=f"e.g. {option} off")
    return mode


@dataclass(frozen=True)
class Binding:
    """What to do: ``cpus`` to pin to (None: leave the affinity alone) and the line to tell the user."""

    cpus: frozenset[int] | None
    message: str | None = None
    warning: bool = False


def current_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its cpuset); every CPU where the call is missing."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return frozenset(range(os.cpu_count() or 1))
    return frozenset(getter(0))


def _gpus_text(devices: Sequence[Device]) -> str:
    return ", ".join(d.label for d in devices)


def plan(devices: Sequence[Device], mode: str, allowed: Collection[int]) -> Binding:
    """Decide the binding for ``devices`` under ``mode``, within the ``allowed`` CPUs."""
    if mode == "off" or not devices:
        return Binding(None)
    gpus = {d.gpu.uuid: d.gpu for d in devices}.values()
    nodes = {g.numa_node for g in gpus}
    if mode == "auto" and (None in nodes or len(nodes) != 1):
        return Binding(None)  # spans NUMA nodes, or unknown: binding could only hurt
    wanted: set[int] = set()
    for gpu in gpus:
        if not gpu.cpu_affinity:
            if mode == "on":
                return Binding(None, f"--bind on: the CPU affinity of {gpu.label} is unknown; not binding", True)
            return Binding(None)
        try:
            wanted.update(parse_cpulist(gpu.cpu_affinity))
        except ValueError:
            return Binding(None, f"--bind: {gpu.label} has an unreadable CPU list {gpu.cpu_affinity!r}; not binding", True)
    cpus = wanted & set(allowed)
    if not cpus:
        return Binding(None, f"not binding to CPUs: the CPUs local to {_gpus_text(devices)} "
                             f"({format_cpulist(wanted)}) are outside the CPUs this process may use "
                             f"({format_cpulist(allowed) or 'none'})", True)
    where = f"NUMA node {next(iter(nodes))}" if len(nodes) == 1 and None not in nodes else "their NUMA nodes"
    return Binding(frozenset(cpus), f"bound to CPUs {format_cpulist(cpus)} ({where}, local to {_gpus_text(devices)})")


def apply(binding: Binding) -> str | None:
    """Pin this process (and so the command it becomes) to ``binding.cpus``; a warning if that failed."""
    if binding.cpus is None:
        return None
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        return "not binding to CPUs: this platform has no sched_setaffinity"
    try:
        setter(0, binding.cpus)
    except (OSError, ValueError, OverflowError) as exc:  # EINVAL: no allowed CPU in the set
        return f"not binding to CPUs {format_cpulist(binding.cpus)}: {getattr(exc, 'strerror', None) or exc}"
    return None
