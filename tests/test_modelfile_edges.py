"""Model files at the edges of what gpulaunch reads (issue 28: mutants of gpu_launch/modelfile/ that the
suite let live; benchmarks/mutation.py finds them). Each test says the slip it catches. The caps are
written here as numbers, not read from the module: a test that reads the constant moves with it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf as gguf_package
import pytest

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.read import read_model
from test_modelfile_hostile import BASE_KV, CONFIG, gguf, kv_str, kv_u32, s, safetensors, tensor
from test_modelfile_limits import head, sparse


def _refusal(path: Path) -> str | None:
    try:
        read_model(str(path))
    except ModelFileError as exc:
        return exc.message
    return None


def test_the_quantisation_is_named_as_llama_cpp_names_it(tmp_path: Path) -> None:
    # Slip: a number of the general.file_type table changed (IQ2_S and IQ4_XS lost their names).
    path = tmp_path / "m.gguf"
    for ftype in gguf_package.LlamaFileType:
        if ftype.name == "GUESSED":
            continue
        path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("general.file_type", ftype.value)]))
        assert read_model(str(path)).dtype == ftype.name.split("_", 1)[1], ftype


@pytest.mark.parametrize("what, counts", [("tensor", (65536, 0)), ("key/value", (0, 65536))])
def test_a_count_exactly_at_the_cap_is_not_refused_for_it(tmp_path: Path, what: str, counts: tuple[int, int]) -> None:
    # Slip: the cap on tensor and key counts (65,536) enforced one early (>= for >). The records are a
    # hole here, so the file fails later, on its first record, never on the count.
    path = sparse(tmp_path / "c.gguf", head(*counts), 65536 * 40)
    refusal = _refusal(path)
    assert refusal is not None and "more than gpulaunch reads" not in refusal, refusal


def test_the_cap_on_numbers_kept_from_arrays_is_262144(tmp_path: Path) -> None:
    # Slip: the cap doubled. Four arrays of 65,536 numbers are kept; a fifth is past it.
    def arrays(n: int) -> list[bytes]:
        return [s(f"x.a{i}") + struct.pack("<IIQ", 9, 0, 65536) + b"\0" * 65536 for i in range(n)]

    path = tmp_path / "numbers.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, *arrays(4)]))
    assert _refusal(path) is None
    path.write_bytes(gguf([], kvs=[*BASE_KV, *arrays(5)]))
    refusal = _refusal(path)
    assert refusal is not None and "past its cap on numbers kept from arrays (262144)" in refusal, refusal


def test_a_single_files_split_tensor_count_is_not_checked(tmp_path: Path) -> None:
    # Slip: the split check applied to a file that is not split (count > 0 for > 1): a stray
    # split.tensors.count in a whole file would make it unreadable.
    path = tmp_path / "whole.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, s("split.tensors.count") + struct.pack("<IH", 2, 7)]))
    assert _refusal(path) is None


def test_a_safetensors_file_without_its_extension_is_read_as_one(tmp_path: Path) -> None:
    # Slip: the sniff of the ninth byte ("{", the header's start) reading two bytes instead of one.
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    weights = folder / "weights"
    weights.write_bytes(safetensors({"model.layers.0.self_attn.q_proj.weight":
                                     {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}))
    facts = read_model(str(weights))
    assert facts.format == "safetensors" and facts.weights.total == 64


@pytest.mark.parametrize("key, most", [("ssm.group_count", 65536), ("ssm.state_size", 65536),
                                       ("ssm.conv_kernel", 1024), ("ssm.inner_size", 1 << 20)])
def test_a_recurrent_state_number_is_refused_just_past_its_most(tmp_path: Path, key: str, most: int) -> None:
    # Slip: a bound of the recurrent-state keys moved (the states llama.cpp sizes multiply them).
    path = tmp_path / "s.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32(f"llama.{key}", most)]))
    assert _refusal(path) is None
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32(f"llama.{key}", most + 1)]))
    assert _refusal(path) == f"model file {path}: llama.{key} is {most + 1}, not a count here (at most {most})"


@pytest.mark.parametrize("model_type, expected", [
    ("gemma2", {"n_layers": 26, "n_heads": 8, "key_length": 256, "hidden_size": 2304, "context_length": 8192,
                "vocab_size": 256000, "sliding_window": 4096}),
    ("qwen2", {"n_layers": 32, "n_heads": 32, "key_length": 128, "hidden_size": 4096, "context_length": 32768,
               "vocab_size": 151936, "sliding_window": None}),
])
def test_a_config_json_that_leaves_out_transformers_defaults_gets_them(tmp_path: Path, model_type: str,
                                                                        expected: dict[str, object]) -> None:
    # Slip: a default of Transformers' config class changed (Gemma2Config, Qwen2Config: hidden 2304,
    # 8192 positions).
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    (tmp_path / "model.safetensors").write_bytes(safetensors(
        {"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}))
    hyper = read_model(str(tmp_path)).hyper
    assert {key: getattr(hyper, key) for key in expected} == expected


def _config_dir(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(safetensors(
        {"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}))
    return tmp_path


def test_a_head_size_from_hidden_over_heads_is_a_whole_number(tmp_path: Path) -> None:
    # Slip: true division instead of floor division (12.5-value heads sizing a cache in fractions of bytes).
    hyper = read_model(str(_config_dir(tmp_path, {**CONFIG, "hidden_size": 100, "num_attention_heads": 8}))).hyper
    assert (hyper.key_length, hyper.value_length) == (12, 12)


def test_a_config_count_that_is_no_count_is_quoted_to_40_characters(tmp_path: Path) -> None:
    # Slip: the quote of the bad value cut at 39 or 41 characters.
    folder = _config_dir(tmp_path, {**CONFIG, "num_attention_heads": "x" * 60})
    assert _refusal(folder) == f"config {folder / 'config.json'}: num_attention_heads is {'x' * 40!r}, not a count"


@pytest.mark.parametrize("layers, ok", [(100_000, True), (100_001, False)])
def test_a_config_of_more_than_100000_layers_is_no_language_model(tmp_path: Path, layers: int, ok: bool) -> None:
    # Slip: the most layers a config may state moved by one.
    refusal = _refusal(_config_dir(tmp_path, {**CONFIG, "num_hidden_layers": layers}))
    if ok:
        assert refusal is None or "no num_hidden_layers" not in refusal, refusal
    else:
        assert refusal is not None and refusal.endswith(": no num_hidden_layers"), refusal


def test_the_first_missing_shard_of_an_index_is_named(tmp_path: Path) -> None:
    # Slip: the last missing shard named as the first.
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    shards = {f"w{i}": f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    (tmp_path / shards["w2"]).write_bytes(b"")
    assert _refusal(tmp_path) == (f"model directory {tmp_path}: 2 of the 3 shards its index lists are missing "
                                  "(first: model-00001-of-00003.safetensors)")


def test_an_index_json_over_64_mib_is_refused_from_its_size(tmp_path: Path) -> None:
    # Slip: the limit on an index file moved (64 MiB: huggingface_hub's own files are far smaller).
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(b"")
    index = sparse(tmp_path / "model.safetensors.index.json", b'{"weight_map": {}}', (64 << 20) + 1)
    assert _refusal(tmp_path) == f"index {index}: {(64 << 20) + 1} bytes is too large for this kind of file " \
                                 f"(limit {64 << 20})"


def test_an_mlc_shard_that_is_not_a_record_is_one_line(tmp_path: Path) -> None:
    # Slip: "not a record" and "no dataPath" both needed for the refusal (and/or): a crash on a bare string.
    (tmp_path / "mlc-chat-config.json").write_text(json.dumps({"model_type": "llama", "model_config": CONFIG}))
    (tmp_path / "ndarray-cache.json").write_text(json.dumps({"records": ["params_shard_0.bin"]}))
    cache = tmp_path / "ndarray-cache.json"
    assert _refusal(tmp_path) == f"ndarray-cache.json {cache}: a shard record without dataPath or records"


def test_gguf_alignment_1_is_taken(tmp_path: Path) -> None:
    # Slip: an alignment of 1 (every offset aligned) refused along with 0.
    path = tmp_path / "a.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("general.alignment", 1)]))
    assert _refusal(path) is None


def test_the_cap_on_text_kept_is_16_mib(tmp_path: Path) -> None:
    # Slip: the cap doubled: 4,200 strings of 4,000 bytes are past 16 MiB.
    names = [kv_str(f"general.x{i}", "x" * 4000) for i in range((16 << 20) // 4000 + 1)]
    path = tmp_path / "text.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, *names]))
    refusal = _refusal(path)
    assert refusal is not None and "past its cap on names and text kept (16777216 bytes)" in refusal, refusal


def test_a_token_shift_count_of_1_is_taken(tmp_path: Path) -> None:
    # Slip: the least of token_shift_count moved from 1 to 2 (RWKV's models use 1 and 2).
    path = tmp_path / "s.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("llama.token_shift_count", 1)]))
    assert _refusal(path) is None


def test_an_i8_array_is_read(tmp_path: Path) -> None:
    # Slip: the i8 element code lost from the array table (an i8 array would be unreadable).
    path = tmp_path / "i8.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, s("general.x") + struct.pack("<IIQ", 9, 1, 3) + b"\x01\xff\x02"]))
    assert _refusal(path) is None


@pytest.mark.parametrize("vtype, name", [(0, "a u8"), (8, "a string")])
def test_an_alignment_of_the_wrong_type_names_the_type(tmp_path: Path, vtype: int, name: str) -> None:
    # Slip: a number of the type-name table changed (the line would say "of type 0" or name another type).
    path = tmp_path / "a.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, s("general.alignment") + struct.pack("<IQ", vtype, 0)]))
    assert _refusal(path) == (f"model file {path}: corrupt header: general.alignment is {name}, not a u32 "
                              "(llama.cpp reads it only as one)")


def test_strings_longer_than_4096_bytes_are_skipped_not_kept(tmp_path: Path) -> None:
    # Slip: long strings kept (and counted against the 16 MiB cap on text kept) instead of skipped:
    # 4,100 descriptions of 4,097 bytes (16.8 MB) would then be refused.
    names = [kv_str(f"general.d{i}", "x" * 4097) for i in range(4100)]
    path = tmp_path / "long.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, *names]))
    assert _refusal(path) is None


def test_the_first_nested_language_config_is_the_one_read(tmp_path: Path) -> None:
    # Slip: the search for a wrapper's nested config going on past the first found (the last would win).
    folder = _config_dir(tmp_path, {"model_type": "llava", "text_config": {**CONFIG, "num_hidden_layers": 5},
                                    "language_config": {**CONFIG, "num_hidden_layers": 7}})
    assert read_model(str(folder)).hyper.n_layers == 5


def test_a_split_set_of_two_parts_has_its_tensor_count_checked(tmp_path: Path) -> None:
    # Slip: the split check's least count moved from 2 parts to 3 (count > 2 for > 1): a two-part set
    # whose parts hold fewer tensors than its header says would be read as whole.
    def part(no: int, tensors_count: int | None) -> bytes:
        split = [s("split.no") + struct.pack("<IH", 2, no), s("split.count") + struct.pack("<IH", 2, 2)]
        if tensors_count is not None:
            split.append(s("split.tensors.count") + struct.pack("<Ii", 5, tensors_count))
        return gguf([tensor(f"blk.0.t{no}.weight", [32, 4])], kvs=[*BASE_KV, *split])

    first, second = tmp_path / "m-00001-of-00002.gguf", tmp_path / "m-00002-of-00002.gguf"
    second.write_bytes(part(1, None))
    first.write_bytes(part(0, 2))
    assert _refusal(first) is None
    first.write_bytes(part(0, 3))
    assert _refusal(first) == f"split GGUF {first}: 2 tensors in its parts, its header says 3"


def test_laguna_slides_three_layers_in_four_after_a_full_one(tmp_path: Path) -> None:
    # Slip: Laguna's period moved from 4 (src/models/laguna.cpp: load_swa_pattern(ml, 4, dense_first)).
    path = tmp_path / "laguna.gguf"
    kvs = [kv_str("general.architecture", "laguna"), kv_u32("laguna.block_count", 8),
           kv_u32("laguna.attention.head_count", 1), kv_u32("laguna.embedding_length", 32),
           kv_u32("laguna.attention.sliding_window", 512)]
    path.write_bytes(gguf([], kvs=kvs))
    hyper = read_model(str(path)).hyper
    assert hyper.sliding == (False, True, True, True, False, True, True, True) and hyper.sliding_window == 512


def test_an_rwkv_head_size_is_refused_just_past_65536(tmp_path: Path) -> None:
    # Slip: the bound of wkv.head_size moved (the RWKV state llama.cpp sizes multiplies it).
    path = tmp_path / "s.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("llama.wkv.head_size", 65536)]))
    assert _refusal(path) is None
    path.write_bytes(gguf([], kvs=[*BASE_KV, kv_u32("llama.wkv.head_size", 65537)]))
    assert _refusal(path) == f"model file {path}: llama.wkv.head_size is 65537, not a count here (at most 65536)"


@pytest.mark.parametrize("value, shown", [(16.5, "16.5"), ((1 << 24) + 1, "16777217")])
def test_a_config_state_size_that_is_a_fraction_or_too_large_is_refused(tmp_path: Path, value: float,
                                                                        shown: str) -> None:
    # Slip: "too large" and "not whole" both needed for the refusal (and for or): 16.5 would be read as
    # 16, and 2**24 + 1 taken, into the size of the recurrent state.
    config = {**CONFIG, "model_type": "mamba", "state_size": 1 << 24}
    assert _refusal(_config_dir(tmp_path, config)) is None
    folder = _config_dir(tmp_path, {**config, "state_size": value})
    assert _refusal(folder) == f"config {folder / 'config.json'}: state_size is {shown}, not a size"


# --- seed 40 (mut2): the survivors of modelfile/ against their own tests -------------------------------------------

@pytest.mark.parametrize("short", [1, 4, 12])
def test_a_file_that_ends_inside_its_last_tensor_record_is_truncated(tmp_path: Path, short: int) -> None:
    # Slip: the bytes a tensor record needs (8 a dimension, then its type and offset: 12) taken one short;
    # the record's last field would then be read past the file's end, a struct error instead of this line.
    # The file ends with the record (no padding, no data), so no read-ahead holds the missing bytes.
    whole = (b"GGUF" + struct.pack("<IQQ", 3, 1, len(BASE_KV)) + b"".join(BASE_KV)
             + tensor("blk.0.attn_q.weight", [32, 4]))
    path = tmp_path / "cut.gguf"
    path.write_bytes(whole[:-short])
    assert _refusal(path) == (f"model file {path}: truncated or corrupt header (tensor blk.0.attn_q.weight runs "
                              f"past the end of the file at byte {len(whole) - short})")


@pytest.mark.parametrize("etype, fmt", [(0, "B"), (1, "b"), (2, "H"), (3, "h"), (4, "I"), (5, "i"), (6, "f"),
                                        (7, "?"), (10, "Q"), (11, "q"), (12, "d")])
def test_an_array_of_each_number_type_is_read(tmp_path: Path, etype: int, fmt: str) -> None:
    # Slip: a key of the array element table (_ARRAY_CODES) moved: that type's short arrays, which are kept,
    # would fail with a KeyError (a traceback, no line) instead of being read. Every GGUF number type can be
    # an array's element (gguf-py's GGUFValueType; i8 alone was pinned before).
    kvs = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 2),
           kv_u32("llama.attention.head_count", 1), kv_u32("llama.embedding_length", 32),
           s("general.numbers") + struct.pack(f"<IIQ3{fmt}", 9, etype, 3, 1, 0, 1)]
    path = tmp_path / "a.gguf"
    path.write_bytes(gguf([], kvs=kvs))
    assert _refusal(path) is None


def test_a_tensor_outside_the_blocks_counts_in_the_weights_total(tmp_path: Path) -> None:
    # Slip: `other` (what is neither a block, the embedding nor the output: here a rope frequency table,
    # which llama.cpp loads with the model) subtracted from the total instead of added: 64 bytes less.
    path = tmp_path / "other.gguf"
    path.write_bytes(gguf([tensor("blk.0.attn_q.weight", [32, 4]), tensor("token_embd.weight", [32, 8], offset=512),
                           tensor("output.weight", [32, 8], offset=1536), tensor("rope_freqs.weight", [16], offset=2560)]))
    w = read_model(str(path)).weights
    assert (w.layers, w.token_embedding, w.output, w.other) == ((512,), 1024, 1024, 64)
    assert w.total == 512 + 1024 + 1024 + 64


@pytest.mark.parametrize("value, ok", [(2**53, True), (2**53 + 1, False)])
def test_a_config_count_is_taken_up_to_2_to_the_53(tmp_path: Path, value: int, ok: bool) -> None:
    # Slip: the bound of a config count moved (`>= 2**53`, 2**52, 2**54). Above 2**53 a JSON number is no
    # longer exact once any other reader of the file (JavaScript, a float parser) has taken it.
    folder = _config_dir(tmp_path, {**CONFIG, "max_position_embeddings": value})
    refusal = _refusal(folder)
    if ok:
        assert refusal is None and read_model(str(folder)).hyper.context_length == value
    else:
        assert refusal == f"config {folder / 'config.json'}: max_position_embeddings is '{value}', not a count"


#: (layers, heads, KV heads, head size, hidden, vocabulary, positions, sliding window) as Transformers 5.24's
#: config classes default them (``AutoConfig.for_model(model_type)``: Gemma3TextConfig, Gemma2Config,
#: LlamaConfig, MistralConfig, Qwen2Config ``__init__``; Qwen2's window is off, use_sliding_window=False)
_TRANSFORMERS_DEFAULTS = {
    "gemma3_text": (26, 8, 4, 256, 2304, 262208, 131072, 4096),
    "gemma2": (26, 8, 4, 256, 2304, 256000, 8192, 4096),
    "llama": (32, 32, 32, 128, 4096, 32000, 2048, None),
    "mistral": (32, 32, 8, 128, 4096, 32000, 131072, 4096),
    "qwen2": (32, 32, 32, 128, 4096, 151936, 32768, None),
}


@pytest.mark.parametrize("model_type", sorted(_TRANSFORMERS_DEFAULTS))
def test_a_bare_config_gets_the_defaults_transformers_fills_in(tmp_path: Path, model_type: str) -> None:
    # Slip: any number of the defaults table (modelfile/hfconfig.py _DEFAULTS) changed, a KV head count
    # or a vocabulary among them (the older test pinned gemma2's and qwen2's, without their KV heads).
    h = read_model(str(_config_dir(tmp_path, {"model_type": model_type}))).hyper
    kv_heads, = set(h.kv_heads)
    assert (h.n_layers, h.n_heads, kv_heads, h.key_length, h.hidden_size, h.vocab_size, h.context_length,
            h.sliding_window) == _TRANSFORMERS_DEFAULTS[model_type]


def test_a_part_whose_header_says_another_number_names_both(tmp_path: Path) -> None:
    # Slip: the part number the name gives counted from 0 or 2 (`i - 1`): "its name part 0 of 2".
    def part(no: int) -> bytes:
        split = [s("split.no") + struct.pack("<IH", 2, no), s("split.count") + struct.pack("<IH", 2, 2)]
        return gguf([tensor(f"blk.0.t{no}.weight", [32, 4])], kvs=[*BASE_KV, *split])

    first, second = tmp_path / "m-00001-of-00002.gguf", tmp_path / "m-00002-of-00002.gguf"
    first.write_bytes(part(0))
    second.write_bytes(part(0))  # the first part again, renamed
    assert _refusal(first) == f"split GGUF {second}: its header says part 0 of 2, its name part 2 of 2"


def test_arrays_nested_three_deep_are_read_and_four_refused(tmp_path: Path) -> None:
    # Slip: MAX_NESTING moved from 3. The outer array holds arrays down to depth 3, whose elements are u8.
    def nested(depth: int) -> bytes:
        return s("general.x") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQB", 0, 1, 7)

    path = tmp_path / "n.gguf"
    path.write_bytes(gguf([], kvs=[*BASE_KV, nested(3)]))
    assert _refusal(path) is None
    path.write_bytes(gguf([], kvs=[*BASE_KV, nested(4)]))
    assert _refusal(path) == f"model file {path}: corrupt header: arrays nested more than 3 deep in general.x"


@pytest.mark.parametrize("vtype, name", [(10, "a u64"), (12, "an f64"), (9, "an array")])
def test_an_alignment_of_a_wide_or_array_type_names_the_type(tmp_path: Path, vtype: int, name: str) -> None:
    # Slip: a key of the type-name table moved (10 to 9: a u64 alignment would be named "an array" or by its
    # number); the older test checked u8 and string only.
    path = tmp_path / "a.gguf"
    value = struct.pack("<IQ", vtype, 0) if vtype != 9 else struct.pack("<IIQ", 9, 0, 0)
    path.write_bytes(gguf([], kvs=[*BASE_KV, s("general.alignment") + value]))
    assert _refusal(path) == (f"model file {path}: corrupt header: general.alignment is {name}, not a u32 "
                              "(llama.cpp reads it only as one)")
