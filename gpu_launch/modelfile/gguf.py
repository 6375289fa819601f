"""GGUF headers (llama.cpp's format), read without the weights and without the ``gguf`` package.

The layout (v2/v3, little-endian): magic ``GGUF``, version u32, tensor count u64, key/value count
u64; the key/value pairs; one info record per tensor (name, dims innermost first, ggml type,
offset into the data region); padding to ``general.alignment``; the data. Only the header is read:
tokenizer arrays (100k+ strings) are walked past without decoding a string, numeric arrays are
jumped over, and every count is checked against the file's size before anything is allocated.

The reference reader (``gguf.GGUFReader``) maps the whole file and builds numpy views of every
field, which takes seconds on a 152k-token vocabulary; this one takes milliseconds
(``benchmarks/model_headers.py``).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.bounded import Cursor, open_cursor
from gpu_launch.modelfile.facts import Hyper, ModelFacts, Weights
from gpu_launch.text import printable

__all__ = ["GGML_TYPES", "GgufTensor", "GgufHeader", "read_header", "read_gguf", "split_parts", "is_gguf"]

MAGIC = b"GGUF"
#: ggml tensor types: id -> (name, elements per block, bytes per block). The same numbers as
#: ``gguf.constants.GGML_QUANT_SIZES`` (tests/test_modelfile_gguf.py checks every type the
#: installed ``gguf`` package knows). Ids 4, 5 (Q4_2/Q4_3) and 31-33, 36-38 (Q4_0_4_4 & co., the
#: IQ4_NL repacks) were removed from ggml and are refused as unknown.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}

#: ``general.file_type`` (llama.cpp's ``llama_ftype``): the quantisation mix as users name it.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
    18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
    25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
    32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}

# GGUF value types: id -> struct format of one element (strings and arrays are handled apart)
_STRING, _ARRAY = 8, 9
_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"), 1: struct.Struct("<b"), 2: struct.Struct("<H"), 3: struct.Struct("<h"),
    4: struct.Struct("<I"), 5: struct.Struct("<i"), 6: struct.Struct("<f"), 7: struct.Struct("<?"),
    10: struct.Struct("<Q"), 11: struct.Struct("<q"), 12: struct.Struct("<d"),
}
_ARRAY_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

MAX_DIMS = 4  # GGML_MAX_DIMS
#: Strings longer than this are skipped, never decoded (a general.description, a chat template):
#: nothing gpulaunch needs is that long. Keys and tensor names longer than it are refused.
MAX_KEPT_STRING = 4096
#: Numeric arrays up to this many elements are kept (per-layer head counts, sliding patterns).
MAX_KEPT_ARRAY = 65536
MAX_NESTING = 3
_INT64_MAX = 2**63 - 1
_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class GgufTensor:
    name: str
    dims: tuple[int, ...]  # innermost first, as the file stores them
    type_id: int
    offset: int  # relative to the data region
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.type_id][0]


@dataclass(frozen=True)
class GgufHeader:
    """One GGUF file's header: its key/values (scalars, short strings, small numeric arrays),
    the length of every array (kept or not), and its tensors' infos."""

    path: str
    version: int
    kv: dict[str, Any]
    array_lengths: dict[str, int]
    tensors: tuple[GgufTensor, ...]
    data_start: int
    file_size: int
    bytes_read: int


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


# -- the header ------------------------------------------------------------------------------


def _string(cur: Cursor, what: str, keep: bool = True, strict: bool = False) -> str | None:
    """A length-prefixed string, or None when skipped (``keep`` false, or longer than MAX_KEPT_STRING).

    ``strict``: a name (key, tensor) must be UTF-8; a value is decoded leniently, as llama.cpp
    does not check it either (an odd byte in a description must not make a model unreadable).
    """
    n = cur.u64(what)
    if n > cur.remaining:
        raise cur.fail(f"corrupt header: {what} claims {n} bytes, more than the file holds",
                       hint="the file is damaged or not a GGUF file")
    if not keep or n > MAX_KEPT_STRING:
        cur.skip(n, what)
        return None
    raw = cur.take(n, what)
    if not strict:
        return raw.decode("utf-8", "replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise cur.fail(f"corrupt header: {what} is not UTF-8 ({printable(raw[:40].decode('utf-8', 'replace'))!r})",
                       hint="the file is damaged or not a GGUF file") from None


