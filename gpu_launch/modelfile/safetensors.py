"""safetensors headers (+ the model's config.json), read without the weights.

A safetensors file is a u64 little-endian header length, a JSON header
``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`` and the data; a
tensor's bytes are exactly ``end - begin``. A sharded model lists its files in
``model.safetensors.index.json`` (``weight_map``: tensor -> file). The hyperparameters come from
config.json beside the weights.
"""

from __future__ import annotations

import os

from gpu_launch.errors import ModelFileError
from gpu_launch.base import units
from gpu_launch.modelfile.bounded import (MIB, exists, joined, load_json, open_cursor, overlap, path_text, plain_name,
                                         read_small)
from gpu_launch.modelfile.facts import ModelFacts
from gpu_launch.modelfile.grouping import group
from gpu_launch.modelfile.hfconfig import architecture, hyper_from_config, text_config
from gpu_launch.base.records import dataclass
from gpu_launch.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["SafeTensor", "read_header", "read_safetensors_file", "read_safetensors_dir", "read_config"]

#: The safetensors library's own bound on the header (MAX_HEADER_SIZE, 100 MB): past it, not safetensors.
FORMAT_MAX_HEADER = 100_000_000
#: The most gpulaunch reads: huggingface_hub's bound on the headers it parses for the Hub's metadata
#: (constants.py, SAFETENSORS_MAX_HEADER_LENGTH, 25 MB). A real header is ~110 bytes a tensor: 25 MB is
#: 200,000+ tensors, where the largest single files hold a few thousand.
MAX_HEADER = 25_000_000
#: Tensors in one file, and JSON objects, lists and items (``{``, ``[``, ``,``) in its header: one
#: tensor is 1 object, 2 lists and 4 + dims items; the rest is room for ``__metadata__``. Counted as
#: the header is read, before it is parsed: 99.9 MB of ``{}`` cost 2.5 GB and 7.7 s before this.
MAX_TENSORS = 1 << 17
MAX_HEADER_ITEMS = 16 * MAX_TENSORS + (1 << 16)
#: The most dimensions a tensor may have (PyTorch's own limit is 64).
MAX_DIMS = 64
MAX_CONFIG = 16 * MIB
#: JSON items in a config.json: real ones hold hundreds (a per-layer list or two)
MAX_CONFIG_ITEMS = 1 << 18
#: ... and in model.safetensors.index.json: two per tensor (DeepSeek-V3 lists 91,000 tensors)
MAX_INDEX_ITEMS = 1 << 21
#: Bits per element of every dtype the safetensors format names.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4,
}
_TORCH_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F8_E4M3": "float8_e4m3fn",
                "F8_E5M2": "float8_e5m2", "F64": "float64", "I8": "int8", "U8": "uint8", "I32": "int32"}


@dataclass(frozen=True)
class SafeTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def read_header(path: str) -> tuple[list[SafeTensor], int]:
    """(tensors, bytes read) of one safetensors file; ModelFileError for anything unsound."""
    label = f"model file {printable(path)}"
    with open_cursor(path, label) as cur:
        cur.read_ahead = 0  # the length says where the header ends: read exactly that
        if cur.size < 8:
            raise cur.fail(f"not a safetensors file (only {cur.size} bytes)")
        n = cur.u64("the header length")
        if n > FORMAT_MAX_HEADER or n > cur.size - 8:
            raise cur.fail(f"not a safetensors file, or truncated (its header claims {n} bytes, the file has "
                           f"{cur.size - 8} after the length)", hint="the file may be incomplete: download it again")
        if n > MAX_HEADER:
            raise cur.fail(f"its header is {n} bytes, more than gpulaunch reads ({MAX_HEADER}, as huggingface_hub)",
                           hint="the file is damaged or crafted: a real header is a few hundred KB")
        raw = cur.take_json(n, "its header", MAX_HEADER_ITEMS)
        header = load_json(raw, label, "safetensors header")
        if not isinstance(header, dict):
            raise cur.fail(f"not a safetensors header (a JSON {type(header).__name__}, not an object)")
        count = len(header) - ("__metadata__" in header)
        if count > MAX_TENSORS:
            raise cur.fail(f"its header lists {count} tensors, more than gpulaunch reads ({MAX_TENSORS})",
                           hint="the file is damaged or crafted")
        tensors = _tensors(header, cur.size - 8 - n, label)
        return tensors, cur.bytes_read


