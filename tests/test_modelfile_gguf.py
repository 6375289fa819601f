"""GGUF headers read by gpulaunch's own reader, against files written by the real ``gguf`` writer.

Byte counts are checked against the reference reader (``gguf.GGUFReader``) and its type table;
hyperparameters against what llama.cpp derives from the same keys (sliding patterns, recurrent
layers, MLA ranks).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as Q  # noqa: E402

from gpu_launch.errors import ExitCode, ModelFileError  # noqa: E402
from gpu_launch.fit import kv  # noqa: E402
from gpu_launch.modelfile import bounded  # noqa: E402
from gpu_launch.modelfile.gguf import GGML_TYPES, read_header  # noqa: E402
from gpu_launch.modelfile.read import read_model  # noqa: E402
from model_fixtures import HEADER_END, Gguf, T, gguf, llama70b, llama_tensors, write_gguf  # noqa: E402


def test_type_table_matches_every_type_the_gguf_package_knows() -> None:
    known = {int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGML_QUANT_SIZES}
    assert {k: GGML_TYPES[k] for k in known} == known
    assert set(GGML_TYPES) == set(known), "a type in gpulaunch's table that gguf does not know, or the reverse"


def test_every_quant_type_is_byte_exact_against_the_reference_reader(tmp_path: Path) -> None:
    tensors = []
    for i, qtype in enumerate(GGML_QUANT_SIZES):
        block, _ = GGML_QUANT_SIZES[qtype]
        tensors.append(T(f"blk.{i}.ffn_up.weight", (3, block * (i % 4 + 1)), qtype))
    model = Gguf("llama", {"llama.block_count": len(tensors), "llama.embedding_length": 64,
                           "llama.attention.head_count": 8}, tensors)
    [path] = write_gguf(tmp_path / "all.gguf", model)
    oracle = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(path).tensors}
    mine = {t.name: t.nbytes for t in read_header(str(path)).tensors}
    assert mine == oracle
    facts = read_model(str(path))
    assert list(facts.weights.layers) == [oracle[f"blk.{i}.ffn_up.weight"] for i in range(len(tensors))]
    assert facts.weights.by_type == {q.name: oracle[f"blk.{i}.ffn_up.weight"] for i, q in enumerate(GGML_QUANT_SIZES)}


def test_weights_are_grouped_as_llama_cpp_places_them(tmp_path: Path) -> None:
    tensors = llama_tensors(4, 256, 8, 2, 512, 1000, qtype=Q.Q8_0)
    model = Gguf("llama", {"llama.block_count": 4, "llama.embedding_length": 256, "llama.attention.head_count": 8,
                           "llama.attention.head_count_kv": 2, "general.file_type": 7}, tensors, vocab=1000)
    [path] = write_gguf(tmp_path / "small.gguf", model)
    oracle = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(path).tensors}
    facts = read_model(str(path))
    w = facts.weights
    assert w.layers == tuple(sum(v for k, v in oracle.items() if k.startswith(f"blk.{i}.")) for i in range(4))
    assert w.token_embedding == oracle["token_embd.weight"]
    assert w.output == oracle["output.weight"] + oracle["output_norm.weight"]
    assert w.total == sum(oracle.values()) and w.other == 0 and not w.tied_embeddings
    assert (facts.format, facts.architecture, facts.dtype) == ("gguf", "llama", "Q8_0")
    assert facts.hyper.vocab_size == 1000
    assert (facts.hyper.n_heads, facts.hyper.kv_heads, facts.hyper.key_length) == (8, (2,) * 4, 32)


def test_tied_embeddings_when_the_file_has_no_output_weight(tmp_path: Path) -> None:
    tensors = llama_tensors(2, 256, 4, 4, 512, 500, qtype=Q.F16, tied=True)
    model = Gguf("qwen2", {"qwen2.block_count": 2, "qwen2.embedding_length": 256, "qwen2.attention.head_count": 4},
                 tensors)
    [path] = write_gguf(tmp_path / "tied.gguf", model)
    w = read_model(str(path)).weights
    assert w.tied_embeddings and w.output == 256 * 4  # the output norm only (F32)


def test_a_70b_header_is_read_without_its_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read starts inside the header; all reads together are less than the header (the
    tokenizer's numeric arrays are jumped over), and a 45 GB file costs a few MB of reads."""
    [path] = write_gguf(tmp_path / "llama-70b.gguf", llama70b())
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        reads.append((offset, len(data)))
        return data

    monkeypatch.setattr(bounded.os, "pread", spy)
    facts = read_model(str(path))
    end = HEADER_END[path]
    assert path.stat().st_size > 40e9 and facts.weights.total > 40e9
    assert reads and all(offset < end for offset, _ in reads)
    assert max(o + n for o, n in reads) <= end + bounded.READ_AHEAD
    assert facts.header_bytes == sum(n for _, n in reads) <= end
    assert facts.hyper.n_layers == 80 and facts.hyper.vocab_size == 128256 and facts.dtype == "Q4_K_M"
    assert facts.weights.total + HEADER_END[path] <= path.stat().st_size


