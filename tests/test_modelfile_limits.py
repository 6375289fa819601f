"""Model files that are well formed but claim too much, numbers that cannot size a cache, and names
that are no paths (issue 27, items 2-5; issue 28's model-file mutations).

Each crafted file makes its claim cheaply: the counts sit in a sparse file whose hole the claim
would have to be read from, so a test costs milliseconds and what it asserts is what a user sees:
the one error line, its exit code (7), the exact byte counts. How long the real, filled-in files
took and how much memory they cost, before and after, is measured by benchmarks/hostile_models.py,
not here.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from cli_run import run_gpulaunch
from gpu_launch.errors import ExitCode, GpuLaunchError, ModelFileError, UsageError
from gpu_launch.modelfile import gguf as gguf_reader
from gpu_launch.modelfile import safetensors as st_reader
from gpu_launch.modelfile.read import read_model
from gpu_launch.base.text import MAX_MESSAGE
from test_modelfile_hostile import BASE_KV, CONFIG, _bounded, gguf, kv_str, kv_u32, s, safetensors, tensor

MIB = 1 << 20


def sparse(path: Path, head: bytes, size: int) -> Path:
    """``head``, then a hole up to ``size`` bytes: a file that holds what it claims, read from nowhere."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(max(size, len(head)))
    return path


def one_line(proc_or_err: object, expected: str, code: int = ExitCode.BAD_FILE) -> str:
    """The single ``gpulaunch: error:`` line a run printed (or an exception would print), checked."""
    if isinstance(proc_or_err, GpuLaunchError):
        err = proc_or_err
        line = f"gpulaunch: error: {err.message}" + (f" (hint: {err.hint})" if err.hint else "")
        assert err.exit_code == code
    else:
        assert proc_or_err.returncode == code, proc_or_err.stderr  # type: ignore[attr-defined]
        lines = proc_or_err.stderr.splitlines()  # type: ignore[attr-defined]
        assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: "), lines[-20:]
        line = lines[0]
    assert expected in line, line
    assert line.isprintable() and len(line) <= 20 + MAX_MESSAGE + 10 + MAX_MESSAGE, line
    return line


def refused(path: Path | str, expected: str) -> str:
    with pytest.raises(ModelFileError) as err:
        read_model(str(path))
    return one_line(err.value, expected)


def plan(*argv: str, env: dict[str, str] | None = None):
    return run_gpulaunch("--snapshot", "dgx-h100", "plan", *argv, env=env)


def head(n_tensors: int, n_kv: int, kvs: list[bytes] | tuple[bytes, ...] = ()) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + b"".join(kvs)


# -- issue 27 item 2: each claim of the issue is one line, exit 7, at once ---------------------------------


def _the_issue_files(root: Path) -> dict[str, tuple[Path, str]]:
    """The five hostile files of the issue, their claims made in sparse files (the benchmark fills them in)."""
    out: dict[str, tuple[Path, str]] = {}
    out["15 M tensor entries"] = (sparse(root / "tensors.gguf", head(15_000_000, 0), 15_000_000 * 33 + 4096),
                                  "the tensor count is 15000000, more than gpulaunch reads (65536)")
    out["10 M key/values"] = (sparse(root / "kv.gguf", head(0, 10_000_000), 10_000_000 * 17),
                              "the key/value count is 10000000, more than gpulaunch reads (65536)")
    tokens = head(0, 5, [*BASE_KV, s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 29)])
    out["a 4 GB tokenizer array"] = (sparse(root / "tokenizer.gguf", tokens, len(tokens) + (4 << 30)),
                                     "array tokenizer.ggml.tokens (536870912 strings) takes gpulaunch past its cap "
                                     "on array elements walked one by one (4194304)")
    for name, folder, inner, size in (("99.9 MB of {}", root / "objects", b"{}", 99_900_000),
                                      ("91 MB of []", root / "lists", b"[]", 91_000_000)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(CONFIG))
        sparse(folder / "model.safetensors", struct.pack("<Q", size - 8) + b'{"w":[' + inner, size)
        out[name] = (folder, f"its header is {size - 8} bytes, more than gpulaunch reads (25000000")
    return out


