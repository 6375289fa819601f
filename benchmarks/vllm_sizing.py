"""gpulaunch's vLLM KV need per GPU beside vLLM's own planning code (issue 25).

Run with a Python in which ``import vllm`` works: vLLM's wheel needs no GPU for this, only its
Python (``pip install --no-deps vllm==0.33.0``, a CPU ``torch``, and what its modules import), so
keep it in an environment of its own (several hundred MB), not the project's:

    python3 -m venv /tmp/vllm-env && /tmp/vllm-env/bin/pip install torch --index-url \\
        https://download.pytorch.org/whl/cpu && /tmp/vllm-env/bin/pip install --no-deps vllm==0.33.0 ...
    /tmp/vllm-env/bin/python benchmarks/vllm_sizing.py

For each model of tests/vllm_configs.py it builds the layers' KV cache specs with vLLM's own classes
(``FullAttentionSpec``, ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MambaSpec`` with
shapes from ``MambaStateShapeCalculator``, three pages for Mamba-2 mixers in align mode as
``MambaMixer2.get_kv_cache_spec`` sets), lets vLLM group them and size one request of max_model_len
(``get_kv_cache_groups``, ``_max_memory_usage_bytes_from_groups``) plus the block it holds back
(``_pool_bytes_per_block_from_builder``), and prints gpulaunch's figure ÷ vLLM's at tp 1 to 8. The
hybrid models' attention block is computed by the formula of ``Platform._align_hybrid_block_size``
(not called: it resolves the model class and attention backends of a real GPU platform), with the
attention page of one token from vLLM's own ``FullAttentionSpec``. Twice: the KV cache in the model's
dtype, and ``--kv-cache-dtype fp8`` (vLLM's ``STR_DTYPE_TO_TORCH_DTYPE["fp8"]`` and
``get_kv_quant_mode("fp8")`` in every attention spec; Mamba states keep the model's dtype).

``--dtype`` (issue 35): the float32 configs (Gemma-2-9B, mamba-2.8b-hf) under ``--dtype auto`` and
``float32`` and ``--kv-cache-dtype fp8``, the model dtype resolved by vLLM's own ``_resolve_auto_dtype``,
KV and weights beside gpulaunch's plan, and ``--cpu-offload-gb 20`` (this mode also needs numpy,
safetensors and pytest in that Python: it writes the test's header-only model).
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

try:
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as Calc
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec, MLAAttentionSpec,
                                            SlidingWindowSpec, get_kv_quant_mode)
    from vllm.v1.kv_cache_layout import KVCacheLayout
except ImportError as e:
    sys.exit(f"vllm_sizing: needs a Python where vLLM imports ({e}); see the docstring")

import vllm_configs as C  # noqa: E402

from gpu_launch.fit import kv, kv_vllm  # noqa: E402
from gpu_launch.modelfile.hfconfig import hyper_from_config, text_config  # noqa: E402

BF16 = torch.bfloat16
#: vLLM's --kv-cache-dtype → (the attention specs' dtype and quantisation mode); gpulaunch's name for it
KV = {"auto": ({"dtype": BF16}, "f16"),
      "fp8": ({"dtype": STR_DTYPE_TO_TORCH_DTYPE["fp8"], "kv_quant_mode": get_kv_quant_mode("fp8")}, "fp8")}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _config(max_len: int, batched: int, mode: str) -> SimpleNamespace:
    """What the planning functions read of a VllmConfig (async scheduling: 2 batches in flight)."""
    cache = SimpleNamespace(mamba_cache_mode=mode, num_gpu_blocks_override=None, kv_cache_layout="LBNHC",
                            prefix_cache_retention_interval=None,
                            get_resolved_kv_cache_layout=lambda: KVCacheLayout.LBNHC)
    return SimpleNamespace(model_config=SimpleNamespace(max_model_len=max_len),
                           parallel_config=SimpleNamespace(decode_context_parallel_size=1, tensor_parallel_size=1),
                           scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False,
                                                            max_num_batched_tokens=batched),
                           cache_config=cache, attention_config=SimpleNamespace(hisparse_config=None),
                           max_in_flight_tokens=2 * batched, num_speculative_tokens=0, speculative_config=None)


def vllm_need(specs: list, max_len: int, batched: int = 8192, mode: str = "none") -> int:
    config = _config(max_len, batched, mode)
    groups = planning.get_kv_cache_groups(config, {f"layer{i}": s for i, s in enumerate(specs)})
    builder = planning.DefaultKVCacheConfigBuilder()
    return (planning._max_memory_usage_bytes_from_groups(builder, config, groups)
            + planning._pool_bytes_per_block_from_builder(builder, config, groups))


def _attn(kind: str, kv_heads: int, head: int, block: int, window: int = 0, kv: str = "auto"):  # noqa: ANN202
    common = {"block_size": block, "num_kv_heads": kv_heads, "head_size": head, **KV[kv][0]}
    if kind == "sliding":
        return SlidingWindowSpec(**common, sliding_window=window)
    if kind == "chunked":
        return ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
    return FullAttentionSpec(**common)


def _mla_block(kv: str) -> int:
    """The block of vLLM's MLA backend on Hopper (platforms/cuda.py _get_backend_priorities: FlashAttention MLA
    first, which takes no fp8 cache, then FlashMLA): FlashMLA's own preferred size for an fp8 cache (the
    class imports without a GPU); FlashAttention MLA's kernels take a multiple of 16 (its class needs CUDA
    to import, so 16 is read from flashattn_mla.py)."""
    if kv == "auto":
        return 16
    from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend

    assert kv in FlashMLABackend.supported_kv_cache_dtypes
    return FlashMLABackend.get_preferred_block_size(16)


def _hybrid(shapes: tuple, attention: list, mamba_layers: int, pages: int, kernel: int = 16) -> list:
    """Specs of a hybrid Mamba model: the block from _align_hybrid_block_size's formula, Mamba pages padded."""
    per_token = attention[0](1).page_size_bytes  # vLLM's attention page of one token
    state = sum(math.prod(s) for s in shapes) * 2
    block = 16 * _cdiv(kernel * _cdiv(state, kernel * per_token), 16)
    mamba = MambaSpec(block_size=block, shapes=shapes, dtypes=(BF16,) * len(shapes), page_size_padded=block * per_token,
                      mamba_cache_mode="align")
    if pages == 3:  # MambaMixer2 / FlashInfer delta-net: one prefill checkpoint page
        mamba = replace(mamba, num_prefill_checkpoint_blocks=1)
    return [spec(block) for spec in attention] + [mamba] * mamba_layers


