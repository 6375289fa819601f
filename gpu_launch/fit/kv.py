"""The KV cache (and recurrent state) a model needs at a context and a number of sequences, per engine.

Every rule is the engine's own sizing, read from its source and cited where it is applied, never a
guess from file size: charging the full context to every layer is 3–8× high for sliding-window
models, ``num_key_value_heads`` is 25× high for MLA, and treating SSM layers as attention is 3–4×
high (MODEL-FACTS.md). llama.cpp's rules are in :mod:`gpu_launch.fit.kv_llama` (checked against its
own byte counts by benchmarks/llama_cpp_sizing.py), vLLM's in :mod:`gpu_launch.fit.kv_vllm`, what
both share (cache types, settings, the result) in :mod:`gpu_launch.fit.kv_units`. This module is the
one entry point.
"""

from __future__ import annotations

from gpu_launch.errors import UsageError
from gpu_launch.fit import kv_llama, kv_vllm
from gpu_launch.fit.kv_units import (FLASH_ATTN, FP8_DS_MLA_ROW, KV_TYPES, LLAMA_BATCH, LLAMA_CTX_PAD, LLAMA_UBATCH,
                                     VLLM_BLOCK, KvSize, Run, parse_kv_type, parse_model_dtype, round_ctx,
                                     row_bytes)
from gpu_launch.modelfile.facts import Hyper

__all__ = ["KV_TYPES", "KvSize", "Run", "kv_cache", "row_bytes", "parse_kv_type", "parse_model_dtype", "round_ctx",
           "LLAMA_CTX_PAD",
           "LLAMA_UBATCH", "LLAMA_BATCH", "VLLM_BLOCK", "FLASH_ATTN", "FP8_DS_MLA_ROW"]

def kv_cache(h: Hyper, ctx: int, seqs: int = 1, kv_type: str = "f16", *, engine: str = "llama.cpp",
             ubatch: int = LLAMA_UBATCH, unified: bool = True, state_type: str | None = None, batched_tokens: int = 8192,
             full_swa: bool = False, v_type: str | None = None, run: Run | None = None) -> KvSize:
    """The cache ``engine`` allocates for ``ctx`` tokens in all (llama.cpp: shared by ``seqs``
    sequences in one unified cache, or ``seqs`` streams of ctx/seqs; vLLM: ``ctx`` is
    ``--max-model-len``, and the size is what its start-up check asks for one request of that
    length at tensor parallelism 1 (:func:`gpu_launch.fit.kv_vllm.need_per_gpu` for other sizes)).
    ``run`` carries the engine settings; the keyword arguments are the older spelling of some."""
    if ctx < 1 or seqs < 1:
        raise UsageError(f"the context ({ctx}) and the number of sequences ({seqs}) must be 1 or more")
    if run is None:
        run = Run(ubatch=ubatch, unified=unified, swa_full=full_swa, v_type=v_type, state_type=state_type,
                  batched_tokens=batched_tokens)
    if engine == "llama.cpp":
        return kv_llama.cache(h, ctx, seqs, kv_type, run)
    return kv_vllm.cache(h, ctx, kv_type, run)
