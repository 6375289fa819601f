"""llama.cpp's KV cache, recurrent state and context-dependent compute buffer, as it sizes them.

Read from llama.cpp 0c1e570 (the copy vendored in llama-cpp-python 0.3.36) and checked against its
own byte counts (``llama_get_memory_breakdown``) by benchmarks/llama_cpp_sizing.py:

* ``llama_context`` constructor (src/llama-context.cpp): n_ctx = GGML_PAD(n_ctx, 256); the batch is
  capped at the requested context and the micro-batch at the batch; without a unified cache each of
  the n_seq streams holds GGML_PAD(n_ctx / n_seq, 256) cells.
* ``llama_model::create_memory`` (src/llama-model.cpp): no memory at all for encoders; a recurrent
  memory for Mamba/RWKV; a hybrid one (attention cache + recurrent state, by the layer filters) for
  Jamba, Falcon-H1 (both filters true for every layer), LFM2, Qwen3-Next...; an interleaved-SWA
  cache where the loader set a sliding pattern; Gemma-3n/4 layers past n_layer_kv_from_start reuse
  an earlier layer's cache; NextN/MTP layers are filtered out (il < n_layer()).
* ``llama_kv_cache`` constructor (src/llama-kv-cache.cpp): per layer, K of n_embd_k_gqa(il) and V of
  n_embd_v_gqa(il) values per cell and stream; when flash attention is off V is transposed and
  every layer's V row is padded to the widest layer's (``n_embd_v_gqa_max``, TAG_V_CACHE_VARIABLE).
  The cache is built before "auto" flash attention is resolved, as if it were on: only an explicit
  ``-fa off`` pads.
* ``llama_kv_cache_iswa`` (src/llama-kv-cache-iswa.cpp): sliding layers hold
  GGML_PAD(min(n_ctx_seq, n_swa × (n_seq if unified else 1) + n_ubatch), 256) cells, or n_ctx_seq
  with swa_full (--swa-full; the C API's default, ``llama_context_default_params``).
* ``llama_memory_recurrent`` (src/llama-memory-recurrent.cpp): max(1, n_seq) rows of n_embd_r +
  n_embd_s f32 values per recurrent layer; ``n_embd_r``/``n_embd_s`` in src/llama-hparams.cpp.
* ``llama_kv_cache_dsa`` (src/llama-kv-cache-dsa.cpp; DeepSeek-V3.2, GLM-5): beside the MLA latent
  a second cache with one K-only "head" of ``indexer_head_size`` values, in the K type, the same
  cells, on the layers its filter keeps (create_memory's ``filter_lid``).
* ``llama_kv_cache_dsv4`` (src/llama-kv-cache-dsv4.cpp; DeepSeek-V4): its own K-only caches and
  compressor states, in :mod:`gpu_launch.fit.kv_dsv4`.
* ``llama_init_from_model`` (src/llama-context.cpp): the settings it refuses.
"""

from __future__ import annotations

from gpu_launch.errors import UsageError
from gpu_launch.fit import kv_dsv4
from gpu_launch.fit.kv_units import FP8_DS_MLA_ROW, KV_TYPES, LLAMA_CTX_PAD, KvSize, Run, round_ctx, row_bytes
from gpu_launch.modelfile.facts import Hyper

__all__ = ["cache", "state_elements", "check_settings", "flash_attn_on_cuda"]

#: CUDA's flash-attention kernels by K head size: the V head size each needs (ggml/src/ggml-cuda/
#: fattn.cu, ``ggml_cuda_get_best_fattn_kernel``; 192/320 also need GQA ratios of 8/32). "auto"
#: resolves to on when every attention layer has one (llama_context::resolve_fused_ops).
_CUDA_FA = {40: 40, 64: 64, 72: 72, 80: 80, 96: 96, 112: 112, 128: 128, 256: 256, 192: 128, 320: 256, 512: 512,
            576: 512}
_CUDA_FA_GQA = {192: 8, 320: 32, 512: 2, 576: 2}
_CUDA_FA_TYPES = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}


def state_elements(h: Hyper) -> tuple[int, int]:
    """(n_embd_r, n_embd_s): the values one sequence's state holds in one recurrent layer
    (src/llama-hparams.cpp, in its order: RWKV by ``wkv.head_size``, LFM2 by ``shortconv.l_cache``,
    Kimi's KDA by ``kda.head_dim``, MiniMax-01's lightning attention by its head size, else Mamba)."""
    s, n_embd, n_head = h.ssm, h.hidden_size or 0, h.n_heads
    d_conv = s.get("conv_kernel", 0)
    if s.get("wkv.head_size"):
        return s.get("token_shift_count", 2) * n_embd, n_embd * s["wkv.head_size"]
    mamba_s = s.get("state_size", 0) * s.get("inner_size", 0)
    if s.get("shortconv.l_cache"):
        return n_embd * (s["shortconv.l_cache"] - 1), mamba_s
    kda = s.get("kda.head_dim", 0)
    if kda:
        return 3 * (d_conv - 1 if d_conv > 0 else 3) * n_head * kda, kda * kda * n_head
    conv = (d_conv - 1 if d_conv > 0 else 0) * (s.get("inner_size", 0) + 2 * s.get("group_count", 0) * s.get("state_size", 0))
    if h.state_kind == "lightning":
        return conv, h.key_length * h.key_length * n_head
    return conv, mamba_s