def _name(cur: Cursor, what: str) -> str:
    n_at = cur.pos
    name = _string(cur, what, strict=True)
    if name is None:
        cur.pos = n_at
        raise cur.fail(f"corrupt header: {what} at byte {n_at} is longer than {MAX_KEPT_STRING} bytes")
    return name


def _value(cur: Cursor, vtype: int, key: str, depth: int = 0) -> tuple[Any, int | None]:
    """(value or None when skipped, array length or None) of one value of type ``vtype``."""
    if vtype in _SCALARS:
        return cur.unpack(_SCALARS[vtype], f"the value of {key}"), None
    if vtype == _STRING:
        return _string(cur, f"the value of {key}", keep=not key.startswith("tokenizer.")), None
    if vtype != _ARRAY:
        raise cur.fail(f"corrupt header: {key} has unknown value type {vtype}",
                       hint="the file is damaged, or written by a newer GGUF version")
    etype = cur.u32(f"the array type of {key}")
    count = cur.u64(f"the array length of {key}")
    if etype in _SCALARS:
        size = _SCALARS[etype].size
        cur.count(count, size, f"the length of array {key}")
        if count <= MAX_KEPT_ARRAY and not key.startswith("tokenizer."):
            off = cur.need(count * size, f"array {key}")
            cur.pos += count * size
            return struct.unpack_from(f"<{count}{_ARRAY_CODES[etype]}", cur.buf, off), count
        cur.skip(count * size, f"array {key}")
        return None, count
    if etype == _STRING:
        cur.count(count, 8, f"the length of array {key}")
        cur.skip_strings(count, f"array {key}")
        return None, count
    if etype == _ARRAY:
        if depth >= MAX_NESTING:
            raise cur.fail(f"corrupt header: arrays nested more than {MAX_NESTING} deep in {key}")
        cur.count(count, 12, f"the length of array {key}")
        for _ in range(count):
            _value(cur, _ARRAY, key, depth + 1)
        return None, count
    raise cur.fail(f"corrupt header: array {key} has unknown element type {etype}",
                   hint="the file is damaged, or written by a newer GGUF version")


