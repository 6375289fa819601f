"""DeepSeek-V4's own cache in llama.cpp (``llama_kv_cache_dsv4``), against the engine's own bytes.

The rule is restated here from llama.cpp 0c1e570's source, not from gpulaunch's code:
src/llama-kv-cache-dsv4.cpp (K only, ``unified_raw = false`` and ``unified_compressed = false``: one
stream per sequence; the raw cache an ISWA cache whose every layer slides, src/models/deepseek4.cpp
``set_swa_pattern(0)``; CSA caches of GGML_PAD(ceil(kv_size / 4), 256) cells on the ratio-4 layers
with the lightning indexer's as many cells of ``indexer_head_size`` values, HCA caches at 1/128 on the
ratio-128 layers; f32 compressor states [2·head, 8], [2·indexer head, 8] and [head, 128], kv and
score, per stream), src/llama-kv-cache-iswa.cpp (the window's cells) and src/llama-context.cpp
(``llama_init_from_model`` refuses K and V of different types for DeepSeek-V4).

The ENGINE figures: ``llama_get_memory_breakdown`` context bytes of the real llama.cpp (CPU build from
llama-cpp-python 0.3.36's sdist) for tests/family_fixtures.py's ``deepseek-v4-flash`` at every setting
of benchmarks/llama_cpp_sizing.py's matrix, 2026-12-02 (before this rule gpulaunch planned 0.42-10.6x them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gpu_launch.errors import ModelFileError, UsageError  # noqa: E402
from gpu_launch.fit import kv  # noqa: E402
from gpu_launch.modelfile.read import read_model  # noqa: E402
from tests.family_fixtures import _model, deepseek_v4_flash, write_family  # noqa: E402
from tests.model_fixtures import write_gguf  # noqa: E402

#: (ctx, sequences, unified, K, V, -fa, --swa-full) -> llama.cpp's context bytes (None: it refuses)
ENGINE = {
    (512, 1, True, "f16", "f16", "on", False): 46874624,
    (4096, 1, True, "f16", "f16", "on", False): 78790656,
    (32768, 1, True, "f16", "f16", "on", False): 271466496,
    (32768, 1, True, "f16", "f16", "off", False): 271466496,
    (32768, 1, True, "f16", "f16", "auto", False): 271466496,
    (8192, 4, True, "f16", "f16", "on", False): 425263104,
    (8192, 4, False, "f16", "f16", "on", False): 260112384,
    (8192, 4, False, "f16", "f16", "off", False): 260112384,
    (32768, 1, True, "q8_0", "q8_0", "on", False): 149938176,
    (32768, 1, True, "q4_0", "q4_0", "on", False): 85123072,
    (32768, 1, True, "q8_0", "f16", "on", False): None,
    (32768, 1, True, "f16", "f16", "on", True): 1680490496,
    (8192, 4, True, "f16", "f16", "off", True): 1732837376,
    (3000, 1, True, "f16", "f16", "on", False): 71909376,
}
#: llama.cpp's compute buffer with flash attention off (it grows with the context), same runs
ENGINE_COMPUTE_FA_OFF = {(32768, 1, True, "f16", "f16", "off", False): 1475484576,
                         (8192, 4, True, "f16", "f16", "off", True): 1681534944}


@pytest.fixture(scope="module")
def flash(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return read_model(str(write_family(tmp_path_factory.mktemp("dsv4"), "deepseek-v4-flash")), environ={}).hyper


def sized(h, case: tuple) -> kv.KvSize:  # noqa: ANN001
    ctx, seqs, unified, k, v, fa, swa_full = case
    return kv.kv_cache(h, ctx, seqs, k, run=kv.Run(unified=unified, v_type=v, flash_attn=fa, swa_full=swa_full))


@pytest.mark.parametrize("case", sorted(ENGINE, key=str))
def test_the_flash_layout_matches_llama_cpps_own_bytes(flash, case: tuple) -> None:  # noqa: ANN001
    if ENGINE[case] is None:
        with pytest.raises(UsageError, match="different K .* and V .* for a DeepSeek-V4 model") as e:
            sized(flash, case)
        assert e.value.exit_code == 2
    else:
        assert sized(flash, case).total == ENGINE[case]


def pad(n: int) -> int:
    return -(-n // 256) * 256


def restated(ctx: int, seqs: int, unified: bool, row: int, lid_row: int, ubatch: int = 512, window: int = 128,
             swa_full: bool = False) -> int:
    """The V4-Flash layout's bytes by the rule as llama.cpp's source states it (f16: 2 bytes a value)."""
    n_ctx_seq = pad(ctx) if unified or seqs == 1 else pad(pad(ctx) // seqs)
    raw = n_ctx_seq if swa_full else pad(min(n_ctx_seq, window + min(ubatch, ctx)))
    csa, hca = pad(max(1, -(-n_ctx_seq // 4))), pad(max(1, -(-n_ctx_seq // 128)))
    ratios = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(41)]
    total = 0
    for r in ratios:
        total += row * raw * seqs
        if r == 4:
            total += (row + lid_row) * csa * seqs + (2 * 1024 * 8 + 2 * 256 * 8) * 4 * seqs
        elif r == 128:
            total += row * hca * seqs + 2 * 512 * 128 * 4 * seqs
    return total


def test_the_rule_as_llama_cpps_source_states_it(flash) -> None:  # noqa: ANN001
    for ctx, seqs, unified in ((512, 1, True), (4096, 1, True), (32768, 1, True), (3000, 1, True), (8192, 4, False)):
        got = kv.kv_cache(flash, ctx, seqs, "f16", run=kv.Run(unified=unified, flash_attn="on")).total
        assert got == restated(ctx, seqs, unified, 512 * 2, 128 * 2)
    q8 = kv.kv_cache(flash, 32768, 1, "q8_0", run=kv.Run(v_type="q8_0", flash_attn="on")).total
    assert q8 == restated(32768, 1, True, 512 // 32 * 34, 128 // 32 * 34)  # the indexer in the -ctk type too


def test_a_unified_cache_still_keeps_one_stream_per_sequence(flash) -> None:  # noqa: ANN001
    """-kvu does not reach this cache (unified_raw = false): 4 sequences of 8192 hold 4 streams of 8192 cells."""
    got = kv.kv_cache(flash, 8192, 4, "f16", run=kv.Run(unified=True, flash_attn="on"))
    assert got.total == restated(8192, 4, True, 1024, 256) == ENGINE[(8192, 4, True, "f16", "f16", "on", False)]
    assert any("one stream per sequence (4)" in r for r in got.rules)


def test_never_under_and_far_below_the_old_bound(flash) -> None:  # noqa: ANN001
    """The old plan (full K and V on every layer at the full context) was 10.6x at 32768 and under at 512."""
    old_32k = 43 * 32768 * (512 + 512) * 2
    got = kv.kv_cache(flash, 32768, 1, "f16", run=kv.Run(flash_attn="on"))
    assert got.total == 271466496 and old_32k / got.total > 10
    assert kv.kv_cache(flash, 512, 1, "f16", run=kv.Run(flash_attn="on")).total > 43 * 512 * 1024 * 2


def test_without_flash_attention_the_allowance_covers_llama_cpps_compute_buffer(flash) -> None:  # noqa: ANN001
    for case, compute in ENGINE_COMPUTE_FA_OFF.items():
        size = sized(flash, case)
        assert not size.flash_attn and (1 << 30) + size.scratch >= compute
    assert sized(flash, (32768, 1, True, "f16", "f16", "on", False)).scratch == 0


def _broken(tmp_path: Path, ratios: list[int] | None) -> Path:
    g = deepseek_v4_flash()
    key = "deepseek4.attention.compress_ratios"
    if ratios is None:
        del g.kv[key]
    else:
        g.kv[key] = ratios
    path = tmp_path / "dsv4.gguf"
    write_gguf(path, g)
    return path


@pytest.mark.parametrize("ratios", [None, [0, 4], [0, 0] + [4, 64] * 20 + [4]], ids=["missing", "short", "ratio-64"])
def test_compress_ratios_llama_cpp_refuses_are_one_error_line(tmp_path: Path, ratios: list[int] | None) -> None:
    with pytest.raises(ModelFileError, match="compress_ratios") as e:
        read_model(str(_broken(tmp_path, ratios)), environ={})
    assert e.value.exit_code == 7


def test_no_window_is_refused_as_the_loader_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "w.gguf"
    write_gguf(path, _model("deepseek4", 1000, 4096, block_count=2, embedding_length=64, attention__head_count=4,
                            attention__compress_ratios=[0, 4]))
    with pytest.raises(ModelFileError, match="sliding_window"):
        read_model(str(path), environ={})