def test_split_gguf_set_reads_every_part(tmp_path: Path) -> None:
    tensors = llama_tensors(6, 256, 8, 8, 512, 1000, qtype=Q.Q4_0)
    model = Gguf("llama", {"llama.block_count": 6, "llama.embedding_length": 256,
                           "llama.attention.head_count": 8}, tensors, vocab=1000)
    files = write_gguf(tmp_path / "m.gguf", model, split_max_tensors=20)
    assert len(files) == 3 and files[0].name == "m-00001-of-00003.gguf"
    whole = read_model(str(files[0]))
    assert whole.files == tuple(str(f) for f in files)
    assert whole.weights.total == sum(t.nbytes for t in tensors)
    assert whole.weights.layers == tuple(sum(t.nbytes for t in tensors if t.name.startswith(f"blk.{i}."))
                                         for i in range(6))
    assert read_model(str(files[2])).weights == whole.weights  # any part names the set
    assert read_model(tmp_path).weights == whole.weights  # so does its folder (a Path too)
    files[1].unlink()
    with pytest.raises(ModelFileError, match="1 of its 3 parts are missing") as err:
        read_model(str(files[0]))
    assert err.value.exit_code == ExitCode.BAD_FILE


def _facts(tmp_path: Path, arch: str, kv: dict, layers: int, **extra: object):
    tensors = [T(f"blk.{i}.attn_norm.weight", (64,), Q.F32) for i in range(layers)]
    model = Gguf(arch, {f"{arch}.block_count": layers, f"{arch}.embedding_length": 64,
                        **{f"{arch}.{k}": v for k, v in kv.items()}}, tensors, **extra)  # type: ignore[arg-type]
    [path] = write_gguf(tmp_path / f"{arch}.gguf", model)
    return read_model(str(path))


def _hyper(tmp_path: Path, arch: str, kv: dict, layers: int, **extra: object):
    return _facts(tmp_path, arch, kv, layers, **extra).hyper


def test_gemma3_every_sixth_layer_is_global(tmp_path: Path) -> None:
    h = _hyper(tmp_path, "gemma3", {"attention.head_count": 8, "attention.head_count_kv": 4,
                                    "attention.key_length": 256, "attention.value_length": 256,
                                    "attention.sliding_window": 1024, "context_length": 131072}, 62)
    assert h.sliding_window == 1024 and len(h.sliding) == 62
    assert [i for i, s in enumerate(h.sliding) if not s] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert (h.key_length, h.value_length, h.kv_heads[0]) == (256, 256, 4)  # head_dim, not hidden / heads


def test_gpt_oss_alternates_sliding_and_full(tmp_path: Path) -> None:
    h = _hyper(tmp_path, "gpt-oss", {"attention.head_count": 64, "attention.head_count_kv": 8,
                                     "attention.sliding_window": 128, "expert_count": 32}, 24)
    assert h.sliding == tuple(i % 2 == 0 for i in range(24)) and h.sliding_window == 128
    assert h.expert_count == 32


def test_gemma2_and_cohere2_patterns_and_an_explicit_pattern_array(tmp_path: Path) -> None:
    g2 = _hyper(tmp_path, "gemma2", {"attention.head_count": 8}, 4)
    assert g2.sliding == (True, False, True, False) and g2.sliding_window == 4096  # llama.cpp's default window
    c2 = _hyper(tmp_path, "cohere2", {"attention.head_count": 8, "attention.sliding_window": 4096}, 8)
    assert c2.sliding == (True, True, True, False) * 2
    pattern = [True, False, False, True, True]
    explicit = _hyper(tmp_path, "gemma3n", {"attention.head_count": 8, "attention.sliding_window": 512,
                                            "attention.sliding_window_pattern": pattern}, 5)
    assert explicit.sliding == tuple(pattern)
    plain = _hyper(tmp_path, "llama", {"attention.head_count": 8}, 3)
    assert plain.sliding == () and plain.sliding_window is None


