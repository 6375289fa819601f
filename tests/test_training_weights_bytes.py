"""The frozen base as a LoRA step holds it in 8 bits, and the optimizer step's moment holding no activations
(fit/training/memory.py; issue 37, seed 38 mut-c)."""

from __future__ import annotations

from dataclasses import replace

from gpu_launch.fit.training.memory import _weights_bytes, peak

from test_training_memory_rules import BASE, CONFIG, llama8b


def test_an_8bit_base_is_a_byte_a_linear_weight_and_an_fp32_scale_a_4096_block_the_rest_in_bf16():
    lora8 = replace(BASE, method="lora", lora_r=16, quant_bits=8)
    linear, total = 4096 * 10_000, 4096 * 10_000 + 777
    assert _weights_bytes(llama8b(), lora8, total, linear) == linear + 4 * linear // 4096 + 777 * 2


def test_the_optimizer_steps_moment_holds_no_activations_and_no_loss():
    p = peak(llama8b(), CONFIG, replace(BASE, gradient_checkpointing=True), 1)
    assert p.peak_at == "optimizer step"
    assert (p.activations_bytes, p.loss_bytes) == (0, 0)
