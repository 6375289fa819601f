"""Hostile model files: one ModelFileError line (exit 7), never a traceback, a hang, or memory
growth beyond the file's size. The crafted headers are written byte by byte here (no writer
produces them); each case names the claim it makes."""

from __future__ import annotations

import json
import os
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_launch.errors import ExitCode, GpuLaunchError, ModelFileError
from gpu_launch.modelfile.read import read_model


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<II", 4, value)


def kv_str(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", 8) + s(value)


BASE_KV = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1),
           kv_u32("llama.attention.head_count", 1), kv_u32("llama.embedding_length", 32)]


def tensor(name: bytes | str, dims: list[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ggml_type, offset)


def gguf(tensors: list[bytes], kvs: list[bytes] | None = None, n_tensors: int | None = None,
         n_kv: int | None = None, data: int = 4096, version: int = 3) -> bytes:
    kvs = BASE_KV if kvs is None else kvs
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    return body + b"\0" * (-len(body) % 32) + b"\0" * data


def safetensors(header: bytes | dict, data: int = 64, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + b"\0" * data


GOOD = gguf([tensor("blk.0.attn_q.weight", [32, 4])])
DEEP = ("[" * 5000 + "]" * 5000).encode()
CONFIG = {"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 1, "hidden_size": 4}

#: name -> (files to write {relative name: bytes}, what to read, what the message says)
GGUF_CASES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "only 0 bytes"),
    "garbage": (os.urandom(4096).replace(b"GGUF", b"xxxx"), "not a GGUF file"),
    "wrong magic": (b"GGML" + GOOD[4:], "not a GGUF file"),
    "truncated in the key/values": (GOOD[:40], "truncated"),
    "truncated in the tensor infos": (GOOD[:len(GOOD) - 4096 - 40], "truncated"),
    "version 1": (gguf([], version=1), "GGUF version 1 is not supported"),
    "big-endian": (gguf([], version=3 << 24), "big-endian"),
    "tensor count 2^60": (gguf([], n_tensors=2**60), "the tensor count is 1152921504606846976"),
    "kv count 2^60": (gguf([], n_kv=2**60), "the key/value count"),
    "a 2^40-byte key": (gguf([], kvs=[struct.pack("<Q", 2**40) + b"k"]), "claims 1099511627776 bytes"),
    "a 2^40-byte string value": (gguf([], kvs=[s("general.name") + struct.pack("<IQ", 8, 2**40)]),
                                 "claims 1099511627776 bytes"),
    "an array of 2^50 strings": (gguf([], kvs=[s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**50)]),
                                 "the length of array tokenizer.ggml.tokens"),
    "a string in an array claims 2^40": (gguf([], kvs=[s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2)
                                                       + s("a") + struct.pack("<Q", 2**40) + b"b" * 16]),
                                         "runs past the end"),
    "arrays nested 100 deep": (gguf([], kvs=[s("x") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 100]),
                               "nested more than"),
    "an unknown value type": (gguf([], kvs=[s("x") + struct.pack("<I", 99)]), "unknown value type 99"),
    "an escape sequence in a key": (gguf([], kvs=[s("\x1b]0;owned\x07\x1b[2J") + struct.pack("<I", 99)]),
                                    "\\x1b]0;owned\\x07\\x1b[2J has unknown value type"),
    "a non-UTF-8 key": (gguf([], kvs=[s(b"\xff\xfe") + struct.pack("<II", 4, 1)]), "not UTF-8"),
    "a non-UTF-8 tensor name": (gguf([tensor(b"blk.0.\xff", [32])]), "not UTF-8"),
    "a negative dimension": (gguf([tensor("blk.0.w", [32, 2**64 - 5])]), "negative or huge dimension"),
    "a shape whose bytes overflow": (gguf([tensor("blk.0.w", [2**32, 2**32, 2**10])]), "more than ggml can address"),
    "100 dimensions": (gguf([tensor("blk.0.w", [1] * 100)]), "has 100 dimensions"),
    "an unknown ggml type": (gguf([tensor("blk.0.w", [32], ggml_type=250)]), "ggml type 250"),
    "a row not a multiple of the block": (gguf([tensor("blk.0.w", [33], ggml_type=2)]), "not a multiple"),
    "an offset past the end": (gguf([tensor("blk.0.w", [32], offset=2**40)]), "past the end of the file"),
    "data past the end": (gguf([tensor("blk.0.w", [32, 1024])]), "past the end of the file"),
    "overlapping tensors": (gguf([tensor("blk.0.a", [32]), tensor("blk.0.b", [32], offset=64)] +
                                 [tensor("blk.0.c", [64], offset=32)]), "overlap by"),
    "a misaligned offset": (gguf([tensor("blk.0.w", [32], offset=3)]), "not a multiple of the alignment"),
    "alignment 0": (gguf([], kvs=[*BASE_KV, kv_u32("general.alignment", 0)]), "not a power of two"),
    "no architecture": (gguf([], kvs=[kv_u32("llama.block_count", 1)]), "no general.architecture"),
    "block count 2^31": (gguf([], kvs=[kv_str("general.architecture", "llama"),
                                       kv_u32("llama.block_count", 2**31)]), "block_count is 2147483648"),
    "head counts per layer of the wrong length": (
        gguf([], kvs=[*BASE_KV, s("llama.attention.head_count_kv") + struct.pack("<IIQ", 9, 4, 3) + b"\1\0\0\0" * 3]),
        "3 entries for 1 layers"),
}

