"""Where a model goes on a given list of GPUs (in the order the child will see them), per engine.

:func:`place` answers for one set; :mod:`gpu_launch.choose.by_model` asks it about the sets the
ranking offers and keeps the fewest GPUs that hold the model. Every number is labelled in
:data:`LABELS`: weights are *exact* (the file's tensor bytes), the KV cache is a *rule* (the
engine's own formula, fit/kv.py), compute buffers are an *allowance* (they cannot be read from a
file; ``--reserve SIZE`` replaces it per GPU).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from gpu_launch.fit import kv as kv_rules
from gpu_launch.fit import offload
from gpu_launch.fit import stages
from gpu_launch.fit.engines import Engine
from gpu_launch.fit.settings import Settings, run_of
from gpu_launch.modelfile.facts import ModelFacts
from gpu_launch.base.records import dataclass, field, replace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.fit.training.setup import TrainingPeak

__all__ = ["Settings", "Sizing", "Room", "GpuShare", "Placement", "Plan", "place", "sizing", "LABELS", "tp_sizes"]

MiB = 1 << 20
LABELS = {"weights": "exact", "kv": "rule", "allowance": "allowance"}
VLLM_DEFAULT_UTIL = 0.9  # vLLM's --gpu-memory-utilization default
VLLM_MAX_UTIL = 0.95  # what gpulaunch hands {gpu_mem_util} at most: the rest is the driver's and others'


@dataclass(frozen=True)
class Sizing:
    """A model, an engine and its settings: everything a choice needs, with the KV cache worked out."""

    model: ModelFacts
    engine: Engine
    settings: Settings
    kv: kv_rules.KvSize

    def with_ctx(self, ctx: int) -> Sizing:
        return sizing(self.model, self.engine, replace(self.settings, ctx=ctx))


def sizing(model: ModelFacts, engine: Engine, settings: Settings) -> Sizing:
    if engine.layout == "training":  # a training step keeps no KV cache (fit/training/steps.py sizes it)
        return Sizing(model, engine, settings, kv_rules.KvSize((), 0, 0, 0, (), "none"))
    kv = kv_rules.kv_cache(model.hyper, settings.ctx, settings.seqs, settings.kv_type, engine=engine.kv_rule,
                           run=run_of(engine, settings))
    said = tuple(filter(None, (settings.binding and f"{settings.binding} keeps llama.cpp's C API defaults: the "
                               "full-size sliding-window cache (swa_full = true) and flash attention off",
                               settings.weights_note)))
    return Sizing(model, engine, settings, replace(kv, rules=kv.rules + said) if said else kv)


@dataclass(frozen=True)
class Room:
    """One GPU as the plan sees it: its physical index, free and total bytes."""

    gpu: int
    free: int
    total: int | None = None


@dataclass(frozen=True)
class GpuShare:
    gpu: int
    weights_bytes: int
    kv_bytes: int
    allowance_bytes: int
    free_bytes: int
    units: int = 0  # llama.cpp: layers (the output layer counts as one) on this GPU
    stage: int = 0  # tensor layouts: the pipeline stage this GPU belongs to
    training: TrainingPeak | None = None  # a training step: its peak here (weights_bytes + kv_bytes = its peak)

    @property
    def left_bytes(self) -> int:
        return self.free_bytes - self.weights_bytes - self.kv_bytes - self.allowance_bytes


@dataclass(frozen=True)
class Placement:
    """The model on one set of GPUs. ``fits``: it runs as planned (wholly on the GPUs, or with the
    rest on the CPU where the engine and command allow it and the host has room)."""

    engine: str
    per_gpu: tuple[GpuShare, ...]
    cpu_weights_bytes: int = 0
    cpu_kv_bytes: int = 0
    gpu_layers: int | None = None
    tp: int | None = None
    tensor_split: tuple[int, ...] | None = None
    gpu_mem_util: float | None = None
    max_memory: dict[str, str] | None = None
    whole: bool = False  # everything on the GPUs
    fits: bool = False
    need_bytes: int = 0  # what the GPUs would need to hold it whole (sum over the set)
    short_bytes: int = 0  # how much is missing for that, 0 when whole
    notes: tuple[str, ...] = field(default=())
    units: int = 0  # llama.cpp's offload units in all (the layers and the output); 0 for the other engines
    pp: int = 1  # tensor layouts: pipeline stages, and what a GPU of each holds
    stage_shares: tuple[stages.StageShare, ...] = ()
    budgets: tuple[int, ...] = ()  # tensor layouts: what the engine may use of each GPU (vLLM: utilisation × total)
    n_cpu_moe: int | None = None  # llama.cpp: {n_cpu_moe}, the first layers whose experts stay on the CPU
    host_bytes: int = 0  # weights (and KV) the command's offload options keep on the host, in cpu_* too
    values: tuple[tuple[str, str], ...] = ()  # a training step's placeholders ({nproc}, {micro_batch})

    def placeholders(self, ctx: int) -> dict[str, str]:
        """The values of ``{tp}``, ``{gpu_layers}``, ``{tensor_split}``, ``{ctx}``, ``{gpu_mem_util}``,
        ``{max_memory}`` for this placement (absent where the engine has no such number)."""
        if self.engine == "training":
            return dict(self.values)
        n = len(self.per_gpu)
        values = {"ctx": str(ctx), "tp": str(self.tp if self.tp is not None else n)}
        if self.stage_shares:
            values["pp"] = str(self.pp)
        if self.gpu_layers is not None:
            values["gpu_layers"] = str(self.gpu_layers)
        if self.n_cpu_moe is not None:
            values["n_cpu_moe"] = str(self.n_cpu_moe)
        if self.tensor_split is not None:
            values["tensor_split"] = ",".join(str(x) for x in self.tensor_split)
        if self.gpu_mem_util is not None:
            values["gpu_mem_util"] = f"{self.gpu_mem_util:.2f}"
        if self.max_memory is not None:
            values["max_memory"] = json.dumps(self.max_memory, separators=(",", ":"))
        return values


@dataclass(frozen=True)
class Plan:
    """A sizing and where it landed: what ``plan``, ``--explain`` and the placeholders show."""

    sizing: Sizing
    placement: Placement
    nodes: int = 1  # a several-node plan: the placement covers every rank, node after node
    gpus_per_node: int | None = None  # None: one node, the placement's GPUs
    node_reason: str = ""  # why one node of this kind does not do

    def placeholders(self) -> dict[str, str]:
        values = self.placement.placeholders(self.sizing.settings.ctx)
        if self.sizing.settings.binding == "llama-cpp-python":  # its --tensor_split takes a word per GPU, no list
            values.pop("tensor_split", None)
        return values

    def shown_placeholders(self) -> dict[str, str]:
        """The values a one-line summary shows: ``{pp}`` only when there are stages."""
        return {k: v for k, v in self.placeholders().items() if not (k == "pp" and v == "1")}


def tp_sizes(model: ModelFacts, most: int) -> list[int]:
    """Tensor-parallel sizes 1, 2, 4, 8 (up to ``most``) the engines accept for this model: dividing
    the attention heads, KV heads split or replicated evenly (fit/stages.py, ``tp_problem``)."""
    return [t for t in (1, 2, 4, 8) if t <= most and stages.tp_problem(model, t) is None]


def _allowance(s: Sizing) -> int:
    return s.settings.reserve if s.settings.reserve is not None else s.engine.allowance


def place(s: Sizing, rooms: Sequence[Room]) -> Placement:
    """``s``'s model on ``rooms`` (child order), the way its engine lays it out."""
    if not rooms:  # the CPU only (--fallback cpu): no layer offloaded, no tensor parallelism
        return Placement(s.engine.name, (), cpu_weights_bytes=s.model.weights.total, cpu_kv_bytes=s.kv.total,
                         gpu_layers=0 if s.engine.layout == "layers" else None, tp=1,
                         tensor_split=None, notes=("no GPU: everything on the CPU",))
    if s.engine.layout == "tensor":
        return _tensor(s, rooms)
    if s.engine.layout == "training":
        return _training(s, rooms)
    if s.engine.layout == "layers":
        if s.settings.offload.choose_moe:
            return offload.fewest_moe(s, rooms, _llama, _with_offload)
        return _llama(s, rooms)
    return _sequential(s, rooms)