def _quantized(kv_type: str) -> bool:
    return KV_TYPES[kv_type][0] > 1


def _attention_layers(h: Hyper) -> list[int]:
    return [il for il in range(h.n_layers) if h.has_attention(il)]


def flash_attn_on_cuda(h: Hyper, k_type: str, v_type: str) -> bool:
    """Whether llama.cpp's "auto" turns flash attention on on a CUDA device: a kernel for every
    attention layer's head sizes and cache types (fattn.cu, ``ggml_cuda_get_best_fattn_kernel``)."""
    if k_type not in _CUDA_FA_TYPES or v_type not in _CUDA_FA_TYPES:
        return False
    for il in _attention_layers(h):
        heads = h.kv_heads[il] if il < len(h.kv_heads) else 0
        if h.kv_lora_rank:
            k, v, heads = (h.kv_lora_rank or 0) + (h.rope_head_dim or 0), h.kv_lora_rank or 0, 1
        else:
            k, v = h.key_len(il), h.value_len(il)
        if heads == 0:
            continue
        gqa = h.n_heads // heads if heads else 0
        if _CUDA_FA.get(k) != v or gqa < _CUDA_FA_GQA.get(k, 1) or gqa % _CUDA_FA_GQA.get(k, 1):
            return False
    return True


def check_settings(h: Hyper, k_type: str, v_type: str, flash_attn: str) -> None:
    """What ``llama_init_from_model`` refuses, said before anything is reserved (UsageError, exit 2)."""
    if h.no_kv:
        return
    if (h.kv_lora_rank or h.compress_ratios) and k_type != v_type:  # is_mla() || LLM_ARCH_DEEPSEEK4
        what = "a DeepSeek-V4" if h.compress_ratios else "an MLA"
        raise UsageError(f"llama.cpp refuses different K ({k_type}) and V ({v_type}) cache types for {what} model",
                         hint=f"give both the same type: -ctk {k_type} -ctv {k_type}")
    if _quantized(v_type) and flash_attn == "off":
        raise UsageError(f"llama.cpp's quantized V cache ({v_type}) requires flash attention, and the command turns it off",
                         hint=f"-fa on (or auto) with -ctv {v_type}, or -ctv f16")
    if flash_attn == "off":
        return
    for which, kind in (("K", k_type), ("V", v_type)):
        block = KV_TYPES[kind][0]
        if block == 1:
            continue
        for il in _attention_layers(h):
            size = h.key_len(il) if which == "K" else h.value_len(il)
            if h.kv_lora_rank:
                size = (h.kv_lora_rank or 0) + (h.rope_head_dim or 0) if which == "K" else h.kv_lora_rank or 0
            if size % block:
                raise UsageError(f"llama.cpp refuses a {kind} {which} cache here: its block of {block} does not "
                                 f"divide the head size {size}",
                                 hint=f"-ct{which.lower()} f16 (or q8_0/q4_0 only where {block} divides the head size)")


