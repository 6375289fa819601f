"""--fit MODEL when the model does not fit: the exact line and hint a user reads (issue 28: mutants of
gpu_launch/choose/model_shortfall.py and by_model.py that the suite let live; benchmarks/mutation.py
finds them). Each test says the slip it catches. In process, on the bundled machines: milliseconds.
"""

from __future__ import annotations

import pytest

from gpu_launch.choose import by_model, select
from gpu_launch.errors import NotEnoughGpus
from gpu_launch.fit import engines, plan
from gpu_launch.hardware.read import Needs, read_machine
from tests.fit_models import GiB, llama_70b, llama_like


def _refused(model, engine: str, settings: plan.Settings, snap: str) -> NotEnoughGpus:
    s = plan.sizing(model, engines.ENGINES[engine], settings)
    with pytest.raises(NotEnoughGpus) as info:
        by_model.choose_by_model(read_machine(snap, Needs(topology=True)), s, select.Constraints())
    return info.value


def test_a_tensor_shortfall_names_tp_alone_and_the_context_that_fits():
    # Slips: "tp 4 × pp 1" for a plan of one stage (> 1 read as >= 1); the shorter context halved
    # badly (131072 -> 65536 -> 21845 instead of 32768).
    err = _refused(llama_70b(), "vllm", plan.Settings(ctx=131072), "workstation-4x")
    assert err.message.startswith(
        "test-model needs 49.0 GiB on each of 4 GPUs at 131072 tokens (vllm, tp 4: weights 33.0 GiB, KV 10.0 GiB, "
        "allowance 6.0 GiB); vLLM may use 43.2 GiB of each (--gpu-memory-utilization 0.90); at 32768 tokens it fits; "
        "it needs 2 nodes of this kind"), err.message


def test_a_gpu_vllm_refuses_names_whose_memory_it_is_and_how_much():
    # Slips: a process's own memory left out when known (is None for is not None); the hint for a
    # command that fixes -tp not offering {tp} (tp is None for is not None).
    err = _refused(llama_70b(), "vllm", plan.Settings(ctx=8192, tp=8, tp_explicit=True), "dgx-h100")
    assert ("vLLM with --gpu-memory-utilization 0.90 needs 71.7 GiB of each GPU free at start, and GPU 1 has "
            "14.3 GiB of 79.6 GiB free: 65.3 GiB in use by alice (pid 2841174: 64.7 GiB) (2 more such)") in err.message
    assert err.hint == ("wait with --wait, --tensor-parallel-size {tp} to let gpulaunch pick the size, or a shorter "
                        "context (--ctx), a smaller KV type (--kv-type q8_0), or a smaller quantisation")


def test_ngl_0_with_too_little_host_memory_counts_every_layer_on_the_cpu():
    # Slip: no layer on the GPUs counted as one ("takes 1 of its 33 layers; the 32 left").
    err = _refused(llama_like(), "llama.cpp", plan.Settings(ctx=8192, gpu_layers_cap=0, host_free=1 * GiB), "dgx-h100")
    assert "takes 0 of its 33 layers; the 33 left on the CPU need 8.2 GiB, the host has 1.0 GiB available" \
        in err.message, err.message


@pytest.mark.parametrize("engine", ["sglang", "tgi", "mlc"])
def test_tensor_engines_without_vllms_utilisation_take_a_gpu_not_entirely_free(engine: str):
    # Slip: an engine with no utilisation rule held to vLLM's (or to 100 %): GPU 2 of dgx-h100 is idle
    # but has a few hundred MiB in use, and a small model must still get it.
    s = plan.sizing(llama_like(), engines.ENGINES[engine], plan.Settings(ctx=8192))
    sel = by_model.choose_by_model(read_machine("dgx-h100", Needs(topology=True)), s, select.Constraints())
    assert [d.gpu.index for d in sel.devices] == [2]


