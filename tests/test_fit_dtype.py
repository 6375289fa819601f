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


# --- the weights in the engine's dtype too (issue 35, brief item 2) ---------------------------------

def gemma2_9b_float32(root: Path, dtype: str = "F32") -> tuple[Path, int]:
    """google/gemma-2-9b's tensors (header only, the data region sparse) in ``dtype``: (folder, parameters)."""
    from tests.model_fixtures import safetensors_header

    c = GEMMA_2_9B
    hidden, ffn, q, k = c["hidden_size"], c["intermediate_size"], 16 * 256, 8 * 256
    t: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": (dtype, (c["vocab_size"], hidden))}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            t[p + norm + ".weight"] = (dtype, (hidden,))
        t.update({p + "self_attn.q_proj.weight": (dtype, (q, hidden)),
                  p + "self_attn.k_proj.weight": (dtype, (k, hidden)),
                  p + "self_attn.v_proj.weight": (dtype, (k, hidden)),
                  p + "self_attn.o_proj.weight": (dtype, (hidden, q)),
                  p + "mlp.gate_proj.weight": (dtype, (ffn, hidden)), p + "mlp.up_proj.weight": (dtype, (ffn, hidden)),
                  p + "mlp.down_proj.weight": (dtype, (hidden, ffn))})
    t["model.norm.weight"] = (dtype, (hidden,))
    size = {"F32": 4, "BF16": 2}[dtype]
    params = sum(int(np.prod(shape, dtype=object)) for _, shape in t.values())
    root.mkdir()
    (root / "config.json").write_text(json.dumps(GEMMA_2_9B))
    header = safetensors_header(t, {dtype: size})
    with open(root / "model.safetensors", "wb") as f:
        f.write(header)
        f.truncate(len(header) + params * size)
    return root, params


def planned_weights(folder: Path, *command: str) -> tuple[int, tuple[str, ...]]:
    """(the weights the plan puts on its one GPU, the plan's rules) for ``vllm serve folder command``."""
    from gpu_launch.fit import plan

    s = sizing_of(str(folder), ["vllm", "serve", str(folder), "--max-model-len", "4096", *command], {}, environ={})
    placed = plan.place(s, [plan.Room(0, 140 << 30, 141 << 30)])
    return placed.per_gpu[0].weights_bytes, s.kv.rules


def test_a_float32_checkpoint_is_planned_at_two_bytes_a_parameter_under_dtype_auto(tmp_path: Path) -> None:
    """vLLM loads a float32 Gemma-2-9B in bf16 (_resolve_auto_dtype): 18.5 GB of weights, not 37 GB."""
    folder, params = gemma2_9b_float32(tmp_path / "g")
    got, rules = planned_weights(folder)
    assert got == 2 * params  # was 4 * params: the file's bytes
    assert any("weights in 16-bit as the engine loads them (--dtype auto" in r for r in rules)
    assert planned_weights(folder, "--dtype", "bfloat16")[0] == 2 * params


def test_dtype_float32_keeps_four_bytes_and_upcasts_a_16_bit_file(tmp_path: Path) -> None:
    folder, params = gemma2_9b_float32(tmp_path / "g")
    assert planned_weights(folder, "--dtype", "float32")[0] == 4 * params
    bf16, params16 = gemma2_9b_float32(tmp_path / "b", "BF16")
    assert planned_weights(bf16)[0] == 2 * params16
    assert planned_weights(bf16, "--dtype", "float32")[0] == 4 * params16  # vLLM casts up as it loads


def test_cpu_offload_gb_comes_off_the_weights_as_held(tmp_path: Path) -> None:
    """--cpu-offload-gb 20 lowers each GPU's weights by 20 GiB of what vLLM holds (bf16), not of the file."""
    folder, params = gemma2_9b_float32(tmp_path / "g")
    got, _ = planned_weights(folder, "--dtype", "float32", "--cpu-offload-gb", "20")
    assert got == 4 * params - 20 * (1 << 30)
    got, _ = planned_weights(folder, "--cpu-offload-gb", "10")
    assert got == 2 * params - 10 * (1 << 30)


def test_a_float32_mamba_keeps_its_a_in_float32(tmp_path: Path) -> None:
    """vLLM's Mamba mixer holds A (inner x state) in float32 whatever --dtype: 2 bytes a parameter else."""
    from tests.model_fixtures import safetensors_header

    c = MAMBA_2_8B_HF
    inner, state, hidden = c["intermediate_size"], c["state_size"], c["hidden_size"]
    t = {"backbone.embeddings.weight": ("F32", (50280, hidden)), "backbone.norm_f.weight": ("F32", (hidden,))}
    for i in range(c["num_hidden_layers"]):
        p = f"backbone.layers.{i}.mixer."
        t.update({p + "A_log": ("F32", (inner, state)), p + "D": ("F32", (inner,)),
                  p + "in_proj.weight": ("F32", (2 * inner, hidden)), p + "out_proj.weight": ("F32", (hidden, inner))})
    params = sum(int(np.prod(s)) for _, s in t.values())
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(c))
    header = safetensors_header(t, {"F32": 4})
    with open(folder / "model.safetensors", "wb") as f:
        f.write(header)
        f.truncate(len(header) + 4 * params)
    a = c["num_hidden_layers"] * inner * state
    assert planned_weights(folder)[0] == 2 * (params - a) + 4 * a
    assert planned_weights(folder, "--dtype", "float32")[0] == 4 * params