def _with_offload(s: Sizing, chosen: offload.Offload) -> Sizing:
    return Sizing(s.model, s.engine, replace(s.settings, offload=chosen), s.kv)


def _units(s: Sizing) -> list[tuple[int, int]]:
    """llama.cpp's offload units in the order it offloads them: the output layer first (output norm
    and weight, the tied embedding duplicated there, and everything else the file holds), then
    the layers from the last one. Each as (weights, KV)."""
    w = s.model.weights
    off = s.settings.offload
    host = offload.host_split(s.model, off.patterns) if off.patterns else None  # -ot, --cpu-moe, --n-cpu-moe
    output = w.output + w.other + (w.token_embedding if w.tied_embeddings else 0) - (host.output if host else 0)
    layers = [((w.layers[i] if i < len(w.layers) else 0) - (host.layers[i] if host else 0),
               0 if off.kv_on_host else s.kv.per_layer[i] if i < len(s.kv.per_layer) else 0)
              for i in range(s.model.hyper.n_layers)]
    return [(output, 0), *reversed(layers)]


def _logits_buffer(s: Sizing) -> int:
    """llama.cpp's compute buffer is mostly one micro-batch of logits: n_ubatch × n_vocab × 4 bytes
    (MODEL-FACTS.md), on the device that holds the output layer; without flash attention the
    attention scores of a micro-batch, which grow with the context, when they are larger
    (fit/kv_llama.py: gpt-oss-20b at 32k needs 4198 MiB). Part of the allowance."""
    vocab = s.model.hyper.vocab_size or 0
    return max(min(s.settings.ubatch, s.settings.batch, s.kv.cells) * vocab * 4, s.kv.scratch)


