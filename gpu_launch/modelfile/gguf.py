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

import os
import re
import struct

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.bounded import Cursor, exists, joined, open_cursor, overlap, path_text
from gpu_launch.base.records import dataclass
from gpu_launch.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["GGML_TYPES", "GgufTensor", "GgufHeader", "read_header", "split_parts", "check_split", "is_gguf", "FILE_TYPES"]

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

_U32 = 4
_TYPE_NAMES = {0: "a u8", 1: "an i8", 2: "a u16", 3: "an i16", 4: "a u32", 5: "an i32", 6: "an f32", 7: "a bool",
               8: "a string", 9: "an array", 10: "a u64", 11: "an i64", 12: "an f64"}

MAX_DIMS = 4  # GGML_MAX_DIMS
#: Strings longer than this are skipped, never decoded (a general.description, a chat template):
#: nothing gpulaunch needs is that long. Keys and tensor names longer than it are refused.
MAX_KEPT_STRING = 4096
#: Numeric arrays up to this many elements are kept (per-layer head counts, sliding patterns).
MAX_KEPT_ARRAY = 65536
MAX_NESTING = 3

# What one header may make gpulaunch read, beyond what the file's size allows. llama.cpp's loader
# (ggml/src/gguf.cpp, gguf_init_from_reader) bounds the tensor and key/value counts only by what it
# can index (SIZE_MAX / sizeof(gguf_tensor_info)), a string at GGUF_MAX_STRING_LENGTH and an array
# at GGUF_MAX_ARRAY_ELEMENTS (both 2^30), and refuses an empty or repeated key, a repeated tensor
# name and a general.alignment that is not a u32. Those bounds suit C++, where a record costs
# nanoseconds; here one costs microseconds and ~200 bytes, and a file can really hold 15 million
# records (500 MB): 51 s and 2.9 GB before these caps (benchmarks/hostile_models.py). So the counts
# are capped far above any published model instead, and checked before anything is read:
#: tensors in one file: the largest published GGUF models hold about a thousand (DeepSeek-V3: 61 layers,
#: its experts merged into one tensor a layer)
MAX_TENSORS = 65536
#: key/value pairs in one file: real ones hold 20-60 (DeepSeek-V3: 46)
MAX_KEYS = 65536
#: llama.cpp's GGUF_MAX_STRING_LENGTH and GGUF_MAX_ARRAY_ELEMENTS
MAX_STRING = MAX_ARRAY = 1 << 30
#: strings (and nested arrays) walked one by one, all arrays of a header together: the largest
#: vocabularies, merges included (Llama 3: 128,256 + 280,147), use under a fifth; 4 Mi take ~0.4 s
MAX_WALKED = 1 << 22
#: bytes of keys, tensor names and kept string values decoded: a real header has tens of KB of them
MAX_KEPT_TEXT = 16 << 20
#: numbers kept from numeric arrays (per-layer head counts and patterns: a few thousand in a real file)
MAX_KEPT_NUMBERS = 1 << 18
#: the least a tensor record takes (name length, no name, 1 dimension, type, offset) and a key/value
#: pair (key length, a 1-byte key, type, a 1-byte value): the counts are held to the file's size with them
MIN_TENSOR_INFO = 8 + 4 + 8 + 4 + 8
MIN_KEY_VALUE = 8 + 1 + 4 + 1
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


class _Budget:
    """What is left of the caps on one header (MAX_WALKED, MAX_KEPT_TEXT, MAX_KEPT_NUMBERS)."""

    def __init__(self) -> None:
        self.walked = MAX_WALKED
        self.text = MAX_KEPT_TEXT
        self.numbers = MAX_KEPT_NUMBERS

    def spend(self, cur: Cursor, what: str, kind: str, n: int) -> None:
        """Take ``n`` from the ``kind`` cap for ``what``; one error line when it runs out."""
        left = getattr(self, kind) - n
        if left < 0:
            raise cur.fail(f"corrupt header: {what} takes gpulaunch past its cap on {_CAPS[kind]} in one header",
                           hint="the file is damaged or crafted: no published model comes near")
        setattr(self, kind, left)


