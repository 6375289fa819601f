"""Sizing at its edges, as the plan shows it (issue 28: mutants of gpu_launch/fit/ that the suite let
live; benchmarks/mutation.py finds them). Each test says the slip it catches; the bytes are worked
out here from the model's shape, the way the engines' own sources count them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_launch.fit import engines, plan
from tests.fit_models import GiB, llama_70b, llama_like


def test_the_kv_bytes_per_token_are_the_layers_times_k_and_v_rows() -> None:
    # Slip: the per-token count started at 1 byte instead of 0. llama.cpp's f16 cache holds, per
    # token and layer, a K and a V row of kv_heads x head_dim values of 2 bytes.
    for model, layers in ((llama_70b(), 80), (llama_like(), 32)):
        s = plan.sizing(model, engines.ENGINES["llama.cpp"], plan.Settings(ctx=8192))
        assert s.kv.per_token == layers * 2 * (8 * 128 * 2)
        assert s.kv.total == s.kv.per_token * 8192


def _heads(head_dim: int, value_dim: int, heads: int, kv_heads: int):
    from dataclasses import replace

    model = llama_like(heads=heads, kv_heads=kv_heads)
    return replace(model, hyper=replace(model.hyper, key_length=head_dim, value_length=value_dim))


def test_flash_attention_auto_follows_cudas_kernels_for_320_wide_heads() -> None:
    # Slip: the 320-wide K head's GQA rule lost (llama.cpp's CUDA FA kernel for K 320 / V 256 needs
    # a GQA ratio that is a multiple of 32, as fit/kv_llama.py has it). 16 heads on one KV head: off.
    def fa(heads: int) -> bool:
        s = plan.sizing(_heads(320, 256, heads, 1), engines.ENGINES["llama.cpp"], plan.Settings(ctx=4096))
        return s.kv.flash_attn

    assert (fa(16), fa(32), fa(64)) == (False, True, True)


def test_a_commands_fixed_tp_is_kept_when_nodes_are_counted() -> None:
    # Slip: the command's own -tp 2 ignored (tp is None for is not None): gpulaunch would answer with a
    # split of its own (2 nodes, tp 4 x pp 2) that the command does not run.
    from gpu_launch.choose import model_shortfall
    from gpu_launch.hardware.read import Needs, read_machine

    gpus = list(read_machine("workstation-4x", Needs(topology=True)).gpus)
    fixed = plan.Settings(ctx=131072, tp=2, tp_explicit=True, fixed_by="as the command's -tp 2 says")
    split = model_shortfall.node_split(plan.sizing(llama_70b(), engines.ENGINES["vllm"], fixed), gpus)
    assert (split.tp, split.pp, split.problem) == (2, 1, "1 node(s) of 2 GPUs (tp 2 × pp 1) do not hold it at "
                                                         "131072 tokens")


def test_two_pipeline_stages_of_a_one_layer_model_are_refused(tmp_path: Path) -> None:
    # Slip: the pipeline check started at 3 stages (pp > 2 for pp > 1): vLLM -pp 2 on one layer passed.
    import json

    from cli_run import run_gpulaunch
    from test_modelfile_hostile import CONFIG, safetensors

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))  # one layer
    (tmp_path / "model.safetensors").write_bytes(safetensors(
        {"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}))
    done = run_gpulaunch("--snapshot", "dgx-h100", "plan", "--", "vllm", "serve", str(tmp_path), "-pp", "2")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"gpulaunch: error: vllm refuses 2 pipeline stages for {tmp_path}: the model has 1 layers "
                           "(hint: drop the pipeline-parallel option, or use more tensor parallelism)\n")


def test_a_context_rounded_up_says_how_for_one_sequence_and_for_several() -> None:
    # Slip: the per-sequence wording used for a single sequence ("1 sequences of 8192 cells").
    def rounded(settings: plan.Settings) -> list[str]:
        s = plan.sizing(llama_like(), engines.ENGINES["llama.cpp"], settings)
        return [r for r in s.kv.rules if r.startswith("context ")]

    assert rounded(plan.Settings(ctx=8000)) == ["context 8000 rounded up to 8192 (llama.cpp pads to 256)"]
    assert rounded(plan.Settings(ctx=8000, seqs=4, unified=False)) == [
        "context 8000 rounded up to 8192 (llama.cpp: 4 sequences of 2048 cells, each padded to 256)"]


def test_flash_attention_auto_is_on_for_40_wide_heads() -> None:
    # Slip: the 40-wide head lost from CUDA's flash-attention head sizes (fit/kv_llama.py's table).
    s = plan.sizing(_heads(40, 40, 32, 8), engines.ENGINES["llama.cpp"], plan.Settings(ctx=4096))
    assert s.kv.flash_attn is True


def test_transformers_layers_left_on_the_cpu_fit_only_when_the_host_has_room() -> None:
    # Slip: the host check made to need no host figure at all (and for or): with device_map="auto"
    # and 500 GiB of host memory free, a model of 241 GiB on 4 x 48 GiB would not fit.
    model = llama_like(layers=80, layer_bytes=3 * GiB, heads=64, fmt="safetensors")
    rooms = [plan.Room(i, 48 * GiB, 48 * GiB) for i in range(4)]

    def fits(host: int | None) -> bool:
        settings = plan.Settings(ctx=4096, partial=True, host_free=host)
        return plan.place(plan.sizing(model, engines.ENGINES["transformers"], settings), rooms).fits

    assert (fits(500 * GiB), fits(1 * GiB), fits(None)) == (True, False, True)


def test_vllms_own_layer_partition_places_the_stages() -> None:
    # Slip: VLLM_PP_LAYER_PARTITION read only when its count differs from -pp (== for !=): 30 and 50
    # layers would become an even 40 and 40.
    settings = plan.Settings(ctx=8192, pp=2, tp=4, tp_explicit=True, environ=(("VLLM_PP_LAYER_PARTITION", "30,50"),))
    p = plan.place(plan.sizing(llama_70b(), engines.ENGINES["vllm"], settings),
                   [plan.Room(i, 80 * GiB, 80 * GiB) for i in range(8)])
    assert [(stage.first, stage.end) for stage in p.stage_shares] == [(0, 30), (30, 80)]


def test_the_layers_left_on_the_cpu_carry_their_own_kv_cache() -> None:
    # Slip: the CPU's KV share summed from the layers' weights (u[0] for u[1]): with 3 GiB layers and a
    # KV row of a few MiB, the plan would put 3 GiB of "KV" per layer on the host.
    model = llama_like(layers=80, layer_bytes=3 * GiB, heads=64, fmt="safetensors")
    s = plan.sizing(model, engines.ENGINES["transformers"], plan.Settings(ctx=4096, partial=True))
    p = plan.place(s, [plan.Room(i, 48 * GiB, 48 * GiB) for i in range(4)])
    on_gpus = sum(share.units for share in p.per_gpu) - 1  # the first GPU also holds the embedding
    left = range(on_gpus, 80)
    assert p.cpu_kv_bytes == sum(s.kv.per_layer[i] for i in left) > 0
    assert p.cpu_weights_bytes == 3 * GiB * len(left) + model.weights.output + model.weights.other


def _whole(gpus: int, free: int, total: int = 80 * GiB) -> list[plan.Room]:
    return [plan.Room(i, free, total) for i in range(gpus)]


def test_nodes_are_counted_by_whole_gpus_not_by_what_is_free_on_this_one() -> None:
    # Slip: a node of this kind sized by this machine's free memory (`is None` for `is not None`): with
    # others' work here, the other nodes would seem as full, and more of them would be asked for.
    from gpu_launch.fit import nodes

    s = plan.sizing(llama_70b(), engines.ENGINES["vllm"], plan.Settings(ctx=8192))
    whole = nodes.split_for_nodes(s, _whole(2, 80 * GiB))
    busy = nodes.split_for_nodes(s, _whole(2, 10 * GiB))
    assert (whole.nodes, whole.tp, whole.pp, whole.problem) == (2, 2, 2, "")
    assert (busy.nodes, busy.tp, busy.pp, busy.problem) == (2, 2, 2, "")


def test_a_model_whose_heads_no_larger_tp_divides_runs_tp_1_with_stages_on_each_node() -> None:
    # Slip: tp 1 never tried (range(per_node, 1, -1)): 5 attention heads on nodes of 2 GPUs would be
    # refused instead of one GPU a stage, two stages a node.
    from gpu_launch.fit import nodes

    model = llama_like(layers=40, layer_bytes=3 * GiB, heads=5, kv_heads=5, fmt="safetensors")
    split = nodes.split_for_nodes(plan.sizing(model, engines.ENGINES["vllm"], plan.Settings(ctx=4096)),
                                  _whole(2, 48 * GiB, 48 * GiB))
    assert (split.tp, split.problem) == (1, "")
    assert split.pp == split.nodes * 2 and split.notes and split.notes[0].startswith("tp 1, not 2: ")


def test_a_split_that_cannot_be_found_counts_no_nodes() -> None:
    # Slip: a refused split (the command's stages, no tp that holds it) said to need 1 node.
    from gpu_launch.fit import nodes

    model = llama_like(layers=80, layer_bytes=40 * GiB, heads=64, fmt="safetensors")
    settings = plan.Settings(ctx=4096, pp=2)
    split = nodes.split_for_nodes(plan.sizing(model, engines.ENGINES["vllm"], settings), _whole(2, 48 * GiB),
                                  max_nodes=4)
    assert split.nodes == 0 and split.problem.startswith("no tp with the command's 2 stages holds it on nodes of 2 GPUs")


@pytest.mark.parametrize("d_conv, rows", [(4, 3), (2, 1), (1, 0), (0, 3)])
def test_a_kda_layers_conv_state_follows_llama_cpps_rule_at_every_kernel(d_conv: int, rows: int) -> None:
    # llama.cpp (src/llama-hparams.cpp, n_embd_r for KDA): 3 x (d_conv > 0 ? d_conv - 1 : 3) x n_head x
    # head_dim. Slip: `d_conv > 1` for `> 0`: a kernel of 1 would hold 3 rows instead of none.
    from gpu_launch.fit import kv_llama
    from gpu_launch.modelfile.facts import Hyper

    h = Hyper(n_layers=1, n_heads=4, kv_heads=(0,), key_length=8, value_length=8, hidden_size=32,
              recurrent=(True,), ssm={"kda.head_dim": 8, "conv_kernel": d_conv})
    assert kv_llama.state_elements(h) == (3 * rows * 4 * 8, 8 * 8 * 4)


def _vllm_hyper(config: dict):  # noqa: ANN202
    from gpu_launch.modelfile.hfconfig import hyper_from_config, text_config

    return hyper_from_config(text_config(config), "config.json")


@pytest.mark.parametrize("batched, blocks", [(2048, 512 + 1), (2049, 513 + 1)])
def test_a_sliding_window_holds_window_minus_one_plus_the_tokens_in_flight(batched: int, blocks: int) -> None:
    # vLLM 0.33.0 SlidingWindowSpec: cdiv(min(window - 1 + in-flight, len), block) + 1 pages; in flight,
    # two batches. Slip: `- 2` for `- 1`, seen only where the count ends one token into a block:
    # 4096 - 1 + 2 x 2049 = 8193 tokens are 513 blocks of 16, 8192 would be 512.
    from gpu_launch.fit import kv, kv_vllm
    from tests.vllm_configs import MISTRAL_7B_V01

    need = kv_vllm.need_per_gpu(_vllm_hyper(MISTRAL_7B_V01), 32768, "f16", kv.Run(batched_tokens=batched), 1)
    assert need.total == 32 * (16 * 2 * 8 * 128 * 2) * (blocks + 1)


def test_the_plan_says_when_vllm_raised_its_attention_block_and_only_then() -> None:
    # Slip: the rule line's test inverted (== for !=): Jamba's 80-token block unexplained, Mistral's
    # 16-token one announced as raised.
    from gpu_launch.fit import kv, kv_vllm
    from tests.vllm_configs import JAMBA_MINI, MISTRAL_7B_V01

    def raised(config: dict) -> list[str]:
        size = kv_vllm.cache(_vllm_hyper(config), 32768, "f16", kv.Run())
        return [r for r in size.rules if r.startswith("attention block raised")]

    assert raised(JAMBA_MINI) == ["attention block raised to 80 tokens so a page holds a Mamba state"]
    assert raised(MISTRAL_7B_V01) == []

    def blocks(config: dict, kv_type: str, run: kv.Run) -> list[str]:
        size = kv_vllm.cache(_vllm_hyper(config), 32768, kv_type, run)
        return [r for r in size.rules if r.startswith("attention block")]

    from tests.vllm_configs import DEEPSEEK_V3
    assert blocks(MISTRAL_7B_V01, "f16", kv.Run(block=32)) == ["attention blocks of 32 tokens, as --block-size says"]
    assert blocks(DEEPSEEK_V3, "fp8", kv.Run(gpu="hopper")) == [
        "attention blocks of 64 tokens: what vLLM's MLA backend takes for the fp8 cache on Hopper"]
    assert blocks(DEEPSEEK_V3, "f16", kv.Run(gpu="hopper")) == []
    assert blocks(JAMBA_MINI, "f16", kv.Run(block=32)) == [
        "attention block raised to 96 tokens so a page holds a Mamba state (--block-size 32)"]


def test_reblocked_sliding_layers_hold_window_minus_one_plus_the_tokens_in_flight(tmp_path: Path) -> None:
    # Gemma-4 E2B under vLLM: its sliding layers' pages (256-wide heads) take a block of 32 tokens so
    # they match the full layers' (512-wide); they still hold cdiv(window - 1 + in-flight, block) + 1
    # blocks. Window 512, two batches in flight: 511 + 2 x 993 = 2497 = 78 x 32 + 1 needs 79 blocks
    # like 2527 (b = 1008) does; 2529 (b = 1009) needs 80. Slip: `- 2` for `- 1` moves each step by one.
    from family_fixtures import write_family

    from gpu_launch.fit import kv, kv_vllm
    from gpu_launch.modelfile.read import read_model

    h = read_model(str(write_family(tmp_path, "gemma-4-e2b")), environ={}).hyper

    def need(batched: int) -> int:
        return kv_vllm.need_per_gpu(h, 131072, "f16", kv.Run(batched_tokens=batched), 1).total

    assert need(993) == need(1008) < need(1009) == need(1024)
