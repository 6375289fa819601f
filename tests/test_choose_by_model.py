"""--fit MODEL: the fewest GPUs that hold the model, then the best of those by the ranking; one line when none."""

from __future__ import annotations

import pytest

from gpu_launch.choose import by_model, select
from gpu_launch.errors import ExitCode, NotEnoughGpus
from gpu_launch.fit import engines, plan
from gpu_launch.hardware.read import Needs, read_machine
from tests.fit_models import GiB, MiB, llama_70b, llama_like


def machine(name: str):
    return read_machine(name, Needs(topology=True))


def chosen(sel) -> list[int]:
    return [d.gpu.index for d in sel.devices]


def test_vllm_70b_on_dgx_takes_4_idle_gpus_not_the_busy_ones() -> None:
    s = plan.sizing(llama_70b(), engines.ENGINES["vllm"], plan.Settings(ctx=32768))
    sel = by_model.choose_by_model(machine("dgx-h100"), s, select.Constraints())
    assert len(sel.devices) == 4  # tp 2 needs ~78 GiB a GPU, over vLLM's 0.9 x 80 GiB
    assert set(chosen(sel)) <= {2, 3, 4, 6, 7}  # GPUs 0, 1, 5 have others' jobs on them
    assert sel.plan.placement.tp == 4 and sel.plan.placement.whole


def test_small_model_takes_one_gpu_the_rankings_best() -> None:
    s = plan.sizing(llama_like(), engines.ENGINES["llama.cpp"], plan.Settings(ctx=8192))
    m = machine("dgx-h100")
    sel = by_model.choose_by_model(m, s, select.Constraints())
    assert chosen(sel) == [d.gpu.index for d in select.choose_auto(m, 1, select.Constraints()).devices]
    assert sel.plan.placement.gpu_layers == 33


def test_llama_cpp_60_gib_on_48_gib_cards_takes_two_and_splits() -> None:
    model = llama_like(layers=80, layer_bytes=750 * MiB, embedding=1 * GiB, output=1 * GiB, heads=64)
    s = plan.sizing(model, engines.ENGINES["llama.cpp"], plan.Settings(ctx=8192))
    sel = by_model.choose_by_model(machine("pcie-8x"), s, select.Constraints())
    assert len(sel.devices) == 2
    assert 6 not in chosen(sel) and 2 not in chosen(sel)  # nearly full / half full
    assert sel.plan.placement.gpu_layers == 81 and sum(sel.plan.placement.tensor_split) == 81


def test_reserved_gpus_are_skipped() -> None:
    s = plan.sizing(llama_like(), engines.ENGINES["llama.cpp"], plan.Settings(ctx=8192))
    m = machine("workstation-4x")
    taken = {g.uuid: "alice (pid 1)" for g in m.gpus[:3]}
    sel = by_model.choose_by_model(m, s, select.Constraints(reserved=taken))
    assert chosen(sel) == [3]


def test_too_big_says_the_shortfall_and_what_would_fit() -> None:
    s = plan.sizing(llama_70b(), engines.ENGINES["vllm"], plan.Settings(ctx=131072))
    m = machine("workstation-4x")  # 4 x 48 GiB
    with pytest.raises(NotEnoughGpus) as info:
        by_model.choose_by_model(m, s, select.Constraints())
    err = info.value
    assert err.exit_code == ExitCode.NOT_ENOUGH_GPUS
    assert "needs" in err.message and "on each of 4 GPUs at 131072 tokens" in err.message
    assert "\n" not in err.message


def test_shorter_context_is_offered_when_it_would_fit() -> None:
    model = llama_like(layers=64, layer_bytes=1 * GiB, heads=32, kv_heads=32)  # MHA: a big KV cache
    s = plan.sizing(model, engines.ENGINES["llama.cpp"], plan.Settings(ctx=131072))
    m = machine("workstation-4x")
    with pytest.raises(NotEnoughGpus) as info:
        by_model.choose_by_model(m, s, select.Constraints())
    assert "tokens it fits" in info.value.message


def test_partial_offload_when_nothing_holds_it_whole() -> None:
    model = llama_like(layers=80, layer_bytes=3 * GiB, heads=64)  # 241 GiB of weights
    s = plan.sizing(model, engines.ENGINES["llama.cpp"], plan.Settings(ctx=4096, partial=True))
    sel = by_model.choose_by_model(machine("workstation-4x"), s, select.Constraints())
    p = sel.plan.placement
    assert not p.whole and p.fits
    assert 0 < p.gpu_layers < 81 and p.cpu_weights_bytes > 0
    assert len(sel.devices) == 4  # the most layers: every GPU


def test_hopeless_when_even_free_gpus_cannot_hold_it() -> None:
    s = plan.sizing(llama_70b(), engines.ENGINES["vllm"], plan.Settings(ctx=8192))
    m = machine("workstation-4x")
    assert by_model.hopeless(s, list(m.gpus[:1])) is not None
    assert by_model.hopeless(s, list(m.gpus)) is None


def _gemma3_27b():
    from dataclasses import replace as _replace

    m = llama_like(layers=62, layer_bytes=800 * MiB, heads=32, kv_heads=16, head_dim=128, fmt="safetensors",
                   arch="gemma3")
    sliding = tuple(il % 6 < 5 for il in range(62))
    return _replace(m, hyper=_replace(m.hyper, sliding_window=1024, sliding=sliding))