@pytest.fixture(scope="module")
def issue_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    return _the_issue_files(tmp_path_factory.mktemp("claims"))


@pytest.mark.parametrize("case", ["15 M tensor entries", "10 M key/values", "a 4 GB tokenizer array",
                                  "99.9 MB of {}", "91 MB of []"])
def test_each_claim_of_the_issue_is_one_line_and_exit_7(issue_files: dict[str, tuple[Path, str]], case: str) -> None:
    path, expected = issue_files[case]
    one_line(plan(str(path)), expected)


def test_the_claims_are_refused_holding_under_2_mib(issue_files: dict[str, tuple[Path, str]]) -> None:
    for path, expected in issue_files.values():
        _bounded(lambda p=path: read_model(str(p)), expected, 2 * MIB)  # type: ignore[misc]


def test_just_past_each_cap_is_refused_and_at_the_cap_is_read(tmp_path: Path) -> None:
    """The caps are where the constants say: one more tensor, key or string is refused."""
    n = gguf_reader.MAX_TENSORS
    refused(sparse(tmp_path / "t.gguf", head(n + 1, 0), (n + 1) * 40),
            f"the tensor count is {n + 1}, more than gpulaunch reads ({n})")
    n = gguf_reader.MAX_KEYS
    refused(sparse(tmp_path / "k.gguf", head(0, n + 1), (n + 1) * 20),
            f"the key/value count is {n + 1}, more than gpulaunch reads ({n})")
    n = gguf_reader.MAX_WALKED
    for count, ok in ((n + 1, False), (n, True)):
        tokens = head(0, 5, [*BASE_KV, s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count)])
        path = sparse(tmp_path / "v.gguf", tokens, len(tokens) + 8 * count)
        if ok:
            assert read_model(str(path)).hyper.vocab_size == n  # a hole of empty strings: walked, not refused
        else:
            refused(path, f"({n + 1} strings) takes gpulaunch past its cap on array elements walked one by one")