def _tensor(cur: Cursor, index: int) -> GgufTensor:
    name = _name(cur, f"the name of tensor {index}")
    n_dims = cur.u32(f"the dimensions of tensor {name}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(f"corrupt header: tensor {printable(name)} has {n_dims} dimensions (ggml allows 1 to {MAX_DIMS})")
    off = cur.need(8 * n_dims + 12, f"tensor {name}")
    dims = struct.unpack_from(f"<{n_dims}Q", cur.buf, off)
    type_id, offset = struct.unpack_from("<IQ", cur.buf, off + 8 * n_dims)
    cur.pos += 8 * n_dims + 12
    elements = 1
    for d in dims:
        if d > _INT64_MAX:  # a negative int64 read as unsigned
            raise cur.fail(f"corrupt header: tensor {printable(name)} has a negative or huge dimension ({d})")
        elements *= d
    if elements > _INT64_MAX:
        raise cur.fail(f"corrupt header: tensor {printable(name)} has {elements} elements, more than ggml can address")
    if type_id not in GGML_TYPES:
        raise cur.fail(f"tensor {printable(name)} has ggml type {type_id}, unknown to this gpulaunch",
                       hint="the file may use a type newer than this gpulaunch; upgrade gpulaunch")
    _, block, size = GGML_TYPES[type_id]
    if dims[0] % block:
        raise cur.fail(f"corrupt header: tensor {printable(name)} has rows of {dims[0]} elements, "
                       f"not a multiple of its type's block of {block}")
    return GgufTensor(name, tuple(dims), type_id, offset, elements // block * size)


def read_header(path: str, label: str | None = None) -> GgufHeader:
    """The header of one GGUF file; ModelFileError for anything that is not a sound GGUF header."""
    label = label or f"model file {printable(path)}"
    with open_cursor(path, label) as cur:
        if cur.size < 24:
            raise cur.fail(f"not a GGUF file (only {cur.size} bytes)")
        magic = cur.take(4, "the magic")
        if magic != MAGIC:
            raise cur.fail(f"not a GGUF file (it starts with {magic!r}, not b'GGUF')",
                           hint="name a .gguf file, a safetensors file or a model directory")
        version = cur.u32()
        if version in (2, 3):
            pass
        elif version & 0xFFFF == 0 and version >> 16:
            raise cur.fail("a big-endian GGUF file: not supported", hint="use the little-endian file")
        else:
            raise cur.fail(f"GGUF version {version} is not supported (versions 2 and 3 are)",
                           hint="convert it again with a current llama.cpp" if version < 2 else None)
        n_tensors = cur.count(cur.u64(), 24, "the tensor count")
        n_kv = cur.count(cur.u64(), 13, "the key/value count")
        kv: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for i in range(n_kv):
            key = _name(cur, f"key {i}")
            vtype = cur.u32(f"the type of {key}")
            value, length = _value(cur, vtype, key)
            if value is not None:
                kv[key] = value
            if length is not None:
                lengths[key] = length
        tensors = [_tensor(cur, i) for i in range(n_tensors)]
        align = kv.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise cur.fail(f"corrupt header: general.alignment is {align!r}, not a power of two")
        data_start = -(-cur.pos // align) * align
        _check_extents(cur, tensors, data_start, align)
        return GgufHeader(path, version, kv, lengths, tuple(tensors), data_start, cur.size, cur.bytes_read)


def _check_extents(cur: Cursor, tensors: list[GgufTensor], data_start: int, align: int) -> None:
    """Every tensor lies inside the file, aligned, and no two overlap."""
    data_size = cur.size - data_start
    end = 0
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.offset % align:
            raise cur.fail(f"corrupt header: tensor {printable(t.name)} is at offset {t.offset}, "
                           f"not a multiple of the alignment {align}")
        if t.offset + t.nbytes > data_size:
            raise cur.fail(f"truncated or corrupt: tensor {printable(t.name)} ends at byte "
                           f"{data_start + t.offset + t.nbytes}, past the end of the file ({cur.size} bytes)",
                           hint="the file may be incomplete: download it again")
        if t.offset < end:
            raise cur.fail(f"corrupt header: tensor {printable(t.name)} overlaps the tensor before it")
        end = t.offset + t.nbytes


# -- split sets ------------------------------------------------------------------------------


def split_parts(path: str) -> list[str]:
    """All parts of the split set ``path`` belongs to (``x-00001-of-00003.gguf``), else [path]."""
    m = _SPLIT_RE.match(Path(path).name)
    if not m:
        return [path]
    count = int(m["count"])
    if not 1 <= int(m["no"]) <= count:
        raise ModelFileError(f"model file {printable(path)}: part {int(m['no'])} of {count} makes no sense")
    parent = Path(path).parent
    parts = [str(parent / f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p for p in parts if not Path(p).exists()]
    if missing:
        raise ModelFileError(f"split GGUF {printable(parts[0])}: {len(missing)} of its {count} parts are missing "
                             f"(first: {printable(Path(missing[0]).name)})",
                             hint="download every part of the set into the same directory")
    return parts


def _check_split(headers: list[GgufHeader]) -> None:
    count = len(headers)
    for i, h in enumerate(headers):
        declared = h.kv.get("split.count", 1 if count == 1 else None)
        if declared != count or h.kv.get("split.no", 0) != i:
            raise ModelFileError(f"split GGUF {printable(h.path)}: its header says part {h.kv.get('split.no')} "
                                 f"of {declared}, its name part {i + 1} of {count}",
                                 hint="the parts come from different sets, or were renamed")
    total = headers[0].kv.get("split.tensors.count")
    have = sum(len(h.tensors) for h in headers)
    if count > 1 and total is not None and total != have:
        raise ModelFileError(f"split GGUF {printable(headers[0].path)}: {have} tensors in its parts, "
                             f"its header says {total}")


# -- facts -----------------------------------------------------------------------------------

#: llama.cpp's interleaved sliding-window patterns, for the architectures whose GGUF need not carry
#: one: set_swa_pattern(n) marks layer i sliding when i % n < n - 1 (every n-th layer global;
#: src/llama-hparams.cpp, llama_hparams::set_swa_pattern). Periods from llama.cpp's hparams loaders:
#: src/llama-model.cpp, llama_model::load_hparams (LLM_ARCH_GEMMA3: 6, LLM_ARCH_GEMMA3N: 5,
#: LLM_ARCH_COHERE2: 4), src/models/gemma2.cpp llama_model_gemma2::load_arch_hparams (2),
#: src/models/openai-moe.cpp llama_model_openai_moe::load_arch_hparams (gpt-oss: 2) and
#: src/models/gemma-embedding.cpp (6). The newer loaders let a GGUF key
#: ``attention.sliding_window_pattern`` override the period (or, as an array, give one bool per
#: layer: ml.get_key_or_arr), which _sliding() honours for every architecture.
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "gpt-oss": 2, "gemma-embedding": 6}
#: Gemma 2's window when its GGUF does not state one (llama.cpp src/models/gemma2.cpp).
SWA_DEFAULT = {"gemma2": 4096}
#: Architectures whose every layer is recurrent (a per-sequence state, no per-token KV).
RECURRENT = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
#: Hybrids whose layers are all recurrent except every ``full_attention_interval``-th (default 4),
#: the trailing NextN/MTP layers excepted (llama.cpp, load_hparams for LLM_ARCH_QWEN3NEXT / QWEN35).
INTERVAL_HYBRIDS = {"qwen3next", "qwen35", "qwen35moe"}
#: Hybrids with three kinds of layer: attention (kv > 0), MLP only (kv = 0, ffn > 0) and SSM (both 0):
#: llama.cpp marks a layer recurrent iff n_head_kv(i) == 0 && n_ff(i) == 0 (its Nemotron-H loader).
KV_AND_FFN_HYBRIDS = {"nemotron_h", "nemotron_h_moe"}
#: Hybrids whose every layer runs attention and an SSM side by side (llama.cpp src/models/falcon-h1.cpp).
PARALLEL_HYBRIDS = {"falcon-h1"}


def _per_layer(value: Any, n: int, key: str, label: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        if len(value) != n:
            raise ModelFileError(f"{label}: {key} has {len(value)} entries for {n} layers")
        return tuple(int(v) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (int(value),) * n
    raise ModelFileError(f"{label}: {key} is {type(value).__name__}, not a number")


def _int(kv: dict[str, Any], key: str, label: str) -> int | None:
    value = kv.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelFileError(f"{label}: {key} is {value!r}, not a count")
    return value


def _sliding(arch: str, kv: dict[str, Any], n: int, label: str) -> tuple[tuple[bool, ...], int | None]:
    window = _int(kv, f"{arch}.attention.sliding_window", label) or SWA_DEFAULT.get(arch)
    pattern = kv.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, tuple):
        if len(pattern) != n:
            raise ModelFileError(f"{label}: {arch}.attention.sliding_window_pattern has {len(pattern)} "
                                 f"entries for {n} layers")
        return tuple(bool(p) for p in pattern), window
    period = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) else SWA_PERIOD.get(arch)
    if not window or period is None:
        return (), window
    return tuple(period == 0 or i % period < period - 1 for i in range(n)), window


def _hyper(h: GgufHeader, arch: str, label: str) -> Hyper:
    kv = h.kv
    p = f"{arch}."
    n_all = _int(kv, p + "block_count", label)
    if n_all is None:
        raise ModelFileError(f"{label}: no {p}block_count in the header", hint="is this a language model?")
    if n_all > 100_000:
        raise ModelFileError(f"{label}: {p}block_count is {n_all}")
    # block_count includes the multi-token-prediction blocks after the trunk (DeepSeek V3, GLM-4.5,
    # Qwen3-Next): they are not layers the model runs per token, so Hyper counts the trunk only.
    nextn = min(_int(kv, p + "nextn_predict_layers", label) or 0, n_all)
    n = n_all - nextn
    heads = _per_layer(kv.get(p + "attention.head_count"), n_all, p + "attention.head_count", label) or (0,) * n
    kv_heads = (_per_layer(kv.get(p + "attention.head_count_kv"), n_all, p + "attention.head_count_kv", label)
                or heads)
    heads, kv_heads = heads[:n], kv_heads[:n]
    hidden = _int(kv, p + "embedding_length", label)
    n_heads = max(heads, default=0)
    per_head = hidden // n_heads if hidden and n_heads else 0
    key_length = _int(kv, p + "attention.key_length", label)
    value_length = _int(kv, p + "attention.value_length", label)
    recurrent: tuple[bool, ...] = ()
    if arch in RECURRENT:
        recurrent, kv_heads = (True,) * n, (0,) * n
    elif arch in INTERVAL_HYBRIDS:
        interval = _int(kv, p + "full_attention_interval", label) or 4
        recurrent = tuple((i + 1) % interval != 0 for i in range(n))
        kv_heads = tuple(0 if r else k for r, k in zip(recurrent, kv_heads))
    elif arch in PARALLEL_HYBRIDS:
        recurrent = (True,) * n
    elif arch in KV_AND_FFN_HYBRIDS:
        ffn = _per_layer(kv.get(p + "feed_forward_length"), n_all, p + "feed_forward_length", label) or (1,) * n
        recurrent = tuple(k == 0 and f == 0 for k, f in zip(kv_heads, ffn[:n]))
    elif 0 in kv_heads and any(kv_heads):
        recurrent = tuple(k == 0 for k in kv_heads)
    sliding, window = _sliding(arch, kv, n_all, label)
    sliding = sliding[:n]
    kv_lora = _int(kv, p + "attention.kv_lora_rank", label)
    ssm = {k[len(p) + 4:]: v for k, v in kv.items()
           if k.startswith(p + "ssm.") and isinstance(v, int) and not isinstance(v, bool)}
    ssm.update({k[len(p):]: v for k, v in kv.items()
                if k.startswith((p + "wkv.", p + "shortconv.")) and isinstance(v, int) and not isinstance(v, bool)})
    vocab = _int(kv, p + "vocab_size", label) or h.array_lengths.get("tokenizer.ggml.tokens")
    return Hyper(
        n_layers=n, n_heads=n_heads, kv_heads=kv_heads,
        key_length=key_length if key_length is not None else per_head,
        value_length=value_length if value_length is not None else per_head,
        hidden_size=hidden, context_length=_int(kv, p + "context_length", label), vocab_size=vocab,
        sliding_window=window, sliding=sliding,
        kv_lora_rank=kv_lora, rope_head_dim=_int(kv, p + "rope.dimension_count", label) if kv_lora else None,
        recurrent=recurrent, ssm=ssm, expert_count=_int(kv, p + "expert_count", label), nextn_layers=nextn,
    )


_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def _weights(tensors: list[GgufTensor], n_layers: int) -> Weights:
    layers = [0] * n_layers
    embedding = output = other = 0
    by_type: dict[str, int] = {}
    has_output = False
    for t in tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.nbytes
        m = _BLOCK_RE.match(t.name)
        if m and int(m[1]) < n_layers:
            layers[int(m[1])] += t.nbytes
        elif t.name.startswith("token_embd"):
            embedding += t.nbytes
        elif t.name.startswith(("output.", "output_norm.")):
            output += t.nbytes
            has_output = has_output or t.name.startswith("output.weight")
        else:
            other += t.nbytes
    return Weights(layers=tuple(layers), token_embedding=embedding, output=output, other=other,
                   tied_embeddings=not has_output and embedding > 0, by_type=by_type)


def read_gguf(source: str, path: str) -> ModelFacts:
    """The facts of the GGUF file (or split set) at ``path``; ``source`` is what the user named."""
    parts = split_parts(path)
    headers = [read_header(p) for p in parts]
    _check_split(headers)
    first = headers[0]
    label = f"model file {printable(first.path)}"
    arch = first.kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(f"{label}: no general.architecture in the header", hint="is this a model GGUF?")
    hyper = _hyper(first, arch, label)
    weights = _weights([t for h in headers for t in h.tensors], hyper.n_layers)
    name = first.kv.get("general.name")
    file_type = first.kv.get("general.file_type")
    return ModelFacts(
        source=source, files=tuple(parts), format="gguf", architecture=printable(arch), hyper=hyper,
        weights=weights, header_bytes=sum(h.bytes_read for h in headers),
        name=printable(name) if isinstance(name, str) else None,
        dtype=FILE_TYPES.get(file_type) if isinstance(file_type, int) else None,
    )