def _tensors(header: dict[str, Any], data_size: int, label: str) -> list[SafeTensor]:
    out: list[SafeTensor] = []
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shown = printable(name)
        if not isinstance(info, dict):
            raise ModelFileError(f"{label}: tensor {shown} is not described by an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list):
            raise ModelFileError(f"{label}: tensor {shown} lacks dtype, shape or data_offsets")
        if len(shape) > MAX_DIMS or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63
                                            for d in shape):
            raise ModelFileError(f"{label}: tensor {shown} has a shape of {units.shown(shape)}: more than "
                                 f"{MAX_DIMS} dimensions, or a negative or non-integer one")
        if (len(offsets) != 2 or not all(isinstance(o, int) and not isinstance(o, bool) and 0 <= o < 2**63
                                         for o in offsets) or not offsets[0] <= offsets[1]):
            raise ModelFileError(f"{label}: tensor {shown} has data_offsets {units.shown(offsets)}")
        begin, end = offsets
        if end > data_size:
            raise ModelFileError(f"{label}: tensor {shown} ends at byte {end} of the data, past its end ({data_size})",
                                 hint="the file may be incomplete: download it again")
        elements = 1
        for d in shape:
            elements = min(elements * d, 2**64)  # past 2^64 elements no file can hold it: the count stays small
        bits = DTYPE_BITS.get(dtype)
        if bits is None:  # safetensors itself refuses the header (its Dtype enum, safetensors/src/tensor.rs)
            raise ModelFileError(f"{label}: tensor {shown} has the dtype {printable(dtype)[:20]!r}, which the "
                                 "safetensors format does not name", hint="the file is damaged or was written wrongly")
        if elements * bits != (end - begin) * 8:
            made = f"{elements * bits / 8:g}" if elements < 2**64 else "more than 2^64"
            raise ModelFileError(f"{label}: tensor {shown} is {end - begin} bytes, its shape and {printable(dtype)} "
                                 f"make {made}")
        spans.append((begin, end, name))
        out.append(SafeTensor(name, printable(dtype), tuple(shape), end - begin))
    shared = overlap(spans, "tensors")
    if shared:
        raise ModelFileError(f"{label}: {shared} of the data", hint="the file is damaged or crafted")
    return out


def read_config(folder: str) -> tuple[dict[str, Any], int]:
    """(config.json, bytes read) from ``folder``; ModelFileError when it is missing or not an object."""
    path = joined(folder, "config.json")
    label = f"config {printable(path)}"
    if not exists(path):
        raise ModelFileError(f"{label}: missing", hint="the layer and head counts come from it: put the model's "
                                                       "config.json beside its weights")
    raw = read_small(path, label, MAX_CONFIG, MAX_CONFIG_ITEMS)
    config = load_json(raw, label, "JSON object")
    if not isinstance(config, dict):
        raise ModelFileError(f"{label}: a JSON {type(config).__name__}, not an object")
    return config, len(raw)


def _facts(source: str, files: list[str], folder: str) -> ModelFacts:
    config, config_bytes = read_config(folder)
    text = text_config(config)
    label = f"config {printable(joined(folder, 'config.json'))}"
    hyper = hyper_from_config(text, label)
    tensors: list[SafeTensor] = []
    read = config_bytes
    for f in files:
        found, n = read_header(f)
        tensors += found
        read += n
    weights = group(((t.name, t.dtype, t.nbytes) for t in tensors), hyper.n_layers, hyper.nextn_layers)
    dtype = text.get("torch_dtype") or text.get("dtype")
    if isinstance(text.get("quantization_config"), dict):
        dtype = None  # torch_dtype names the unquantised parts; the weights' own types say more
    if not isinstance(dtype, str) and weights.by_type:
        top = max(weights.by_type, key=lambda k: weights.by_type[k])
        dtype = _TORCH_NAMES.get(top, top)
    name = config.get("_name_or_path")
    return ModelFacts(source=source, files=(joined(folder, "config.json"), *files), format="safetensors",
                      architecture=printable(architecture(text)), hyper=hyper, weights=weights, header_bytes=read,
                      name=printable(name) if isinstance(name, str) and name else None,
                      dtype=printable(dtype) if isinstance(dtype, str) else None)


def read_safetensors_file(source: str, path: str) -> ModelFacts:
    """One .safetensors file, with the config.json beside it (a shard of an indexed set reads the set)."""
    parent, name = os.path.split(path_text(path))
    folder = path_text(parent)  # Path(path).parent
    if exists(joined(folder, "model.safetensors.index.json")) and name in _index_files(folder):
        return read_safetensors_dir(source, folder)
    return _facts(source, [path], folder)


def _index_files(folder: str) -> list[str]:
    path = joined(folder, "model.safetensors.index.json")
    label = f"index {printable(path)}"
    index = load_json(read_small(path, label, 64 * MIB, MAX_INDEX_ITEMS), label)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ModelFileError(f"{label}: no weight_map of tensor names to files")
    return [plain_name(n, label, "its weight_map names the shard") for n in sorted(set(weight_map.values()))]


def read_safetensors_dir(source: str, folder: str) -> ModelFacts:
    """config.json + model.safetensors, or the shards model.safetensors.index.json lists."""
    folder = path_text(os.fspath(folder))
    if exists(joined(folder, "model.safetensors.index.json")):
        names = _index_files(folder)
        missing = [n for n in names if not exists(joined(folder, n))]
        if missing:
            raise ModelFileError(f"model directory {printable(folder)}: {len(missing)} of the {len(names)} "
                                 f"shards its index lists are missing (first: {printable(missing[0])})",
                                 hint="download every shard")
    else:
        found = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        names = [n for n in found if not n.startswith(("adapter_", "consolidated"))] or found
    return _facts(source, [joined(folder, n) for n in names], folder)