def test_strings_past_llama_cpps_limit_and_kept_text_past_the_cap_are_refused(tmp_path: Path) -> None:
    big = s("general.description") + struct.pack("<IQ", 8, (1 << 30) + 1)
    refused(sparse(tmp_path / "d.gguf", head(0, 5, [*BASE_KV, big]), (1 << 30) + 4096),
            "claims 1073741825 bytes, more than llama.cpp reads (1073741824)")
    names = [kv_str(f"general.x{i}", "x" * 4000) for i in range(gguf_reader.MAX_KEPT_TEXT // 4000 + 1)]
    path = tmp_path / "text.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, *names]))
    refused(path, "takes gpulaunch past its cap on names and text kept")


def test_kept_numbers_past_the_cap_are_refused(tmp_path: Path) -> None:
    """65536 keys of 65536-element arrays of zeros: a sparse file that would be 32 GB of tuples."""
    per = gguf_reader.MAX_KEPT_ARRAY
    arrays = [s(f"x.a{i}") + struct.pack("<IIQ", 9, 0, per) + b"\0" * per
              for i in range(gguf_reader.MAX_KEPT_NUMBERS // per + 1)]
    path = tmp_path / "numbers.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, *arrays]))
    refused(path, "takes gpulaunch past its cap on numbers kept from arrays")


@pytest.mark.parametrize("inner", [b"{}", b"[]", b"[[]]", b"0"])
def test_a_safetensors_header_of_empty_objects_or_lists_is_refused_as_it_is_read(tmp_path: Path, inner: bytes) -> None:
    """Under the 25 MB cap, 4.5 MB of ``{}`` would be 2.25 M dicts: counted before json.loads sees them."""
    count = (4_500_000 // (len(inner) + 1))
    body = b'{"w":[' + b",".join([inner] * count) + b"]}"
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(safetensors(body))
    _bounded(lambda: read_model(str(tmp_path)), "JSON objects, lists and items in its first", 6 * MIB)


def test_a_config_json_of_empty_objects_is_refused_as_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b'{"x":[' + b",".join([b"{}"] * 1_000_000) + b"]}")
    (tmp_path / "model.safetensors").write_bytes(safetensors({}))
    _bounded(lambda: read_model(str(tmp_path)), "JSON objects, lists and items in its first", 6 * MIB)


def test_more_tensors_than_the_cap_in_one_safetensors_file_are_refused(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """At a cap of 4 (the real one, 131,072, would cost seconds of test), a fifth tensor is refused;
    ``__metadata__`` is no tensor."""
    monkeypatch.setattr(st_reader, "MAX_TENSORS", 4)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    for n, ok in ((5, False), (4, True)):
        header = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(n)}
        (tmp_path / "model.safetensors").write_bytes(safetensors({"__metadata__": {"format": "pt"}, **header}))
        if ok:
            assert read_model(str(tmp_path)).weights.total == 0
        else:
            refused(tmp_path, "its header lists 5 tensors, more than gpulaunch reads (4)")


# -- issue 28: the header-size limits -------------------------------------------------------------------


def test_a_safetensors_header_over_25_mb_is_refused_from_its_length(tmp_path: Path) -> None:
    """A 30 MB header (the format allows 100 MB) is never read: huggingface_hub's own bound."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    sparse(tmp_path / "model.safetensors", struct.pack("<Q", 30_000_000) + b"{", 30_000_100)
    line = refused(tmp_path, "its header is 30000000 bytes, more than gpulaunch reads (25000000, as huggingface_hub)")
    assert "model.safetensors" in line


def test_a_safetensors_header_over_100_mb_is_not_safetensors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    sparse(tmp_path / "model.safetensors", struct.pack("<Q", 200_000_000) + b"{", 200_000_100)
    refused(tmp_path, "not a safetensors file, or truncated (its header claims 200000000 bytes, the file has "
                      "200000092 after the length)")


def test_a_config_json_over_its_limit_is_refused_from_its_size(tmp_path: Path) -> None:
    sparse(tmp_path / "config.json", b"{", 17 * MIB)
    (tmp_path / "model.safetensors").write_bytes(safetensors({}))
    refused(tmp_path, f"{17 * MIB} bytes is too large for this kind of file (limit {16 * MIB})")


# -- issue 28: counts held to what the rest of the file can hold ---------------------------------------------


@pytest.mark.parametrize("kind", ["tensor", "key/value"])
def test_a_count_one_record_too_many_for_the_file_is_refused_with_the_exact_sizes(tmp_path: Path, kind: str) -> None:
    """A tensor record takes at least 32 bytes, a key/value 14: one record more than the rest of the file
    (from just after the count) holds at that size is refused before any is read (a weaker bound reads
    on, into zeros)."""
    count = 1001
    header, size = (head(count, 0), 16 + 32 * count - 1) if kind == "tensor" else (head(0, count), 24 + 14 * count - 1)
    path = sparse(tmp_path / "c.gguf", header, size)
    refused(path, f"corrupt header: the {kind} count is {count}, more than the file's {size} bytes can hold")
    sparse(tmp_path / "c.gguf", header, size + 1)  # one byte more: the count fits, the records (zeros) do not
    with pytest.raises(ModelFileError) as err:
        read_model(str(tmp_path / "c.gguf"))
    assert "bytes can hold" not in err.value.message


@pytest.mark.parametrize("etype, size", [(4, 4), (10, 8), (8, 8), (9, 12)])
def test_an_array_one_element_too_long_for_the_file_is_refused(tmp_path: Path, etype: int, size: int) -> None:
    """u32 (4 bytes), u64 (8), strings (an 8-byte length each), arrays (type + length: 12)."""
    array = s("general.x") + struct.pack("<IIQ", 9, etype, 100)
    raw = head(0, 5, [*BASE_KV, array])
    path = sparse(tmp_path / "a.gguf", raw, len(raw) + 100 * size - 1)
    refused(path, f"the length of array general.x is 100, more than the file's {len(raw) + 100 * size - 1} bytes")


# -- issue 28: data that two tensors share ------------------------------------------------------------------


def test_a_one_byte_overlap_of_gguf_tensor_data_is_refused_and_adjacent_tensors_are_not(tmp_path: Path) -> None:
    i8 = 24  # ggml's I8: one byte an element, so a tensor can end one byte into the next one's place
    path = tmp_path / "o.gguf"
    path.write_bytes(gguf([tensor("blk.0.a", [33], i8), tensor("blk.0.b", [32], i8, offset=32)]))
    refused(path, "tensors blk.0.a and blk.0.b overlap by 1 byte (bytes 32 to 33) of the data")
    path.write_bytes(gguf([tensor("blk.0.a", [32], i8), tensor("blk.0.b", [32], i8, offset=32)]))
    assert read_model(str(path)).weights.layers == (64,)


def test_a_one_byte_overlap_of_safetensors_data_is_refused_and_adjacent_tensors_are_not(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    for b_begin, expected in ((16, None), (15, "tensors model.layers.0.a and model.layers.0.b overlap by 1 byte "
                                               "(bytes 15 to 16) of the data")):
        header = {"model.layers.0.a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},
                  "model.layers.0.b": {"dtype": "U8", "shape": [16], "data_offsets": [b_begin, b_begin + 16]}}
        (tmp_path / "model.safetensors").write_bytes(safetensors(header))
        if expected:
            refused(tmp_path, expected)
        else:
            assert read_model(str(tmp_path)).weights.layers == (32,)


def _mlc(folder: Path, shard_size: int, params: list[tuple[str, int, int]], data_path: str = "params_shard_0.bin",
         shards: int = 1) -> None:
    from model_fixtures import MLC_CONFIG

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mlc-chat-config.json").write_text(json.dumps(MLC_CONFIG))
    sparse(folder / data_path, b"", shard_size)
    records = [{"name": n, "shape": [size], "dtype": "uint8", "format": "raw", "nbytes": size, "byteOffset": offset}
               for n, offset, size in params]
    (folder / "tensor-cache.json").write_text(json.dumps({"metadata": {}, "records": [
        {"dataPath": data_path, "format": "raw-shard", "nbytes": shard_size, "records": records}] * shards}))


def test_mlc_parameters_that_share_bytes_of_a_shard_are_refused(tmp_path: Path) -> None:
    """Today's 29.8 GiB of weights from one 1 GB shard: 30 parameters all over the same gigabyte."""
    gib = 1 << 30
    _mlc(tmp_path / "a", gib, [(f"model.layers.{i % 2}.w{i}", 0, gib) for i in range(30)])
    refused(tmp_path / "a", "overlap by 1073741824 bytes (bytes 0 to 1073741824) of params_shard_0.bin")
    _mlc(tmp_path / "b", gib, [("model.layers.0.w", 0, gib)], shards=2)  # one shard listed twice
    refused(tmp_path / "b", "parameters model.layers.0.w and model.layers.0.w overlap by 1073741824 bytes")
    _mlc(tmp_path / "c", 64, [("model.layers.0.a", 0, 33), ("model.layers.1.b", 32, 32)])
    refused(tmp_path / "c", "parameters model.layers.0.a and model.layers.1.b overlap by 1 byte (bytes 32 to 33)")
    _mlc(tmp_path / "d", 64, [("model.layers.0.a", 0, 32), ("model.layers.1.b", 32, 32)])
    assert read_model(str(tmp_path / "d")).weights.layers == (32, 32)


# -- issue 28: names that are paths ------------------------------------------------------------------------


@pytest.mark.parametrize("shard", ["sub/model.safetensors", "../model.safetensors", "/etc/passwd"])
def test_a_safetensors_index_naming_a_path_is_refused_even_where_the_file_exists(tmp_path: Path, shard: str) -> None:
    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    for where in (folder, folder / "sub", tmp_path):
        (where / "config.json").write_text(json.dumps(CONFIG))
        (where / "model.safetensors").write_bytes(safetensors({"w": {"dtype": "U8", "shape": [4],
                                                                     "data_offsets": [0, 4]}}))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    refused(folder, f"its weight_map names the shard {shard!r}, not a bare file name (a path could lead outside "
                    "the folder)")


@pytest.mark.parametrize("shard", ["sub/params_shard_0.bin", "..", "a\\b"])
def test_an_mlc_shard_naming_a_path_is_refused_even_where_the_file_exists(tmp_path: Path, shard: str) -> None:
    (tmp_path / "sub").mkdir()
    sparse(tmp_path / "sub" / "params_shard_0.bin", b"", 64)
    _mlc(tmp_path, 64, [("model.layers.0.w", 0, 32)])
    index = json.loads((tmp_path / "tensor-cache.json").read_text())
    index["records"][0]["dataPath"] = shard
    (tmp_path / "tensor-cache.json").write_text(json.dumps(index))
    refused(tmp_path, f"shard {shard!r}, not a bare file name")


# -- issue 28: where the data region starts -------------------------------------------------------------------


def test_the_data_region_starts_at_the_next_multiple_of_the_alignment(tmp_path: Path) -> None:
    """The header ends at byte 254; with alignment 256 the data starts at 256, not 0: a tensor that
    would fit from 0 runs past the end from 256, and the error says where, to the byte."""
    kvs = [*BASE_KV, kv_u32("general.alignment", 256)]
    body = head(1, len(kvs), kvs) + tensor("blk.0.w", [64], 24)  # 64 I8 elements: 64 bytes
    assert len(body) == 254, len(body)
    path = tmp_path / "a.gguf"
    for size, expected in ((256 + 64, None), (256 + 63, "tensor blk.0.w ends at byte 320, past the end of the file "
                                                          "(319 bytes)")):
        sparse(path, body, size)
        if expected:
            refused(path, expected)
        else:
            assert gguf_reader.read_header(str(path)).data_start == 256


# -- issue 27 item 3: numbers that cannot size a cache -----------------------------------------------------


def _kv(key: str, vtype: int, fmt: str, value: object) -> bytes:
    return s(key) + _v(vtype, fmt, value)


def _v(vtype: int, fmt: str, value: object) -> bytes:
    """A value as a GGUF key/value stores it: its type, then the value."""
    return struct.pack(f"<I{fmt}", vtype, value)


_LLAMA = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 2), kv_u32("llama.embedding_length", 64),
          kv_u32("llama.context_length", 4096)]


@pytest.mark.parametrize("key, value, expected", [
    ("llama.attention.head_count", _v(6, "f", float("nan")), "llama.attention.head_count is nan, not a count"),
    ("llama.attention.head_count", _v(6, "f", float("inf")), "llama.attention.head_count is inf, not a count"),
    ("llama.attention.head_count", _v(6, "f", 2.5), "llama.attention.head_count is 2.5, not a count"),
    ("llama.attention.head_count_kv", _v(5, "i", -32), "llama.attention.head_count_kv is -32, not a count"),
    ("llama.attention.head_count_kv", _v(10, "Q", 1 << 40), "is 1099511627776, not a count (0 to 4294967295)"),
    ("llama.attention.head_count_kv", struct.pack("<IIQii", 9, 5, 2, 8, -8), "head_count_kv is -8, not a count"),
    ("llama.attention.key_length", _v(4, "I", 0), "its attention layers have a head size of 0 (key length 0"),
    ("llama.attention.head_count", _v(4, "I", 128), "have a head size of 0 (key length 0, value length 0, "
                                                          "128 KV heads, embedding 64, 128 heads)"),
    ("llama.block_count", _v(4, "I", 0), "it has no layers"),
    # (llama's own loader never reads a window pattern: a cache-sizing key is checked where it is read)
    ("llama.attention.sliding_window", _v(5, "i", -2), "sliding_window is -2, not a count"),
    ("llama.ssm.state_size", _v(5, "i", -16), "llama.ssm.state_size is -16, not a count"),
])
def test_a_number_that_cannot_size_a_cache_is_one_line(tmp_path: Path, key: str, value: bytes, expected: str) -> None:
    kvs = [k for k in _LLAMA if not k.startswith(s(key))]
    if key != "llama.attention.head_count":
        kvs.append(kv_u32("llama.attention.head_count", 8))
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf([tensor("blk.0.w", [32])], kvs=[*kvs, s(key) + value]))
    refused(path, expected)


def test_a_count_written_as_a_whole_float_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf([tensor("blk.0.w", [32])], kvs=[*_LLAMA, _kv("llama.attention.head_count", 6, "f", 8.0)]))
    assert read_model(str(path)).hyper.n_heads == 8


