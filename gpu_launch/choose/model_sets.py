"""The pieces a choice by model is made of: GPUs as the plan sees them, the counts to try, whether a
placement runs what the command asks for. Shared by the search (``by_model``) and the one-line
shortfall (``model_shortfall``)."""

from __future__ import annotations

from gpu_launch.choose import select
from gpu_launch.fit import plan as fit_plan
from gpu_launch.fit import gpu_tiers
from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.base.records import dataclass, replace

__all__ = ["Tried", "rooms", "for_machine", "counts", "holds", "all_free", "MiB"]

MiB = 1 << 20


@dataclass(frozen=True)
class Tried:
    """A set of ``n`` GPUs the search tried, and the model's placement on it."""

    n: int
    gpus: tuple[Gpu, ...]
    placement: fit_plan.Placement


def rooms(gpus: tuple[Gpu, ...] | list[Gpu]) -> list[fit_plan.Room]:
    return [fit_plan.Room(g.index, (g.memory_free_mib or 0) * MiB,
                          g.memory_total_mib * MiB if g.memory_total_mib is not None else None) for g in gpus]


def all_free(gpus: list[Gpu] | tuple[Gpu, ...]) -> list[Gpu]:
    """The same GPUs with nothing on them: what they could hold once others' work ends."""
    return [replace(g, memory_free_mib=g.memory_total_mib, processes=()) for g in gpus]


def for_machine(s: fit_plan.Sizing, machine: Machine) -> fit_plan.Sizing:
    """``s`` with the host memory a snapshot states (it describes its own host, not this one), and
    with vLLM's default batched tokens for this machine's GPUs where the command sets none."""
    settings = s.settings
    if machine.host_memory_available_mib is not None and settings.host_free is not None:
        settings = replace(settings, host_free=machine.host_memory_available_mib * MiB)
    if s.engine.name == "vllm" and settings.batched_tokens is None:
        settings = replace(settings, batched_tokens=gpu_tiers.vllm_batched_default(
            [(g.name, g.memory_total_mib) for g in machine.gpus]))
    if s.engine.name == "vllm" and not settings.gpu_arch:
        settings = replace(settings, gpu_arch=gpu_tiers.gpu_arch([g.name for g in machine.gpus]))
    if settings == s.settings:
        return s
    if replace(settings, host_free=s.settings.host_free) == s.settings:  # the host's memory alone: the same cache
        return replace(s, settings=settings)
    return fit_plan.sizing(s.model, s.engine, settings)


def counts(s: fit_plan.Sizing, most: int) -> list[int]:
    """The GPU counts to try, fewest first: for tensor parallelism tp × pp × dp (the ranks the
    engine starts on this node), tp as the command fixes it or each size the model allows."""
    if s.engine.layout == "training":  # one process a GPU: as many as the launcher is told, else any count
        fixed = s.settings.training.setup.nproc
        return [fixed] if fixed is not None and fixed <= most else [] if fixed is not None else \
            list(range(1, most + 1))
    if s.engine.layout == "tensor":
        st = s.settings
        sizes = [st.tp] if st.tp is not None else fit_plan.tp_sizes(s.model, most)
        return [n for n in (t * st.group // st.nnodes for t in sizes) if 0 < n <= most]
    return list(range(1, min(most, max(select.FIT_SIZES)) + 1))


def holds(s: fit_plan.Sizing, p: fit_plan.Placement) -> bool:
    """The set runs what the command asks for: the whole model, or the units a fixed ``-ngl N`` offloads."""
    return p.whole or (s.settings.gpu_layers_cap is not None and p.fits)