def _fill(units: list[tuple[int, int]], caps: Sequence[float], backwards: bool = True) -> list[list[tuple[int, int]]]:
    """Units into GPUs in order, as many as each capacity takes before the next GPU: from the last GPU
    backwards (llama.cpp's offload) or from the first (Accelerate's device map)."""
    out: list[list[tuple[int, int]]] = [[] for _ in caps]
    order = iter(range(len(caps) - 1, -1, -1) if backwards else range(len(caps)))
    j = next(order, None)
    room = caps[j] if j is not None else 0
    k = 0
    while k < len(units) and j is not None:
        cost = units[k][0] + units[k][1]
        if cost <= room:
            out[j].append(units[k])
            room -= cost
            k += 1
        else:
            j = next(order, None)
            room = caps[j] if j is not None else 0
    return out


def _llama(s: Sizing, rooms: Sequence[Room]) -> Placement:
    base = _allowance(s)
    logits = _logits_buffer(s) if s.settings.reserve is None else 0
    units = _units(s)
    cap = s.settings.gpu_layers_cap
    # -ngl N offloads the first N units of this order and keeps the rest on the CPU (llama-model.cpp,
    # llama_model::load_tensors: layers below n_layer + 1 - N stay on the CPU), whatever the GPUs could hold
    offloaded = units if cap is None else units[:max(0, cap)]
    need = sum(a + b for a, b in offloaded)
    # The logits buffer goes where the output unit goes: the last GPU, unless it has no room for it.
    out_at = len(rooms) - 1
    for _ in range(2):
        extra = [logits if j == out_at else 0 for j in range(len(rooms))]
        caps = [max(0, r.free - base - e) for r, e in zip(rooms, extra)]
        filled = _spread(offloaded, caps)
        holders = [j for j, f in enumerate(filled) if f]
        if not holders or holders[-1] == out_at:
            break
        out_at = holders[-1]
    placed = len(_flatten(filled))
    # A GPU that holds nothing is charged nothing: the allowance is for the buffers next to the layers.
    allowance = [base + e if f else 0 for f, e in zip(filled, extra)]
    shares = tuple(GpuShare(r.gpu, sum(u[0] for u in f), sum(u[1] for u in f), a, r.free, len(f))
                   for r, f, a in zip(rooms, filled, allowance))
    rest = units[placed:]
    w = s.model.weights
    # On the CPU a tied output reads the embedding itself: the copy exists only on a GPU.
    copy = w.token_embedding if w.tied_embeddings and placed == 0 else 0
    off = s.settings.offload
    kv_host = s.kv.total if off.kv_on_host else 0
    on_host = (offload.host_split(s.model, off.patterns).total if off.patterns else 0) + kv_host
    cpu_w = w.token_embedding + sum(u[0] for u in rest) - copy + on_host - kv_host
    cpu_kv = sum(u[1] for u in rest) + kv_host
    whole = placed == len(units)
    notes = []
    if s.settings.self_fit:
        notes.append(f"the command gives no -ngl: llama.cpp fits the layers itself (--fit, on the devices in this "
                     f"order); expect about {placed} of {len(units)} on the GPUs")
    fits = whole
    if on_host:
        notes.extend(offload.notes(s, on_host))
        fits = whole and (s.settings.host_free is None or cpu_w + cpu_kv <= s.settings.host_free)
        if whole and not fits:
            notes.append("the host has too little memory for what the command keeps on the CPU")
    if cap is not None and not whole:
        host = s.settings.host_free
        fits = placed == len(offloaded) and (host is None or cpu_w + cpu_kv <= host)
        said = f"{s.settings.ngl} {cap}" + (f" ({s.settings.binding}'s default; -1: all)" if s.settings.layers_default
                                             else "")
        notes.append(f"{said}: {len(units) - len(offloaded)} of {len(units)} units stay on the CPU"
                     + ("" if placed == len(offloaded) else f"; only {placed} of the {len(offloaded)} fit on these GPUs"))
        if placed == len(offloaded) and not fits:
            notes.append("the host has too little memory for the CPU's share")
    elif not whole and s.settings.partial and placed > 0:
        host = s.settings.host_free
        fits = host is None or cpu_w + cpu_kv <= host
        notes.append(f"{len(units) - placed} of {len(units)} units stay on the CPU")
        if not fits:
            notes.append("the host has too little memory for the CPU's share")
    # MTP/next-token layers (GLM-4.5, DeepSeek-V3) are llama.cpp's last blocks: counted in -ngl, weighed here
    # with the output unit (their weights are in ``other``), offloaded right after it.
    nextn = getattr(s.model.hyper, "nextn_layers", 0) if placed else 0
    split = [sh.units for sh in shares]
    if nextn:
        split[max(i for i, u in enumerate(split) if u)] += nextn  # the GPU with the output unit
    return Placement(s.engine.name, shares, cpu_w, cpu_kv, gpu_layers=placed + nextn, tp=None,
                     tensor_split=tuple(split), whole=whole, fits=fits,
                     need_bytes=need + base * len(rooms) + logits,
                     short_bytes=max(0, need - sum(caps)) if placed < len(offloaded) else 0, notes=tuple(notes),
                     units=len(units), host_bytes=on_host)


