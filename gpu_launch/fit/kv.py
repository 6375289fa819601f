"""The KV cache (and recurrent state) a model needs at a context and a number of sequences, per family.

Every rule here is the engine's own sizing, read from its source (named in each comment), never a
guess from file size: charging the full context to every layer is 3–8× high for sliding-window
models, ``num_key_value_heads`` is 25× high for MLA, and treating SSM layers as attention is 3–4×
high (MODEL-FACTS.md). The result is per layer, so a layer split (llama.cpp ``-ngl``) can put each
layer's cache where the layer goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_launch.errors import UsageError
from gpu_launch.modelfile.facts import Hyper

__all__ = ["KV_TYPES", "KvSize", "kv_cache", "row_bytes", "parse_kv_type", "round_ctx", "LLAMA_CTX_PAD", "VLLM_BLOCK"]

#: (elements per block, bytes per block), GGML's type table (ggml.c ``type_traits``; q8_0: 32 in 34,
#: q4_0: 32 in 18...). vLLM's fp8 caches are one byte an element.
KV_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2),
    "q8_0": (32, 34), "q5_0": (32, 22), "q5_1": (32, 24), "q4_0": (32, 18), "q4_1": (32, 20), "iq4_nl": (32, 18),
    "fp8": (1, 1), "fp8_e4m3": (1, 1), "fp8_e5m2": (1, 1), "fp8_ds_mla": (1, 1),
}
#: vLLM's fp8_ds_mla cache (DeepSeek V3.2's sparse MLA) stores 656 bytes a token, not 576 values of
#: one byte (vllm/v1/kv_cache_interface.py, MLAAttentionSpec.real_page_size_bytes).
FP8_DS_MLA_ROW = 656
_ALIASES = {"float16": "f16", "half": "f16", "bfloat16": "bf16", "float32": "f32", "float": "f32",
            "fp16": "f16", "fp32": "f32", "fp8_inc": "fp8"}

#: llama.cpp rounds the context up to a multiple of 256 before it sizes the cache
#: (llama-context.cpp: ``n_ctx = GGML_PAD(n_ctx, 256)``; measured: 3000 → 3072, MODEL-FACTS.md).
LLAMA_CTX_PAD = 256
#: vLLM allocates its paged cache in blocks of 16 tokens (kv_cache_interface.py: ``cdiv(max_model_len,
#: block_size) * page_size_bytes``).
VLLM_BLOCK = 16


def parse_kv_type(text: str, option: str = "--kv-type") -> str:
    """A KV cache type by its llama.cpp (``-ctk q8_0``) or vLLM (``--kv-cache-dtype fp8``) name."""
    name = _ALIASES.get(text.strip().lower(), text.strip().lower())
    if name in ("auto", ""):
        return "f16"
    if name not in KV_TYPES:
        raise UsageError(f"{option}: {text!r} is not a KV cache type",
                         hint="one of " + ", ".join(KV_TYPES))
    return name


def row_bytes(kv_type: str, elements: int) -> int:
    """Bytes of ``elements`` values of ``kv_type`` (GGML ``ggml_row_size``: whole blocks)."""
    block, size = KV_TYPES[kv_type]
    return -(-elements // block) * size


def round_ctx(ctx: int, pad: int) -> int:
    return -(-ctx // pad) * pad if pad > 1 else ctx


@dataclass(frozen=True)
class KvSize:
    """The cache, per layer (0 for a layer with none), and how it was sized.

    ``cells`` is the context the full-attention layers were sized for (after the engine's rounding);
    ``per_token`` is the bytes one more token costs over those layers; ``state`` the recurrent
    layers' fixed share (per-sequence state, independent of the context).
    """

    per_layer: tuple[int, ...]
    cells: int
    per_token: int
    state: int
    rules: tuple[str, ...]
    kv_type: str

    @property
    def total(self) -> int:
        return sum(self.per_layer)


def _is_recurrent(h: Hyper, il: int) -> bool:
    if h.recurrent:
        return bool(h.recurrent[il])
    return h.kv_heads[il] == 0 and bool(h.ssm)


def _state_per_seq(h: Hyper) -> tuple[int, int]:
    """(conv/shift elements, state elements) one sequence holds in one recurrent layer.

    llama.cpp llama-hparams.cpp ``n_embd_r``/``n_embd_s``: Mamba/Mamba2 and the hybrids that reuse
    its cache (Jamba, NemotronH, Granite-H, Qwen3-Next's gated delta net): conv state
    (d_conv − 1) × (d_inner + 2 × n_group × d_state), SSM state d_state × d_inner; RWKV: token shift
    count × n_embd and n_embd × head size; LFM2 short convolutions: n_embd × (L_cache − 1).
    """
    s = h.ssm
    n_embd = h.hidden_size or 0
    wkv = s.get("wkv_head_size") or s.get("head_size") or 0
    if wkv:
        return s.get("token_shift_count", 2) * n_embd, n_embd * wkv
    l_cache = s.get("shortconv_l_cache") or s.get("l_cache") or 0
    if l_cache:
        return n_embd * (l_cache - 1), 0
    d_conv, d_inner = s.get("conv_kernel", 0), s.get("inner_size", 0)
    d_state, groups = s.get("state_size", 0), s.get("group_count", 0)
    conv = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * groups * d_state)
    return conv, d_state * d_inner


def kv_cache(h: Hyper, ctx: int, seqs: int = 1, kv_type: str = "f16", *, engine: str = "llama.cpp",
             ubatch: int = 512, unified: bool = True, state_type: str | None = None, batched_tokens: int = 2048,
             full_swa: bool = False, v_type: str | None = None) -> KvSize:
    """The cache ``engine`` allocates for ``ctx`` tokens in all (llama.cpp: shared by ``seqs``
    sequences in one unified cache; vLLM: ``ctx`` is ``--max-model-len``, one sequence's worth is the
    least it starts with).

    Rules, per layer ``il`` (c = cells, b(n) = bytes of n values of the KV type):

    * full attention, MHA/GQA: c × (b(key_len × kv_heads[il]) + b(value_len × kv_heads[il]))
      (llama.cpp llama-kv-cache.cpp: one K and one V tensor of ``n_embd_{k,v}_gqa(il)`` × kv_size;
      vLLM FullAttentionSpec page = 2 × block × kv_heads × head_size × dtype), with the file's own
      key/value lengths (head_dim ≠ hidden/heads in Qwen3, Gemma);
    * MLA (DeepSeek V2/V3, kv_lora_rank set): one latent row of kv_lora_rank + rope dim per token,
      K only (llama.cpp stores the compressed KV in the K cache, the V view reads from it; vLLM
      MLAAttentionSpec: one head of kv_lora_rank + qk_rope_head_dim);
    * sliding-window layers: llama.cpp llama-kv-cache-iswa.cpp sizes them
      GGML_PAD(min(c, window × (seqs if unified else 1) + ubatch), 256) cells (per stream when not
      unified); vLLM SlidingWindowSpec: min(window − 1 + max_num_batched_tokens, max_model_len)
      tokens in 16-token blocks, plus one block (the window need not start at a block's start);
      full-attention layers are also allocated in whole 16-token blocks;
    * recurrent layers (Mamba, RWKV, the SSM layers of Jamba/Qwen3-Next/LFM2...): a fixed state per
      sequence, no per-token cache at all: llama.cpp llama-memory-recurrent.cpp holds
      ``mem_size = max(1, n_seq_max)`` cells of n_embd_r + n_embd_s values in f32 (type_r/type_s);
      vLLM's MambaSpec one page per request, in the model's dtype by default (``state_type`` f16 here).
    """
    if ctx < 1 or seqs < 1:
        raise UsageError(f"the context ({ctx}) and the number of sequences ({seqs}) must be 1 or more")
    # llama.cpp types K and V apart (-ctk, -ctv: llama-kv-cache.cpp makes K of type_k, V of type_v);
    # vLLM's --kv-cache-dtype is both. None: V as K.
    v_type = v_type or kv_type
    llama = engine == "llama.cpp"
    cells = round_ctx(ctx, LLAMA_CTX_PAD if llama else VLLM_BLOCK)
    per_stream = cells
    if llama and not unified and seqs > 1:
        # one stream per sequence, each of pad256(n_ctx / n_seq) cells (llama-context.cpp, the
        # llama_context constructor: n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256), n_ctx = n_ctx_seq × n_seq_max)
        per_stream = round_ctx(max(1, cells // seqs), LLAMA_CTX_PAD)
        cells = per_stream * seqs
    if state_type is None:
        state_type = "f32" if llama else "f16"
    mla = bool(h.kv_lora_rank)
    rules: list[str] = []
    per_layer: list[int] = []
    per_token = state = 0
    conv, ssm_state = _state_per_seq(h) if (h.ssm or h.recurrent) else (0, 0)
    state_row = row_bytes(state_type, conv) + row_bytes(state_type, ssm_state)
    for il in range(h.n_layers):
        if _is_recurrent(h, il):
            size = state_row * max(1, seqs)
            per_layer.append(size)
            state += size
            continue
        heads = h.kv_heads[il] if il < len(h.kv_heads) else 0
        if heads == 0 and not mla:
            per_layer.append(0)
            continue
        if mla:
            row = FP8_DS_MLA_ROW if kv_type == "fp8_ds_mla" else row_bytes(
                kv_type, (h.kv_lora_rank or 0) + (h.rope_head_dim or 0))
        else:
            row = row_bytes(kv_type, h.key_length * heads) + row_bytes(v_type, h.value_length * heads)
        sliding = bool(h.sliding) and il < len(h.sliding) and h.sliding[il] and bool(h.sliding_window)
        if sliding and not full_swa:
            window = h.sliding_window or 0
            if llama:
                streams = 1 if unified else seqs
                # n_ubatch is capped by the requested context before it is padded (llama_context constructor)
                want = window * (seqs if unified else 1) + min(ubatch, ctx)
                swa_cells = round_ctx(min(per_stream, want), 256) * streams
            else:
                swa_cells = round_ctx(min(window - 1 + batched_tokens, ctx), VLLM_BLOCK) + VLLM_BLOCK
            per_layer.append(row * swa_cells)
        else:
            per_layer.append(row * cells)
            per_token += row
    if mla:
        rules.append(f"MLA latent cache: {h.kv_lora_rank} + {h.rope_head_dim} values per token per layer, K only")
    elif per_token:
        types = kv_type if v_type == kv_type else f"K {kv_type}, V {v_type}"
        rules.append(f"attention: {per_token} bytes per token ({types}) over the full-attention layers, "
                     "key and value lengths as the file states them")
    if any(h.sliding) and h.sliding_window and not full_swa:
        rules.append(f"sliding-window layers: window {h.sliding_window} "
                     + ("× sequences + one micro-batch, padded to 256 (llama.cpp)" if llama
                        else "− 1 + batched tokens, + one block (vLLM)"))
    if state:
        rules.append(f"recurrent layers: a fixed state per sequence ({state_type}), not per token")
    if cells != ctx:
        rules.append(f"context {ctx} rounded up to {cells} "
                     + (f"(llama.cpp: {seqs} sequences of {per_stream} cells, each padded to 256)"
                        if per_stream != cells else "(llama.cpp pads to 256)" if llama else "(vLLM allocates 16-token blocks)"))
    return KvSize(tuple(per_layer), cells, per_token, state, tuple(rules), kv_type)
