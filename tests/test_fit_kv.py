"""KV cache per family, against each engine's formula computed here independently (fit/kv.py cites
the source of each rule; these tests restate the rule from the engine's logs and source, not from
gpulaunch's code)."""

from __future__ import annotations

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.fit import kv
from gpu_launch.modelfile.facts import Hyper

MiB = 1 << 20


def llama31_8b() -> Hyper:
    return Hyper(n_layers=32, n_heads=32, kv_heads=(8,) * 32, key_length=128, value_length=128,
                 hidden_size=4096, context_length=131072, vocab_size=128256)


def gemma3_4b() -> Hyper:
    # Gemma-3 GGUFs carry no pattern: llama.cpp makes every 6th layer global (il % 6 == 5).
    sliding = tuple(il % 6 < 5 for il in range(34))
    return Hyper(n_layers=34, n_heads=8, kv_heads=(4,) * 34, key_length=256, value_length=256, hidden_size=2560,
                 sliding_window=1024, sliding=sliding)


def deepseek_v3() -> Hyper:
    return Hyper(n_layers=61, n_heads=128, kv_heads=(128,) * 61, key_length=192, value_length=128, hidden_size=7168,
                 kv_lora_rank=512, rope_head_dim=64)


def qwen3_next() -> Hyper:
    recurrent = tuple(il % 4 != 3 for il in range(48))
    kv_heads = tuple(0 if r else 2 for r in recurrent)
    return Hyper(n_layers=48, n_heads=16, kv_heads=kv_heads, key_length=256, value_length=256, hidden_size=2048,
                 recurrent=recurrent,
                 ssm={"conv_kernel": 4, "inner_size": 4096, "state_size": 128, "group_count": 16, "time_step_rank": 32})


def mamba_2_8b() -> Hyper:
    return Hyper(n_layers=64, n_heads=0, kv_heads=(0,) * 64, key_length=0, value_length=0, hidden_size=2560,
                 recurrent=(True,) * 64,
                 ssm={"conv_kernel": 4, "inner_size": 5120, "state_size": 16, "group_count": 0, "time_step_rank": 160})


def near(got: int, want: float) -> bool:
    return abs(got - want) <= 0.01 * want


