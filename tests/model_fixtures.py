"""Model files written at test time by the real writers (``gguf``, ``safetensors``), header only.

A GGUF fixture is written with ``GGUFWriter``'s three header calls and then truncated up to its full
size: readers see a complete file whose data region is a hole, so a 70B layout costs a few MB of
disk (most of it the tokenizer array) and no time writing weights.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

gguf = __import__("gguf")
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402


@dataclass
class T:
    """A tensor to declare: its name, its shape (outermost first, numpy order) and its ggml type."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType = GGMLQuantizationType.F16

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.qtype]
        return int(np.prod(self.shape, dtype=object)) // block * size


@dataclass
class Gguf:
    arch: str
    kv: dict[str, Any] = field(default_factory=dict)
    tensors: list[T] = field(default_factory=list)
    vocab: int = 0  # tokenizer.ggml.tokens length (strings written, never read by the reader)
    merges: int = 0


HEADER_END: dict[Path, int] = {}


def _add(writer: Any, key: str, value: Any) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        (writer.add_uint32 if value < 1 << 32 else writer.add_uint64)(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        writer.add_array(key, list(value))
    else:
        raise TypeError(key)


def write_gguf(path: Path, model: Gguf, *, split_max_tensors: int = 0) -> list[Path]:
    """Write ``model``'s header with GGUFWriter, truncated up to the full size; returns the files.

    ``HEADER_END[file]`` records where each file's header ends (the writer's position after the
    tensor infos), measured independently of the reader under test.
    """
    writer = gguf.GGUFWriter(path, model.arch, split_max_tensors=split_max_tensors)
    for key, value in model.kv.items():
        _add(writer, key, value)
    if model.vocab:
        writer.add_token_list([f"tok{i}" for i in range(model.vocab)])
        writer.add_token_types([1] * model.vocab)
    if model.merges:
        writer.add_token_merges([f"a{i} b{i}" for i in range(model.merges)])
    for t in model.tensors:
        writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype)  # not uint8: the shape is in elements
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    files = [Path(f.name) for f in writer.fout]
    for f, tensors in zip(writer.fout, writer.tensors):
        header = f.tell()
        HEADER_END[Path(f.name)] = header
        align = writer.data_alignment
        data = sum(writer.ggml_pad(ti.nbytes, align) for ti in tensors.values())
        f.truncate(writer.ggml_pad(header, align) + data)
    writer.close()
    return files


def header_end(path: Path) -> int:
    """Where the data region starts, by the reference reader."""
    return int(gguf.GGUFReader(path).data_offset)


def llama_tensors(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
                  qtype: GGMLQuantizationType = GGMLQuantizationType.Q4_K, tied: bool = False,
                  head_dim: int | None = None) -> list[T]:
    hd = head_dim or hidden // heads
    out = [T("token_embd.weight", (vocab, hidden), qtype)]
    for i in range(layers):
        p = f"blk.{i}."
        out += [T(p + "attn_norm.weight", (hidden,), GGMLQuantizationType.F32),
                T(p + "attn_q.weight", (heads * hd, hidden), qtype),
                T(p + "attn_k.weight", (kv_heads * hd, hidden), qtype),
                T(p + "attn_v.weight", (kv_heads * hd, hidden), GGMLQuantizationType.Q6_K),
                T(p + "attn_output.weight", (hidden, heads * hd), qtype),
                T(p + "ffn_norm.weight", (hidden,), GGMLQuantizationType.F32),
                T(p + "ffn_gate.weight", (ffn, hidden), qtype),
                T(p + "ffn_up.weight", (ffn, hidden), qtype),
                T(p + "ffn_down.weight", (hidden, ffn), GGMLQuantizationType.Q6_K)]
    out.append(T("output_norm.weight", (hidden,), GGMLQuantizationType.F32))
    if not tied:
        out.append(T("output.weight", (vocab, hidden), GGMLQuantizationType.Q6_K))
    return out


def llama70b(vocab: int = 128256) -> Gguf:
    """Llama-3.1-70B's layout in Q4_K_M-like types: 80 layers, 64 heads, 8 KV heads."""
    kv = {"general.name": "Llama 3.1 70B (header only)", "general.file_type": 15,
          "llama.block_count": 80, "llama.context_length": 131072, "llama.embedding_length": 8192,
          "llama.feed_forward_length": 28672, "llama.attention.head_count": 64,
          "llama.attention.head_count_kv": 8, "llama.rope.dimension_count": 128}
    return Gguf("llama", kv, llama_tensors(80, 8192, 64, 8, 28672, vocab), vocab=vocab, merges=280147)


def llama8b() -> Gguf:
    """Llama-3.1-8B's layout, types left to llama_tensors: 32 layers, 32 heads, 8 KV heads."""
    kv = {"general.name": "Llama 8B (header only)", "llama.block_count": 32, "llama.context_length": 131072,
          "llama.embedding_length": 4096, "llama.feed_forward_length": 14336, "llama.attention.head_count": 32,
          "llama.attention.head_count_kv": 8}
    return Gguf("llama", kv, llama_tensors(32, 4096, 32, 8, 14336, 128256))


def llama_pair(root: Path) -> dict[str, Path]:
    """The 8B and the 70B (a small vocabulary) as header-only GGUF files in ``root``: {"8b": ..., "70b": ...}."""
    write_gguf(root / "l8.gguf", llama8b())
    write_gguf(root / "l70.gguf", llama70b(vocab=1000))
    return {"8b": root / "l8.gguf", "70b": root / "l70.gguf"}


def safetensors_header(tensors: dict[str, tuple[str, Sequence[int]]], itemsize: dict[str, float]) -> bytes:
    """A safetensors header (u64 length + JSON) for ``{name: (dtype, shape)}``, offsets contiguous."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = int(int(np.prod(shape, dtype=object)) * itemsize[dtype])
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def all_quant_types() -> Iterable[GGMLQuantizationType]:
    return list(GGML_QUANT_SIZES)


MLC_CONFIG = {"model_type": "llama", "quantization": "q4f16_1", "context_window_size": 8192, "prefill_chunk_size": 2048,
              "tensor_parallel_shards": 1, "vocab_size": 128256,
              "model_config": {"hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
                               "num_key_value_heads": 8, "head_dim": 128, "context_window_size": 8192,
                               "vocab_size": 128256}}


def write_mlc_folder(folder: Path, params: Sequence[tuple[str, int]], config: dict[str, Any] | None = None) -> int:
    """An MLC-LLM compiled folder as mlc_llm's converter leaves it: ``mlc-chat-config.json`` and one
    ``params_shard_0.bin`` (a hole of the right size) indexed by ``tensor-cache.json`` (one record per
    parameter: name, shape, dtype, nbytes, byteOffset). Returns the shard's size."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mlc-chat-config.json").write_text(json.dumps(config or MLC_CONFIG))
    offset, records = 0, []
    for name, n in params:
        records.append({"name": name, "shape": [n], "dtype": "uint32", "format": "raw", "nbytes": n,
                        "byteOffset": offset})
        offset += n
    (folder / "params_shard_0.bin").write_bytes(b"")
    os.truncate(folder / "params_shard_0.bin", offset)
    (folder / "tensor-cache.json").write_text(json.dumps({"metadata": {}, "records": [
        {"dataPath": "params_shard_0.bin", "format": "raw-shard", "nbytes": offset, "records": records}]}))
    return offset
