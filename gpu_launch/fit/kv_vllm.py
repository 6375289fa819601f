"""vLLM's KV cache need at start-up, per GPU, as its own planning code computes it.

Read from vLLM 0.33.0 (the wheel's source; vllm/v1/kv_cache_interface.py, vllm/v1/core/
kv_cache_planning.py, vllm/platforms/interface.py, vllm/engine/arg_utils.py, vllm/config/vllm.py,
vllm/model_executor/models/config.py, vllm/model_executor/layers/mamba/):

* per layer a spec (``GPUModelRunner.get_kv_cache_spec``): full attention, sliding window, chunked
  local attention (Llama 4), MLA (one latent row, the same on every tensor-parallel rank) or Mamba
  state; no spec for encoder-only attention or for a layer that reuses another's KV (Gemma-3n/4);
  Falcon-H1's layers have both an attention and a Mamba spec;
* what one request of max_model_len holds per spec (``max_memory_usage_bytes``): full attention
  cdiv(len, block) pages; sliding window cdiv(min(window − 1 + in-flight tokens, len), block) + 1;
  chunked cdiv(min(chunk + in-flight tokens, len), block); in-flight tokens are
  ``VllmConfig.max_in_flight_tokens`` = concurrent batches (2 with async scheduling, the default for
  generation models) × max_num_batched_tokens; Mamba 1 page, or 2 + a checkpoint page in
  ``mamba_cache_mode="align"`` (prefix caching, on by default for hybrid generation models:
  ``MambaModelConfig.verify_and_update_config``);
* the hybrid allocator's groups (``get_kv_cache_groups``, ``_get_kv_cache_groups_uniform_page_size``):
  layers of one spec in groups of the smallest type's count (the largest's when within 1.5×), the
  last group of a type padded to that size; every block of the pool holds a page for each slot of
  the widest group; the need is bytes per block × (the blocks of every group + the one block the
  pool holds back: ``get_kv_cache_configs``, ``_pool_bytes_per_block_from_builder``);
* hybrid Mamba models (``Platform._align_hybrid_block_size``): the attention block grows until a
  page holds a Mamba state, and the Mamba page is padded to the attention page.
"""

from __future__ import annotations

import math
from collections import Counter

from gpu_launch.fit.kv_units import FP8_DS_MLA_ROW, KV_TYPES, MODEL_DTYPES, VLLM_BLOCK, KvSize, Run
from gpu_launch.modelfile.facts import Hyper
from gpu_launch.base.records import dataclass, replace

__all__ = ["cache", "need_per_gpu", "VllmNeed"]

_ONE_BYTE = {"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"}
#: The Mamba page count in align mode (``MambaSpec.max_memory_usage_bytes``: 2 + checkpoint pages):
#: Mamba-2 mixers and Hopper's FlashInfer gated delta-net export a prefill checkpoint (one page more).
_CHECKPOINT_KINDS = {"mamba2"}
#: Qwen3-Next's gated delta-net on Hopper puts prefill checkpoints every 64 tokens
#: (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT): the hybrid block becomes a multiple of 64.
_GDN_ALIGN = 64


@dataclass(frozen=True)
class _Spec:
    kind: str  # "full", "sliding", "chunked", "mamba"
    page: int  # bytes a block of this layer holds on one GPU
    block: int  # tokens a block holds (attention)
    blocks: int  # blocks one request of max_model_len needs


@dataclass(frozen=True)
class VllmNeed:
    """vLLM's start-up need on one GPU, and what it is made of."""

    per_layer: tuple[int, ...]  # each layer's pages for one request (0: no spec)
    extra: int  # group padding and the held-back pool block
    block: int  # the attention block size, in tokens
    mamba_pages: int  # pages per Mamba layer (0: none)

    @property
    def total(self) -> int:
        return sum(self.per_layer) + self.extra


def _as_run(h: Hyper, run: Run) -> Hyper:
    """The model as the engine runs it: its "auto" and state types in the dtype the engine resolves.

    vLLM's ``--dtype auto`` (``_resolve_auto_dtype`` in vllm/config/model.py, 0.33.0) downcasts a
    float32 config ("Downcast for float32 models") to the platform's first supported dtype (bf16 on
    CUDA from Ampere on, fp16 before it: 2 bytes either way), and ``--kv-cache-dtype auto`` and the
    Mamba states follow the model's dtype; only ``--dtype float32``/``float`` keeps 4 bytes. SGLang,
    TGI and MLC-LLM also run float32 checkpoints in half precision by default."""
    if not run.dtype:
        return h
    wanted = MODEL_DTYPES.get(run.dtype, 0) or (2 if h.dtype_bytes == 4 else h.dtype_bytes)
    if wanted == h.dtype_bytes:
        return h
    return replace(h, dtype_bytes=wanted)