@pytest.fixture()
def nan_model(tmp_path: Path) -> Path:
    path = tmp_path / "nan.gguf"
    path.write_bytes(gguf([tensor("blk.0.w", [32])], kvs=[*_LLAMA, _kv("llama.attention.head_count", 6, "f",
                                                                          float("nan"))]))
    return path


def test_a_nan_head_count_is_one_line_in_plan_fit_and_the_api(nan_model: Path) -> None:
    import gpu_launch

    expected = "llama.attention.head_count is nan, not a count"
    one_line(plan(str(nan_model)), expected)
    one_line(run_gpulaunch("--snapshot", "dgx-h100", "--fit", str(nan_model), "--", "true"), expected)
    with pytest.raises(ModelFileError) as err:
        gpu_launch.plan(nan_model, snapshot="dgx-h100")
    one_line(err.value, expected)


def test_a_nan_head_count_is_one_line_on_the_nvml_path(nan_model: Path, tmp_path: Path) -> None:
    """The same through the NVML adapter (tests/fake_pynvml.py's DGX H100 standing in for the driver)."""
    from cli_run import ROOT
    from test_imports import _SHIM

    (tmp_path / "pynvml.py").write_text(_SHIM)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    one_line(run_gpulaunch("--fit", str(nan_model), "--", "true", env=env),
             "llama.attention.head_count is nan, not a count")


