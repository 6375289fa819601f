"""A training step that no set of GPUs here holds: one line with the step's per-GPU need, the best set
tried and what it has free, then what would fit, with numbers ("with --gradient_checkpointing: 41.2 GiB a
GPU", "ZeRO-3 over 8 GPUs: 27.0 GiB each", "LoRA r16: 22.0 GiB", "micro-batch 1: ..."), exit 4."""

from __future__ import annotations

from gpu_launch.choose import select
from gpu_launch.choose.model_sets import Tried, all_free, counts, rooms
from gpu_launch.errors import NotEnoughGpus
from gpu_launch.fit import plan as fit_plan
from gpu_launch.hardware.model import Machine

__all__ = ["training_shortfall"]

GiB = 1 << 30


def _gib(b: int) -> str:
    return f"{b / GiB:.1f} GiB"


def training_shortfall(machine: Machine, s: fit_plan.Sizing, tried: list[Tried],
                       constraints: select.Constraints) -> NotEnoughGpus:
    from gpu_launch.choose.model_shortfall import hopeless
    from gpu_launch.fit.training import steps

    run = s.settings.training
    setup = run.setup
    name = s.model.name or s.model.source
    usable = [g for g in machine.gpus if select.could_ever_be_chosen(g, constraints.exclude)]
    biggest = all_free(sorted(usable, key=lambda g: -(g.memory_total_mib or 0)))
    want = counts(s, len(usable))
    if not want:
        return NotEnoughGpus(f"{name}: the launch starts {setup.nproc} processes, one a GPU; this machine has "
                             f"{len(usable)} usable GPUs", hint="a smaller --nproc-per-node/--num_processes, or {n} "
                                                                "to let gpulaunch count them")

    def need(t: Tried) -> int:
        sh = t.placement.per_gpu[0] if t.placement.per_gpu else None
        return sh.weights_bytes + sh.kv_bytes + sh.allowance_bytes if sh is not None else 1 << 62

    why_here = hopeless(s, usable)
    if why_here:  # no wait helps: say it of this machine's GPUs all free, the most of them where sharding divides
        n = want[-1] if setup.sharding in steps.SHARDED else want[0]
        last = Tried(n, tuple(biggest[:n]), fit_plan.place(s, rooms(biggest[:n])))
    else:  # the set tried that needs the least a GPU (sharding: the most GPUs; DDP: any, so the fewest)
        last = min(tried, key=lambda t: (need(t), t.n)) if tried else \
            Tried(want[0], tuple(biggest[:want[0]]), fit_plan.place(s, rooms(biggest[:want[0]])))
    p = last.placement
    share = p.per_gpu[0] if p.per_gpu else None
    peak = share.training if share is not None else None
    room = min((sh.free_bytes for sh in p.per_gpu), default=0)
    if peak is None:  # pragma: no cover - a training placement always carries its peak
        return NotEnoughGpus(f"{name}: no set of GPUs here holds one training step")
    n = last.n
    how = f"{setup.method}" + (f" r{setup.lora_r}" if setup.lora_r else "") + f", {steps.SHOWN[steps.sharding_at(setup, n)]}" \
        + (", gradient checkpointing" if setup.gradient_checkpointing else "")
    at = peak.moment
    msg = (f"{name}: one training step needs {_gib(peak.peak_bytes + peak.allowance_bytes)} a GPU on {n} GPU"
           f"{'s' if n != 1 else ''} at micro-batch {setup.micro_batch} × {setup.seq_len} tokens ({how}; peak "
           f"{_gib(peak.peak_bytes)} at {at}, {peak.dominant} the largest, + allowance "
           f"{_gib(peak.allowance_bytes)}); " + (f"these GPUs have {_gib(room)} each when free" if why_here else
                                                f"the tightest GPU of the best {n} has {_gib(room)} free"))
    if p.notes:
        msg += f" ({'; '.join(p.notes)})"
    full = max((g.memory_total_mib or 0) for g in usable) * (1 << 20) if usable else 0
    options = steps.alternatives(s.model, run, full if why_here else room, len(usable))
    fitting = [f"{what}: {_gib(need)} a GPU" for what, need, ok in options if ok]
    others = [f"{what}: {_gib(need)}" for what, need, ok in options if not ok]
    nodes = steps.nodes_needed(s.model, run, [r.free for r in rooms(biggest[:len(usable)])], s.settings.host_free) \
        if why_here else None
    if nodes is not None:
        fitting.append(f"{nodes} nodes of this kind ({steps.SHOWN[setup.sharding]} over {nodes * len(usable)} ranks): "
                       f"gpulaunch --nodes {nodes} --slurm")
    if why_here:
        msg += "; no wait can help"
    hint = ("what would fit: " + "; ".join(fitting)) if fitting else \
        ("none of these alone fits: " + "; ".join(others) if others else "a smaller model or more GPUs")
    if not why_here:
        hint = "wait with --wait, or " + hint
    return NotEnoughGpus(msg, hint=hint)