_CAPS = {"walked": f"array elements walked one by one ({MAX_WALKED})",
         "text": f"names and text kept ({MAX_KEPT_TEXT} bytes)",
         "numbers": f"numbers kept from arrays ({MAX_KEPT_NUMBERS})"}


def _string(cur: Cursor, what: str, budget: _Budget, keep: bool = True, strict: bool = False) -> str | None:
    """A length-prefixed string, or None when skipped (``keep`` false, or longer than MAX_KEPT_STRING).

    ``strict``: a name (key, tensor) must be UTF-8; a value is decoded leniently, as llama.cpp
    does not check it either (an odd byte in a description must not make a model unreadable).
    """
    n = cur.u64(what)
    if n > cur.remaining:
        raise cur.fail(f"corrupt header: {what} claims {n} bytes, more than the file holds",
                       hint="the file is damaged or not a GGUF file")
    if n > MAX_STRING:
        raise cur.fail(f"corrupt header: {what} claims {n} bytes, more than llama.cpp reads ({MAX_STRING})",
                       hint="the file is damaged or crafted")
    if not keep or n > MAX_KEPT_STRING:
        cur.skip(n, what)
        return None
    budget.spend(cur, what, "text", n)
    raw = cur.take(n, what)
    if not strict:
        return raw.decode("utf-8", "replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise cur.fail(f"corrupt header: {what} is not UTF-8 ({printable(raw[:40].decode('utf-8', 'replace'))!r})",
                       hint="the file is damaged or not a GGUF file") from None


def _name(cur: Cursor, what: str, budget: _Budget) -> str:
    n_at = cur.pos
    name = _string(cur, what, budget, strict=True)
    if name is None:
        cur.pos = n_at
        raise cur.fail(f"corrupt header: {what} at byte {n_at} is longer than {MAX_KEPT_STRING} bytes")
    return name


def _value(cur: Cursor, vtype: int, key: str, budget: _Budget, depth: int = 0) -> tuple[Any, int | None]:
    """(value or None when skipped, array length or None) of one value of type ``vtype``."""
    if vtype in _SCALARS:
        return cur.unpack(_SCALARS[vtype], f"the value of {key}"), None
    if vtype == _STRING:
        return _string(cur, f"the value of {key}", budget, keep=not key.startswith("tokenizer.")), None
    if vtype != _ARRAY:
        raise cur.fail(f"corrupt header: {key} has unknown value type {vtype}",
                       hint="the file is damaged, or written by a newer GGUF version")
    etype = cur.u32(f"the array type of {key}")
    count = cur.u64(f"the array length of {key}")
    if etype in _SCALARS:
        size = _SCALARS[etype].size
        cur.count(count, size, f"the length of array {key}", most=MAX_ARRAY)
        if count <= MAX_KEPT_ARRAY and not key.startswith("tokenizer."):
            budget.spend(cur, f"array {key} ({count} numbers)", "numbers", count)
            off = cur.need(count * size, f"array {key}")
            cur.pos += count * size
            return struct.unpack_from(f"<{count}{_ARRAY_CODES[etype]}", cur.buf, off), count
        cur.skip(count * size, f"array {key}")
        return None, count
    if etype == _STRING:
        cur.count(count, 8, f"the length of array {key}", most=MAX_ARRAY)
        budget.spend(cur, f"array {key} ({count} strings)", "walked", count)
        cur.skip_strings(count, f"array {key}")
        return None, count
    if etype == _ARRAY:
        if depth >= MAX_NESTING:
            raise cur.fail(f"corrupt header: arrays nested more than {MAX_NESTING} deep in {key}")
        cur.count(count, 12, f"the length of array {key}", most=MAX_ARRAY)
        budget.spend(cur, f"array {key} ({count} arrays)", "walked", count)
        for _ in range(count):
            _value(cur, _ARRAY, key, budget, depth + 1)
        return None, count
    raise cur.fail(f"corrupt header: array {key} has unknown element type {etype}",
                   hint="the file is damaged, or written by a newer GGUF version")


def _tensor(cur: Cursor, index: int, budget: _Budget) -> GgufTensor:
    name = _name(cur, f"the name of tensor {index}", budget)
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


