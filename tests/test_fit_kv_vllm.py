"""vLLM's start-up KV need per GPU, restated from vLLM 0.33.0's source for each family it sizes its
own way (gpulaunch's code is not the oracle):

* vllm/v1/kv_cache_interface.py: FullAttentionSpec cdiv(len, block) pages; SlidingWindowSpec
  cdiv(min(window - 1 + in-flight, len), block) + 1; ChunkedLocalAttentionSpec cdiv(min(chunk +
  in-flight, len), block); MambaSpec 1 page, 2 + checkpoint pages with mamba_cache_mode="align";
  in-flight = 2 batches x max_num_batched_tokens (VllmConfig.max_in_flight_tokens, async scheduling);
* vllm/v1/core/kv_cache_planning.py: groups of the smallest type's layer count, every pool block a
  page for each slot of a group, plus one block held back (get_kv_cache_configs);
* vllm/platforms/interface.py _align_hybrid_block_size: block = 16 x cdiv(Mamba page, 16 x the
  attention page of one token) (64 for Qwen3-Next's FlashInfer delta-net on Hopper); the Mamba page
  padded to the attention page;
* vllm/model_executor/layers/mamba/mamba_utils.py: the state shapes (conv in the model's dtype);
* vllm/platforms/cuda.py _get_backend_priorities and the MLA backends (vllm/v1/attention/backends/mla/):
  the block is 16 unless the first backend that takes the cache's dtype wants another
  (Platform.update_block_size_for_backend): Hopper's FlashAttention MLA takes no fp8, FlashMLA (64) does;
  Blackwell's FlashInfer MLA (32) where qk_nope_head_dim is 64, 128 or 192.
"""

from __future__ import annotations

import pytest

from gpu_launch.fit import gpu_tiers, kv, kv_vllm, plan
from gpu_launch.modelfile.hfconfig import hyper_from_config, text_config
from tests.vllm_configs import (BERT, DEEPSEEK_V3, FALCON_H1_7B, GPT_OSS_20B, GRANITE_4_H_SMALL, JAMBA_MINI, LLAMA4_SCOUT, MAMBA_2_8B,
                                MISTRAL_7B_V01, QWEN3_NEXT)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def need(config: dict, max_len: int, tp: int = 1, gpu: str = "hopper", batched: int = 8192,
         block: int | None = None) -> int:
    h = hyper_from_config(text_config(config), "config.json")
    return kv_vllm.need_per_gpu(h, max_len, "f16", kv.Run(batched_tokens=batched, block=block, gpu=gpu), tp).total


@pytest.mark.parametrize("max_len", [4096, 32768])
def test_all_sliding_mistral_holds_window_plus_two_batches_in_flight(max_len: int) -> None:
    page = 16 * 2 * 8 * 128 * 2
    blocks = cdiv(min(4096 - 1 + 2 * 8192, max_len), 16) + 1
    assert need(MISTRAL_7B_V01, max_len) == 32 * page * (blocks + 1)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("batched", [8192, 16384])
