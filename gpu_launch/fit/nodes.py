"""A model over several nodes of one kind: how many, and how it is split.

The engines' documented rule (vLLM "Distributed inference and serving", SGLang "Multi-node
deployment"; MODEL-FACTS.md "Several nodes"): tensor parallelism within a node (tp = its GPUs),
pipeline parallelism across nodes (pp = the nodes). :func:`split_for_nodes` finds the fewest nodes
like ``node`` (its GPUs, all free) that hold the model at its context, and what each GPU of each
stage then holds (fit/stages.py). Where tp would exceed the model's KV heads (each head's cache
then replicated) it keeps tp at the KV head count and puts more stages on each node instead; a
model the engine cannot split into stages is refused with the reason. A command that fixes tp or
pp is obeyed: the nodes are what its ranks need.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.fit import plan as fit_plan
from gpu_launch.fit import stages
from gpu_launch.base.records import dataclass, replace

__all__ = ["NodeSplit", "split_for_nodes", "MAX_NODES"]

MAX_NODES = 64  # the most nodes a plan looks at: more is a cluster scheduler's question, not a launcher's


@dataclass(frozen=True)
class NodeSplit:
    """``nodes`` nodes of ``gpus_per_node`` GPUs each, tp × pp (× dp); ``placement`` covers every rank
    in order (node after node), on the node kind's GPUs all free. ``problem`` says why no split
    works (nodes is then 0)."""

    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    placement: fit_plan.Placement | None = None
    problem: str = ""
    notes: tuple[str, ...] = ()
    ctx: int = 0  # the context it was sized for (0: not said)

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def placeholders(self) -> dict[str, str]:
        """The plan's values for a launch on these nodes: ``{tp}`` and ``{pp}`` this split's, ``{ctx}``,
        ``{gpu_mem_util}``... its placement's."""
        values = self.placement.placeholders(self.ctx) if self.placement is not None else {}
        if not self.ctx:
            values.pop("ctx", None)
        return {**values, "tp": str(self.tp), "pp": str(self.pp)}


def _free(node: Sequence[fit_plan.Room]) -> list[fit_plan.Room]:
    return [fit_plan.Room(r.gpu, r.total if r.total is not None else r.free, r.total) for r in node]


def _tp_for(s: fit_plan.Sizing, per_node: int) -> tuple[int, str]:
    """tp within a node: the node's GPUs, or fewer where the model's heads refuse that many or its KV
    heads would be replicated (stages then fill the node instead)."""
    kv = max(s.model.hyper.kv_heads, default=0)
    for tp in range(per_node, 0, -1):
        if per_node % tp or stages.tp_problem(s.model, tp):
            continue
        if not s.model.hyper.kv_lora_rank and 0 < kv < tp:
            continue
        note = "" if tp == per_node else (f"tp {tp}, not {per_node}: " + (
            stages.tp_problem(s.model, per_node) or f"the model has {kv} KV heads; more tp would replicate their "
                                                   f"cache") + f"; {per_node // tp} stages a node instead")
        return tp, note
    return 0, ""


def split_for_nodes(s: fit_plan.Sizing, node: Sequence[fit_plan.Room], max_nodes: int = MAX_NODES) -> NodeSplit:
    """The fewest nodes like ``node`` that hold ``s`` (tp = the node's GPUs, pp = the stages), or a
    NodeSplit with ``problem`` set. A command's fixed tp/pp are kept; then the nodes are its ranks / G."""
    per_node = len(node)
    st = s.settings
    if per_node == 0:
        return NodeSplit(0, 0, 0, 0, problem="a node of this kind has no GPU")
    if s.engine.layout != "tensor":
        return NodeSplit(0, per_node, 0, 0, problem=f"{s.engine.name} does not split a model over nodes here (tensor "
                                                    "and pipeline parallelism are vLLM's, SGLang's and MLC-LLM's)")
    rooms = _free(node)
    if st.tp is not None and st.tp_explicit:
        return _fixed(s, rooms, max_nodes)
    why = stages.pp_problem(s.model, s.engine.name)
    if why:
        return NodeSplit(0, per_node, 0, 0, problem=why + ": a model must fit one node to run on it")
    replicas = st.dp * st.ranks_factor
    if st.pp > 1:  # the command fixes the stages, gpulaunch picks tp: the fewest ranks that hold it
        for tp in stages.tp_choices(s.model, per_node):
            ranks = tp * st.pp * replicas
            if ranks % per_node and ranks > per_node:
                continue
            found = _fixed(fit_plan.sizing(s.model, s.engine, replace(st, tp=tp)), rooms, max_nodes)
            if not found.problem:
                return found
        return NodeSplit(0, per_node, 0, st.pp, problem=f"no tp with the command's {st.pp} stages holds it on nodes "
                                                        f"of {per_node} GPUs at {st.ctx} tokens")
    tp, note = _tp_for(s, per_node // replicas or 1)
    if tp == 0:
        return NodeSplit(0, per_node, 0, 0, problem=f"no tensor-parallel size up to {per_node} divides the model's "
                                                    f"{s.model.hyper.n_heads} attention heads")
    stages_per_node = max(1, per_node // (tp * replicas))
    for nodes in range(1, max_nodes + 1):
        pp = nodes * stages_per_node
        if pp > s.model.hyper.n_layers:
            break
        placement = fit_plan.place(fit_plan.sizing(s.model, s.engine, replace(st, tp=tp, pp=pp)), rooms * nodes)
        if placement.whole:
            return NodeSplit(nodes, per_node, tp, pp, placement, notes=tuple(n for n in (note,) if n), ctx=st.ctx)
    return NodeSplit(0, per_node, tp, 0, problem=f"not even {max_nodes} nodes of this kind hold it at {st.ctx} tokens")


def _fixed(s: fit_plan.Sizing, rooms: list[fit_plan.Room], max_nodes: int) -> NodeSplit:
    """tp and pp as the command (or the caller) fixes them: its ranks, G a node, make the nodes."""
    st = s.settings
    per_node = len(rooms)
    tp = st.tp or 1
    ranks = tp * st.group
    if ranks > per_node and ranks % per_node:
        return NodeSplit(0, per_node, tp, st.pp, problem=f"the command's {ranks} ranks do not fill nodes of "
                                                         f"{per_node} GPUs evenly")
    nodes = -(-ranks // per_node)
    if nodes > max_nodes:
        return NodeSplit(0, per_node, tp, st.pp, problem=f"the command's {ranks} ranks need {nodes} nodes")
    used = min(per_node, ranks)
    placement = fit_plan.place(s, (rooms * nodes)[:ranks])
    if not placement.whole:
        return NodeSplit(0, used, tp, st.pp, placement, problem=f"{nodes} node(s) of {used} GPUs (tp {tp} × pp "
                                                                f"{st.pp}) do not hold it at {st.ctx} tokens")
    return NodeSplit(nodes, used, tp, st.pp, placement, ctx=st.ctx)
