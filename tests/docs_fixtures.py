"""The files the docs' examples name (model files, a snapshot), written at test time for tests/test_docs.py.

A block declares what it needs in its marker, ``<!-- docs-test: models=NAME:KIND,... files=NAME:KIND -->``
(see docs/index.md, "How the examples are checked"); each KIND below writes one thing:

- GGUF models are written by the real ``gguf`` writer (``tests/model_fixtures.write_gguf``): the header
  only, the file truncated up to its full size, so a 70B file is a hole of 42 GB costing a few KB.
- The safetensors model is a folder with ``config.json`` and one ``model.safetensors`` whose header is
  the format's own (u64 length + JSON, ``tests/model_fixtures.safetensors_header``), truncated up to its
  full size likewise: the real ``safetensors`` writer needs every tensor's data in memory (141 GB here),
  and the readers are checked against that writer in tests/test_modelfile_safetensors.py.
- A name of the form ``org/name`` goes into the private Hugging Face cache the block runs with
  (``HF_HUB_CACHE``), as ``huggingface-cli download`` would leave it; any other name is a path in the
  block's working directory.

The layouts are Llama 3.1's (8B and 70B: layers, heads, KV heads, feed-forward and vocabulary sizes),
in Q4_K_M-like types for GGUF and bf16 for safetensors, so the docs show the numbers of real models.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

VOCAB = 128256
MiB = 1 << 20


def _write_llama_gguf(path: Path, name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int) -> None:
    from model_fixtures import Gguf, llama_tensors, write_gguf  # needs the test extra `gguf`

    kv = {"general.name": name, "general.file_type": 15,  # 15: MOSTLY_Q4_K_M
          "llama.block_count": layers, "llama.context_length": 131072, "llama.embedding_length": hidden,
          "llama.feed_forward_length": ffn, "llama.attention.head_count": heads,
          "llama.attention.head_count_kv": kv_heads, "llama.rope.dimension_count": hidden // heads}
    # No tokenizer strings: the readers take the vocabulary from the embedding's shape, and they are
    # most of a real header's bytes (seconds to write, nothing to show).
    write_gguf(path, Gguf("llama", kv, llama_tensors(layers, hidden, heads, kv_heads, ffn, VOCAB)))


def llama_8b_gguf(path: Path) -> None:
    _write_llama_gguf(path, "Llama 3.1 8B", 32, 4096, 32, 8, 14336)


def llama_70b_gguf(path: Path) -> None:
    _write_llama_gguf(path, "Llama 3.1 70B", 80, 8192, 64, 8, 28672)


_CONFIG_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 80,
               "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 8192,
               "intermediate_size": 28672, "vocab_size": VOCAB, "max_position_embeddings": 131072,
               "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _safetensors_llama(folder: Path, config: dict[str, Any]) -> None:
    from model_fixtures import safetensors_header

    layers, hidden, ffn = config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]
    hd = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * hd
    bf = "BF16"
    t: dict[str, tuple[str, Sequence[int]]] = {"model.embed_tokens.weight": (bf, (VOCAB, hidden))}
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": (bf, (hidden,)),
                  p + "self_attn.q_proj.weight": (bf, (hidden, hidden)),
                  p + "self_attn.k_proj.weight": (bf, (kv, hidden)),
                  p + "self_attn.v_proj.weight": (bf, (kv, hidden)),
                  p + "self_attn.o_proj.weight": (bf, (hidden, hidden)),
                  p + "post_attention_layernorm.weight": (bf, (hidden,)),
                  p + "mlp.gate_proj.weight": (bf, (ffn, hidden)),
                  p + "mlp.up_proj.weight": (bf, (ffn, hidden)),
                  p + "mlp.down_proj.weight": (bf, (hidden, ffn))})
    t["model.norm.weight"] = (bf, (hidden,))
    t["lm_head.weight"] = (bf, (VOCAB, hidden))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    header = safetensors_header(t, {bf: 2})
    data = sum(2 * _count(shape) for _, shape in t.values())
    with open(folder / "model.safetensors", "wb") as f:
        f.write(header)
        f.truncate(len(header) + data)


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def llama_70b_safetensors(folder: Path) -> None:
    _safetensors_llama(folder, _CONFIG_70B)


def llama_8b_safetensors(folder: Path) -> None:
    """Llama-3.1-8B's layout in bf16 (14.96 GiB): 32 layers, 32 heads, 8 KV heads, a hole of 16 GB."""
    _safetensors_llama(folder, {**_CONFIG_70B, "num_hidden_layers": 32, "num_attention_heads": 32,
                                "hidden_size": 4096, "intermediate_size": 14336})


def llama_405b_safetensors(folder: Path) -> None:
    """Llama-3.1-405B's layout in bf16 (756 GiB): 126 layers, 128 heads, 8 KV heads; a hole of 811 GB."""
    _safetensors_llama(folder, {**_CONFIG_70B, "num_hidden_layers": 126, "num_attention_heads": 128,
                                "hidden_size": 16384, "intermediate_size": 53248})