def _spread(units: list[tuple[int, int]], caps: list[int]) -> list[list[tuple[int, int]]]:
    """Units over the GPUs in proportion to what each can hold: the smallest scale of every capacity
    at which all units still fit, so no GPU is filled to the brim while another has room to spare;
    when they do not all fit, as many as fit, from the last GPU backwards."""
    if len(_flatten(_fill(units, caps))) < len(units):
        return _fill(units, caps)
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if len(_flatten(_fill(units, [c * mid for c in caps]))) == len(units):
            hi = mid
        else:
            lo = mid
    return _fill(units, [c * hi for c in caps])


def _flatten(filled: list[list[tuple[int, int]]]) -> list[tuple[int, int]]:
    return [u for f in filled for u in f]


def _tensor(s: Sizing, rooms: Sequence[Room]) -> Placement:
    """vLLM/SGLang/MLC-LLM/TGI: tp-way tensor parallelism within each of pp pipeline stages, dp
    replicas, over ``len(rooms)`` GPUs in rank order (rank = stage × tp + tp rank, replica after
    replica: vLLM's and SGLang's order). Each GPU holds its stage's share (fit/stages.py)."""
    st = s.settings
    tp = st.tp or max(1, len(rooms) * st.nnodes // st.group)
    local = tp * st.group // max(1, st.nnodes)  # the ranks on this node: the command's --node-rank's share
    first = st.node_rank * local if st.nnodes > 1 else 0
    shares_of = stages.stage_shares(s.model, s.kv, tp, st.pp, dict(st.environ))
    if s.engine.name == "vllm":
        shares_of = _vllm_stage_need(s, tp, shares_of)
    allowance = _allowance(s)
    notes: list[str] = []
    problem = stages.tp_problem(s.model, tp)
    if problem:
        notes.append(f"tensor parallelism {tp}: {problem}")
    replicated = stages.replicated_note(s.model, tp)
    if replicated:
        notes.append(replicated)
    util = None
    budgets = [r.free for r in rooms]
    if s.engine.name == "vllm" or (s.engine.name == "sglang" and (st.gpu_mem_util is not None or st.util_placeholder)):
        util, budgets, why = _vllm_budget(s, rooms)
        if why:
            notes.append(why)
    elif st.gpu_mem_util is not None:  # TGI --cuda-memory-fraction, MLC gpu_memory_utilization: a cap
        budgets = [min(r.free, int(st.gpu_mem_util * (r.total or r.free))) for r in rooms]
    gpus = []
    moved = offload.gpu_share_off(s)  # vLLM --cpu-offload-gb: that much of each GPU's weights on the host
    host = 0
    for i, r in enumerate(rooms):
        share = shares_of[((first + i) // tp) % len(shares_of)]
        off = min(moved, share.weights_bytes)
        host += off
        gpus.append(GpuShare(r.gpu, share.weights_bytes - off, share.kv_bytes, allowance, r.free, stage=share.stage))
    if moved:
        notes.append(f"--cpu-offload-gb {st.offload.cpu_offload_gb:g}: {off / (1 << 30):.1f} GiB of each GPU's "
                     "weights stay in host memory (vLLM streams them in)")
    # SGLang's fraction covers the weights and KV pool; its graphs and activations live outside it
    outside = allowance if s.engine.name == "sglang" and util is not None else 0
    short = max((g.weights_bytes + g.kv_bytes + g.allowance_bytes - outside - b for g, b in zip(gpus, budgets)),
                default=0)
    short = max(0, short)
    whole = not problem and short == 0 and len(rooms) == local
    need = sum(g.weights_bytes + g.kv_bytes + g.allowance_bytes for g in gpus)
    fits = whole and (not host or st.host_free is None or host <= st.host_free)
    return Placement(s.engine.name, tuple(gpus), cpu_weights_bytes=host, host_bytes=host, tp=tp, gpu_mem_util=util,
                     whole=whole, fits=fits,
                     need_bytes=need, short_bytes=short * len(rooms), notes=tuple(notes), pp=st.pp,
                     stage_shares=shares_of, budgets=tuple(budgets))


def _vllm_stage_need(s: Sizing, tp: int, shares: tuple[stages.StageShare, ...]) -> tuple[stages.StageShare, ...]:
    """Each stage's KV as vLLM's own start-up check asks for it on one of its GPUs at this tp
    (fit/kv_vllm.py): its layers' pages for one request; the group padding and the held-back block,
    measured for the whole model, shared out by layers (exact with one stage, as vLLM 0.33 was checked)."""
    from gpu_launch.fit import kv_vllm

    need = kv_vllm.need_per_gpu(s.model.hyper, s.settings.ctx, s.settings.kv_type, run_of(s.engine, s.settings, tp),
                                tp)
    n = max(1, len(need.per_layer))
    return tuple(replace(share, kv_bytes=sum(need.per_layer[share.first:share.end])
                         + -(-need.extra * (share.end - share.first) // n)) for share in shares)


def _vllm_budget(s: Sizing, rooms: Sequence[Room]) -> tuple[float, list[int], str]:
    """What vLLM (or SGLang, with --mem-fraction-static) may use on each GPU: utilisation × total,
    and it refuses to start when a GPU has less than that free. gpulaunch picks the utilisation for
    ``{gpu_mem_util}`` (the most every GPU of the set has free, at most 0.95), else it is the
    command's value or vLLM's 0.9."""
    totals = [r.total or r.free or 1 for r in rooms]  # a GPU whose total is unknown: its free memory is all
    if s.settings.gpu_mem_util is not None:
        util = s.settings.gpu_mem_util
    elif s.settings.util_placeholder:
        util = min(VLLM_MAX_UTIL, math.floor(min(r.free / t for r, t in zip(rooms, totals)) * 100) / 100)
    else:
        util = VLLM_DEFAULT_UTIL
    budgets = []
    why = ""
    for r, t in zip(rooms, totals):
        if r.free < util * t:
            budgets.append(0)
            why = f"GPU {r.gpu} has less than {util:.2f} of its memory free: {s.engine.name} would refuse to start"
        else:
            budgets.append(int(util * t))
    return util, budgets, why


def _sequential(s: Sizing, rooms: Sequence[Room]) -> Placement:
    """Accelerate's ``device_map="auto"`` under a ``max_memory`` map: layers in order, the embedding
    with the first, the output with the last, each layer's KV beside it; what is left to the CPU."""
    allowance = _allowance(s)
    caps = [max(0, r.free - allowance) for r in rooms]
    w = s.model.weights
    units = [(w.token_embedding, 0)]
    units += [(w.layers[i] if i < len(w.layers) else 0, s.kv.per_layer[i] if i < len(s.kv.per_layer) else 0)
              for i in range(s.model.hyper.n_layers)]
    units.append((w.output + w.other, 0))
    filled = _fill(units, caps, backwards=False)
    placed = sum(len(f) for f in filled)
    rest = units[placed:]
    shares = tuple(GpuShare(r.gpu, sum(u[0] for u in f), sum(u[1] for u in f), allowance, r.free, len(f))
                   for r, f in zip(rooms, filled))
    need = sum(a + b for a, b in units)
    whole = not rest
    # Accelerate caps the *weights* per device; the KV cache grows there later, so it is kept out of the cap.
    max_memory = {str(i): f"{max(0, c - sh.kv_bytes) // MiB}MiB" for i, (c, sh) in enumerate(zip(caps, shares))}
    if s.settings.host_free is not None:
        max_memory["cpu"] = f"{s.settings.host_free // MiB}MiB"
    cpu_w, cpu_kv = sum(u[0] for u in rest), sum(u[1] for u in rest)
    fits = whole or (s.settings.partial and (s.settings.host_free is None or cpu_w + cpu_kv <= s.settings.host_free))
    return Placement(s.engine.name, shares, cpu_w, cpu_kv, whole=whole, fits=fits, max_memory=max_memory,
                     need_bytes=need + allowance * len(rooms), short_bytes=max(0, need - sum(caps)) if not whole else 0)


def _training(s: Sizing, rooms: Sequence[Room]) -> Placement:
    """A training launch: one process a GPU, each holding the step's peak at this world size (training/steps.py)."""
    from gpu_launch.fit.training import memory_generation, steps

    run = s.settings.training
    vllm = [memory_generation.vllm_reserved(run.setup, r.total or r.free) for r in rooms]  # GRPO's, colocated
    step = steps.step_on(s.model, run, [r.free - v for r, v in zip(rooms, vllm)], s.settings.host_free)
    p = step.peak
    shares = tuple(GpuShare(r.gpu, p.weights_bytes, p.peak_bytes - p.weights_bytes, p.allowance_bytes + v, r.free,
                            training=p) for r, v in zip(rooms, vllm))
    need = (p.peak_bytes + p.allowance_bytes) * len(rooms) + sum(vllm)
    short = sum(max(0, -sh.left_bytes) for sh in shares)
    values = {"nproc": str(len(rooms)), **({"micro_batch": str(step.micro_batch)} if run.micro_open else {})}
    return Placement("training", shares, whole=step.fits, fits=step.fits, need_bytes=need, short_bytes=short,
                     notes=step.notes + memory_generation.vllm_notes(run.setup, rooms, vllm), values=tuple(values.items()))