def test_a_duplicate_tensor_name_or_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.gguf"
    path.write_bytes(gguf([tensor("blk.0.w", [32]), tensor("blk.0.w", [32], offset=128)]))
    refused(path, "corrupt header: tensors 0 and 1 are both named blk.0.w")
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("llama.block_count", 2)]))
    refused(path, "corrupt header: key llama.block_count appears twice")
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("", 2)]))
    refused(path, "corrupt header: key 4 (at byte ")


def test_an_alignment_that_is_an_array_is_one_short_line(tmp_path: Path) -> None:
    """Today: a 409,021-byte error line quoting 60,000 numbers."""
    path = tmp_path / "a.gguf"
    array = s("general.alignment") + struct.pack("<IIQ", 9, 4, 60000) + struct.pack("<I", 1) * 60000
    path.write_bytes(gguf([tensor("blk.0.w", [32])], kvs=[*BASE_KV, array]))
    line = one_line(plan(str(path)), "general.alignment is an array, not a u32")
    assert len(line) < 300, line


def test_every_error_line_is_clipped_to_a_readable_length(tmp_path: Path) -> None:
    """A message that quotes 409,021 characters keeps its start and its end, within MAX_MESSAGE."""
    err = ModelFileError("model x: " + "1, " * 136_000 + "not a power of two", hint="h" * 5000)
    assert len(err.message) <= MAX_MESSAGE and len(err.hint or "") <= MAX_MESSAGE
    assert err.message.startswith("model x: 1, 1, ") and err.message.endswith("1, not a power of two")
    assert "characters left out" in err.message and str(err) == err.message
    deep = "/" + "/".join(["d" * 200] * 30) + "/m.gguf"  # a 6,000-character path: the OS refuses the name
    line = one_line(plan(deep), "cannot look at it (File name too long)")
    assert line.startswith("gpulaunch: error: model /ddd") and "characters left out" in line