def cases(tp: int, kv: str = "auto") -> dict[str, tuple[dict, int, list, str]]:
    kv8 = max(1, 8 // tp)
    out: dict[str, tuple[dict, int, list, str]] = {
        "gpt-oss-20b": (C.GPT_OSS_20B, 32768, [_attn("sliding" if i % 2 == 0 else "full", kv8, 64, 16, 128, kv)
                                               for i in range(24)], "none"),
        "gemma-3-27b": (C.GEMMA_3_27B, 32768, [_attn("sliding" if i % 6 < 5 else "full", max(1, 16 // tp), 128, 16,
                                                     1024, kv) for i in range(62)], "none"),
        "mistral-7b-v0.1": (C.MISTRAL_7B_V01, 32768, [_attn("sliding", kv8, 128, 16, 4096, kv) for _ in range(32)],
                            "none"),
        "llama-4-scout": (C.LLAMA4_SCOUT, 131072, [_attn("chunked" if (i + 1) % 4 else "full", kv8, 128, 16, 8192, kv)
                                                   for i in range(48)], "none"),
    }
    shapes = Calc.mamba1_state_shape(tp, 8192, 16, 4)
    specs = _hybrid(shapes, [lambda b: _attn("full", kv8, 128, b, kv=kv)] * 4, 28, 2)
    out["jamba-mini"] = (C.JAMBA_MINI, 32768, specs, "align")
    shapes = Calc.mamba2_state_shape(tp, 8192, 1, 128, 64, 128, 4)
    specs = _hybrid(shapes, [lambda b: _attn("full", kv8, 128, b, kv=kv)] * 4, 36, 3)
    out["granite-4.0-h-small"] = (C.GRANITE_4_H_SMALL, 100000, specs, "align")
    kv2 = max(1, 2 // tp)
    shapes = Calc.mamba2_state_shape(tp, 3072, 1, 24, 128, 256, 4)
    specs = _hybrid(shapes, [lambda b: _attn("full", kv2, 128, b, kv=kv)] * 44, 44, 3)
    out["falcon-h1-7b"] = (C.FALCON_H1_7B, 32768, specs, "align")
    shapes = Calc.gated_delta_net_state_shape(tp, 16, 32, 128, 128, 4)
    specs = _hybrid(shapes, [lambda b: _attn("full", kv2, 256, b, kv=kv)] * 12, 36, 3, kernel=64)
    out["qwen3-next (H100)"] = (C.QWEN3_NEXT, 65536, specs, "align")
    block = _mla_block(kv)
    latent = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=512 + 64, cache_dtype_str=kv, **KV[kv][0])
    out["deepseek-v3 (H100)"] = (C.DEEPSEEK_V3, 32768, [latent] * 61, "none")
    if tp == 1:
        shapes = Calc.mamba1_state_shape(1, 5120, 16, 4)
        out["mamba-2.8b"] = (C.MAMBA_2_8B, 4096, [MambaSpec(block_size=4096, shapes=shapes, dtypes=(BF16, BF16))] * 64,
                             "none")
    return out


def dtype_rows(root: Path) -> None:
    """Issue 35: float32 configs (Gemma-2-9B, mamba-2.8b-hf) under vLLM's own dtype resolution
    (``_resolve_auto_dtype`` for --dtype auto, on a platform whose dtypes are CUDA's from sm80 on:
    Platform.supported_dtypes; ``_STR_DTYPE_TO_TORCH_DTYPE`` for --dtype float32), the KV specs and
    Mamba state dtypes (``MambaStateDtypeCalculator``) in that dtype, and the weights at its element
    size (vLLM builds its parameters in it; the Mamba mixer's A in float32), beside gpulaunch's plan."""
    from vllm.config import model as vllm_model
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator
    from vllm.platforms.interface import Platform

    import test_fit_dtype as T

    vllm_model.current_platform = SimpleNamespace(supported_dtypes=Platform.supported_dtypes.fget(None))
    gemma, params = T.gemma2_9b_float32(root / "gemma-2-9b")
    print(f"{'float32 configs':34} {'KV: gpulaunch ÷ vLLM':>20} {'weights: gpulaunch ÷ vLLM':>26}")
    for dtype, cache in (("auto", "auto"), ("float32", "auto"), ("auto", "fp8"), ("float32", "fp8")):
        torch_dtype = vllm_model._resolve_auto_dtype("gemma2", torch.float32, is_pooling_model=False) \
            if dtype == "auto" else vllm_model._STR_DTYPE_TO_TORCH_DTYPE[dtype]
        spec = {"dtype": torch_dtype} if cache == "auto" else KV["fp8"][0]
        specs = [(SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=256, sliding_window=4096, **spec)
                  if i % 2 == 0 else FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=256, **spec))
                 for i in range(42)]
        theirs = vllm_need(specs, 8192)
        command = ["--max-num-batched-tokens", "8192", "--dtype", dtype]
        command += ["--kv-cache-dtype", "fp8"] if cache == "fp8" else []
        ours = T.planned_kv(gemma, *command).total
        weights, _ = T.planned_weights(gemma, *command[2:4])
        held = params * torch.empty((), dtype=torch_dtype).element_size()
        print(f"gemma-2-9b --dtype {dtype:8} kv {cache:5} {ours / theirs:20.4f} {weights / held:26.4f}  (vLLM: KV {theirs}, weights {held})")
    for dtype in ("auto", "float32"):
        torch_dtype = vllm_model._resolve_auto_dtype("mamba", torch.float32, is_pooling_model=False) \
            if dtype == "auto" else torch.float32
        dtypes = MambaStateDtypeCalculator.mamba1_state_dtype(torch_dtype, "auto", "auto")
        shapes = Calc.mamba1_state_shape(1, 5120, 16, 4)
        theirs = vllm_need([MambaSpec(block_size=2048, shapes=shapes, dtypes=dtypes)] * 64, 2048)
        ours = T.planned_kv(T.model_dir(root / f"mamba-{dtype}", C.MAMBA_2_8B_HF), "--max-model-len", "2048",
                            "--dtype", dtype).total
        print(f"mamba-2.8b-hf --dtype {dtype:8} kv auto {ours / theirs:16.4f}  (vLLM: {theirs})")
    off, _ = T.planned_weights(gemma, "--dtype", "float32", "--cpu-offload-gb", "20")
    print(f"gemma-2-9b --dtype float32 --cpu-offload-gb 20: weights on the GPU {off}, held {4 * params}: "
          f"{(4 * params - off) / (1 << 30):.2f} GiB lower (vLLM's UVAOffloader moves parameters until >= 20 GiB)")


def main() -> None:
    if "--dtype" in sys.argv:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            dtype_rows(Path(tmp))
        return
    for cache in KV:
        rows: dict[str, dict[int, float]] = {}
        for tp in (1, 2, 4, 8):
            for name, (config, max_len, specs, mode) in cases(tp, cache).items():
                h = hyper_from_config(text_config(config), "config.json")
                ours = kv_vllm.need_per_gpu(h, max_len, KV[cache][1], kv.Run(batched_tokens=8192, gpu="hopper"), tp).total
                theirs = vllm_need(specs, max_len, mode=mode)
                rows.setdefault(name, {})[tp] = ours / theirs
        print(f"{'--kv-cache-dtype ' + cache:22} gpulaunch ÷ vLLM at tp 1, 2, 4, 8")
        for name, by_tp in rows.items():
            print(f"{name:22} " + "  ".join(f"{by_tp[tp]:.4f}" if tp in by_tp else "   -  " for tp in (1, 2, 4, 8)))


if __name__ == "__main__":
    main()