def _key_values(cur: Cursor, n_kv: int, budget: _Budget) -> tuple[dict[str, Any], dict[str, int]]:
    """The key/value pairs: (kept values, array lengths); a key twice, an empty key or a
    general.alignment that is not a u32 refused, as llama.cpp refuses them (gguf_init_from_reader)."""
    kv: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    seen: set[str] = set()
    for i in range(n_kv):
        at = cur.pos
        key = _name(cur, f"key {i}", budget)
        if not key:
            raise cur.fail(f"corrupt header: key {i} (at byte {at}) is empty")
        if key in seen:
            raise cur.fail(f"corrupt header: key {printable(key)} appears twice")
        seen.add(key)
        vtype = cur.u32(f"the type of {key}")
        if key == "general.alignment" and vtype != _U32:
            raise cur.fail(f"corrupt header: general.alignment is {_TYPE_NAMES.get(vtype, f'of type {vtype}')}, "
                           "not a u32 (llama.cpp reads it only as one)")
        value, length = _value(cur, vtype, key, budget)
        if value is not None:
            kv[key] = value
        if length is not None:
            lengths[key] = length
    return kv, lengths


def _tensors(cur: Cursor, n_tensors: int, budget: _Budget) -> list[GgufTensor]:
    tensors: list[GgufTensor] = []
    first: dict[str, int] = {}
    for i in range(n_tensors):
        t = _tensor(cur, i, budget)
        if t.name in first:  # llama.cpp refuses it too: a name must say which tensor it is
            raise cur.fail(f"corrupt header: tensors {first[t.name]} and {i} are both named {printable(t.name)}")
        first[t.name] = i
        tensors.append(t)
    return tensors


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
        n_tensors = cur.count(cur.u64(), MIN_TENSOR_INFO, "the tensor count", most=MAX_TENSORS)
        n_kv = cur.count(cur.u64(), MIN_KEY_VALUE, "the key/value count", most=MAX_KEYS)
        budget = _Budget()
        kv, lengths = _key_values(cur, n_kv, budget)
        tensors = _tensors(cur, n_tensors, budget)
        align = kv.get("general.alignment", 32)
        if align <= 0 or align & (align - 1):
            raise cur.fail(f"corrupt header: general.alignment is {align}, not a power of two")
        data_start = -(-cur.pos // align) * align  # the data starts at the next multiple: up, never down
        _check_extents(cur, tensors, data_start, align)
        return GgufHeader(path, version, kv, lengths, tuple(tensors), data_start, cur.size, cur.bytes_read)


def _check_extents(cur: Cursor, tensors: list[GgufTensor], data_start: int, align: int) -> None:
    """Every tensor lies inside the file, aligned, and no two share a byte."""
    data_size = cur.size - data_start
    for t in tensors:
        if t.offset % align:
            raise cur.fail(f"corrupt header: tensor {printable(t.name)} is at offset {t.offset}, "
                           f"not a multiple of the alignment {align}")
        if t.offset + t.nbytes > data_size:
            raise cur.fail(f"truncated or corrupt: tensor {printable(t.name)} ends at byte "
                           f"{data_start + t.offset + t.nbytes}, past the end of the file ({cur.size} bytes)",
                           hint="the file may be incomplete: download it again")
    shared = overlap(((t.offset, t.offset + t.nbytes, t.name) for t in tensors), "tensors")
    if shared:
        raise cur.fail(f"corrupt header: {shared} of the data", hint="the file is damaged or crafted")


# -- split sets ------------------------------------------------------------------------------


def split_parts(path: str) -> list[str]:
    """All parts of the split set ``path`` belongs to (``x-00001-of-00003.gguf``), else [path]."""
    parent, name = os.path.split(path_text(path))  # Path(path).parent and .name
    m = _SPLIT_RE.match(name)
    if not m:
        return [path]
    count = int(m["count"])
    if not 1 <= int(m["no"]) <= count:
        raise ModelFileError(f"model file {printable(path)}: part {int(m['no'])} of {count} makes no sense")
    parts = [joined(parent, f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p for p in parts if not exists(p)]
    if missing:
        raise ModelFileError(f"split GGUF {printable(parts[0])}: {len(missing)} of its {count} parts are missing "
                             f"(first: {printable(os.path.basename(missing[0]))})",
                             hint="download every part of the set into the same directory")
    return parts


def check_split(headers: list[GgufHeader]) -> None:
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