def test_deepseek_mla_ranks(tmp_path: Path) -> None:
    # Today's convert_hf_to_gguf.py (DeepseekV2Model.set_gguf_parameters) writes the latent row as
    # one KV head (key_length = kv_lora_rank + rope, value_length = kv_lora_rank) and the per-head
    # sizes under key_length_mla / value_length_mla: llama.cpp's is_mla() (src/llama-hparams.cpp).
    h = _hyper(tmp_path, "deepseek2", {"attention.head_count": 128, "attention.head_count_kv": 1,
                                       "attention.key_length": 576, "attention.value_length": 512,
                                       "attention.key_length_mla": 192, "attention.value_length_mla": 128,
                                       "attention.kv_lora_rank": 512, "rope.dimension_count": 64,
                                       "expert_count": 256}, 61)
    assert (h.kv_lora_rank, h.rope_head_dim, h.n_heads) == (512, 64, 128)
    assert h.kv_lora_rank + h.rope_head_dim == 576
    assert kv.kv_cache(h, 4096).total == 61 * 4096 * 576 * 2  # one latent row per token, K only


def test_old_deepseek_gguf_without_mla_keys_caches_full_k_and_v(tmp_path: Path) -> None:
    """A DeepSeek GGUF converted before the MLA keys existed (kv_lora_rank, but no key_length_mla):
    llama.cpp's is_mla() is false and src/models/deepseek2.cpp runs it as multi-head attention,
    caching K (192) and V (128) for all 16 KV heads: 9x the latent row, which would under-size it."""
    h = _hyper(tmp_path, "deepseek2", {"attention.head_count": 16, "attention.head_count_kv": 16,
                                       "attention.key_length": 192, "attention.value_length": 128,
                                       "attention.kv_lora_rank": 512, "rope.dimension_count": 64}, 27)
    assert not h.kv_lora_rank
    assert kv.kv_cache(h, 4096).total == 27 * 4096 * 16 * (192 + 128) * 2


def test_multi_token_prediction_blocks_are_not_trunk_layers(tmp_path: Path) -> None:
    """DeepSeek V3's GGUF counts its MTP block in block_count (62 = 61 + 1); it is no layer of the trunk,
    and llama.cpp does not load its weights (TENSOR_SKIP): they are counted apart, not in the total."""
    facts = _facts(tmp_path, "deepseek2", {"attention.head_count": 128, "attention.kv_lora_rank": 512,
                                           "attention.key_length": 192, "attention.value_length": 128,
                                           "rope.dimension_count": 64, "nextn_predict_layers": 1}, 62)
    assert facts.hyper.n_layers == 61 and facts.hyper.nextn_layers == 1 and len(facts.hyper.kv_heads) == 61
    assert len(facts.weights.layers) == 61 and facts.weights.other == 0
    assert facts.weights.nextn == 64 * 4 and facts.weights.total == 61 * 64 * 4  # blk.61's tensor, not loaded


def test_a_20_digit_count_of_prediction_blocks_is_that_fields_error(tmp_path: Path) -> None:
    """It was taken as every block (min with block_count), and the line said "a layer count of 0"."""
    from gpu_launch.errors import ModelFileError

    for count, says in ((10**19, "nextn_predict_layers is a number of about 20 digits"),
                        (1000, "nextn_predict_layers is 1000, not a count here (at most 4)")):
        with pytest.raises(ModelFileError) as err:
            _facts(tmp_path, "llama", {"attention.head_count": 8, "nextn_predict_layers": count}, 4)
        assert says in err.value.message and "layer count" not in err.value.message


def test_mamba_every_layer_recurrent_with_its_ssm_numbers(tmp_path: Path) -> None:
    h = _hyper(tmp_path, "mamba", {"ssm.conv_kernel": 4, "ssm.inner_size": 5120, "ssm.state_size": 16,
                                   "ssm.time_step_rank": 160, "attention.head_count": 0}, 64)
    assert h.recurrent == (True,) * 64 and h.kv_heads == (0,) * 64
    assert h.ssm == {"conv_kernel": 4, "inner_size": 5120, "state_size": 16, "time_step_rank": 160}


def test_jamba_per_layer_kv_heads_mark_the_recurrent_layers(tmp_path: Path) -> None:
    kv = [0, 0, 0, 0, 8, 0, 0, 0] * 4
    h = _hyper(tmp_path, "jamba", {"attention.head_count": 32, "attention.head_count_kv": kv,
                                   "ssm.state_size": 16, "ssm.inner_size": 8192, "ssm.conv_kernel": 4}, 32)
    assert h.kv_heads == tuple(kv) and h.recurrent == tuple(k == 0 for k in kv)
    assert sum(1 for r in h.recurrent if not r) == 4