@pytest.mark.parametrize("ctx", [4096, 8192, 32768, 3000])
def test_gqa_is_layers_times_cells_times_k_plus_v(ctx: int) -> None:
    cells = -(-ctx // 256) * 256  # llama.cpp pads the context to 256
    want = 32 * cells * (8 * 128 + 8 * 128) * 2  # f16
    got = kv.kv_cache(llama31_8b(), ctx).total
    assert near(got, want) and got == want
    if ctx == 8192:
        assert got == 1024 * MiB  # llama.cpp logs "KV self size = 1024.00 MiB" for Llama-3.1-8B at -c 8192


def test_head_dim_is_the_files_not_hidden_over_heads() -> None:
    h = Hyper(n_layers=28, n_heads=16, kv_heads=(8,) * 28, key_length=128, value_length=128, hidden_size=1024)
    assert kv.kv_cache(h, 4096).total == 28 * 4096 * 2 * 8 * 128 * 2  # hidden/heads = 64 would be half


@pytest.mark.parametrize("ctx,seqs", [(8192, 1), (32768, 1), (1024, 1), (16384, 4)])
def test_sliding_window_layers_hold_the_window_not_the_context(ctx: int, seqs: int) -> None:
    h = gemma3_4b()
    row = 2 * 4 * 256 * 2
    swa_cells = min(ctx, -(-(1024 * seqs + min(512, ctx)) // 256) * 256)
    want = 5 * ctx * row + 29 * swa_cells * row
    got = kv.kv_cache(h, ctx, seqs).total
    assert near(got, want)
    naive = 34 * ctx * row
    if ctx >= 8192:
        assert got < naive / 2.5  # every layer at the full context would be 3-8x too much


def test_gemma3_at_8192_matches_llama_cpps_log() -> None:
    # llama.cpp: non-SWA 160.00 MiB (8192 cells, 5 layers), SWA 174.00 MiB (1536 cells, 29 layers)
    assert kv.kv_cache(gemma3_4b(), 8192).total == (160 + 174) * MiB


@pytest.mark.parametrize("ctx", [4096, 32768, 163840])
def test_mla_is_one_latent_row_per_token(ctx: int) -> None:
    got = kv.kv_cache(deepseek_v3(), ctx).total
    cells = -(-ctx // 256) * 256
    assert near(got, 61 * cells * (512 + 64) * 2)
    assert got * 20 < 61 * cells * 128 * (192 + 128) * 2  # num_key_value_heads=128 would be ~70x


@pytest.mark.parametrize("ctx,seqs", [(4096, 1), (65536, 1), (8192, 4)])
def test_qwen3_next_attention_layers_per_token_ssm_layers_per_sequence(ctx: int, seqs: int) -> None:
    got = kv.kv_cache(qwen3_next(), ctx, seqs).total
    attention = 12 * ctx * (2 * 256 * 2) * 2
    conv = (4 - 1) * (4096 + 2 * 16 * 128)
    state = 128 * 4096
    recurrent = 36 * (conv + state) * 4 * seqs  # f32
    assert near(got, attention + recurrent)


@pytest.mark.parametrize("ctx", [2048, 100000])
def test_mamba_state_does_not_grow_with_the_context(ctx: int) -> None:
    got = kv.kv_cache(mamba_2_8b(), ctx).total
    assert got == 64 * ((4 - 1) * 5120 + 16 * 5120) * 4


@pytest.mark.parametrize("kv_type,per_32", [("q8_0", 34), ("q4_0", 18), ("f16", 64), ("fp8", 32)])
def test_quantised_kv_types_use_ggml_block_sizes(kv_type: str, per_32: int) -> None:
    got = kv.kv_cache(llama31_8b(), 4096, kv_type=kv_type).total
    assert got == 32 * 4096 * 2 * (8 * 128 // 32) * per_32


@pytest.mark.parametrize("ctx", [3000, 32768, 2500])
def test_vllm_blocks_of_16_and_its_sliding_rule(ctx: int) -> None:
    # vLLM 0.33.0 kv_cache_interface.py: FullAttentionSpec cdiv(max_model_len, 16) pages; SlidingWindowSpec
    # cdiv(min(window - 1 + max_in_flight_tokens, max_model_len), 16) + 1 pages, in-flight = 2 batches of
    # 8192 (async scheduling); kv_cache_planning.py: one block per slot of the widest group (Gemma-3: 29
    # sliding layers in 6 groups of 5 beside the 5 full ones) and one more block held back at start-up
    blocks = -(-ctx // 16)
    assert kv.kv_cache(llama31_8b(), ctx, engine="vllm").total == 32 * (blocks + 1) * 16 * 2 * 8 * 128 * 2
    page = 16 * 2 * 4 * 256 * 2
    swa_blocks = -(-min(1024 - 1 + 2 * 8192, ctx) // 16) + 1
    want = 5 * page * (blocks + 6 * swa_blocks + 1)
    assert kv.kv_cache(gemma3_4b(), ctx, engine="vllm").total == want


def test_vllm_mamba_state_is_in_the_models_dtype_and_needs_two_pages_to_start() -> None:
    # an attention-free model has no prefix caching (one state page a layer), and the start-up check
    # holds one pool block back: a block of a pure Mamba model is every layer's whole state
    assert kv.kv_cache(mamba_2_8b(), 4096, engine="vllm").total == 2 * 64 * ((4 - 1) * 5120 + 16 * 5120) * 2


def test_kv_type_names_of_both_engines() -> None:
    assert kv.parse_kv_type("Q8_0") == "q8_0"
    assert kv.parse_kv_type("bfloat16") == "bf16"
    assert kv.parse_kv_type("auto") == "f16"
    with pytest.raises(UsageError):
        kv.parse_kv_type("q3_z")


def gpt_oss_20b() -> Hyper:
    # llama.cpp gpt-oss: sliding window 128 on every other layer (set_swa_pattern(2): il % 2 == 0 slides)
    sliding = tuple(il % 2 == 0 for il in range(24))
    return Hyper(n_layers=24, n_heads=64, kv_heads=(8,) * 24, key_length=64, value_length=64, hidden_size=2880,
                 sliding_window=128, sliding=sliding)


def jamba_mini() -> Hyper:
    recurrent = tuple(il % 8 != 4 for il in range(32))  # attn_layer_period 8, offset 4
    return Hyper(n_layers=32, n_heads=32, kv_heads=tuple(0 if r else 8 for r in recurrent), key_length=128,
                 value_length=128, hidden_size=4096, recurrent=recurrent,
                 ssm={"conv_kernel": 4, "inner_size": 8192, "state_size": 16, "group_count": 0, "time_step_rank": 256})


@pytest.mark.parametrize("ctx,seqs", [(8192, 1), (131072, 1), (32768, 4)])
def test_gpt_oss_alternating_sliding_layers(ctx: int, seqs: int) -> None:
    row = 2 * 8 * 64 * 2
    swa = min(ctx, -(-(128 * seqs + 512) // 256) * 256)
    want = 12 * ctx * row + 12 * swa * row
    assert near(kv.kv_cache(gpt_oss_20b(), ctx, seqs).total, want)


@pytest.mark.parametrize("ctx,seqs", [(4096, 1), (262144, 1), (16384, 8)])
def test_jamba_attention_layers_per_token_mamba_layers_per_sequence(ctx: int, seqs: int) -> None:
    attention = 4 * ctx * 2 * 8 * 128 * 2
    mamba = 28 * ((4 - 1) * 8192 + 16 * 8192) * 4 * seqs
    assert near(kv.kv_cache(jamba_mini(), ctx, seqs).total, attention + mamba)
    assert kv.kv_cache(jamba_mini(), ctx, seqs).total < 32 * ctx * 2 * 8 * 128 * 2 or ctx < 8192


@pytest.mark.parametrize("ctx,seqs", [(8192, 3), (3000, 4), (1000, 3), (8192, 4)])
def test_llama_cpp_split_cache_pads_each_sequences_share(ctx: int, seqs: int) -> None:
    # llama-context.cpp, llama_context constructor: with -np N and no -kvu the cache is N streams of
    # n_ctx_seq = GGML_PAD(GGML_PAD(ctx, 256) / N, 256) cells each (llama-model.cpp create_memory passes
    # n_ctx_seq as kv_size; llama-kv-cache.cpp allocates kv_size x n_stream); -c 8192 -np 3 is 3 x 2816.
    n_ctx = -(-ctx // 256) * 256
    n_ctx_seq = -(-(n_ctx // seqs) // 256) * 256
    want = 32 * n_ctx_seq * seqs * (8 * 128 + 8 * 128) * 2
    assert kv.kv_cache(llama31_8b(), ctx, seqs, unified=False).total == want
    # sliding layers: per stream pad256(min(n_ctx_seq, window + ubatch)) cells (llama-kv-cache-iswa.cpp)
    row = 2 * 4 * 256 * 2
    swa = -(-min(n_ctx_seq, 1024 + min(512, ctx)) // 256) * 256
    want = 5 * n_ctx_seq * seqs * row + 29 * swa * seqs * row
    assert kv.kv_cache(gemma3_4b(), ctx, seqs, unified=False).total == want


def test_vllm_fp8_ds_mla_is_656_bytes_a_token() -> None:
    # vllm/v1/kv_cache_interface.py MLAAttentionSpec.real_page_size_bytes: block_size * 656 for fp8_ds_mla
    assert kv.parse_kv_type("fp8_ds_mla") == "fp8_ds_mla"
    assert kv.kv_cache(deepseek_v3(), 4096, kv_type="fp8_ds_mla", engine="vllm").total == 61 * (4096 + 16) * 656