def test_gpt_oss_sliding_and_full_groups_per_gpu(tp: int, batched: int) -> None:
    page = 16 * 2 * (8 // tp) * 64 * 2
    full, swa = cdiv(32768, 16), cdiv(min(128 - 1 + 2 * batched, 32768), 16) + 1
    assert need(GPT_OSS_20B, 32768, tp, batched=batched) == 12 * page * (full + swa + 1)


def test_vllm_batched_tokens_by_gpu_memory_tier() -> None:
    # EngineArgs.get_batch_defaults, OPENAI_API_SERVER: >= 160 GiB 16384, >= 70 GiB (not A100) 8192, else 2048
    assert gpu_tiers.vllm_batched_default([("NVIDIA B200", 183 * 1024)]) == 16384
    assert gpu_tiers.vllm_batched_default([("NVIDIA H100 80GB HBM3", 81559)]) == 8192
    assert gpu_tiers.vllm_batched_default([("NVIDIA A100-SXM4-80GB", 81920)]) == 2048


def test_jamba_mamba_pages_padded_to_an_attention_block_of_80() -> None:
    state = 8192 * 3 * 2 + 8192 * 16 * 2  # Mamba-1: conv (inner, k - 1) + temporal (inner, d_state), bf16
    per_token = 8 * 256 * 2
    block = 16 * cdiv(state, 16 * per_token)
    assert block == 80
    # 4 attention layers, 28 Mamba layers in 7 groups of 4; Mamba-1 in align mode: 2 pages
    assert need(JAMBA_MINI, 32768) == 4 * block * per_token * (cdiv(32768, block) + 7 * 2 + 1)


@pytest.mark.parametrize("block", [32, 128])
def test_block_size_from_the_command_is_the_block(block: int) -> None:
    """`--block-size B` (CacheConfig.block_size, user_specified_block_size: the backend's preference is
    skipped): every page holds B tokens, and the pool holds one block of B back."""
    page = block * 2 * 8 * 128 * 2
    blocks = cdiv(min(4096 - 1 + 2 * 8192, 32768), block) + 1
    assert need(MISTRAL_7B_V01, 32768, block=block) == 32 * page * (blocks + 1)
    h = hyper_from_config(text_config(DEEPSEEK_V3), "config.json")  # over the MLA backend's own choice too
    got = kv_vllm.need_per_gpu(h, 32768, "fp8", kv.Run(block=block, gpu="hopper"), 8)
    assert got.block == block and got.total == 61 * 576 * block * (cdiv(32768, block) + 1)


@pytest.mark.parametrize("block,want", [(None, 80), (32, 96), (128, 128)])
def test_block_size_in_a_hybrid_aligns_the_attention_block(block: int | None, want: int) -> None:
    """_align_hybrid_block_size: the alignment is max(16, --block-size); the block the smallest multiple of
    it whose page holds a Mamba state, and never below --block-size. Jamba's state is 76 tokens of
    attention: 80 by 16s, 96 by 32s, 128 when asked for."""
    state = 8192 * 3 * 2 + 8192 * 16 * 2
    per_token = 8 * 256 * 2
    align = max(16, block or 16)
    got = max(block or 16, 16 * cdiv(align * cdiv(state, align * per_token), 16))
    assert got == want
    assert need(JAMBA_MINI, 32768, block=block) == 4 * got * per_token * (cdiv(32768, got) + 7 * 2 + 1)


@pytest.mark.parametrize("tp", [1, 2])
def test_mamba2_groups_widen_the_state_past_a_block(tp: int) -> None:
    """mamba2_state_shape's conv state carries 2 × groups × d_state channels beside the inner ones: with 16
    groups (Granite's shape otherwise) that pushes the state past 33 blocks of 16 tokens' attention, so the
    block is 544, not the 528 of one group (Mamba-1's shape has no groups at all)."""
    config = {**GRANITE_4_H_SMALL, "mamba_n_groups": 16}
    state = (8192 + 2 * 16 * 128) // tp * 3 * 2 + 8192 // tp * 128 * 2  # 16 groups: no replication at tp 1, 2
    per_token = (8 // tp) * 256 * 2
    block = 16 * cdiv(state, 16 * per_token)
    assert block == 544
    assert need(config, 100000, tp=tp) == 4 * block * per_token * (cdiv(100000, block) + 36 // 4 * 3 + 1)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_granite_4_h_mamba2_three_pages_and_the_context_in_big_blocks(tp: int) -> None:
    groups = 1 if 1 % tp == 0 else tp  # mamba2_state_shape: the groups replicated up to tp
    state = (8192 + 2 * groups * 128) // tp * 3 * 2 + 128 // tp * 64 * 128 * 2
    per_token = (8 // tp) * 256 * 2
    block = 16 * cdiv(state, 16 * per_token)
    want = 4 * block * per_token * (cdiv(100000, block) + 9 * 3 + 1)
    assert need(GRANITE_4_H_SMALL, 100000, tp) == want


@pytest.mark.parametrize("gpu,kv_type,block", [("hopper", "f16", 16), ("hopper", "fp8", 64), ("blackwell", "f16", 32),
                                               ("blackwell", "fp8", 32), ("ampere", "fp8", 16), ("", "fp8", 16)])
def test_deepseek_v3_mla_block_follows_the_backend_vllm_picks(gpu: str, kv_type: str, block: int) -> None:
    """One 576-wide latent row a token and layer (kv_lora_rank 512 + rope 64), on every tp rank, in blocks
    of the backend's size: with an fp8 cache on Hopper 64 (planned as 16, the held-back block and the
    rounding were 1,686,528 bytes short at 32k)."""
    h = hyper_from_config(text_config(DEEPSEEK_V3), "config.json")
    got = kv_vllm.need_per_gpu(h, 32768 + 100, kv_type, kv.Run(batched_tokens=8192, gpu=gpu), 8)
    row = 576 * (1 if kv_type == "fp8" else 2)
    assert got.block == block and got.total == 61 * row * block * (cdiv(32768 + 100, block) + 1)


@pytest.mark.parametrize("gpu,align,pages", [("hopper", 64, 3), ("ampere", 16, 2)])
def test_qwen3_next_delta_net_on_hopper_and_elsewhere(gpu: str, align: int, pages: int) -> None:
    # FlashInfer's delta-net prefill (Hopper) exports a checkpoint (one page more) every 64 tokens
    state = (128 * 16 * 2 + 128 * 32) * 3 * 2 + 32 * 128 * 128 * 2
    per_token = 2 * 512 * 2
    block = 16 * cdiv(align * cdiv(state, align * per_token), 16)
    assert need(QWEN3_NEXT, 65536, gpu=gpu) == 12 * block * per_token * (cdiv(65536, block) + 3 * pages + 1)


def test_falcon_h1_every_layer_has_an_attention_and_a_mamba_spec() -> None:
    state = (3072 + 2 * 256) * 3 * 2 + 24 * 128 * 256 * 2
    per_token = 2 * 256 * 2
    block = 16 * cdiv(state, 16 * per_token)
    assert need(FALCON_H1_7B, 32768) == 44 * block * per_token * (cdiv(32768, block) + 3 + 1)


def test_llama4_chunked_layers_hold_a_chunk_plus_the_tokens_in_flight() -> None:
    page = 16 * 2 * 8 * 128 * 2
    chunked = cdiv(min(8192 + 2 * 8192, 131072), 16)  # no + 1: a chunk starts on a block
    assert need(LLAMA4_SCOUT, 131072) == 12 * page * (cdiv(131072, 16) + 3 * chunked + 1)


def test_pure_mamba_needs_twice_its_state_and_encoders_nothing() -> None:
    # attention-free: no prefix caching, 1 page; the held-back block is a whole state
    assert need(MAMBA_2_8B, 4096) == 2 * 64 * (5120 * 3 + 5120 * 16) * 2
    assert need(BERT, 512) == 0


def test_a_plan_charges_each_gpu_vllms_need_at_its_tp() -> None:
    from gpu_launch.fit import engines
    from tests.fit_models import llama_like

    m = llama_like(layers=24, heads=64, kv_heads=8, head_dim=64, fmt="safetensors")
    h = hyper_from_config(text_config(GPT_OSS_20B), "config.json")
    m = type(m)(**{**m.__dict__, "hyper": h})
    s = plan.sizing(m, engines.ENGINES["vllm"], plan.Settings(ctx=32768, batched_tokens=8192, gpu_arch="hopper"))
    GiB = 1 << 30
    for tp in (2, 4):
        p = plan.place(s, [plan.Room(i, 79 * GiB, 80 * GiB) for i in range(tp)])
        assert p.per_gpu[0].kv_bytes == need(GPT_OSS_20B, 32768, tp)


def test_a_falcon_h1_folder_plans_vllms_need(tmp_path) -> None:  # noqa: ANN001
    # config.json and safetensors written by the real package; plan --json shows vLLM's figure
    pytest.importorskip("safetensors")
    from tests.test_modelfile_safetensors import llama_layout, write_model
    from tests.test_plan_cli import plan_json

    folder = write_model(tmp_path / "falcon-h1-7b", {**FALCON_H1_7B, "vocab_size": 100}, llama_layout(44))
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", "vllm", "serve", str(folder),
                    "--max-model-len", "32768")
    assert doc["kv_cache_bytes"] == need(FALCON_H1_7B, 32768) == 1766195200  # vLLM's own planning: 1766195200
    assert any("Mamba layers: 3 state pages" in r for r in doc["kv_rules"])


def test_the_kv_rules_get_the_engines_default_batch_and_the_commands_block() -> None:
    """run_of, before a machine is known: vLLM's batched tokens on a 70+ GiB GPU (8192), the other engines
    sized by vLLM's rules 2048; the command's --max-num-batched-tokens and --block-size as written."""
    from gpu_launch.fit import engines

    def run(engine: str, **settings: int) -> kv.Run:
        return plan.run_of(engines.ENGINES[engine], plan.Settings(ctx=4096, **settings))

    assert (run("vllm").batched_tokens, run("sglang").batched_tokens, run("tgi").batched_tokens) == (8192, 2048, 2048)
    assert run("vllm", batched_tokens=512, block_size=32) == kv.Run(batched_tokens=512, block=32)
    assert run("vllm").block is None


def test_the_cache_follows_the_models_dtype_and_prefix_caching_off_keeps_one_mamba_page() -> None:
    """--kv-cache-dtype auto is the model's dtype (a float32 model run with --dtype float32: 4 bytes a value;
    under --dtype auto vLLM runs it in bf16, tests/test_fit_dtype.py); without prefix caching
    a hybrid's Mamba layers are not aligned: one state page each, not 2 (MambaSpec, mamba_cache_mode none)."""
    page = 16 * 2 * 8 * 128
    blocks = cdiv(min(4096 - 1 + 2 * 8192, 32768), 16) + 1
    assert need({**MISTRAL_7B_V01, "torch_dtype": "float32"}, 32768) == 32 * page * 4 * (blocks + 1)
    h = hyper_from_config(text_config(JAMBA_MINI), "config.json")
    assert kv_vllm.need_per_gpu(h, 32768, "f16", kv.Run(prefix_caching=False), 1).mamba_pages == 1
    assert kv_vllm.need_per_gpu(h, 32768, "f16", kv.Run(prefix_caching=None), 1).mamba_pages == 2


def test_the_plans_rule_lines_say_what_vllm_holds() -> None:
    def rules(config: dict) -> list[str]:
        return list(kv_vllm.cache(hyper_from_config(text_config(config), "config.json"), 32768, "f16", kv.Run()).rules)

    assert "sliding-window layers: window 4096 − 1 + 2 × 8192 in-flight tokens, in blocks (vLLM)" in rules(MISTRAL_7B_V01)
    assert "chunked-attention layers: chunk 8192 + 2 × 8192 in-flight tokens, in blocks (vLLM)" in rules(LLAMA4_SCOUT)
    assert "Mamba layers: 1 state page each" in rules(MAMBA_2_8B)
    assert "Mamba layers: 2 state pages each (prefix caching: mamba_cache_mode=align)" in rules(JAMBA_MINI)
    # the state is the Mamba layers' alone; an attention model has none
    mistral = kv_vllm.cache(hyper_from_config(text_config(MISTRAL_7B_V01), "config.json"), 32768, "f16", kv.Run())
    mamba = kv_vllm.cache(hyper_from_config(text_config(MAMBA_2_8B), "config.json"), 4096, "f16", kv.Run())
    assert mistral.state == 0 and mamba.state == sum(mamba.per_layer) > 0
    # Falcon-H1's Mamba shares every layer with attention: those bytes are the layers' cache, not a state apart
    falcon = kv_vllm.cache(hyper_from_config(text_config(FALCON_H1_7B), "config.json"), 32768, "f16", kv.Run())
    assert falcon.state == 0 and sum(falcon.per_layer) > 0


@pytest.mark.parametrize("argv,caching", [(["--no-enable-prefix-caching"], False), (["--enable-prefix-caching"], True),
                                          (["--enable-prefix-caching", "--no_enable_prefix_caching"], False), ([], None)])
def test_prefix_caching_as_the_command_says_reaches_the_mamba_pages(argv: list[str], caching: bool | None) -> None:
    """`--no-enable-prefix-caching` (argparse's BooleanOptionalAction; the last one written wins): a hybrid's
    Mamba layers hold one state page, not 2 (Jamba) — planned as vLLM runs it, not as its default."""
    from gpu_launch.fit import command, engines

    said = command.read_command(["vllm", "serve", "m", *argv], engines.ENGINES["vllm"])
    assert said.prefix_caching is caching
    run = plan.run_of(engines.ENGINES["vllm"], plan.Settings(ctx=32768, prefix_caching=said.prefix_caching))
    h = hyper_from_config(text_config(JAMBA_MINI), "config.json")
    assert kv_vllm.need_per_gpu(h, 32768, "f16", run, 1).mamba_pages == (1 if caching is False else 2)