def cache(h: Hyper, ctx: int, seqs: int, k_type: str, run: Run) -> KvSize:
    """The memory llama.cpp allocates for this context, these sequences and these settings."""
    v_type = run.v_type or k_type
    flash = run.flash_attn if run.flash_attn in ("on", "off") else "auto"
    check_settings(h, k_type, v_type, flash)
    if h.no_kv:
        return KvSize((0,) * h.n_layers, 0, 0, 0, ("no KV cache: an encoder / embedding model (llama.cpp "
                                                    "creates no memory for it)",), k_type)
    if h.compress_ratios:
        return kv_dsv4.cache(h, ctx, seqs, k_type, run, flash_on=_fa_on(h, flash, k_type, v_type))
    n_ctx = round_ctx(ctx, LLAMA_CTX_PAD)
    streams = 1 if run.unified or seqs == 1 else seqs
    n_ctx_seq = n_ctx if streams == 1 else round_ctx(max(1, n_ctx // seqs), LLAMA_CTX_PAD)
    # causal attention caps the batch at the requested (unpadded) context, the micro-batch at the batch
    ubatch = min(run.ubatch, min(run.batch, ctx))
    window = h.sliding_window or 0
    swa_cells = n_ctx_seq if run.swa_full else round_ctx(
        min(n_ctx_seq, window * (seqs if streams == 1 else 1) + ubatch), 256)
    v_trans = flash == "off"  # "auto" builds the cache as if flash attention were on
    mla = bool(h.kv_lora_rank)
    heads_of = [h.kv_heads[il] if il < len(h.kv_heads) else 0 for il in range(h.n_layers)]
    v_widest = max((h.value_len(il) * heads_of[il] for il in range(h.n_layers)), default=0)
    state_type = run.state_type or "f32"
    r, s = state_elements(h)
    state_row = (row_bytes(state_type, r) + row_bytes(state_type, s)) * max(1, seqs)
    per_layer, per_token, state, padded = [], 0, 0, False
    for il in range(h.n_layers):
        size = 0
        if h.has_attention(il):
            heads = heads_of[il]
            if mla:  # the compressed row, one "head", K only: no V tensor at all
                row = FP8_DS_MLA_ROW if k_type == "fp8_ds_mla" else row_bytes(
                    k_type, (h.kv_lora_rank or 0) + (h.rope_head_dim or 0))
            else:
                v_width = v_widest if v_trans else h.value_len(il) * heads
                padded = padded or v_width != h.value_len(il) * heads
                row = row_bytes(k_type, h.key_len(il) * heads) + row_bytes(v_type, v_width)
            if il < len(h.indexer) and h.indexer[il]:  # the DSA indexer's own K-only cache (full cells)
                extra = row_bytes(k_type, h.indexer_key_length or 0)
                size += extra * n_ctx_seq * streams
                per_token += extra
            if h.is_sliding(il):
                size += row * swa_cells * streams
                if run.swa_full:
                    per_token += row
            else:
                size += row * n_ctx_seq * streams
                per_token += row
        if h.is_recurrent(il):
            size += state_row
            state += state_row
        per_layer.append(size)
    scratch = _scores(h, n_ctx_seq * streams, swa_cells * streams, ubatch) if not _fa_on(h, flash, k_type, v_type) else 0
    rules = _rules(h, ctx, seqs, k_type, v_type, run, n_ctx, n_ctx_seq, streams, per_token, state, padded, flash)
    return KvSize(tuple(per_layer), n_ctx_seq * streams, per_token, state, tuple(rules), k_type, scratch=scratch,
                  flash_attn=_fa_on(h, flash, k_type, v_type))


def _fa_on(h: Hyper, flash: str, k_type: str, v_type: str) -> bool:
    if flash == "auto":
        # a quantized V turns "auto" into "on" (llama_init_from_model); else CUDA's kernels decide
        return _quantized(v_type) or flash_attn_on_cuda(h, k_type, v_type)
    return flash == "on"


def _scores(h: Hyper, full_cells: int, swa_cells: int, ubatch: int) -> int:
    """Without flash attention the compute buffer holds one micro-batch's attention scores, f32, for
    the longest cache (n_kv × n_ubatch × n_head, with its f32 mask beside it: llm_graph_context::
    build_attn_mha, src/llama-graph.cpp). Measured: gpt-oss-20b at 32k, 4198 MiB against 410 MiB."""
    layers = _attention_layers(h)
    if not layers:
        return 0
    n_kv = max(swa_cells if h.is_sliding(il) else full_cells for il in layers)
    return n_kv * ubatch * (4 * max(h.n_heads, 1) + 4)


def _rules(h: Hyper, ctx: int, seqs: int, k_type: str, v_type: str, run: Run, n_ctx: int, n_ctx_seq: int,
           streams: int, per_token: int, state: int, padded: bool, flash: str) -> list[str]:
    rules = []
    types = k_type if v_type == k_type else f"K {k_type}, V {v_type}"
    if h.kv_lora_rank:
        rules.append(f"MLA latent cache: {h.kv_lora_rank} + {h.rope_head_dim} values per token per layer, K only")
    if any(h.indexer):
        rules.append(f"DSA indexer cache: {h.indexer_key_length} K values per token on {sum(h.indexer)} layers "
                     f"({k_type}; llama_kv_cache_dsa)")
    elif per_token:
        rules.append(f"attention: {per_token} bytes per token ({types}) over the full-attention layers, "
                     "key and value lengths as the file states them")
    if padded:
        rules.append("flash attention off (-fa off): every layer's V row padded to the widest layer's")
    if any(h.sliding) and h.sliding_window:
        what = f"chunked-attention layers: chunk {h.sliding_window}" if h.chunked else \
            f"sliding-window layers: window {h.sliding_window}"
        rules.append(what + (": full size (--swa-full)" if run.swa_full else
                             " × sequences + one micro-batch, padded to 256 (llama.cpp)"))
    if h.kv_layers is not None and h.kv_layers < h.n_layers:
        rules.append(f"layers {h.kv_layers}-{h.n_layers - 1} reuse an earlier layer's KV: no cache of their own")
    if state:
        rules.append(f"recurrent layers: a fixed state per sequence ({run.state_type or 'f32'}), not per token")
    if n_ctx_seq * streams != ctx:
        rules.append(f"context {ctx} rounded up to {n_ctx_seq * streams} "
                     + (f"(llama.cpp: {seqs} sequences of {n_ctx_seq} cells, each padded to 256)" if streams > 1
                        else "(llama.cpp pads to 256)"))
    del n_ctx, flash
    return rules