def _dtype_bytes(h: Hyper, kv_type: str) -> int:
    if kv_type in _ONE_BYTE:
        return 1
    if kv_type in ("f32",):
        return 4
    return h.dtype_bytes if kv_type in ("f16", "bf16") else KV_TYPES[kv_type][1]


def _attention_page_per_token(h: Hyper, il: int, kv_type: str, tp: int) -> int:
    """One token's K and V on one GPU (``AttentionSpec.page_size_bytes`` / block): KV heads per rank
    max(1, heads // tp), MLA one latent head on every rank."""
    if h.kv_lora_rank:
        width = (h.kv_lora_rank or 0) + (h.rope_head_dim or 0)
        return FP8_DS_MLA_ROW if kv_type == "fp8_ds_mla" else width * _dtype_bytes(h, kv_type)
    heads = max(1, (h.kv_heads[il] if il < len(h.kv_heads) else 0) // tp)
    return heads * (h.key_len(il) + h.value_len(il)) * _dtype_bytes(h, kv_type)


def _mamba_state(h: Hyper, tp: int) -> int:
    """One Mamba layer's state on one GPU (``MambaStateShapeCalculator``, mamba_utils.py), conv
    state in the model's dtype and the temporal state in its own (NemotronH: float32)."""
    s = h.ssm
    kind, k = h.state_kind, s.get("conv_kernel", 0)
    conv_b = h.dtype_bytes
    ssm_b = h.state_dtype_bytes or conv_b
    if kind == "gdn":  # gated_delta_net_state_shape
        # config.json's linear_* numbers; a GGUF states the value heads as ssm.time_step_rank and
        # their total width as ssm.inner_size (convert_hf_to_gguf.py, Qwen3NextModel)
        k_heads, k_dim = s.get("group_count", 0), s.get("state_size", 0)
        v_heads = s.get("head_count") or s.get("time_step_rank") or 1
        v_dim = s.get("head_dim") or s.get("inner_size", 0) // v_heads
        conv = (k_dim * k_heads * 2 + v_dim * v_heads) // tp * max(k - 1, 0)
        return conv * conv_b + (v_heads // tp) * v_dim * k_dim * ssm_b
    if kind == "shortconv":
        return (h.hidden_size or 0) // tp * max(s.get("shortconv.l_cache", 0) - 1, 0) * conv_b
    inner, state = s.get("inner_size", 0), s.get("state_size", 0)
    if kind == "mamba2":  # mamba2_state_shape: groups replicated up to tp when tp does not divide them
        groups = s.get("group_count", 0)
        groups = groups if groups % tp == 0 else groups + tp - groups
        conv = (inner + 2 * groups * state) // tp * max(k - 1, 0)
        return conv * conv_b + inner // tp * state * ssm_b
    return inner // tp * max(k - 1, 0) * conv_b + inner // tp * state * ssm_b  # mamba1_state_shape


def _attention_block(h: Hyper, kv_type: str, run: Run) -> int:
    """The block, in tokens, vLLM's attention backend asks for (``Platform.update_block_size_for_backend``:
    16, unless 16 is not a multiple of one of the backend's kernel block sizes, then its smallest). Only
    dense MLA's backends ask for more (``_get_backend_priorities`` in platforms/cuda.py, each backend's
    ``supported_kv_cache_dtypes`` and ``get_supported_kernel_block_sizes``): on Hopper FlashAttention MLA
    (16) takes no fp8 cache, which goes to FlashMLA (64); on Blackwell FlashInfer MLA (32 or 64: 32) comes
    first where qk_nope_head_dim is one its kernels have (64, 128, 192), else CUTLASS MLA (128: the
    largest a later backend asks, so never less than vLLM's). "blackwell" also names the RTX PRO 6000,
    whose first MLA backend is Triton's (16): planned with the bigger block, a block's bytes too many."""
    if not h.kv_lora_rank or kv_type == "fp8_ds_mla":  # (fp8_ds_mla: DeepSeek's sparse MLA, not this rule)
        return VLLM_BLOCK
    if run.gpu == "hopper" and kv_type in _ONE_BYTE:
        return 64
    if run.gpu == "blackwell":
        return 32 if h.key_length - (h.rope_head_dim or 0) in (64, 128, 192) else 128
    return VLLM_BLOCK


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


#: need_per_gpu's answers by (the model's Hyper, by identity, and the rest of its arguments): a choice
#: places the same model at the same tp on many candidate sets. The Hyper is kept with its answer, so
#: its id cannot be reused while the entry lives; a few dozen entries at most.
_NEEDS: dict[tuple[int, int, str, Run, int], tuple[Hyper, VllmNeed]] = {}
_NEEDS_KEPT = 64


def need_per_gpu(h: Hyper, max_len: int, kv_type: str, run: Run, tp: int = 1) -> VllmNeed:
    """What vLLM's start-up check asks each of ``tp`` GPUs to hold for one request of ``max_len``."""
    key = (id(h), max_len, kv_type, run, tp)
    known = _NEEDS.get(key)
    if known is not None and known[0] is h:
        return known[1]
    need = _need_per_gpu(h, max_len, kv_type, run, tp)
    if len(_NEEDS) >= _NEEDS_KEPT:
        _NEEDS.clear()
    _NEEDS[key] = (h, need)
    return need


def _need_per_gpu(h: Hyper, max_len: int, kv_type: str, run: Run, tp: int) -> VllmNeed:
    h = _as_run(h, run)
    n = h.n_layers
    if h.no_kv:
        return VllmNeed((0,) * n, 0, VLLM_BLOCK, 0)
    attention = [il for il in range(n) if h.has_attention(il)]
    mamba = [il for il in range(n) if h.is_recurrent(il)]
    hybrid = bool(attention and mamba)
    in_flight = run.in_flight * run.batched_tokens
    # prefix caching is on by default for decoder and hybrid generation models, off for attention-free
    # (pure Mamba) ones (ModelConfig.is_prefix_caching_supported); with it, Mamba layers are "align"ed
    align = bool(mamba) and hybrid and run.prefix_caching is not False
    block = VLLM_BLOCK if hybrid else run.block or _attention_block(h, kv_type, run)
    state = _mamba_state(h, tp) if mamba else 0
    if hybrid:
        # Platform._align_hybrid_block_size: the model-level attention geometry (first attention layer)
        # (the alignment: the backend's smallest kernel block, or --block-size when larger; in align mode
        # also a multiple of the prefill checkpoints'; the block: that, or --block-size when larger)
        per_token = _attention_page_per_token(h, attention[0], kv_type, tp)
        kernel = max(VLLM_BLOCK, run.block or 0)
        if align and h.state_kind == "gdn" and run.gpu == "hopper":
            kernel = math.lcm(kernel, _GDN_ALIGN)
        block = max(run.block or VLLM_BLOCK,
                    VLLM_BLOCK * _cdiv(kernel * _cdiv(state, kernel * per_token), VLLM_BLOCK))
    mamba_pages = 0
    if mamba:
        checkpoint = h.state_kind in _CHECKPOINT_KINDS or (h.state_kind == "gdn" and run.gpu == "hopper")
        mamba_pages = (2 + int(checkpoint)) if align else 1
    specs: dict[int, list[_Spec]] = {}
    for il in attention:
        page = _attention_page_per_token(h, il, kv_type, tp) * block
        if h.is_sliding(il) and h.chunked:
            blocks = _cdiv(min((h.sliding_window or 0) + in_flight, max_len), block)
            kind = f"chunked{h.sliding_window}"
        elif h.is_sliding(il):
            blocks = _cdiv(min((h.sliding_window or 0) - 1 + in_flight, max_len), block) + 1
            kind = f"sliding{h.sliding_window}"
        else:
            blocks, kind = _cdiv(max_len, block), "full"
        specs.setdefault(il, []).append(_Spec(kind, page, block, blocks))
    for il in mamba:
        page = block * _attention_page_per_token(h, attention[0], kv_type, tp) if hybrid else state
        specs.setdefault(il, []).append(_Spec("mamba", max(page, state), block, mamba_pages))
    layers = [spec for il in range(n) for spec in specs.get(il, [])]
    if not layers:
        return VllmNeed((0,) * n, 0, block, mamba_pages)
    per_layer = tuple(sum(sp.page * sp.blocks for sp in specs.get(il, [])) for il in range(n))
    kinds = {sp.kind for sp in layers}
    if len(kinds) == 1:
        # one group of every layer (uniform spec, or UniformTypeKVCacheSpecs when pages differ):
        # a block holds every layer's page; a request needs the most pages any layer needs
        per_block = sum(sp.page for sp in layers)
        blocks = max(sp.blocks for sp in layers)
        need = per_block * (blocks + 1)
        return VllmNeed(per_layer, need - sum(per_layer), block, mamba_pages)
    # unify_kv_cache_spec_page_size: smaller attention pages whose size divides the largest take a
    # bigger block (fewer blocks), others are padded; then groups of equal size
    widest = max(sp.page for sp in layers)
    unified = []
    for sp in layers:
        if sp.page == widest or sp.kind == "mamba" or widest % sp.page:
            unified.append(_Spec(sp.kind, widest, sp.block, sp.blocks))
        else:
            ratio = widest // sp.page
            unified.append(_Spec(sp.kind, widest, sp.block * ratio, _reblock(sp, ratio, h, max_len, in_flight)))
    counts = Counter((sp.kind, sp.block) for sp in unified)
    blocks_of = {(sp.kind, sp.block): sp.blocks for sp in unified}
    group = min(counts.values())
    if max(counts.values()) < group * 1.5:
        group = max(counts.values())
    total_blocks = sum(_cdiv(count, group) * blocks_of[key] for key, count in counts.items())
    need = group * widest * (total_blocks + 1)
    return VllmNeed(per_layer, need - sum(per_layer), block, mamba_pages)


def _reblock(sp: _Spec, ratio: int, h: Hyper, max_len: int, in_flight: int) -> int:
    block = sp.block * ratio
    if sp.kind.startswith("sliding"):
        return _cdiv(min((h.sliding_window or 0) - 1 + in_flight, max_len), block) + 1
    if sp.kind.startswith("chunked"):
        return _cdiv(min((h.sliding_window or 0) + in_flight, max_len), block)
    return _cdiv(max_len, block)


def cache(h: Hyper, max_len: int, kv_type: str, run: Run) -> KvSize:
    """vLLM's need for one request of ``max_len`` at tensor parallelism ``run.tp``, as a KvSize."""
    need = need_per_gpu(h, max_len, kv_type, run, run.tp)
    given = h
    h = _as_run(h, run)
    per_token = sum(_attention_page_per_token(h, il, kv_type, run.tp) for il in range(h.n_layers)
                    if h.has_attention(il) and not h.is_sliding(il))
    state = sum(need.per_layer[il] for il in range(h.n_layers) if h.is_recurrent(il) and not h.has_attention(il))
    cells = _cdiv(max_len, need.block) * need.block
    rules: list[str] = []
    if h.no_kv:
        rules.append("no KV cache: encoder-only attention has no KV cache spec (vLLM)")
    elif h.kv_lora_rank:
        rules.append(f"MLA latent cache: {h.kv_lora_rank} + {h.rope_head_dim} values per token per layer, "
                     "the same on every GPU")
    elif per_token:
        rules.append(f"attention: {per_token} bytes per token ({kv_type}) over the full-attention layers")
    if any(h.sliding) and h.sliding_window:
        what = "chunked-attention layers: chunk" if h.chunked else "sliding-window layers: window"
        rules.append(f"{what} {h.sliding_window} {'+' if h.chunked else '− 1 +'} {run.in_flight} × "
                     f"{run.batched_tokens} in-flight tokens, in blocks (vLLM)")
    if need.mamba_pages:
        rules.append(f"Mamba layers: {need.mamba_pages} state page{'s' if need.mamba_pages > 1 else ''} each"
                     + (" (prefix caching: mamba_cache_mode=align)" if need.mamba_pages > 1 else ""))
    if need.block != VLLM_BLOCK:
        if need.mamba_pages and any(h.has_attention(il) for il in range(h.n_layers)):
            why = "so a page holds a Mamba state" + (f" (--block-size {run.block})" if run.block else "")
            rules.append(f"attention block raised to {need.block} tokens {why}")
        elif run.block:
            rules.append(f"attention blocks of {need.block} tokens, as --block-size says")
        else:
            rules.append(f"attention blocks of {need.block} tokens: what vLLM's MLA backend takes for the {kv_type} "
                         f"cache on {run.gpu.capitalize()}")
    if given.dtype_bytes == 4 and h.dtype_bytes == 2 and kv_type in ("f16", "bf16"):
        rules.append("a float32 model runs in 16-bit under --dtype auto (vLLM: _resolve_auto_dtype): "
                     "KV cache and states in 2 bytes a value")
    if need.extra:
        rules.append(f"{need.extra} bytes for the layer groups' padding and the pool block vLLM holds back")
    if cells != max_len and not h.no_kv:
        rules.append(f"context {max_len} rounded up to {cells} (vLLM allocates {need.block}-token blocks)")
    return KvSize(need.per_layer, cells, per_token, state, tuple(rules), kv_type, extra=need.extra)
