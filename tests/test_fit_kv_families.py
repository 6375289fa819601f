"""llama.cpp's KV cache and recurrent state, family by family, against the engine's own byte counts.

The ENGINE figures were read from a real llama.cpp (0c1e570, built for the CPU from llama-cpp-python
0.3.36's sdist): ``llama_get_memory_breakdown`` after creating a context with these settings on the
header-only GGUFs of tests/family_fixtures.py (benchmarks/llama_cpp_sizing.py reproduces them).
The rule tests restate each rule from llama.cpp's source (src/llama-hparams.cpp, llama-kv-cache.cpp,
llama-kv-cache-iswa.cpp, llama-memory-recurrent.cpp, models/*.cpp), not from gpulaunch's code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gpu_launch.errors import UsageError  # noqa: E402
from gpu_launch.fit import kv  # noqa: E402
from gpu_launch.modelfile.read import read_model  # noqa: E402
from tests.family_fixtures import FAMILIES, write_family  # noqa: E402

#: (ctx, sequences, unified, K, V, -fa, --swa-full) by name
SETTINGS = {"fa-on-4k": (4096, 1, True, "f16", "f16", "on", False),
            "fa-off-32k": (32768, 1, True, "f16", "f16", "off", False),
            "4-split-8k": (8192, 4, False, "f16", "f16", "on", False),
            "k-q8-32k": (32768, 1, True, "q8_0", "f16", "on", False),
            "swa-full-32k": (32768, 1, True, "f16", "f16", "on", True)}
#: llama.cpp's own context bytes (KV cache + recurrent state); None: llama_init_from_model refuses
ENGINE: dict[str, dict[str, int | None]] = {
    "llama-3.1-8b": {"fa-on-4k": 536870912, "fa-off-32k": 4294967296, "4-split-8k": 1073741824,
                     "k-q8-32k": 3288334336, "swa-full-32k": 4294967296},
    "gemma-3-4b": {"fa-on-4k": 266338304, "fa-off-32k": 853540864, "4-split-8k": 897581056, "k-q8-32k": 653492224,
                   "swa-full-32k": 4563402752},
    "gpt-oss-20b": {"fa-on-4k": 119537664, "fa-off-32k": 824180736, "4-split-8k": 276824064, "k-q8-32k": 631013376,
                    "swa-full-32k": 1610612736},
    "deepseek-v2-lite": {"fa-on-4k": 127401984, "fa-off-32k": 1019215872, "4-split-8k": 254803968, "k-q8-32k": None,
                         "swa-full-32k": 1019215872},
    "falcon-h1-0.5b": {"fa-on-4k": 104583168, "fa-off-32k": 633065472, "4-split-8k": 267337728,
                       "k-q8-32k": 491507712, "swa-full-32k": 633065472},
    "falcon-h1-7b": {"fa-on-4k": 324853760, "fa-off-32k": 1616699392, "4-split-8k": 930316288,
                     "k-q8-32k": 1270669312, "swa-full-32k": 1616699392},
    "rwkv6-1.6b": {"fa-on-4k": 12976128, "fa-off-32k": 12976128, "4-split-8k": 51904512, "k-q8-32k": 12976128,
                   "swa-full-32k": 12976128},
    "rwkv7-1.5b": {"fa-on-4k": 12976128, "fa-off-32k": 12976128, "4-split-8k": 51904512, "k-q8-32k": 12976128,
                   "swa-full-32k": 12976128},
    "lfm2-1.2b": {"fa-on-4k": 50495488, "fa-off-32k": 402817024, "4-split-8k": 101318656, "k-q8-32k": 308445184,
                  "swa-full-32k": 402817024},
    "kimi-linear": {"fa-on-4k": 77922304, "fa-off-32k": 309133312, "4-split-8k": 245628928, "k-q8-32k": None,
                    "swa-full-32k": 309133312},
    "nemotron-nas": {"fa-on-4k": 1048576000, "fa-off-32k": 9563013120, "4-split-8k": 2097152000,
                     "k-q8-32k": 6422528000, "swa-full-32k": 8388608000},
    "gemma-4-e2b": {"fa-on-4k": 37748736, "fa-off-32k": 220200960, "4-split-8k": 100663296, "k-q8-32k": 163774464,
                    "swa-full-32k": 603979776},
    "gemma-3n-e4b": {"fa-on-4k": 67108864, "fa-off-32k": 301989888, "4-split-8k": 201326592, "k-q8-32k": 231211008,
                     "swa-full-32k": 1342177280},
    "smallthinker-21b": {"fa-on-4k": 436207616, "fa-off-32k": 1240465408, "4-split-8k": 872415232,
                         "k-q8-32k": 949731328, "swa-full-32k": 3489660928},
    "afmoe-trinity-mini": {"fa-on-4k": 192937984, "fa-off-32k": 662700032, "4-split-8k": 536870912,
                           "k-q8-32k": 507379712, "swa-full-32k": 2147483648},
    "llama-4-scout": {"fa-on-4k": 805306368, "fa-off-32k": 2894069760, "4-split-8k": 1610612736,
                      "k-q8-32k": 2215772160, "swa-full-32k": 6442450944},
    "embeddinggemma": dict.fromkeys(SETTINGS, 0),
    "bert-base": dict.fromkeys(SETTINGS, 0),
    "olmo-3-7b": {"fa-on-4k": 2147483648, "fa-off-32k": 6106906624, "4-split-8k": 4294967296,
                  "k-q8-32k": 4675600384, "swa-full-32k": 17179869184},
    "exaone-4-32b": {"fa-on-4k": 1073741824, "fa-off-32k": 3053453312, "4-split-8k": 2147483648,
                     "k-q8-32k": 2337800192, "swa-full-32k": 8589934592},
    "command-r7b": {"fa-on-4k": 536870912, "fa-off-32k": 1526726656, "4-split-8k": 1073741824,
                    "k-q8-32k": 1168900096, "swa-full-32k": 4294967296},
    "jamba-mini": {"fa-on-4k": 84541440, "fa-off-32k": 554303488, "4-split-8k": 203948032, "k-q8-32k": 428474368,
                   "swa-full-32k": 554303488},
    "qwen3-next": {"fa-on-4k": 179699712, "fa-off-32k": 884342784, "4-split-8k": 517472256, "k-q8-32k": 695599104,
                   "swa-full-32k": 884342784},
    "mamba-2.8b": {"fa-on-4k": 24903680, "fa-off-32k": 24903680, "4-split-8k": 99614720, "k-q8-32k": 24903680,
                   "swa-full-32k": 24903680},
    "phi-2": {"fa-on-4k": 1342177280, "fa-off-32k": 10737418240, "4-split-8k": 2684354560, "k-q8-32k": None,
              "swa-full-32k": 10737418240},
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("families")
    return {name: write_family(folder, name) for name in FAMILIES}


def size(path: Path, setting: str) -> kv.KvSize:
    ctx, seqs, unified, k, v, fa, swa_full = SETTINGS[setting]
    h = read_model(str(path), environ={}).hyper
    return kv.kv_cache(h, ctx, seqs, k, run=kv.Run(unified=unified, v_type=v, flash_attn=fa, swa_full=swa_full))


#: more loaders (their own sliding periods; MiniMax-01's lightning attention), llama.cpp's bytes with flash
#: attention on, one sequence, at 4096 and 32768
MORE = {"cohere2moe": (411041792, 1212153856), "exaone-moe": (104857600, 574619648), "plamo3-2b": (135266304, 311427072),
        "minimax-01": (92274688, 327155712)}  # MiniMax-01: lightning-attention state of key_length² × heads


@pytest.mark.parametrize("family", sorted(MORE))
def test_more_loaders_periods_match_llama_cpps_bytes(files: dict[str, Path], family: str) -> None:
    h = hyper(files, family)
    for ctx, want in zip((4096, 32768), MORE[family]):
        assert kv.kv_cache(h, ctx, run=kv.Run(flash_attn="on")).total == want


@pytest.mark.parametrize("family", sorted(ENGINE))
def test_every_family_matches_llama_cpps_own_bytes(files: dict[str, Path], family: str) -> None:
    for setting, want in ENGINE[family].items():
        if want is None:
            with pytest.raises(UsageError):
                size(files[family], setting)
        else:
            assert size(files[family], setting).total == want, setting


def hyper(files: dict[str, Path], family: str):  # noqa: ANN201
    return read_model(str(files[family]), environ={}).hyper


def test_falcon_h1_has_attention_and_a_mamba2_state_in_every_layer(files: dict[str, Path]) -> None:
    # create_memory: Falcon-H1's hybrid memory has both filters true for every layer
    got = kv.kv_cache(hyper(files, "falcon-h1-0.5b"), 4096).total
    attention = 36 * 4096 * 2 * (2 * 64) * 2
    conv = (4 - 1) * (1536 + 2 * 1 * 128)  # n_embd_r: (d_conv - 1) x (d_inner + 2 n_group d_state)
    state = 128 * 1536  # n_embd_s: d_state x d_inner
    assert got == attention + 36 * (conv + state) * 4  # f32 state, one sequence


def test_rwkv_state_is_token_shift_and_wkv_per_layer(files: dict[str, Path]) -> None:
    # n_embd_r = token_shift_count (default 2) x n_embd, n_embd_s = n_embd x wkv.head_size, f32, per sequence
    for family in ("rwkv6-1.6b", "rwkv7-1.5b"):
        for seqs in (1, 3):
            assert kv.kv_cache(hyper(files, family), 4096, seqs).total == 24 * (2 * 2048 + 2048 * 64) * 4 * seqs


def test_lfm2_short_convolutions_hold_l_cache_minus_one_rows(files: dict[str, Path]) -> None:
    # n_embd_r = n_embd x (shortconv.l_cache - 1) in the 10 conv layers; 6 attention layers of 8 KV heads
    h = hyper(files, "lfm2-1.2b")
    assert kv.kv_cache(h, 4096).total == 10 * 2048 * (3 - 1) * 4 + 6 * 4096 * 2 * 8 * 64 * 2


def test_kimi_linear_kda_state_from_its_head_dim(files: dict[str, Path]) -> None:
    # KDA: n_embd_r = 3 x (d_conv - 1) x n_head x kda.head_dim, n_embd_s = kda.head_dim^2 x n_head;
    # 7 MLA layers of one latent row (512 + 64), K only
    got = kv.kv_cache(hyper(files, "kimi-linear"), 4096).total
    assert got == 20 * (3 * 3 * 32 * 128 + 128 * 128 * 32) * 4 + 7 * 4096 * 576 * 2


def test_per_layer_kv_heads_pad_v_to_the_widest_without_flash_attention(files: dict[str, Path]) -> None:
    # llama_kv_cache: with -fa off V is transposed and every layer's V row is n_embd_v_gqa_max wide
    # (also the no-attention layers': K of 0, V of the widest); "auto" builds the cache as if on
    h = hyper(files, "nemotron-nas")
    heads = list(h.kv_heads)
    k = sum(n * 128 for n in heads) * 2
    on = kv.kv_cache(h, 8192, run=kv.Run(flash_attn="on")).total
    off = kv.kv_cache(h, 8192, run=kv.Run(flash_attn="off")).total
    assert on == 8192 * 2 * k and kv.kv_cache(h, 8192, run=kv.Run(flash_attn="auto")).total == on
    assert off == 8192 * (k + 80 * 8 * 128 * 2)
    assert on / off < 0.9


def test_gemma4_shared_kv_layers_and_sliding_head_sizes(files: dict[str, Path]) -> None:
    # gemma4: n_layer_kv_from_start = 35 - 20 = 15 layers hold KV; sliding ones use key/value_length_swa
    # (256), full ones key/value_length (512); sliding cells pad256(512 + 512) = 1024
    h = hyper(files, "gemma-4-e2b")
    assert h.kv_layers == 15
    got = kv.kv_cache(h, 8192).total
    assert got == 12 * 1024 * 2 * 256 * 2 + 3 * 8192 * 2 * 512 * 2


def test_gemma3n_reuses_kv_after_layer_20(files: dict[str, Path]) -> None:
    h = hyper(files, "gemma-3n-e4b")
    got = kv.kv_cache(h, 8192).total  # 16 sliding (1024 cells) + 4 full of the first 20 layers
    assert got == 16 * 1024 * 2 * 2 * 256 * 2 + 4 * 8192 * 2 * 2 * 256 * 2


@pytest.mark.parametrize("family,window,sliding", [
    ("smallthinker-21b", 4096, [il % 4 != 0 for il in range(52)]),  # dense-first, the file's window replaced
    ("afmoe-trinity-mini", 2048, [il % 4 < 3 for il in range(32)]),
    ("olmo-3-7b", 4096, [il % 4 < 3 for il in range(32)]),
    ("exaone-4-32b", 4096, [il % 4 < 3 for il in range(64)]),
    ("llama-4-scout", 8192, [il % 4 < 3 for il in range(48)]),  # chunked attention, the chunk as window
])
def test_default_sliding_periods_and_forced_windows(files: dict[str, Path], family: str, window: int,
                                                    sliding: list[bool]) -> None:
    h = hyper(files, family)
    assert h.sliding_window == window and list(h.sliding) == sliding
    assert h.chunked == (family == "llama-4-scout")


def test_smallthinker_window_is_forced_to_4096_whatever_the_file_says(tmp_path: Path) -> None:
    from tests.family_fixtures import smallthinker_21b
    from tests.model_fixtures import write_gguf

    model = smallthinker_21b()
    model.kv["smallthinker.attention.sliding_window"] = 512
    write_gguf(tmp_path / "st.gguf", model)
    assert read_model(str(tmp_path / "st.gguf"), environ={}).hyper.sliding_window == 4096


@pytest.mark.parametrize("family", ["embeddinggemma", "bert-base"])
def test_encoders_have_no_kv_cache(files: dict[str, Path], family: str) -> None:
    size = kv.kv_cache(hyper(files, family), 8192, 4)
    assert size.total == 0 and "no KV cache" in size.rules[0]


def test_swa_full_gives_sliding_layers_the_whole_context(files: dict[str, Path]) -> None:
    h = hyper(files, "gpt-oss-20b")
    assert kv.kv_cache(h, 32768, run=kv.Run(swa_full=True)).total == 24 * 32768 * 2 * 8 * 64 * 2


def test_without_flash_attention_the_compute_buffer_grows_with_the_context(files: dict[str, Path]) -> None:
    # llama.cpp measured gpt-oss-20b at 32768 cells, -fa off: compute 4402329600 bytes (4198 MiB); the
    # scores of one micro-batch: n_kv x n_ubatch x (4 n_head + 4) bytes, f32 scores and mask
    h = hyper(files, "gpt-oss-20b")
    off = kv.kv_cache(h, 32768, run=kv.Run(flash_attn="off"))
    assert off.scratch == 32768 * 512 * (4 * 64 + 4) and not off.flash_attn
    assert (1 << 30) + off.scratch >= 4402329600
    assert kv.kv_cache(h, 32768, run=kv.Run(flash_attn="auto")).scratch == 0  # CUDA has a kernel for head 64


def test_refused_settings_say_the_valid_choice(files: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="block of 32 does not divide the head size 80") as e:
        kv.kv_cache(hyper(files, "phi-2"), 4096, kv_type="q8_0")
    assert "f16" in (e.value.hint or "")
    with pytest.raises(UsageError, match=r"different K \(q8_0\) and V \(f16\)") as e:
        kv.kv_cache(hyper(files, "deepseek-v2-lite"), 4096, kv_type="q8_0", v_type="f16")
    assert "-ctk q8_0 -ctv q8_0" in (e.value.hint or "")
    with pytest.raises(UsageError, match="requires flash attention"):
        kv.kv_cache(hyper(files, "llama-3.1-8b"), 4096, run=kv.Run(v_type="q8_0", flash_attn="off"))
    # flash attention off skips the head-size check (llama_init_from_model checks it only when FA may run)
    assert kv.kv_cache(hyper(files, "phi-2"), 4096, 1, "q8_0", run=kv.Run(v_type="f16", flash_attn="off")).total > 0
