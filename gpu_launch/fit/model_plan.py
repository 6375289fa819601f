"""A model's plan without a launch: ``gpulaunch plan`` and the Python API's ``plan()``.

On ``--gpus`` as given (in that order), else on the GPUs ``--fit MODEL`` would choose, seeing
others' reservations but taking none. When one node of this kind (this machine, ``--snapshot``, or
``--gpus-per-node G`` of its GPUs) cannot hold the model even with all its GPUs free, the plan
answers in nodes: how many such nodes, and the split (fit/nodes.py). :func:`node_split` gives the
same answer to a several-node launch (``--fit model --slurm``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.base.records import replace
from gpu_launch.fit import sizing

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.fit.nodes import NodeSplit
    from gpu_launch.fit.plan import Plan, Sizing
    from gpu_launch.hardware.model import Gpu, Machine
    from gpu_launch.options.args import Invocation

__all__ = ["make_plan", "node_split"]


def make_plan(inv: Invocation, ref: str, argv: Sequence[str]) -> tuple[Plan, str]:
    """The plan for model ``ref`` run by ``argv``: on ``--gpus`` as given, else on the GPUs
    ``--fit MODEL`` would choose (nothing reserved), else on N nodes of this kind when one cannot
    hold it; and why, in one line."""
    if inv.get("gpus") is not None:
        return _on_gpus(inv, ref, tuple(argv))
    per_node = inv.get("gpus_per_node")
    if per_node is not None:
        _node_kind(inv, None)  # a node kind larger than this machine is refused before anything else
    try:
        plan, why = _chosen(inv, ref, tuple(argv))
    except NotEnoughGpus:
        found = _in_nodes(inv, ref, tuple(argv))
        if found is None:
            raise
        return found
    if per_node is not None and len(plan.placement.per_gpu) > per_node:
        found = _in_nodes(inv, ref, tuple(argv), force=True)
        if found is not None:
            return found
    return plan, why


def _chosen(inv: Invocation, ref: str, argv: tuple[str, ...]) -> tuple[Plan, str]:
    from gpu_launch.reservations import acquire
    from gpu_launch.placing import pick

    chooser = replace(inv, options={**inv.options, "fit": ref}, argv=argv)
    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=False)
    _machine, _vis, got, _env = pick.choose(chooser, locking, choose_only=True)
    from gpu_launch.fit.plan import Plan

    plan = got.selection.plan
    assert isinstance(plan, Plan)  # a model request always comes back with its plan, or raises
    devices = ", ".join(d.label for d in got.selection.devices)
    n = len(got.selection.devices)
    cap = plan.sizing.settings.gpu_layers_cap
    what = "it" if cap is None else f"the {cap} units {plan.sizing.settings.ngl} {cap} offloads"
    why = (f"why: {devices}: the fewest GPUs ({n}) that hold {what}, the best of such sets by availability, "
           "model, links and free memory" if plan.placement.whole or (cap is not None and plan.placement.fits) else
           f"why: {devices}: nothing holds it whole; these take the most of it, the rest stays on the CPU")
    return plan, why + "\n"


def _on_gpus(inv: Invocation, ref: str, argv: tuple[str, ...]) -> tuple[Plan, str]:
    from gpu_launch.choose import by_model
    from gpu_launch.choose import spec as gpu_spec
    from gpu_launch.fit import plan as fit_plan
    from gpu_launch.placing import pick

    s = sizing.sizing_of(ref, argv, inv.options)
    machine = pick.read_machine(inv, processes=False, topology=False)
    devices = gpu_spec.resolve(inv.get("gpus"), machine)
    s = by_model.for_machine(s, machine)
    placement = fit_plan.place(s, by_model.rooms([d.gpu for d in devices]))
    return fit_plan.Plan(s, placement), f"why: --gpus {', '.join(d.label for d in devices)}, in that order\n"


def _node_kind(inv: Invocation, s: Sizing | None) -> tuple[Sizing | None, list[Gpu], Machine]:
    """The sizing with the node kind's GPU count, and the usable GPUs of this machine (the kind)."""
    from gpu_launch.choose import by_model, select
    from gpu_launch.choose import spec as gpu_spec
    from gpu_launch.placing import pick

    machine = pick.read_machine(inv, processes=False, topology=False)
    exclude = frozenset(d.uuid for d in gpu_spec.resolve(inv.get("exclude"), machine, "--exclude")) \
        if inv.get("exclude") else frozenset()
    usable = [g for g in machine.gpus if select.could_ever_be_chosen(g, exclude)]
    per_node = inv.get("gpus_per_node")
    if per_node is not None and per_node > len(usable):
        raise UsageError(f"--gpus-per-node {per_node}: a node of this kind ({machine.source}) has "
                         f"{len(usable)} usable GPUs", hint=f"at most --gpus-per-node {len(usable)}, or --snapshot "
                                                           "a node of the kind you mean")
    if s is None:
        return None, usable, machine
    s = by_model.for_machine(s, machine)
    return replace(s, settings=replace(s.settings, gpus_per_node=per_node)), usable, machine