SAFETENSORS_CASES: dict[str, tuple[bytes, str]] = {
    "a header length of 2^60": (safetensors({}, length=2**60), "its header claims"),
    "a header that is a list": (safetensors(b"[1, 2]"), "a JSON list, not an object"),
    "a 5000-deep header": (safetensors(DEEP), "nested too deeply"),
    "a non-UTF-8 header": (safetensors(b'{"\xff": 1}'), "not UTF-8"),
    "garbage JSON": (safetensors(b"{not json"), "not valid JSON"),
    "offsets past the end": (safetensors({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 2**40]}}),
                             "past its end"),
    "overlapping data_offsets": (safetensors({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                              "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}),
                                 "overlap"),
    "reversed offsets": (safetensors({"w": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}}), "data_offsets"),
    "a negative dimension": (safetensors({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}),
                             "negative"),
    "bytes that do not match the shape": (safetensors({"w": {"dtype": "BF16", "shape": [4],
                                                             "data_offsets": [0, 16]}}), "make 8"),
    "a shape whose bytes overflow": (safetensors({"w": {"dtype": "F32", "shape": [2**62, 2**62],
                                                        "data_offsets": [0, 16]}}), "its shape and F32"),
    "a tensor that is not an object": (safetensors({"w": 5}), "not described by an object"),
    # safetensors refuses a dtype it does not name; it was sized from its byte range
    "an unknown dtype": (safetensors({"w": {"dtype": "F3", "shape": [4], "data_offsets": [0, 16]}}),
                         "has the dtype 'F3', which the safetensors format does not name"),
    "truncated": (safetensors({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})[:20],
                  "truncated"),
}


def _check(err: ModelFileError, expected: str) -> None:
    line = f"gpulaunch: error: {err.message}" + (f" (hint: {err.hint})" if err.hint else "")
    assert "\n" not in line and len(line) < 600, line
    assert line.isprintable(), line  # the file's own names are escaped, never sent raw to a terminal
    assert err.exit_code == ExitCode.BAD_FILE
    assert expected in err.message, err.message


def _bounded(read: Callable[[], object], expected: str, limit: int) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ModelFileError) as err:
            read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _check(err.value, expected)
    assert peak < limit, f"{peak} bytes allocated reading a {limit}-byte-bounded file"


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_hostile_gguf(tmp_path: Path, case: str) -> None:
    raw, expected = GGUF_CASES[case]
    path = tmp_path / "model.gguf"
    path.write_bytes(raw)
    _bounded(lambda: read_model(str(path)), expected, 2 * 1024 * 1024)


@pytest.mark.parametrize("case", list(SAFETENSORS_CASES))
def test_hostile_safetensors(tmp_path: Path, case: str) -> None:
    raw, expected = SAFETENSORS_CASES[case]
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(raw)
    _bounded(lambda: read_model(str(tmp_path)), expected, 2 * 1024 * 1024)


