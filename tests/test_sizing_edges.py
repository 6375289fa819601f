"""Sizing at its edges, as the plan shows it (issue 28: mutants of gpu_launch/fit/ that the suite let
live; benchmarks/mutation.py finds them). Each test says the slip it catches; the bytes are worked
out here from the model's shape, the way the engines' own sources count them.
"""

from __future__ import annotations

from pathlib import Path

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