def _in_nodes(inv: Invocation, ref: str, argv: tuple[str, ...], force: bool = False) -> tuple[Plan, str] | None:
    """The several-node plan, when one node of this kind cannot hold the model even all free
    (``force``: it needs more GPUs than ``--gpus-per-node``); None when waiting could help."""
    from gpu_launch.choose import model_shortfall
    from gpu_launch.fit.plan import Plan

    s, usable, machine = _node_kind(inv, sizing.sizing_of(ref, argv, inv.options))
    assert s is not None
    kind = s.settings.gpus_per_node or len(usable)
    if s.engine.layout == "training":
        return _training_nodes(s, usable, kind, machine.source)
    biggest = sorted(usable, key=lambda g: -(g.memory_total_mib or 0))[:kind]
    why_here = model_shortfall.hopeless(s, biggest)
    if why_here is None and not force:
        return None
    split = model_shortfall.node_split(s, usable)
    if split.nodes < 2 or split.placement is None:
        return None
    sized = replace(s, settings=replace(s.settings, tp=split.tp, pp=split.pp))
    reason = why_here or f"it needs more than --gpus-per-node {kind} GPUs"
    plan = Plan(sized, split.placement, nodes=split.nodes, gpus_per_node=split.gpus_per_node, node_reason=reason)
    hint = model_shortfall.nodes_hint(s, split)
    return plan, (f"why: one node of this kind ({kind} GPUs of {machine.source}) cannot hold it: {reason}; "
                  f"{split.nodes} such nodes can, tp {split.tp} within each, pp {split.pp} across them\n"
                  f"run: {hint}\n")


def _training_nodes(s: Sizing, usable: list[Gpu], kind: int, source: str) -> tuple[Plan, str] | None:
    """A sharded training step that one node cannot hold: the fewest nodes of this kind whose ranks hold
    it (ZeRO/FSDP divide over every rank, fit/training/steps.py); None when more nodes do not help."""
    from gpu_launch.choose.model_sets import all_free, rooms
    from gpu_launch.fit import plan as fit_plan
    from gpu_launch.fit.training import steps

    node = all_free(sorted(usable, key=lambda g: -(g.memory_total_mib or 0))[:kind])
    run = s.settings.training
    k = steps.nodes_needed(s.model, run, [r.free for r in rooms(node)], s.settings.host_free)
    if k is None:
        return None
    sized = replace(s, settings=replace(s.settings, training=replace(run, nnodes=k)))
    one = fit_plan.place(sized, rooms(node))
    placement = replace(one, per_gpu=one.per_gpu * k)  # every rank, node after node: the same share on each
    reason = f"one training step needs more than its {kind} GPUs hold even when they are free"
    plan = fit_plan.Plan(sized, placement, nodes=k, gpus_per_node=kind, node_reason=reason)
    return plan, (f"why: one node of this kind ({kind} GPUs of {source}) cannot hold it: {reason}; {k} such nodes "
                  f"can, {steps.SHOWN[run.setup.sharding]} over all {k * kind} ranks\n"
                  f"run: gpulaunch --nodes {k} --slurm -- COMMAND with --nnodes {k} --nproc-per-node {{nproc}}\n")


def node_split(inv: Invocation, ref: str, argv: Sequence[str]) -> NodeSplit:
    """(nodes, gpus_per_node, tp, pp) for model ``ref`` run by ``argv`` on nodes like this machine
    (``--snapshot``; ``--gpus-per-node`` of its GPUs): one node and the fewest GPUs that hold it when
    one node can (all its GPUs free), else the fewest nodes (fit/nodes.py). ``.problem`` says why
    none can; the request's options (``--ctx``, ``--engine``...) apply as for a plan."""
    from gpu_launch.choose import model_sets, model_shortfall
    from gpu_launch.fit import plan as fit_plan
    from gpu_launch.fit.nodes import NodeSplit

    s, usable, _machine = _node_kind(inv, sizing.sizing_of(ref, tuple(argv), inv.options))
    assert s is not None
    kind = s.settings.gpus_per_node or len(usable)
    biggest = model_sets.all_free(sorted(usable, key=lambda g: -(g.memory_total_mib or 0))[:kind])
    training = s.engine.layout == "training"
    for n in model_sets.counts(s, len(biggest)):
        placement = fit_plan.place(s, model_sets.rooms(biggest[:n]))
        if model_sets.holds(s, placement):
            return NodeSplit(1, n, placement.tp or n, placement.pp, placement, ctx=0 if training else s.settings.ctx)
    if training:  # a sharded step over more nodes of this kind, else no number of nodes helps
        found = _training_nodes(s, usable, kind, _machine.source)
        if found is None:
            return NodeSplit(0, kind, 1, 1, problem=f"one training step of {s.model.name or s.model.source} does "
                             f"not fit {kind} GPUs of this kind, and more nodes do not divide it (DDP keeps every "
                             "term whole on each rank: ZeRO-3 or FSDP full shard would)")
        plan, _why = found
        return NodeSplit(plan.nodes, kind, kind, 1, plan.placement)
    return model_shortfall.node_split(s, usable)