@pytest.mark.parametrize("config, expected", [
    (b"[1, 2, 3]", "a JSON list, not an object"),
    (DEEP, "nested too deeply"),
    (b'{"num_hidden_layers": -3}', "not a count"),
    (b'{"num_hidden_layers": "12"}', "not a count"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"model_type": "someformer"}', "no num_hidden_layers"),
    (b'{"num_hidden_layers": 4, "layer_types": ["full_attention"]}', "1 entries for 4 layers"),
])
def test_hostile_config_json(tmp_path: Path, config: bytes, expected: str) -> None:
    (tmp_path / "config.json").write_bytes(config)
    (tmp_path / "model.safetensors").write_bytes(safetensors({}))
    _bounded(lambda: read_model(str(tmp_path)), expected, 2 * 1024 * 1024)


def test_hostile_mlc_index(tmp_path: Path) -> None:
    (tmp_path / "mlc-chat-config.json").write_text(json.dumps({"model_type": "llama", "model_config": CONFIG}))
    (tmp_path / "tensor-cache.json").write_text("[]")
    with pytest.raises(ModelFileError) as err:
        read_model(str(tmp_path))
    _check(err.value, "not an object")
    (tmp_path / "tensor-cache.json").write_text(json.dumps({"records": [{"dataPath": "../../etc/passwd",
                                                                         "records": []}]}))
    with pytest.raises(ModelFileError) as err:
        read_model(str(tmp_path))
    _check(err.value, "outside the folder")


def test_not_regular_files_are_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)  # no writer: a blocking open would hang forever
    with pytest.raises(ModelFileError) as err:
        read_model(str(fifo))
    _check(err.value, "a FIFO")
    with pytest.raises(ModelFileError) as err:
        read_model("/dev/zero")
    _check(err.value, "a character device")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelFileError) as err:
        read_model(str(empty))
    _check(err.value, "no model in it")
    (empty / "config.json").write_text("{}")
    with pytest.raises(ModelFileError) as err:
        read_model(str(empty))
    _check(err.value, "no .safetensors weights")
    (empty / "config.json").rename(empty / "model.safetensors")
    with pytest.raises(ModelFileError) as err:
        read_model(str(empty))
    _check(err.value, "but no config.json")


def test_missing_and_unknown_names(tmp_path: Path) -> None:
    for source, expected in ((str(tmp_path / "absent.gguf"), "no such file"),
                             (str(tmp_path / "absent"), "no such file"),
                             ("../x/../../y", "no such file"),
                             ("not an id", "no such file"),
                             ("org/not an id", "not a Hugging Face id")):
        with pytest.raises(ModelFileError) as err:
            read_model(source, environ={"HF_HUB_CACHE": str(tmp_path)})
        _check(err.value, expected)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ModelFileError) as err:
        read_model(str(text))
    _check(err.value, "neither a GGUF nor a safetensors file")


def test_an_odd_byte_in_a_value_is_no_error(tmp_path: Path) -> None:
    """llama.cpp does not check values' UTF-8 either: a description with a stray byte still loads."""
    path = tmp_path / "m.gguf"
    odd = s("general.name") + struct.pack("<I", 8) + s(b"caf\xe9")  # Latin-1, not UTF-8
    path.write_bytes(gguf([tensor("blk.0.w", [32])], kvs=[*BASE_KV, odd]))
    assert read_model(str(path)).name == "caf\ufffd"


def test_a_huge_sparse_garbage_file_costs_no_memory(tmp_path: Path) -> None:
    """A 1 TB hole that claims to be GGUF: refused from its first bytes, nothing read beyond them."""
    path = tmp_path / "huge.gguf"
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 2**60, 2**60))
        fh.truncate(2**40)
    _bounded(lambda: read_model(str(path)), "tensor count", 2 * 1024 * 1024)


def test_errors_are_gpulaunch_errors_for_the_cli_boundary(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF")
    with pytest.raises(GpuLaunchError):
        read_model(str(path))