# -- issue 27 item 4: numbers of thousands of digits -------------------------------------------------------


def test_a_5000_digit_layer_number_in_a_tensor_name_counts_as_no_layer(tmp_path: Path) -> None:
    name = "model.layers." + "9" * 5000 + ".mlp.w"
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(safetensors({name: {"dtype": "U8", "shape": [16],
                                                                     "data_offsets": [0, 16]}}))
    w = read_model(str(tmp_path)).weights
    assert (w.layers, w.other) == ((0,), 16)
    _mlc(tmp_path / "mlc", 64, [(name, 0, 32), ("model.layers.1.w", 32, 32)])
    w = read_model(str(tmp_path / "mlc")).weights
    assert (w.layers, w.other) == ((0, 32), 32)


def test_a_shape_whose_size_outgrows_a_float_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(safetensors({"w": {"dtype": "F32", "shape": [2**62] * 20,
                                                                    "data_offsets": [0, 16]}}))
    refused(tmp_path, "tensor w is 16 bytes, its shape and F32 make more than 2^64")
    (tmp_path / "model.safetensors").write_bytes(safetensors({"w": {"dtype": "F32", "shape": [1] * 65,
                                                                    "data_offsets": [0, 4]}}))
    refused(tmp_path, "has a shape of [1, 1, 1")


