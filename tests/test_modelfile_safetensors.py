"""safetensors + config.json, MLC-LLM folders and Hugging Face cache ids, read from headers only.

Fixtures are written by the real ``safetensors`` package: ``safetensors.numpy.save_file`` for
F32/F16/I8, ``safetensors.serialize_file`` with ``TensorSpec`` for BF16 and FP8 (numpy has neither).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")
safetensors = pytest.importorskip("safetensors")
import safetensors.numpy as st_numpy  # noqa: E402

from gpu_launch.errors import ExitCode, ModelFileError  # noqa: E402
from gpu_launch.modelfile import bounded  # noqa: E402
from gpu_launch.modelfile.read import read_model  # noqa: E402

ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "float16": 2, "float32": 4}


def save_specs(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """Write ``{name: (torch dtype name, shape)}`` with the real writer, any dtype, zero data."""
    buffers = {n: np.zeros(int(np.prod(s)) * ITEMSIZE[d], np.uint8) for n, (d, s) in tensors.items()}
    specs = {n: safetensors.TensorSpec(dtype=d, shape=list(s), data_ptr=buffers[n].ctypes.data,
                                       data_len=buffers[n].nbytes) for n, (d, s) in tensors.items()}
    safetensors.serialize_file(specs, str(path))


def llama_layout(layers: int, hidden: int = 64, heads: int = 4, kv: int = 2, vocab: int = 100,
                 dtype: str = "bfloat16", prefix: str = "model.", tied: bool = False) -> dict[str, Any]:
    hd = hidden // heads
    t: dict[str, tuple[str, tuple[int, ...]]] = {f"{prefix}embed_tokens.weight": (dtype, (vocab, hidden))}
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        t[p + "self_attn.q_proj.weight"] = (dtype, (heads * hd, hidden))
        t[p + "self_attn.k_proj.weight"] = (dtype, (kv * hd, hidden))
        t[p + "self_attn.v_proj.weight"] = (dtype, (kv * hd, hidden))
        t[p + "mlp.down_proj.weight"] = (dtype, (hidden, 2 * hidden))
        t[p + "input_layernorm.weight"] = ("float32", (hidden,))
    t[f"{prefix}norm.weight"] = ("float32", (hidden,))
    if not tied:
        t["lm_head.weight"] = (dtype, (vocab, hidden))
    return t


def nbytes(spec: tuple[str, tuple[int, ...]]) -> int:
    return int(np.prod(spec[1])) * ITEMSIZE[spec[0]]


def write_model(folder: Path, config: dict[str, Any], tensors: dict[str, Any], shards: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if shards == 1:
        save_specs(folder / "model.safetensors", tensors)
        return folder
    names = list(tensors)
    weight_map = {}
    for k in range(shards):
        part = {n: tensors[n] for n in names[k::shards]}
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_specs(folder / fname, part)
        weight_map.update({n: fname for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(nbytes(v) for v in tensors.values())}, "weight_map": weight_map}))
    return folder


LLAMA = {"model_type": "llama", "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
         "hidden_size": 64, "vocab_size": 100, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"])
def test_weights_are_byte_exact_per_layer_for_each_dtype(tmp_path: Path, dtype: str) -> None:
    tensors = llama_layout(3, dtype=dtype)
    facts = read_model(str(write_model(tmp_path / "m", LLAMA, tensors)))
    w = facts.weights
    assert w.layers == tuple(sum(nbytes(v) for k, v in tensors.items() if k.startswith(f"model.layers.{i}."))
                             for i in range(3))
    assert w.token_embedding == nbytes(tensors["model.embed_tokens.weight"])
    assert w.output == nbytes(tensors["lm_head.weight"]) + nbytes(tensors["model.norm.weight"])
    assert w.total == sum(nbytes(v) for v in tensors.values()) and w.other == 0 and not w.tied_embeddings
    header_name = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float8_e4m3fn": "F8_E4M3",
                   "float8_e5m2": "F8_E5M2"}[dtype]
    assert header_name in w.by_type
    assert (facts.format, facts.architecture, facts.hyper.n_layers, facts.hyper.kv_heads) == \
        ("safetensors", "llama", 3, (2, 2, 2))


def test_numpy_writer_and_the_byte_count_on_disk(tmp_path: Path) -> None:
    folder = tmp_path / "np"
    folder.mkdir()
    arrays = {"model.embed_tokens.weight": np.ones((10, 8), np.float16),
              "model.layers.0.mlp.up_proj.weight": np.ones((8, 8), np.float32),
              "model.layers.1.mlp.up_proj.weight": np.ones((8, 8), np.int8),
              "model.norm.weight": np.ones(8, np.float32)}
    st_numpy.save_file(arrays, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 2, "tie_word_embeddings": True}))
    facts = read_model(str(folder / "model.safetensors"))
    assert facts.weights.layers == (256, 64) and facts.weights.token_embedding == 160
    assert facts.weights.tied_embeddings and facts.weights.output == 32
    data = (folder / "model.safetensors").stat().st_size
    assert facts.weights.total == sum(a.nbytes for a in arrays.values()) < data
    assert facts.header_bytes < data - facts.weights.total + len((folder / "config.json").read_bytes()) + 1


def test_sharded_model_reads_every_shard_in_its_index(tmp_path: Path) -> None:
    tensors = llama_layout(4)
    folder = write_model(tmp_path / "sharded", {**LLAMA, "num_hidden_layers": 4}, tensors, shards=3)
    facts = read_model(str(folder))
    assert len(facts.files) == 4  # config.json + 3 shards
    assert facts.weights.total == sum(nbytes(v) for v in tensors.values())
    assert read_model(str(folder / "model-00002-of-00003.safetensors")).weights == facts.weights
    (folder / "model-00003-of-00003.safetensors").unlink()
    with pytest.raises(ModelFileError, match="1 of the 3 shards its index lists are missing"):
        read_model(str(folder))


def test_only_headers_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensors = llama_layout(2, hidden=1024, vocab=4096)
    folder = write_model(tmp_path / "big", {**LLAMA, "num_hidden_layers": 2, "hidden_size": 1024}, tensors)
    reads: list[tuple[int, int]] = []
    real = os.pread
    monkeypatch.setattr(bounded.os, "pread", lambda fd, n, off: reads.append((off, n)) or real(fd, n, off))
    facts = read_model(str(folder))
    header = 8 + int.from_bytes((folder / "model.safetensors").read_bytes()[:8], "little")
    config = (folder / "config.json").stat().st_size
    assert facts.header_bytes == header + config
    assert sum(n for _, n in reads) == header + config and facts.weights.total > 10 * header


def test_grouping_of_transformers_names(tmp_path: Path) -> None:
    t = {"language_model.model.embed_tokens.weight": ("bfloat16", (100, 64)),
         "language_model.model.layers.0.mlp.up_proj.weight": ("bfloat16", (64, 64)),
         "language_model.model.layers.1.mlp.up_proj.weight": ("bfloat16", (64, 64)),
         "language_model.model.norm.weight": ("bfloat16", (64,)),
         "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight": ("bfloat16", (64, 64)),
         "multi_modal_projector.linear_1.weight": ("bfloat16", (64, 64)),
         "language_model.model.layers.2.eh_proj.weight": ("bfloat16", (64, 64))}  # an MTP layer past the count
    config = {"model_type": "llava", "text_config": {**LLAMA, "num_hidden_layers": 2}}
    facts = read_model(str(write_model(tmp_path / "vlm", config, t)))
    w = facts.weights
    assert w.layers == (8192, 8192) and w.token_embedding == 12800 and w.output == 128
    assert w.other == 3 * 8192 and w.tied_embeddings
    mamba = {"backbone.embeddings.weight": ("float32", (100, 16)),
             "backbone.layers.0.mixer.in_proj.weight": ("float32", (64, 16)),
             "backbone.norm_f.weight": ("float32", (16,))}
    m = read_model(str(write_model(tmp_path / "mamba", {"model_type": "mamba", "num_hidden_layers": 1,
                                                      "hidden_size": 16, "state_size": 16, "conv_kernel": 4,
                                                      "intermediate_size": 32, "time_step_rank": 1}, mamba)))
    assert m.weights.layers == (4096,) and m.weights.token_embedding == 6400 and m.weights.output == 64
    assert m.hyper.recurrent == (True,) and m.hyper.kv_heads == (0,)
    assert m.hyper.ssm == {"conv_kernel": 4, "state_size": 16, "time_step_rank": 1, "inner_size": 32}


def _hyper(tmp_path: Path, config: dict[str, Any]):
    folder = tmp_path / str(config.get("model_type", "x"))
    n = config.get("num_hidden_layers") or config.get("text_config", {}).get("num_hidden_layers")
    return read_model(str(write_model(folder, config, llama_layout(n)))).hyper


def test_gemma3_vlm_text_config_head_dim_and_layer_types(tmp_path: Path) -> None:
    types = ["sliding_attention"] * 5 + ["full_attention"]
    h = _hyper(tmp_path, {"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024, "layer_types": types * 2}})
    assert (h.key_length, h.value_length, h.kv_heads[0], h.sliding_window) == (256, 256, 4, 1024)
    assert h.sliding == tuple(t == "sliding_attention" for t in types * 2)
    old = _hyper(tmp_path, {"model_type": "gemma3_text", "num_hidden_layers": 12, "num_attention_heads": 8,
                            "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024,
                            "sliding_window_pattern": 6})
    assert old.sliding == h.sliding and old.kv_heads == (4,) * 12  # Gemma3TextConfig's default, as Transformers loads it
    newer = _hyper(tmp_path, {"model_type": "gemma3_text", "num_hidden_layers": 12, "sliding_window": 512,
                              "_sliding_window_pattern": 6})
    assert newer.sliding == h.sliding and newer.sliding_window == 512
    mha = _hyper(tmp_path, {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 16,
                            "hidden_size": 2048})
    assert mha.kv_heads == (16, 16) and mha.key_length == 128  # no num_key_value_heads: MHA


def test_values_a_saved_text_config_leaves_out_are_transformers_defaults(tmp_path: Path) -> None:
    """Gemma 3 4B's config.json states neither heads, KV heads nor head_dim in its text_config
    (they equal Gemma3TextConfig's defaults); a llava text_config may not even name its model_type."""
    h = _hyper(tmp_path, {"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "model_type": "gemma3_text", "num_hidden_layers": 34, "sliding_window": 1024}})
    assert (h.n_heads, h.kv_heads[0], h.key_length, h.sliding_window) == (8, 4, 256, 1024)
    assert [i for i, sl in enumerate(h.sliding) if not sl] == [5, 11, 17, 23, 29]
    llava = _hyper(tmp_path, {"model_type": "llava", "text_config": {"num_hidden_layers": 2, "vocab_size": 32064}})
    assert (llava.n_heads, llava.kv_heads, llava.key_length, llava.vocab_size) == (32, (32, 32), 128, 32064)


def test_gpt_oss_and_mistral_sliding(tmp_path: Path) -> None:
    h = _hyper(tmp_path, {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 64,
                          "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880, "sliding_window": 128,
                          "layer_types": ["sliding_attention", "full_attention"] * 2, "num_local_experts": 32})
    assert h.sliding == (True, False, True, False) and h.key_length == 64 and h.expert_count == 32
    m = _hyper(tmp_path, {"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 32,
                          "num_key_value_heads": 8, "hidden_size": 4096, "sliding_window": 4096})
    assert m.sliding == (True, True) and m.key_length == 128
    q = _hyper(tmp_path, {"model_type": "qwen2", "num_hidden_layers": 2, "num_attention_heads": 28,
                          "num_key_value_heads": 4, "hidden_size": 3584, "sliding_window": 131072,
                          "use_sliding_window": False})
    assert q.sliding == ()


def test_fp8_checkpoint_names_its_weights_type_and_counts_may_be_floats(tmp_path: Path) -> None:
    tensors = {k: ("float8_e4m3fn", v[1]) if "proj" in k else v for k, v in llama_layout(2).items()}
    config = {**LLAMA, "num_hidden_layers": 2.0, "quantization_config": {"quant_method": "fp8"}}
    facts = read_model(str(write_model(tmp_path / "fp8", config, tensors)))
    assert facts.dtype == "float8_e4m3fn" and facts.hyper.n_layers == 2
    assert facts.weights.by_type["F8_E4M3"] == sum(nbytes(v) for k, v in tensors.items() if "proj" in k)


def test_deepseek_v3_mla_from_config(tmp_path: Path) -> None:
    h = _hyper(tmp_path, {"model_type": "deepseek_v3", "num_hidden_layers": 3, "num_attention_heads": 128,
                          "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512,
                          "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                          "n_routed_experts": 256, "num_nextn_predict_layers": 1})
    assert h.nextn_layers == 1 and h.n_layers == 3
    assert (h.kv_lora_rank, h.rope_head_dim, h.key_length, h.value_length) == (512, 64, 192, 128)
    assert h.expert_count == 256


def test_jamba_qwen3_next_and_nemotron_h_layouts(tmp_path: Path) -> None:
    j = _hyper(tmp_path, {"model_type": "jamba", "num_hidden_layers": 16, "num_attention_heads": 32,
                          "num_key_value_heads": 8, "hidden_size": 4096, "attn_layer_period": 8,
                          "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2})
    assert [i for i, r in enumerate(j.recurrent) if not r] == [4, 12]
    assert j.kv_heads == tuple(0 if r else 8 for r in j.recurrent)
    assert j.ssm["state_size"] == 16 and j.ssm["inner_size"] == 8192
    q = _hyper(tmp_path, {"model_type": "qwen3_next", "num_hidden_layers": 8, "num_attention_heads": 16,
                          "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048,
                          "full_attention_interval": 4, "linear_num_value_heads": 32})
    assert [i for i, r in enumerate(q.recurrent) if not r] == [3, 7] and q.key_length == 256
    n = _hyper(tmp_path, {"model_type": "nemotron_h", "num_hidden_layers": 6, "num_attention_heads": 32,
                          "num_key_value_heads": 8, "hidden_size": 4096, "hybrid_override_pattern": "M-M*-M"})
    assert n.recurrent == (True, False, True, False, False, True)
    assert n.kv_heads == (0, 0, 0, 8, 0, 0)


def test_qwen3_next_gated_delta_net_state_from_config(tmp_path: Path) -> None:
    """Qwen3-Next's config states its linear-attention layers as linear_* keys, no Mamba numbers: the
    per-sequence state must still come out (vLLM's gated delta-net state, vllm/model_executor/layers/
    mamba/mamba_utils.py gated_delta_net_state_shape: conv (kernel - 1) x (2 x key_dim + value_dim),
    recurrent v_heads x k_dim x v_dim), not zero."""
    from gpu_launch.fit import kv

    q = _hyper(tmp_path, {"model_type": "qwen3_next", "num_hidden_layers": 48, "num_attention_heads": 16,
                          "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048, "full_attention_interval": 4,
                          "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                          "linear_num_key_heads": 16, "linear_num_value_heads": 32})
    conv = (4 - 1) * (2 * 16 * 128 + 32 * 128)
    state = 32 * 128 * 128
    # llama.cpp (llama-hparams.cpp n_embd_r/n_embd_s, llama-memory-recurrent.cpp: f32 rows) holds the same elements
    assert kv.kv_cache(q, 4096).state == 36 * (conv + state) * 4  # 36 linear-attention layers, one sequence


def test_mlc_folder(tmp_path: Path) -> None:
    from tests.model_fixtures import write_mlc_folder

    folder = tmp_path / "Llama-3-8B-q4f16_1-MLC"
    params = [("model.embed_tokens.q_weight", 1000), ("model.embed_tokens.q_scale", 100),
              ("model.layers.0.self_attn.qkv_proj.q_weight", 4000), ("model.layers.1.mlp.down_proj.q_weight", 3000),
              ("model.norm.weight", 64), ("lm_head.q_weight", 1200)]
    offset = write_mlc_folder(folder, params)
    facts = read_model(str(folder))
    assert (facts.format, facts.architecture, facts.dtype) == ("mlc", "llama", "q4f16_1")
    assert facts.weights.layers == (4000, 3000) and facts.weights.token_embedding == 1100
    assert facts.weights.output == 1264 and facts.hyper.kv_heads == (8, 8) and facts.hyper.context_length == 8192
    (folder / "tensor-cache.json").rename(folder / "ndarray-cache.json")  # the older name
    assert read_model(str(folder)).weights == facts.weights
    os.truncate(folder / "params_shard_0.bin", offset - 1)
    with pytest.raises(ModelFileError, match="lm_head.q_weight ends at byte"):
        read_model(str(folder))


def _cache_model(hub: Path, model_id: str, commit: str = "a" * 40, branch: str = "main") -> Path:
    repo = hub / f"models--{model_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    write_model(snap, LLAMA, llama_layout(3))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / branch).write_text(commit)
    return snap


def test_hugging_face_cache_locations(tmp_path: Path) -> None:
    for env, hub in ({"HF_HUB_CACHE": str(tmp_path / "c1")}, tmp_path / "c1"), \
                    ({"HF_HOME": str(tmp_path / "h")}, tmp_path / "h" / "hub"), \
                    ({"HOME": str(tmp_path / "home")}, tmp_path / "home" / ".cache" / "huggingface" / "hub"), \
                    ({"HUGGINGFACE_HUB_CACHE": str(tmp_path / "old")}, tmp_path / "old"), \
                    ({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": "/nonexistent"},
                     tmp_path / "xdg" / "huggingface" / "hub"):
        snap = _cache_model(hub, "meta-llama/Llama-3.1-8B")
        facts = read_model("meta-llama/Llama-3.1-8B", environ=env)
        assert facts.source == "meta-llama/Llama-3.1-8B" and facts.files[0] == str(snap / "config.json")
    both = {"HF_HUB_CACHE": str(tmp_path / "c1"), "HF_HOME": str(tmp_path / "elsewhere")}
    assert read_model("meta-llama/Llama-3.1-8B", environ=both).files[0].startswith(str(tmp_path / "c1"))


def test_hugging_face_revisions_and_misses(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    env = {"HF_HUB_CACHE": str(hub)}
    _cache_model(hub, "org/model", commit="b" * 40)
    _cache_model(hub, "org/model", commit="c" * 40, branch="v2")
    assert read_model("org/model@v2", environ=env).files[0].startswith(str(hub / "models--org--model" / "snapshots" / ("c" * 40)))
    assert read_model("org/model@bbbbbbb", environ=env).files[0].startswith(str(hub / "models--org--model" / "snapshots" / ("b" * 40)))
    with pytest.raises(ModelFileError) as err:
        read_model("org/absent", environ=env)
    assert "not in the local Hugging Face cache" in err.value.message and str(hub) in err.value.message
    assert "huggingface-cli download org/absent" in (err.value.hint or "")
    assert err.value.exit_code == ExitCode.BAD_FILE
    with pytest.raises(ModelFileError, match="revision v9 is not in the local"):
        read_model("org/model@v9", environ=env)
