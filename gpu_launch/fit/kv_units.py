"""What the KV rules of both engines share: the cache types, their sizes, the engine settings a
cache depends on (:class:`Run`) and the result (:class:`KvSize`). The rules themselves are in
:mod:`gpu_launch.fit.kv_llama` and :mod:`gpu_launch.fit.kv_vllm`; :mod:`gpu_launch.fit.kv` is the
entry point."""

from __future__ import annotations

from gpu_launch.errors import UsageError
from gpu_launch.base.records import dataclass

__all__ = ["KV_TYPES", "FP8_DS_MLA_ROW", "FLASH_ATTN", "LLAMA_CTX_PAD", "VLLM_BLOCK", "KvSize", "Run", "parse_kv_type",
           "row_bytes", "round_ctx"]

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
#: llama.cpp's -fa values (common/arg.cpp: is_truthy / is_falsey / is_autoy) as gpulaunch names them.
FLASH_ATTN = {"on": "on", "enabled": "on", "true": "on", "1": "on", "off": "off", "disabled": "off",
              "false": "off", "0": "off", "auto": "auto", "-1": "auto"}

#: llama.cpp rounds the context up to a multiple of 256 before it sizes the cache
#: (llama-context.cpp: ``n_ctx = GGML_PAD(n_ctx, 256)``; measured: 3000 → 3072, MODEL-FACTS.md).
LLAMA_CTX_PAD = 256
#: vLLM allocates its paged cache in blocks of 16 tokens (kv_cache_interface.py: ``cdiv(max_model_len,
#: block_size) * page_size_bytes``); hybrid Mamba models enlarge the block (fit/kv_vllm.py).
VLLM_BLOCK = 16
#: llama.cpp's micro-batch and batch when the command sets neither (common.h: n_ubatch 512, n_batch 2048);
#: the micro-batch it runs is at most the batch (llama-context.cpp: n_ubatch = min(n_batch, n_ubatch)).
LLAMA_UBATCH, LLAMA_BATCH = 512, 2048


def parse_kv_type(text: str, option: str = "--kv-type") -> str:
    """A KV cache type by its llama.cpp (``-ctk q8_0``) or vLLM (``--kv-cache-dtype fp8``) name."""
    name = _ALIASES.get(text.strip().lower(), text.strip().lower())
    if name in ("auto", ""):
        return "f16"
    if name not in KV_TYPES:
        raise UsageError(f"{option}: {text!r} is not a KV cache type",
                         hint="one of " + ", ".join(KV_TYPES))
    return name


#: vLLM's ``--dtype`` words (``ModelDType``, vllm/config/model.py) → bytes a value; "auto": the engine's rule.
MODEL_DTYPES = {"auto": 0, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4}


def parse_model_dtype(text: str, option: str = "--dtype") -> str:
    """A model dtype as vLLM/SGLang spell it (``--dtype bfloat16``), checked."""
    name = text.strip().lower()
    if name not in MODEL_DTYPES:
        raise UsageError(f"{option}: {text!r} is not a model dtype the engine takes",
                         hint="one of " + ", ".join(MODEL_DTYPES))
    return name


def row_bytes(kv_type: str, elements: int) -> int:
    """Bytes of ``elements`` values of ``kv_type`` (GGML ``ggml_row_size``: whole blocks)."""
    block, size = KV_TYPES[kv_type]
    return -(-elements // block) * size


def round_ctx(ctx: int, pad: int) -> int:
    """``ctx`` rounded up to a multiple of ``pad`` (GGML_PAD; vLLM's cdiv × block)."""
    return -(-ctx // pad) * pad if pad > 1 else ctx


@dataclass(frozen=True)
class Run:
    """How the engine runs: the settings, beyond context and sequences, its cache depends on.

    llama.cpp: ``ubatch``/``batch`` (-ub/-b), ``unified`` (-kvu), ``flash_attn`` ("on", "off" or
    "auto": -fa), ``swa_full`` (--swa-full), ``v_type`` (-ctv; None: as K). vLLM: ``batched_tokens``
    (--max-num-batched-tokens), ``block`` (--block-size), ``in_flight`` (concurrent batches: 2 with async scheduling, its
    default for generation models), ``prefix_caching`` (None: vLLM's default), ``gpu`` ("hopper",
    "blackwell", "ampere" or "": which kernels its hybrid-Mamba rules assume), ``tp``.
    """

    ubatch: int = LLAMA_UBATCH
    batch: int = LLAMA_BATCH
    unified: bool = True
    flash_attn: str = "auto"
    swa_full: bool = False
    v_type: str | None = None
    state_type: str | None = None
    batched_tokens: int = 8192
    block: int | None = None  # vLLM --block-size as written (None: the attention backend's choice)
    in_flight: int = 2
    prefix_caching: bool | None = None
    gpu: str = ""
    tp: int = 1
    dtype: str = ""  # the engine's model dtype (vLLM --dtype): "" the file's own, "auto" the engine's rule


@dataclass(frozen=True)
class KvSize:
    """The cache, per layer (0 for a layer with none), and how it was sized.

    ``cells`` is the context the full-attention layers were sized for (after the engine's rounding);
    ``per_token`` is the bytes one more token costs over those layers; ``state`` the recurrent
    layers' fixed share (per-sequence state, independent of the context); ``extra`` what no one
    layer holds (vLLM: the padding layers of its layer groups and the pool block it holds back).
    ``scratch`` is the compute buffer's share that grows with the context (llama.cpp without flash
    attention: the attention scores of one micro-batch), part of the allowance, not of the cache.
    """

    per_layer: tuple[int, ...]
    cells: int
    per_token: int
    state: int
    rules: tuple[str, ...]
    kv_type: str
    extra: int = 0
    scratch: int = 0
    flash_attn: bool = True

    @property
    def total(self) -> int:
        return sum(self.per_layer) + self.extra