@pytest.mark.parametrize("call", ["plan", "use", "reserve"])
def test_an_api_ctx_of_5000_digits_is_a_usage_error(nan_model: Path, call: str) -> None:
    import gpu_launch

    with pytest.raises(UsageError) as err:
        getattr(gpu_launch, call)(model=nan_model, ctx=10**5000, snapshot="dgx-h100")
    one_line(err.value, "ctx: a number of about 5001 digits is out of range (1 to 999999999)", ExitCode.USAGE)


# -- issue 27 item 5: model paths ---------------------------------------------------------------------------


def test_a_tilde_user_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    one_line(plan("~nosuchuser-gpulaunch/m.gguf"), "model ~nosuchuser-gpulaunch/m.gguf: ~nosuchuser-gpulaunch "
                                                   "names no home directory (no such user)")
    one_line(run_gpulaunch("--snapshot", "dgx-h100", "--fit", "~nosuchuser-gpulaunch/m.gguf", "--", "true"),
             "names no home directory")
    env = {"HF_HUB_CACHE": "", "HUGGINGFACE_HUB_CACHE": "", "HF_HOME": "~nosuchuser-gpulaunch"}
    one_line(plan("org/name", env=env), "HF_HOME: ~nosuchuser-gpulaunch names no home directory")
    with pytest.raises(ModelFileError) as err:
        read_model("org/name", environ={"HF_HUB_CACHE": "~nosuchuser-gpulaunch/hub"})
    one_line(err.value, "HF_HUB_CACHE: ~nosuchuser-gpulaunch names no home directory")


def test_a_name_longer_than_a_file_name_can_be_is_one_line() -> None:
    one_line(plan("a" * 300), "cannot look at it (File name too long)")
    for name in ("a" * 300 + ".gguf", "./" + "a" * 300):
        refused(name, "cannot look at it (File name too long)")


def test_the_api_takes_a_model_as_bytes_and_refuses_a_number(tmp_path: Path) -> None:
    import gpu_launch
    from model_fixtures import llama8b, write_gguf

    [path] = write_gguf(tmp_path / "m.gguf", llama8b())
    result = gpu_launch.plan(model=os.fsencode(path), snapshot="dgx-h100")
    assert result.sizing.model.source == str(path)
    with pytest.raises(UsageError) as err:
        gpu_launch.plan(model=5, snapshot="dgx-h100")  # type: ignore[arg-type]
    one_line(err.value, "model: 5 is not a model (a int)", ExitCode.USAGE)
    with pytest.raises(UsageError):
        gpu_launch.use(model=8.0, snapshot="dgx-h100")  # type: ignore[arg-type]


def test_json_of_exactly_the_most_items_is_read_one_more_is_refused(tmp_path: Path) -> None:
    # Seed 39: the count of objects, lists and items started at 1, refusing a file of exactly max_items.
    from gpu_launch.modelfile.bounded import read_small

    (tmp_path / "three.json").write_bytes(b"[[1,2]]")  # '[', '[' and ',': 3
    assert read_small(str(tmp_path / "three.json"), "three.json", 1000, max_items=3) == b"[[1,2]]"
    (tmp_path / "four.json").write_bytes(b"[[1,2,3]]")
    with pytest.raises(ModelFileError, match="more than 3 JSON objects, lists and items in its first 9 bytes"):
        read_small(str(tmp_path / "four.json"), "four.json", 1000, max_items=3)
