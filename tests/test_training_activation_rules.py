"""Saved activations rule by rule (fit/training/memory_activations.py): a routed MoE block's tensors a token and
the sliding-window mask only where the window is shorter than the sequence (issue 37, seed 38 mut-c)."""

from __future__ import annotations

from gpu_launch.fit.training.memory_activations import _moe, _sliding_layers
from gpu_launch.fit.training.setup import TrainingSetup

H, E, K, I = 2048, 60, 4, 1408  # Qwen1.5-MoE-A2.7B's router: 60 experts, 4 a token


def test_a_routed_blocks_tensors_a_token_frozen_and_trained_experts():
    config = {"num_experts_per_tok": K, "moe_intermediate_size": I}
    frozen = 4 * E + 32 * K + 2 * K + 2 * K * H + 3 * 2 * K * I
    assert _moe(config, E, H, 2, full=False) == frozen
    assert _moe(config, E, H, 2, full=True) == frozen + 2 * K * (H + I)
    # under autocast the experts' tensors stay fp32
    assert _moe(config, E, H, 2, full=True, amp=True) == 4 * E + 32 * K + 2 * K + 4 * K * H + 3 * 4 * K * I \
        + 4 * K * (H + I)


def test_a_window_as_long_as_the_sequence_needs_no_mask():
    config = {"sliding_window": 4096, "layer_types": ["sliding_attention", "full_attention"]}
    at = TrainingSetup(model="M", launcher="trainer", precision="bf16", micro_batch=1, seq_len=4096)
    assert _sliding_layers(config, "gemma2", at, 2) == 0.0
    assert _sliding_layers(config, "gemma2", TrainingSetup(model="M", launcher="trainer", precision="bf16",
                                                           micro_batch=1, seq_len=4097), 2) == 0.5


def test_autocasts_casts_of_a_full_fine_tunes_weights_are_kept_the_heads_outside_the_layers():
    from dataclasses import replace

    from gpu_launch.fit.training.memory_activations import saved
    from gpu_launch.fit.training.memory_params import linears

    from test_training_memory_rules import BASE, CONFIG, H as LH, V, llama8b
    model = llama8b()
    amp = replace(BASE, precision="amp_bf16", method="full")
    act = saved(model, CONFIG, amp, linears(model, CONFIG), 10 ** 9)
    assert (act.fixed, act.fixed_outside) == (2 * 10 ** 9 + 2 * V * LH, 2 * V * LH)
    eager = saved(model, CONFIG, replace(BASE, attention="eager"), linears(model, CONFIG), 10 ** 9)
    assert eager.squared == (4 + 2) * 32  # softmax's fp32 output and its bf16 cast, every head