def test_no_wait_helps_is_said_of_the_most_gpus_all_free_not_of_the_busy_ones_now():
    # Slip: the check whether the machine's largest set was tried read the smallest count: the line
    # would speak of dgx-h100's GPUs as they are now (alice's at 98 %: "may use 0.0 GiB of each").
    err = _refused(llama_like(layers=80, layer_bytes=12 * GiB, heads=64), "vllm", plan.Settings(ctx=8192), "dgx-h100")
    assert "; vLLM may use 71.7 GiB of each (--gpu-memory-utilization 0.90); it needs 2 nodes" in err.message, \
        err.message


def test_gpus_taken_by_others_now_say_what_would_fit_once_free():
    # Slip: whose memory it is asked of no GPU at all (or for a wait that helps, of one vLLM takes): a crash.
    m = read_machine("workstation-4x", Needs(topology=True))
    taken = {g.uuid: "alice (pid 1)" for g in m.gpus[:2]}
    s = plan.sizing(llama_70b(), engines.ENGINES["vllm"], plan.Settings(ctx=8192))
    with pytest.raises(NotEnoughGpus) as info:
        by_model.choose_by_model(m, s, select.Constraints(reserved=taken))
    assert info.value.message.endswith("; vLLM may use 43.2 GiB of each (--gpu-memory-utilization 0.90); it would fit "
                                       "on 4 free GPUs"), info.value.message


def test_a_command_that_starts_more_ranks_than_gpus_says_how_many_and_why():
    # Seed 39 slips: the rank count read as "more" (want for not want), the command's own flag dropped.
    err = _refused(llama_70b(), "vllm", plan.Settings(ctx=8192, tp=16, tp_explicit=True, fixed_by="-tp 16"), "dgx-h100")
    assert err.message.startswith("test-model: vllm starts 16 ranks (-tp 16), one a GPU; this machine has 8 GPUs, "), \
        err.message


def test_ngl_more_than_the_gpus_take_says_how_many_they_do():
    # Seed 39 slip: the layers the best set takes shown as 0 (`and 0` for `or 0`).
    model = llama_like(layers=80, layer_bytes=3000 * 2**20, embedding=1 * GiB, output=1 * GiB, heads=64)
    err = _refused(model, "llama.cpp", plan.Settings(ctx=8192, gpu_layers_cap=80), "workstation-4x")
    assert err.message == ("test-model at 8192 tokens (llama.cpp): -ngl 80 puts 80 of its 81 layers on the GPUs, the "
                           "best set of 4 (190.9 GiB free) takes 61; no wait can help")


def test_ngl_0_short_of_host_memory_hints_letting_gpulaunch_count_the_layers():
    # Seed 39 slip: the {gpu_layers} hint given only when the command fixes no -ngl (is None for is not None).
    err = _refused(llama_like(), "llama.cpp", plan.Settings(ctx=8192, gpu_layers_cap=0, host_free=1 * GiB), "dgx-h100")
    assert err.hint.startswith("-ngl {gpu_layers} to put as many layers on the GPUs as fit, a shorter context"), err.hint


def test_a_gpu_whose_used_memory_is_unknown_is_said_to_use_its_total_less_its_free():
    # Seed 39 slip: free memory left out (`and 0`), so the whole card was "in use".
    from gpu_launch.base.records import replace

    m = read_machine("dgx-h100", Needs(topology=True))
    m = replace(m, gpus=tuple(replace(g, memory_used_mib=None) if g.index == 1 else g for g in m.gpus))
    s = plan.sizing(llama_70b(), engines.ENGINES["vllm"], plan.Settings(ctx=8192, tp=8, tp_explicit=True))
    with pytest.raises(NotEnoughGpus) as info:
        by_model.choose_by_model(m, s, select.Constraints())
    assert "GPU 1 has 14.3 GiB of 79.6 GiB free: 65.3 GiB in use by alice (pid 2841174: 64.7 GiB)" in info.value.message
