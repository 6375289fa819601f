"""What a ZeRO-3 rank holds gathered through the backward, by replaying DeepSpeed's parameter coordinator over the
step's module trace. Arithmetic only: no torch, no deepspeed.

From deepspeed/runtime/zero (0.19.8), checked against rank 0 of a real DeepSpeed step over 2 gloo ranks on CPU:
the coordinator's own gathered elements, counted at each of its fetches and releases, are the replay's, element
for element (tests/test_training_deepspeed.py ``test_zero3_gathered_is_deepspeeds_coordinator_replayed``: 2 and
6 layers, tied and untied, checkpointing, a max-live limit, reuse distances 0, 1e6 and 1e9):

* every module's forward pre-hook and backward pre-hook fetches its own parameters (parameter_offload.py
  ``_register_deepspeed_module``, ``pre_sub_module_forward_function``/``pre_sub_module_backward_function``),
  containers with none among them; the step's trace is that order of modules (the forward, then the backward:
  the children of a module in reverse; under gradient checkpointing a layer's recompute inside its backward,
  after its last linear's fetch), each module's parameters with the trace step that uses them
  (partitioned_param_coordinator.py ``record_module``, ``record_parameters``);
* after each fetch the coordinator prefetches from that trace (``fetch_sub_module``): it walks the queue of
  parameter uses, gathering those not yet available, until ``stage3_prefetch_bucket_size`` elements are in flight
  or ``stage3_max_live_parameters`` are gathered; a use it walks past, gathered or not, is marked as fetched
  for (``__most_recent_step_id_param_fetched_for``), and a parameter so marked for a later step is not released
  by ``__params_to_release``. Every fetch walks on, so the queue runs ahead of the step, into the backward's
  uses, and the modules whose backward uses it reached stay gathered from their forward to their backward;
* a module's parameters are also kept when used again within ``stage3_max_reuse_distance`` elements of the
  trace (``__params_to_release``), and those of ``stage3_param_persistence_threshold`` elements or fewer are
  gathered for good (parameter_offload.py ``mark_persistent_parameters``: norms, biases);
* the count of gathered elements (``__n_available_params``) starts at 0 each step (``reset_step``) and moves
  at each all-gather and release (``__all_gather_params_``, ``__release_param``).

A PEFT model is replayed as its base model (its adapters' modules and their fetches left out): measured, it
gathers no more than that (a tiny Llama, LoRA r8: 116,736 elements early where the replay says 157,696, 37,888
late for 78,848; the same under checkpointing), so the plan errs high there.

A full fine-tune's DPO reference runs under a coordinator of its own, over its forward alone (:func:`reference`;
trl/models/utils.py ``prepare_deepspeed``), checked against that coordinator's count (tests/test_training_dpo_zero.py).
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from gpu_launch.base.records import dataclass

__all__ = ["Gathered", "gathered", "reference"]


@dataclass(frozen=True)
class Gathered:
    """Elements gathered whole (the persistent ones included): early in the backward (the loss, the head's and the
    last layer's backward), and in the first layer's backward (the end of backward); ``persistent``: those
    gathered for good; ``at_norm``: at the final norm's backward (where an untied head's gradient is reduced: the
    next gradient's hook, the norm's)."""

    early: int
    late: int
    persistent: int
    at_norm: int = 0


# a module: (name, parameter sizes, children)
_Module = tuple[str, tuple[int, ...], tuple]


def _layer(i: int, block: tuple[tuple[str, int], ...], h: int, head_dim: int, qk_norm: bool) -> _Module:
    """One decoder layer as modeling_llama.py (and its kin) calls its modules: the input norm, the attention's
    linears (Qwen3's q_norm/k_norm after q_proj/k_proj), the second norm, the MLP's linears with its activation
    after the first (LlamaMLP.forward: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``)."""
    attn: list[_Module] = []
    mlp: list[_Module] = []
    for name, n in block:
        if name in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj"):
            attn.append((f"{i}.{name}", (n,), ()))
            if qk_norm and name in ("q_proj", "k_proj"):
                attn.append((f"{i}.{name[0]}_norm", (head_dim,), ()))
        else:
            mlp.append((f"{i}.{name}", (n,), ()))
            if len(mlp) == 1:
                mlp.append((f"{i}.act_fn", (), ()))
    return (f"layer{i}", (), ((f"{i}.input_layernorm", (h,), ()), (f"{i}.self_attn", (), tuple(attn)),
                             (f"{i}.post_attention_layernorm", (h,), ()), (f"{i}.mlp", (), tuple(mlp))))


def _forward(m: _Module, out: list) -> None:
    out.append(("F", m))
    for c in m[2]:
        _forward(c, out)
    out.append(("R", m))


def _recompute(layer: _Module) -> list:
    """A checkpointed layer's recompute (torch/utils/checkpoint.py, non-reentrant), run when its last linear's
    backward needs the saved tensors: its children's forward up to that linear, which is not released then."""
    out: list = []
    for c in layer[2]:
        _forward(c, out)
    while out and out[-1][0] == "R":
        out.pop()
    return out


def _events(block: tuple[tuple[str, int], ...], layers: int, h: int, head_dim: int, vocab: int, tied: bool, checkpointing: bool,
            qk_norm: bool) -> list:
    embed = ("embed_tokens", (vocab * h,), ())
    head = ("lm_head", () if tied else (vocab * h,), ())
    decoder = [_layer(i, block, h, head_dim, qk_norm) for i in range(layers)]
    model = ("model", (), (embed, ("rotary_emb", (), ()), *decoder, ("norm", (h,), ())))
    root = ("root", (), (model, head))
    out: list = []
    _forward(root, out)
    out.append(("B", root))
    out.extend((("B", head), ("R", head), ("B", model), ("B", model[2][-1]), ("R", model[2][-1])))
    for d in reversed(decoder):
        out.append(("B", d))
        for c in reversed(d[2]):
            if c[2]:
                out.append(("B", c))
                for k, leaf in enumerate(reversed(c[2])):
                    if k == 0 and checkpointing and c is d[2][-1]:
                        out.extend((("B", leaf), *_recompute(d), ("R", leaf)))
                    else:
                        out.extend((("B", leaf), ("R", leaf)))
                out.append(("R", c))
            else:
                out.extend((("B", c), ("R", c)))
        out.append(("R", d))
    out.extend((("B", embed), ("R", embed)))
    return out


def _params(m: _Module, tied_head: bool) -> tuple[tuple[str, int], ...]:
    if m[0] in ("lm_head", "root_head") and tied_head:
        return (("embed_tokens.0", 0),)  # the embedding's own parameter (its size known from it)
    return tuple((f"{m[0]}.{k}", n) for k, n in enumerate(m[1]))


def _replay(events: list, tied: bool, prefetch: int, max_live: int, reuse: int, persist: int,
            flats: bool = False) -> tuple[list[int], int]:
    """The coordinator's gathered elements after each event of one step (its trace complete), and the elements of
    the persistent parameters (not among them). ``flats``: with each prefetch's flat buffer, which lives beside the
    parameters it gathers until the last of them is fetched for use (partition_parameters.py ``_all_gather_dtype``
    allocates one ``flat_tensor`` for the batch, ``AllGatherCoalescedHandle.wait`` copies each parameter out of it,
    and the coordinator's ``__inflight_param_registry`` holds the handle for each of them until its fetch pops it)."""
    size: dict[str, int] = {}
    for _, m in events:
        for p, n in _params(m, tied):
            if n:
                size[p] = n
    uses = [[p for p, _ in _params(m, tied)] for kind, m in events if kind != "R"]
    persistent = {p for p, n in size.items() if n <= persist}
    queue = deque((p, step) for step, ps in enumerate(uses) for p in sorted(ps))
    most_recent: dict[str, int] = {}
    live: set[str] = set()
    active: dict[str, set[str]] = {}
    n_avail = step = 0
    marks: list[int] = []
    owner: dict[str, int] = {}
    pending: dict[int, set[str]] = {}
    flat: dict[int, int] = {}
    for kind, m in events:
        ps = [p for p, _ in _params(m, tied)]
        if kind != "R":
            for p in ps:
                b = owner.pop(p, -1)
                if b >= 0:
                    pending[b].discard(p)
                    if not pending[b]:
                        del flat[b]
            for p in ps:
                if p not in live and p not in persistent:
                    live.add(p)
                    n_avail += size[p]
                active.setdefault(p, set()).add(m[0])
            fresh = {p for p in ps if most_recent.get(p, -1 << 60) < step}
            seen: set[str] = set()
            while queue and len(seen) < len(fresh):
                p, at = queue.popleft()
                most_recent[p] = at
                seen.add(p)
            budget, flying, numel = min(max_live - n_avail, prefetch), set(), 0
            while prefetch > 0 and queue and numel < budget:
                p, at = queue.popleft()
                most_recent[p] = max(most_recent.get(p, -1 << 60), at)
                if p not in live and p not in persistent and p not in flying:
                    flying.add(p)
                    numel += size[p]
            live |= flying
            n_avail += numel
            if flats and flying:
                pending[len(pending)] = set(flying)
                flat[len(pending) - 1] = numel
                owner.update((p, len(pending) - 1) for p in flying)
            step += 1
        else:
            release = {p for p in ps if p not in persistent and most_recent.get(p, -1 << 60) <= step}
            traversed = 0
            for later in uses[step:]:
                if traversed >= reuse:
                    break
                for p in later:
                    release.discard(p)
                    traversed += size[p]
            for p in ps:
                active.get(p, set()).discard(m[0])
                if p in release and p in live and not active.get(p):
                    live.discard(p)
                    n_avail -= size[p]
        marks.append(n_avail + sum(flat.values()))
    return marks, sum(size[p] for p in persistent)


@lru_cache(maxsize=64)
def gathered(*, block: tuple[tuple[str, int], ...], layers: int, h: int, head_dim: int, vocab: int, tied: bool,
             checkpointing: bool, qk_norm: bool, prefetch: int, max_live: int, reuse: int,
             persist: int) -> Gathered:
    """Replay one step of the coordinator (its trace complete, as from the second step on). ``block``: a layer's
    linears (name, elements) in the order the layer calls them; the sizes in elements. Kept: a plan asks it once
    a GPU count and micro-batch, with the same model and JSON."""
    events = _events(block, layers, h, head_dim, vocab, tied, checkpointing, qk_norm)
    marks, whole = _replay(events, tied, prefetch, max_live, reuse, persist)
    # from the loss (computed in the root's forward once the head's has returned) to the last layer's first linear
    start = next(i for i, (kind, m) in enumerate(events) if kind == "R" and m[0] == "lm_head")
    last = next(i for i, (kind, m) in enumerate(events) if kind == "R" and i > start
                and m[0].startswith(f"{layers - 1}."))
    first = [i for i, (_, m) in enumerate(events) if i > start and m[0].startswith("0.")]
    late = max(marks[first[0]:first[-1] + 1]) if first else marks[-1]
    norm = next(i for i, (kind, m) in enumerate(events) if kind == "B" and m[0] == "norm")
    return Gathered(early=max(marks[start:last + 1]) + whole, late=late + whole, persistent=whole,
                    at_norm=marks[norm] + whole)


@lru_cache(maxsize=64)
def reference(*, block: tuple[tuple[str, int], ...], layers: int, h: int, head_dim: int, vocab: int, tied: bool,
              qk_norm: bool, prefetch: int, max_live: int, reuse: int, persist: int) -> tuple[int, int, int]:
    """A frozen reference model's no-grad forward under its own coordinator (trl/models/utils.py
    ``prepare_deepspeed``: ``deepspeed.initialize`` with no optimizer, a DeepSpeedZeRoOffload, whose trace is the
    forward alone; parameter_offload.py ``_start_of_forward_hook`` resets the step at each forward): (the most it
    counts gathered during that forward, the persistent parameters among them; the most it holds then, its
    prefetches' flat buffers too (:func:`_replay`); the persistent ones alone, gathered for good).
    TRL's fused LM head never calls ``lm_head`` (trl/trainer/utils.py ``add_fused_lm_head``) but reads its weight in
    the model's own forward, where ZeRO-3 registers it as the root module's external parameter
    (partition_parameters.py ``ZeROOrderedDict.__getitem__``, ``register_external_parameter``): the root's fetch
    gathers it, and it stays gathered to the root's release, at the forward's end. Measured: the coordinator's
    count at each fetch and release (tests/test_training_dpo_zero.py)."""
    decoder = [_layer(i, block, h, head_dim, qk_norm) for i in range(layers)]
    model = ("model", (), (("embed_tokens", (vocab * h,), ()), ("rotary_emb", (), ()), *decoder, ("norm", (h,), ())))
    events: list = []
    _forward(("root_head", () if tied else (vocab * h,), (model,)), events)
    counted, _ = _replay(events, tied, prefetch, max_live, reuse, persist)
    marks, whole = _replay(events, tied, prefetch, max_live, reuse, persist, flats=True)
    return max(counted) + whole, max(marks) + whole, whole
