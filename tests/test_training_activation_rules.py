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
