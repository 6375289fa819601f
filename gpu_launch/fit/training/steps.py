"""A training run's step on a set of GPUs: the per-GPU peak at that world size (memory.peak), whether it
fits each GPU's free memory and the host's, the largest micro-batch that fits (``{micro_batch}``: what
Trainer's ``auto_find_batch_size`` finds by crashing, found by arithmetic), and what would fit when
nothing does ("with --gradient_checkpointing: 41.2 GiB a GPU"). fit/plan.py builds the placement from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gpu_launch.base.records import dataclass, replace
from gpu_launch.fit.training.setup import TrainingPeak, TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TrainingRun", "Step", "step_on", "peak_at_world", "largest_micro_batch", "alternatives", "MAX_MICRO",
           "nodes_needed", "SHARDED", "MAX_NODES", "SHOWN"]

GiB = 1 << 30
MAX_MICRO = 4096  # no per-device batch is larger; the search stops there
MAX_NODES = 64  # a several-node answer is sought up to this many nodes
#: The sharding kinds whose per-GPU peak falls as the ranks grow (more nodes can help only these)
SHARDED = ("zero1", "zero2", "zero3", "fsdp_full", "fsdp_grad_op")
#: How the sharding kinds read in a plan or an error line
SHOWN = {"none": "one process", "ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
         "fsdp_full": "FSDP full shard", "fsdp_grad_op": "FSDP shard-grad-op", "fsdp_hybrid": "FSDP hybrid shard"}


@dataclass(frozen=True)
class TrainingRun:
    """What a plan needs of a training launch: the setup, the model's config.json (as JSON text, so that
    the record stays hashable), whether the command leaves the micro-batch to gpulaunch, and the nodes."""

    setup: TrainingSetup
    config_json: str = ""
    micro_open: bool = False
    nnodes: int = 1

    @property
    def config(self) -> dict[str, Any] | None:
        return _parsed(self.config_json)


_CACHE: dict[str, Any] = {}


def _parsed(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    if text not in _CACHE:
        _CACHE[text] = json.loads(text)
    return _CACHE[text]


def sharding_at(setup: TrainingSetup, world: int) -> str:
    """One process: nothing to share; several: DDP unless the launch shards."""
    if world <= 1:
        return "none" if setup.sharding in ("none", "ddp") else setup.sharding
    return "ddp" if setup.sharding == "none" else setup.sharding


_PEAKS: dict[tuple[int, TrainingSetup, str, int], tuple[ModelFacts, TrainingPeak]] = {}


def peak_at_world(model: ModelFacts, run: TrainingRun, world: int, setup: TrainingSetup | None = None
                  ) -> TrainingPeak:
    """memory.peak at ``world`` ranks, remembered: a choice asks the same world size of many sets."""
    from gpu_launch.fit.training import memory

    s = setup or run.setup
    s = replace(s, sharding=sharding_at(s, world))
    key = (id(model), s, run.config_json, world)
    found = _PEAKS.get(key)
    if found is not None and found[0] is model:
        return found[1]
    if len(_PEAKS) > 4096:
        _PEAKS.clear()
    result = memory.peak(model, run.config, s, world)
    _PEAKS[key] = (model, result)
    return result


@dataclass(frozen=True)
class Step:
    """The step on one set: the peak a GPU, the micro-batch it was sized at, and why it does not fit."""

    peak: TrainingPeak
    micro_batch: int
    fits: bool
    host_short: bool = False
    notes: tuple[str, ...] = ()


def _need(p: TrainingPeak) -> int:
    return p.peak_bytes + p.allowance_bytes


def largest_micro_batch(model: ModelFacts, run: TrainingRun, world: int, room: int) -> int:
    """The largest per-device batch whose peak and allowance fit ``room`` bytes (0: not even 1)."""
    def fits(b: int) -> bool:
        return _need(peak_at_world(model, run, world, replace(run.setup, micro_batch=b))) <= room

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_MICRO and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, MAX_MICRO + 1)
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def step_on(model: ModelFacts, run: TrainingRun, frees: Sequence[int], host_free: int | None) -> Step:
    """The step on GPUs with ``frees`` bytes free (one process a GPU, ``run.nnodes`` such nodes)."""
    world = max(1, len(frees)) * max(1, run.nnodes)
    # the processes a node are these GPUs' (FSDP's hybrid shard divides within a node: memory.peak reads nproc)
    run = replace(run, setup=replace(run.setup, nproc=len(frees) or None))
    micro = run.setup.micro_batch
    room = min(frees) if frees else 0
    if run.micro_open:
        found = largest_micro_batch(model, run, world, room)
        micro = max(1, found)
    peak = peak_at_world(model, run, world, replace(run.setup, micro_batch=micro))
    fits = bool(frees) and _need(peak) <= room
    notes = []
    host_short = False
    if peak.host_bytes and host_free is not None and peak.host_bytes * len(frees) > host_free:
        host_short, fits = True, False
        notes.append(f"the offloaded states need {peak.host_bytes * len(frees) / GiB:.1f} GiB of host memory "
                     f"({len(frees)} process{'es' if len(frees) != 1 else ''} × {peak.host_bytes / GiB:.1f} GiB), the host has "
                     f"{host_free / GiB:.1f} GiB available")
    return Step(peak, micro, fits, host_short, tuple(notes))


def alternatives(model: ModelFacts, run: TrainingRun, room: int, most: int) -> list[tuple[str, int, bool]]:
    """What else the step could be, each as (what, bytes a GPU, fits ``room``): gradient checkpointing,
    ZeRO-3 over the most GPUs, LoRA r16, micro-batch 1; only those that differ from the launch."""
    s = run.setup
    world = 1 if s.sharding == "none" else max(1, most)
    tries: list[tuple[str, TrainingSetup, int]] = []
    if not s.gradient_checkpointing:
        tries.append(("with --gradient_checkpointing", replace(s, gradient_checkpointing=True), world))
    if s.sharding not in ("zero3", "fsdp_full") and most > 1:
        # with the bucket sizes "auto", as the HF integration's example ZeRO-3 config writes them
        auto = (("reduce_bucket_size", "auto"), ("stage3_prefetch_bucket_size", "auto"),
                ("stage3_param_persistence_threshold", "auto"))
        tries.append((f"ZeRO-3 over {most} GPUs", replace(s, sharding="zero3", zero_buckets=s.zero_buckets or auto),
                      most))
    if s.method == "full":
        tries.append(("LoRA r16", replace(s, method="lora", lora_r=16, lora_alpha=32,
                                          lora_targets=s.lora_targets or ("q_proj", "v_proj")), world))
    if s.micro_batch > 1:
        tries.append(("micro-batch 1", replace(s, micro_batch=1), world))
    out = []
    for what, setup, w in tries:
        need = _need(peak_at_world(model, run, w, setup))
        out.append((what, need, need <= room))
    return out


def nodes_needed(model: ModelFacts, run: TrainingRun, frees: Sequence[int], host_free: int | None) -> int | None:
    """The fewest nodes of ``len(frees)`` GPUs (each ``frees``, all free) whose ranks together hold one step
    (sharded states, gradients or weights divide over every rank); None when more nodes cannot help."""
    if run.setup.sharding not in SHARDED or not frees:
        return None
    for k in range(2, MAX_NODES + 1):
        if step_on(model, replace(run, nnodes=k), frees, host_free).fits:
            return k
    return None
