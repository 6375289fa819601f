"""The parameters and optimizer states a fine-tune holds (fit/training/memory_params.py), rule by rule on small
layouts: what a user's plan is sized with (issue 37, seed 38 mut-c: ten of its fourteen sampled mutants
survived every rule test)."""

from __future__ import annotations

from dataclasses import replace

from gpu_launch.fit.training.memory_params import (OPT8_BLOCK, Linear, ParamCounts, Shape, _elements, linears, lora_targets,
                                                   shapes, state_bytes, step_temporary_bytes)
from gpu_launch.fit.training.setup import TrainingSetup

from test_training_memory_rules import BASE, CONFIG, H, llama8b

N = 1_000_003  # trainable parameters, not a multiple of the 8-bit block (256)


def _moe():  # a Qwen2-MoE-like layout: 8 routed experts and a shared expert
    model = llama8b()
    return replace(model, hyper=replace(model.hyper, expert_count=8)), \
        CONFIG | {"model_type": "qwen2_moe", "moe_intermediate_size": 384, "shared_expert_intermediate_size": 2048}


def test_adamw_8bit_without_shapes_is_two_bytes_a_parameter_and_an_fp32_absmax_a_started_block():
    blocks = -(-N // OPT8_BLOCK)
    assert state_bytes("adamw_8bit", N, 10, 2) == 2 * (N + 4 * blocks)


def test_adafactor_keeps_fp32_row_and_column_moments_and_whole_ones_for_1d():
    one = (Shape(1000, 300),)  # one 2-D tensor: 1000 + 300 fp32 moments; 77 parameters of 1-D ones
    assert state_bytes("adafactor", 300_000 + 77, 2, 2, one) == 4 * (1300 + 77)


def test_adafactors_step_upcasts_the_largest_tensor_four_times_over():
    counts = ParamCounts(total=10 ** 9, linear=0, largest=12345, trainable=10 ** 9, trainable_tensors=9)
    assert step_temporary_bytes("adafactor", counts, 2) == 4 * 12345 * 4
    assert step_temporary_bytes("adafactor", counts, 4) == 2 * 12345 * 4


def test_lora_targets_peft_defaults_and_a_name_that_ends_with_a_target():
    plain = (Linear("q_proj", H, H), Linear("k_proj", H, 1024), Linear("v_proj", H, 1024), Linear("o_proj", H, H))
    fused = (Linear("qkv_proj", H, 3 * H), Linear("o_proj", H, H))
    lora = TrainingSetup(model="M", launcher="trainer", method="lora", lora_r=16)
    assert [x.name for x in lora_targets(lora, plain)] == ["q_proj", "v_proj"]
    assert [x.name for x in lora_targets(lora, fused)] == ["qkv_proj"]
    shared = (Linear("gate_proj", H, 512), Linear("shared_expert.gate_proj", H, 2048))
    named = replace(lora, lora_targets=("gate_proj",))
    assert [x.name for x in lora_targets(named, shared)] == ["gate_proj", "shared_expert.gate_proj"]
    # a routed MoE's experts (3-D parameters in transformers v5) are no module peft's target_modules matches: a
    # Qwen2-MoE with gate_proj, up_proj, down_proj named trains only its shared expert's (checkpointed: 1.048 of
    # PyTorch's count while the experts were counted as adapted, 1.001 since)
    routed = (Linear("gate", H, 8), Linear("gate_proj", H, 512, 8, True), Linear("shared_expert.gate_proj", H, 2048))
    assert [x.name for x in lora_targets(named, routed)] == ["shared_expert.gate_proj"]
    # nor its router, a TopKRouter module in transformers v5, under all-linear (1.033 of PyTorch's count with it)
    every = replace(lora, lora_targets=("all-linear",))
    assert [x.name for x in lora_targets(every, routed)] == ["shared_expert.gate_proj"]
    assert [x.name for x in lora_targets(replace(lora, lora_targets=("gate",)), routed)] == []


def test_elements_read_every_dtypes_width():
    model = llama8b()
    w = replace(model.weights, by_type={"F32": 4 * 1000, "I32": 4 * 31})
    assert _elements(replace(model, weights=w)) == 1031


def test_qwen2_moes_shared_expert_gate_and_the_experts_full_shapes():
    model, config = _moe()
    block = {x.name: x for x in linears(model, config)}
    assert (block["shared_expert_gate"].fan_in, block["shared_expert_gate"].fan_out) == (H, 1)
    rows = {(s.rows, s.cols) for s in shapes(model, config, replace(BASE, method="full"))}
    assert (384 * 8, H) in rows and (384 // 8, H) not in rows  # up_proj's eight experts as one tensor