@pytest.mark.parametrize("snapshot,batched", [("dgx-h100", 8192), ("workstation-4x", 2048)])
def test_vllm_sliding_layers_use_vllm_serves_batched_tokens_for_these_gpus(snapshot: str, batched: int) -> None:
    # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: `vllm serve` batches 8192 tokens on GPUs
    # of 70 GiB or more (not A100), else 2048; vllm/v1/kv_cache_interface.py SlidingWindowSpec
    # .max_memory_usage_bytes: (cdiv(min(window - 1 + 2 x batched, max_model_len), 16) + 1) pages (two
    # batches in flight with async scheduling); kv_cache_planning.py: the 52 sliding layers in 6 groups
    # of 10 beside the 10 full ones, a block of 10 pages, one block held back.
    s = plan.sizing(_gemma3_27b(), engines.ENGINES["vllm"], plan.Settings(ctx=32768))
    s = by_model.for_machine(s, machine(snapshot))
    page = 16 * 2 * 16 * 128 * 2
    swa_blocks = -(-min(1024 - 1 + 2 * batched, 32768) // 16) + 1
    assert s.kv.total == 10 * page * (32768 // 16 + 6 * swa_blocks + 1)


def test_vllm_batched_tokens_from_the_command_win() -> None:
    from gpu_launch.fit import command

    said = command.read_command(["vllm", "serve", "m", "--max-num-batched-tokens", "4096"], engines.ENGINES["vllm"])
    assert said.batched_tokens == 4096
    s = plan.sizing(_gemma3_27b(), engines.ENGINES["vllm"], plan.Settings(ctx=32768, batched_tokens=4096))
    s = by_model.for_machine(s, machine("dgx-h100"))
    page = 16 * 2 * 16 * 128 * 2
    assert s.kv.total == 10 * page * (2048 + 6 * (-(-(1023 + 2 * 4096) // 16) + 1) + 1)


@pytest.mark.parametrize("argv,block", [(["--block-size", "32"], 32), (["--block_size=128"], 128), ([], None)])
def test_vllm_block_size_from_the_command_is_planned(argv: list[str], block: int | None) -> None:
    from gpu_launch.fit import command

    said = command.read_command(["vllm", "serve", "m", *argv], engines.ENGINES["vllm"])
    assert said.block_size == block
    s = plan.sizing(_gemma3_27b(), engines.ENGINES["vllm"], plan.Settings(ctx=32768, block_size=block))
    s = by_model.for_machine(s, machine("dgx-h100"))
    b = block or 16
    page = b * 2 * 16 * 128 * 2
    assert s.kv.total == 10 * page * (-(-32768 // b) + 6 * (-(-(1023 + 2 * 8192) // b) + 1) + 1)


@pytest.mark.parametrize("text,value", [("32768", 32768), ("32k", 32000), ("32K", 32768), ("25.6k", 25600),
                                        ("1M", 1 << 20), ("1.5K", None), ("k", None), ("{ctx}", None),
                                        ("-1", None), ("auto", None)])
def test_vllm_max_model_len_with_its_suffixes(text: str, value: int | None) -> None:
    # vLLM parses --max-model-len with human_readable_int (vllm/engine/arg_utils.py; newer releases:
    # vllm/utils/argparse_utils.py): 1k = 1000,
    # 1K = 1024, decimals only with the lowercase (decimal) suffixes; vLLM refuses 1.5K and k, and
    # so does gpulaunch (one line, exit 2), instead of sizing for another context; -1/auto: as long as fits
    from gpu_launch.errors import UsageError
    from gpu_launch.fit import command

    argv = ["vllm", "serve", "m", "--max-model-len", text]
    if text in ("1.5K", "k"):
        with pytest.raises(UsageError, match="--max-model-len"):
            command.read_command(argv, engines.ENGINES["vllm"])
        return
    assert command.read_command(argv, engines.ENGINES["vllm"]).ctx == value


def test_only_vllm_needs_its_utilisation_free_on_a_gpu() -> None:
    # GPU 5 alone (bob's, 65.1 GiB of 79.6 GiB free): vLLM wants 0.9 x 79.6 = 71.7 GiB free at start and refuses
    # it; SGLang's small share fits, and it takes it (seed 39: the 0.9 bar applied to every engine but vLLM).
    m = machine("dgx-h100")
    only_5 = select.Constraints(exclude=frozenset(g.uuid for g in m.gpus if g.index in (2, 3, 4, 6, 7)))
    sglang = plan.sizing(llama_like(), engines.ENGINES["sglang"], plan.Settings(ctx=8192))
    assert chosen(by_model.choose_by_model(m, sglang, only_5)) == [5]
    vllm = plan.sizing(llama_like(), engines.ENGINES["vllm"], plan.Settings(ctx=8192))
    with pytest.raises(NotEnoughGpus) as exc:
        by_model.choose_by_model(m, vllm, only_5)
    assert "vLLM with --gpu-memory-utilization 0.90 needs 71.7 GiB of each GPU free at start" in exc.value.message
