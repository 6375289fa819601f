"""DeepSeek-V4's own cache in llama.cpp (``llama_kv_cache_dsv4``), as it sizes it.

Read from llama.cpp 0c1e570 (vendored in llama-cpp-python 0.3.36): src/llama-kv-cache-dsv4.cpp
(the ``llama_kv_cache_dsv4`` and ``llama_dsv4_comp_state`` constructors), src/llama-kv-cache-iswa.cpp,
src/llama-kv-cache.cpp, src/models/deepseek4.cpp (``load_arch_hparams``) and create_memory's
``LLM_ARCH_DEEPSEEK4`` branch (src/llama-model.cpp); checked against its own byte counts
(``llama_get_memory_breakdown``) by benchmarks/llama_cpp_sizing.py and tests/test_fit_kv_dsv4.py.

* Every cache is K only (``dsv4_make_k_only``: the hparams are made "MLA" so no V tensor exists)
  and holds one stream per sequence whatever ``-kvu`` says (``unified_raw = false``,
  ``unified_compressed = false``), each of ``kv_size`` = n_ctx_seq cells (the context's, unified
  or split, as for any cache).
* The raw cache: a sliding-window cache (every layer slides: ``set_swa_pattern(0)``) of
  GGML_PAD(min(n_ctx_seq, n_swa + n_ubatch), 256) cells a stream (the window once: not unified),
  or n_ctx_seq with --swa-full; ``key_length`` × KV heads values a cell, in the -ctk type.
* Layers whose ``attention.compress_ratios`` entry is 4 (CSA) add a compressed cache of
  GGML_PAD(ceil(n_ctx_seq / 4), 256) cells of the same row, and the lightning indexer's cache, as
  many cells of ``attention.indexer.key_length`` values (one head); layers at 128 (HCA) a compressed
  cache of GGML_PAD(ceil(n_ctx_seq / 128), 256) cells. Ratio 0: the raw cache only.
* Compressor states, f32, per stream and per rollback snapshot (``n_planes = n_stream × (1 +
  n_rs_seq)``; n_rs_seq is 0 unless speculative decoding asks for rollback), two tensors (kv and
  score) each: CSA layers 2·key_length × 8 and the indexer's 2·indexer_key_length × 8 values;
  HCA layers key_length × 128.
"""

from __future__ import annotations

from gpu_launch.fit.kv_units import LLAMA_CTX_PAD, KvSize, Run, round_ctx, row_bytes
from gpu_launch.modelfile.facts import Hyper

__all__ = ["CSA", "HCA", "cache"]

#: DSV4_CSA_RATIO and DSV4_HCA_RATIO (src/llama-kv-cache-dsv4.cpp); the loader refuses any other ratio.
CSA, HCA = 4, 128


def _compressed_cells(n_ctx_seq: int, ratio: int) -> int:
    """GGML_PAD(dsv4_comp_size(kv_size, ratio), 256): at least one cell, padded to 256."""
    return round_ctx(max(1, -(-n_ctx_seq // ratio)), 256)


def cache(h: Hyper, ctx: int, seqs: int, k_type: str, run: Run, flash_on: bool = True) -> KvSize:
    """The bytes llama_kv_cache_dsv4 allocates for this context, these sequences and these settings;
    ``flash_on``: whether flash attention runs (as llama.cpp resolves -fa, fit/kv_llama.py)."""
    n_ctx = round_ctx(ctx, LLAMA_CTX_PAD)
    split = not run.unified and seqs > 1
    n_ctx_seq = round_ctx(max(1, n_ctx // seqs), LLAMA_CTX_PAD) if split else n_ctx
    streams = seqs  # one per sequence, unified or not
    ubatch = min(run.ubatch, min(run.batch, ctx))
    window = h.sliding_window or 0
    raw_cells = n_ctx_seq if run.swa_full else round_ctx(min(n_ctx_seq, window + ubatch), 256)
    csa_cells, hca_cells = _compressed_cells(n_ctx_seq, CSA), _compressed_cells(n_ctx_seq, HCA)
    head, lid = h.key_length, h.indexer_key_length or 0
    planes = streams  # x (1 + n_rs_seq): no rollback snapshots without speculative decoding
    csa_state = 2 * (2 * head * 2 * CSA + 2 * lid * 2 * CSA) * 4 * planes  # kv + score, f32: csa and lid
    hca_state = 2 * (head * HCA) * 4 * planes
    n_all = h.n_layers + h.nextn_layers  # the raw and compressed caches also hold NextN blocks (n_layer_nextn = 0)
    per_layer, per_token_x128, state = [], 0, 0
    for il in range(n_all):
        row = row_bytes(k_type, h.key_len(il) * (h.kv_heads[il] if il < len(h.kv_heads) else 1))
        size = row * raw_cells * streams
        per_token_x128 += row * 128 if run.swa_full else 0
        ratio = h.compress_ratios[il] if il < len(h.compress_ratios) else 0
        if ratio == CSA:
            lid_row = row_bytes(k_type, lid)
            size += (row + lid_row) * csa_cells * streams
            per_token_x128 += (row + lid_row) * 128 // CSA
        elif ratio == HCA:
            size += row * hca_cells * streams
            per_token_x128 += row
        if il < h.n_layers and ratio in (CSA, HCA):
            layer_state = csa_state if ratio == CSA else hca_state
            size += layer_state
            state += layer_state
        per_layer.append(size)
    csa_n = sum(1 for r in h.compress_ratios[:h.n_layers] if r == CSA)
    hca_n = sum(1 for r in h.compress_ratios[:h.n_layers] if r == HCA)
    rules = [f"DeepSeek-V4 cache (llama_kv_cache_dsv4): K only, one stream per sequence ({streams})",
             f"raw cache: {head} K values a token over the window {window}"
             + (": full size (--swa-full)" if run.swa_full else " + one micro-batch, padded to 256")
             + f" on all {n_all} layers",
             f"compressed caches: 1/{CSA} of the context on {csa_n} layers (with the {lid}-value indexer cache), "
             f"1/{HCA} on {hca_n}; compressor states f32 ({state} bytes)"]
    if n_ctx_seq * (seqs if split else 1) != ctx:
        rules.append(f"context {ctx} rounded up to {n_ctx_seq * (seqs if split else 1)} (llama.cpp pads to 256)")
    # Without flash attention the compute buffer grows with what a micro-batch attends to: bounded here by
    # f32 scores over one stream's raw and 1/4 cells for every head (with the mask beside them), as for
    # the other caches (fit/kv_llama.py _scores); measured for the V4-Flash layout at 32768 tokens: the
    # buffer grows by 1107 MiB from -fa on to off, the bound 1137 MiB (benchmarks/llama_cpp_sizing.py).
    scratch = 0 if flash_on else (raw_cells + csa_cells) * ubatch * (4 * max(h.n_heads, 1) + 4)
    return KvSize(tuple(per_layer[:h.n_layers]), n_ctx_seq * (seqs if split else 1), -(-per_token_x128 // 128),
                  state, tuple(rules), k_type, extra=sum(per_layer[h.n_layers:]), scratch=scratch,
                  flash_attn=flash_on)