def laptop_snapshot(path: Path) -> None:
    """A laptop: one 6 GiB GPU, nothing running, 16 GiB of host memory available."""
    gpu = {"index": 0, "uuid": "GPU-5d1e2c3b-0a4f-4e6d-9b8c-7a6f5e4d3c2b", "name": "NVIDIA GeForce RTX 3060 Laptop GPU",
           "pci_bus_id": "00000000:01:00.0", "memory_total_mib": 6144, "memory_used_mib": 0,
           "memory_free_mib": 6144, "utilization_gpu": 0, "temperature_c": 45, "processes": []}
    path.write_text(json.dumps({"schema": 1, "hostname": "laptop", "driver_version": "550.54.15",
                                "cuda_driver_version": "12.4", "host_memory_available_mib": 16384,
                                "gpus": [gpu]}, indent=1))


def gpt_oss_20b_gguf(path: Path) -> None:
    """gpt-oss-20b's header (alternating sliding layers of window 128), metadata only (tests/family_fixtures.py)."""
    from family_fixtures import gpt_oss_20b
    from model_fixtures import write_gguf

    write_gguf(path, gpt_oss_20b())


#: Training configs for docs/training-sizing.md, each naming ./Llama-3.1-8B (the llama-8b-safetensors kind).
TRAINING_CONFIGS = {
    "trl-sft": "model_name_or_path: ./Llama-3.1-8B\nuse_peft: true\nlora_r: 32\nmax_length: 4096\n"
               "per_device_train_batch_size: 2\n",
    "axolotl-qlora": "base_model: ./Llama-3.1-8B\nadapter: qlora\nload_in_4bit: true\nlora_r: 32\n"
                     "lora_target_linear: true\nsequence_len: 4096\nsample_packing: true\nmicro_batch_size: 2\n"
                     "gradient_checkpointing: true\nbf16: auto\nflash_attention: true\n",
    "llamafactory-lora": "model_name_or_path: ./Llama-3.1-8B\nstage: sft\nfinetuning_type: lora\nlora_rank: 16\n"
                         "cutoff_len: 2048\nper_device_train_batch_size: 4\nbf16: true\n",
    "accelerate-fsdp": "distributed_type: FSDP\nnum_processes: 4\nmixed_precision: bf16\nfsdp_config:\n"
                       "  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_version: 2\n",
    "accelerate-fsdp1": "distributed_type: FSDP\nnum_processes: 4\nmixed_precision: bf16\nfsdp_config:\n"
                        "  fsdp_sharding_strategy: FULL_SHARD\n",
    "torchtune-lora": "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n"
                      "  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']\n  lora_rank: 8\n  lora_alpha: 16\n"
                      "tokenizer:\n  max_seq_len: 4096\ncheckpointer:\n  checkpoint_dir: ./Llama-3.1-8B\n"
                      "batch_size: 2\ndtype: bf16\nloss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n"
                      "enable_activation_checkpointing: true\n",
}


def _config_writer(kind: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(TRAINING_CONFIGS[kind])


MODEL_KINDS: dict[str, Callable[[Path], None]] = {
    "llama-8b-q4": llama_8b_gguf,
    "gpt-oss-20b": gpt_oss_20b_gguf,
    "llama-70b-q4": llama_70b_gguf,
    "llama-70b-safetensors": llama_70b_safetensors,
    "llama-8b-safetensors": llama_8b_safetensors,
    "llama-405b-safetensors": llama_405b_safetensors,
}
FILE_KINDS: dict[str, Callable[[Path], None]] = {"laptop-snapshot": laptop_snapshot,
                                                 **{k: _config_writer(k) for k in TRAINING_CONFIGS}}


def is_hub_id(name: str) -> bool:
    """``org/name`` (no ``./``, no absolute path, one slash) names a model in the Hugging Face cache."""
    return not name.startswith((".", "/")) and name.count("/") == 1


def materialise(name: str, kind: str, workdir: Path, hub: Path, kinds: dict[str, Callable[[Path], None]]) -> Path:
    """Write ``kind`` as ``name``: a path under ``workdir``, or an ``org/name`` id in the cache ``hub``."""
    if kind not in kinds:
        raise AssertionError(f"unknown docs-test kind {kind!r}: one of {', '.join(sorted(kinds))}")
    if is_hub_id(name):
        repo = hub / f"models--{name.replace('/', '--')}"
        commit = "0" * 40
        target = repo / "snapshots" / commit
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        if not kind.endswith("-safetensors"):  # a GGUF repo: one file in the snapshot folder
            target = target / f"{name.split('/')[1]}-Q4_K_M.gguf"
        target.parent.mkdir(parents=True, exist_ok=True)
        kinds[kind](target)
        return target
    target = workdir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    kinds[kind](target)
    return target

