"""Tensor and pipeline parallelism: what one GPU holds when a model is split tp ways within each of
pp pipeline stages (vLLM, SGLang, MLC-LLM, TGI), and which splits an engine accepts.

Plain arithmetic on a model's facts and its KV cache per layer; the placement (``fit/plan.py``) and
the several-node plan (``fit/nodes.py``) assemble it. The rules (MODEL-FACTS.md, "Several nodes",
from vLLM ``vllm/distributed/utils.py`` and ``vllm/config/model.py``):

* stage s holds a contiguous run of layers: L // pp each, the remainder one more each on the stages
  before the last, from the second-to-last backwards (``get_pp_indices``; ``VLLM_PP_LAYER_PARTITION``
  overrides it); the token embedding is on the first stage and the output head on the last (a tied
  head is a second copy of the embedding there), both split tp ways;
* every GPU of a stage holds 1/tp of its stage's weights, and of its KV cache
  ``max(1, kv_heads // tp)`` heads per layer: the cache is replicated once tp exceeds the KV heads;
  an MLA latent row is whole on every tp rank;
* tp must divide the attention heads, and the KV heads must split evenly or replicate evenly
  (``ModelConfig.verify_with_parallel_config``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.fit.kv import KvSize
from gpu_launch.modelfile.facts import ModelFacts
from gpu_launch.base.records import dataclass

__all__ = ["StageShare", "partition", "stage_shares", "tp_problem", "tp_choices", "pp_problem", "replicated_note",
           "NO_PP", "ENGINES_WITH_PP"]

#: Architectures (GGUF/config ``model_type`` spelling, as ModelFacts.architecture holds it) that vLLM
#: cannot split into pipeline stages: no ✅ in the PP column of vLLM's docs/models/supported_models.md
#: (read 2026), and the encoder-only families, which run whole on one stage.
NO_PP = frozenset({"gemma3n", "exaone_moe", "exaone-moe", "stablelm", "zamba2", "gpt_bigcode", "starcoder",
                   "hrm_text", "iquestcoder", "iquestloopcoder", "rnj1", "aria", "idefics3", "bert", "nomic-bert",
                   "roberta", "xlm-roberta", "jina-bert-v2", "t5", "t5encoder", "bart"})
ENGINES_WITH_PP = ("vllm", "sglang", "mlc")


@dataclass(frozen=True)
class StageShare:
    """What each GPU of one pipeline stage holds: layers [first, end), bytes of weights and KV a GPU."""

    stage: int
    first: int
    end: int
    weights_bytes: int
    kv_bytes: int


def partition(n_layers: int, pp: int, environ: Mapping[str, str] | None = None) -> tuple[tuple[int, int], ...]:
    """The layer range of each of ``pp`` stages, as vLLM's ``get_pp_indices`` cuts them (or as
    ``VLLM_PP_LAYER_PARTITION=a,b,...`` in ``environ`` says, when it is valid for these numbers)."""
    pp = max(1, pp)
    counts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        counts[-i] += 1
    text = (environ or {}).get("VLLM_PP_LAYER_PARTITION", "")
    given = [p.strip() for p in text.split(",")] if text else []
    if len(given) == pp and all(p.isdigit() and len(p) <= 9 for p in given) and sum(map(int, given)) == n_layers:
        counts = [int(p) for p in given]
    out, start = [], 0
    for count in counts:
        out.append((start, start + count))
        start += count
    return tuple(out)


def _kv_share(model: ModelFacts, kv: KvSize, layers: range, tp: int) -> int:
    h = model.hyper
    total = 0
    for il in layers:
        size = kv.per_layer[il] if il < len(kv.per_layer) else 0
        heads = h.kv_heads[il] if il < len(h.kv_heads) else 0
        if h.kv_lora_rank:
            total += size  # MLA: the latent row is whole on every rank
        elif heads == 0:
            total += -(-size // tp)  # a recurrent state: split with the heads it belongs to
        else:
            total += -(-size * max(1, heads // tp) // heads)
    return total


def stage_shares(model: ModelFacts, kv: KvSize, tp: int, pp: int = 1,
                 environ: Mapping[str, str] | None = None) -> tuple[StageShare, ...]:
    """Per stage, what one of its ``tp`` GPUs holds (weights rounded up, as a tensor split is)."""
    w = model.weights
    n = model.hyper.n_layers
    ranges = partition(n, pp, environ)
    out = []
    for s, (first, end) in enumerate(ranges):
        weights = sum(w.layers[first:end])
        if s == 0:
            weights += w.token_embedding + w.other
        if s == len(ranges) - 1:
            weights += w.output + (w.token_embedding if w.tied_embeddings and len(ranges) > 1 else 0)
        out.append(StageShare(s, first, end, -(-weights // tp), _kv_share(model, kv, range(first, end), tp)))
    return tuple(out)


def tp_problem(model: ModelFacts, tp: int) -> str | None:
    """Why an engine refuses tensor parallelism ``tp`` for this model, or None."""
    heads = model.hyper.n_heads
    kv = max(model.hyper.kv_heads, default=0)
    if heads > 0 and heads % tp:
        return f"it does not divide the model's {heads} attention heads"
    if kv > 0 and not model.hyper.kv_lora_rank and kv % tp and tp % kv:
        return f"the model's {kv} KV heads neither split nor replicate evenly over it"
    return None


def tp_choices(model: ModelFacts, most: int = 64) -> list[int]:
    """Every tensor-parallel size up to ``most`` the engines accept for this model."""
    return [t for t in range(1, most + 1) if tp_problem(model, t) is None]


def pp_problem(model: ModelFacts, engine: str) -> str | None:
    """Why ``engine`` cannot split this model into pipeline stages, or None."""
    if engine not in ENGINES_WITH_PP:
        return f"{engine} has no pipeline parallelism"
    if model.architecture.lower() in NO_PP:
        return f"{engine} has no pipeline-parallel support for {model.architecture} models"
    return None


def replicated_note(model: ModelFacts, tp: int) -> str | None:
    """Said when tp exceeds the KV heads: each GPU then holds a copy of a head's cache."""
    kv = max(model.hyper.kv_heads, default=0)
    if model.hyper.kv_lora_rank or kv <= 0 or tp <= kv:
        return None
    return (f"tp {tp} exceeds the model's {kv} KV heads: each KV head's cache is replicated on {tp // kv} GPUs "
            f"(pipeline stages instead, e.g. tp {kv} × pp {tp // kv}, would not)")
