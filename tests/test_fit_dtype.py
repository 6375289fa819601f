"""The model dtype as the engine resolves it (issue 35, item 1).

vLLM 0.33.0 runs a float32 checkpoint in bf16 under its default ``--dtype auto``
(``_resolve_auto_dtype``, vllm/config/model.py: "Downcast for float32 models" to the platform's first
supported dtype), and its KV cache (``--kv-cache-dtype auto``) and Mamba states follow the model's
dtype; only ``--dtype float32`` on the command keeps 4 bytes a value, and ``--kv-cache-dtype`` wins
for the cache. The figures vLLM's own planning code gave (benchmarks/vllm_sizing.py, 8192 batched
tokens, tp 1): Gemma-2-9B at its 8192 context 2,821,324,800 bytes of KV.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import numpy as st_numpy

from gpu_launch.errors import UsageError
from gpu_launch.fit import kv, kv_vllm
from gpu_launch.fit.sizing import sizing_of
from gpu_launch.modelfile.hfconfig import hyper_from_config, text_config
from tests.vllm_configs import GEMMA_2_9B, MAMBA_2_8B_HF

VLLM_GEMMA_2_9B_TP1 = 2_821_324_800  # vLLM 0.33.0's own planning code (issue 35)


def model_dir(root: Path, config: dict) -> Path:
    """A config.json beside a small safetensors file written by the real writer."""
    root.mkdir()
    st_numpy.save_file({"model.norm.weight": np.zeros(8, np.float32)}, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(config))
    return root


def planned_kv(folder: Path, *command: str) -> kv.KvSize:
    return sizing_of(str(folder), ["vllm", "serve", str(folder), *command], {}, environ={}).kv


def mamba_state_bf16(layers: int = 64, inner: int = 5120, state: int = 16, conv: int = 4) -> int:
    """mamba1_state_shape (vllm/model_executor/layers/mamba/mamba_utils.py) in 2 bytes a value."""
    return layers * (inner * (conv - 1) + inner * state) * 2


def test_a_float32_gemma2_is_sized_in_bf16_as_vllm_runs_it(tmp_path: Path) -> None:
    got = planned_kv(model_dir(tmp_path / "g", GEMMA_2_9B), "--max-num-batched-tokens", "8192")
    assert VLLM_GEMMA_2_9B_TP1 <= got.total <= VLLM_GEMMA_2_9B_TP1 * 1.01  # was 5,648,154,624 (2.00×)
    assert any("float32 model runs in 16-bit under --dtype auto" in r for r in got.rules)


def test_dtype_float32_on_the_command_keeps_four_bytes(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "g", GEMMA_2_9B)
    auto = planned_kv(folder, "--max-num-batched-tokens", "8192").total
    assert planned_kv(folder, "--max-num-batched-tokens", "8192", "--dtype", "float32").total == 2 * auto
    assert planned_kv(folder, "--max-num-batched-tokens", "8192", "--dtype=float").total == 2 * auto
    assert planned_kv(folder, "--max-num-batched-tokens", "8192", "--dtype", "bfloat16").total == auto


def test_kv_cache_dtype_on_the_command_wins_over_the_model_dtype(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "g", GEMMA_2_9B)
    auto = planned_kv(folder, "--max-num-batched-tokens", "8192").total
    fp8 = planned_kv(folder, "--max-num-batched-tokens", "8192", "--dtype", "float32", "--kv-cache-dtype", "fp8")
    assert fp8.total * 2 == auto  # one byte a value whatever --dtype says


def test_a_float32_mamba_state_is_bf16_under_auto(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "m", MAMBA_2_8B_HF)
    # pure Mamba: one state page a layer, plus the whole state vLLM's pool holds back
    assert planned_kv(folder, "--max-model-len", "2048").total == 2 * mamba_state_bf16()
    assert planned_kv(folder, "--max-model-len", "2048", "--dtype", "float32").total == 4 * mamba_state_bf16()


def test_sglang_runs_float32_in_half_precision_too(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "g", GEMMA_2_9B)
    got = sizing_of(str(folder), ["python", "-m", "sglang.launch_server", "--model-path", str(folder)], {},
                    environ={})
    h = hyper_from_config(text_config(GEMMA_2_9B), "config.json")
    assert got.kv.total * 2 == kv_vllm.cache(h, 8192, "f16", kv.Run(batched_tokens=2048)).total


def test_a_dtype_the_engine_does_not_take_is_one_error_line(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "g", GEMMA_2_9B)
    with pytest.raises(UsageError, match="'fp64' is not a model dtype"):
        planned_kv(folder, "--dtype", "fp64")


def test_the_files_own_dtype_when_no_engine_rule_applies() -> None:
    """Without an engine's rule (Run.dtype empty) the cache is in the file's dtype, as before."""
    h = hyper_from_config(text_config(GEMMA_2_9B), "config.json")
    plain = kv_vllm.need_per_gpu(h, 8192, "f16", kv.Run(), 1).total
    assert plain == 2 * kv_vllm.need_per_gpu(h, 8192, "f16", kv.Run(dtype="auto"), 1).total