def test_nemotron_h_mlp_only_layers_are_not_recurrent(tmp_path: Path) -> None:
    """Nemotron-H: kv 0 and ffn 0 is an SSM layer; kv 0 with an ffn is an MLP-only layer, with no state."""
    h = _hyper(tmp_path, "nemotron_h", {"attention.head_count": 32, "attention.head_count_kv": [0, 0, 8, 0],
                                        "feed_forward_length": [0, 21504, 0, 0], "ssm.state_size": 128}, 4)
    assert h.recurrent == (True, False, False, True) and h.kv_heads == (0, 0, 8, 0)


def test_qwen3_next_one_full_attention_layer_in_four(tmp_path: Path) -> None:
    h = _hyper(tmp_path, "qwen3next", {"attention.head_count": 16, "attention.head_count_kv": 2,
                                       "attention.key_length": 256, "full_attention_interval": 4,
                                       "ssm.state_size": 128, "ssm.group_count": 16}, 48)
    assert [i for i, r in enumerate(h.recurrent) if not r] == list(range(3, 48, 4))
    assert h.kv_heads == tuple(0 if r else 2 for r in h.recurrent)
    assert h.ssm["state_size"] == 128


def test_per_layer_head_counts_are_kept_per_layer(tmp_path: Path) -> None:
    h = _hyper(tmp_path, "openelm", {"attention.head_count": [12, 12, 16, 20],
                                     "attention.head_count_kv": [3, 3, 4, 5]}, 4)
    assert h.n_heads == 20 and h.kv_heads == (3, 3, 4, 5)


def test_errors_are_one_line_with_exit_code_7(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError) as err:
        read_model(str(tmp_path / "absent.gguf"))
    assert err.value.exit_code == ExitCode.BAD_FILE and "\n" not in str(err.value)


def test_vocabulary_from_the_embedding_when_the_file_has_no_tokenizer(tmp_path: Path) -> None:
    """The vocabulary sizes llama.cpp's logits buffer (n_ubatch x n_vocab x 4, part of the GPU's allowance):
    a file without tokenizer strings still states it as token_embd's outer dimension."""
    model = Gguf("llama", {"llama.block_count": 2, "llama.embedding_length": 256, "llama.attention.head_count": 8},
                 llama_tensors(2, 256, 8, 8, 512, 3000))
    [path] = write_gguf(tmp_path / "notok.gguf", model)
    assert read_model(str(path)).hyper.vocab_size == 3000


# --- seed 40 (mut2): survivors of modelfile/gguf_facts.py ------------------------------------------------------------

def test_a_stated_sliding_window_pattern_sets_the_period(tmp_path: Path) -> None:
    # Slip: the most a stated period may be (1 << 16) turned into 0 (1 >> 16): every stated period refused.
    # Gemma 3's period is 6 unless the file says otherwise; here it says 3 (llama.cpp: set_swa_pattern(n)).
    h = _hyper(tmp_path, "gemma3", {"attention.head_count": 8, "attention.sliding_window": 1024,
                                    "attention.sliding_window_pattern": 3}, 6)
    assert h.sliding == (True, True, False, True, True, False) and h.sliding_window == 1024


@pytest.mark.parametrize("shared, ok", [(4, True), (5, False)])
def test_gemma4_shares_kv_from_all_layers_but_two(tmp_path: Path, shared: int, ok: bool) -> None:
    # Slip: the most shared_kv_layers may be (gguf_facts: n_layer - 2) moved by one.
    kv = {"attention.head_count": 8, "attention.shared_kv_layers": shared}
    if ok:
        assert _hyper(tmp_path, "gemma4", kv, 6).n_layers == 6
    else:
        with pytest.raises(ModelFileError, match=r"gemma4\.attention\.shared_kv_layers is 5, not a count here "
                                                 r"\(at most 4\)"):
            _hyper(tmp_path, "gemma4", kv, 6)


@pytest.mark.parametrize("key", ["ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.group_count",
                                 "ssm.time_step_rank"])
def test_a_mamba_number_of_0_is_read_as_stated(tmp_path: Path, key: str) -> None:
    # Slip: the least of a Mamba state number moved from 0 to 1 (STATE_KEYS says the Mamba numbers may be 0,
    # as when absent): a file stating 0 would be refused.
    h = _hyper(tmp_path, "mamba", {key: 0}, 2)
    assert h.ssm.get(key.removeprefix("ssm.")) == 0
