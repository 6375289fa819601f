"""gpulaunch's per-GPU peak of a training step against PyTorch's own count of the same step of the real
Hugging Face code (tests/training_oracle.py: transformers + peft on CPU, MemTracker, two steps).

Each case writes the model as config.json + header-only safetensors, asks gpulaunch (which reads the headers
and the config, never torch), runs the real step and compares: the peak within 3 % of PyTorch's count and
never more than 1 % under it; each phase's weights exactly; the moment of the peak. A quick slice of the
matrix runs here (a few seconds a case on 2 cores); benchmarks/training_sizing.py runs all of it and prints
the table. Cases known to be off are listed with the reason, strict: they fail when they come right.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the oracle runs real PyTorch steps: pip install torch==2.13.0")
pytest.importorskip("transformers", reason="the oracle runs the real Hugging Face code: pip install -e '.[test]'")
pytest.importorskip("peft", reason="the LoRA cases run the real peft: pip install -e '.[test]'")

from training_oracle import Case, compare, write_model  # noqa: E402

#: The quick slice: every family, full and LoRA, checkpointing off and on, both losses, both lengths, autocast.
QUICK = [
    Case("llama", precision="fp32"), Case("llama", precision="amp_bf16"), Case("llama"),
    Case("llama", seq_len=256), Case("llama", gradient_checkpointing=True),
    Case("llama", precision="fp32", gradient_checkpointing=True), Case("llama", loss="chunked"),
    Case("llama", method="lora"), Case("llama", method="lora", lora_targets=("all-linear",)),
    Case("llama", micro_batch=2),
    Case("qwen3"), Case("qwen3", method="lora"), Case("qwen2", gradient_checkpointing=True),
    Case("mistral"), Case("phi3"), Case("phi3", method="lora", lora_targets=("qkv_proj",)),
    Case("gemma2"), Case("gemma2", gradient_checkpointing=True),
    Case("qwen2_moe"),
    Case("llama", method="qlora"), Case("qwen3", method="qlora", gradient_checkpointing=True),
    # each was more than 1 % under PyTorch's count before the backward's moments (memory_backward.py): the
    # head's gradient summed chunk by chunk (0.981), a chunked loss's input and the final norm's fp32 backward
    # with a frozen base (0.954), the last layer's MLP backward under checkpointing (0.840), autocast's head
    # cast kept under checkpointing (0.984), eager attention's masks and Gemma-2's closing norm (0.963), MoE
    # experts in fp32 under autocast (0.977); Gemma-3 (tied, a sliding-window layer): 0.964 when added
    Case("llama", precision="fp32", loss="chunked"), Case("llama", method="lora", loss="chunked", seq_len=256),
    Case("llama", method="lora", loss="chunked", gradient_checkpointing=True),
    Case("llama", gradient_checkpointing=True, loss="chunked", seq_len=256),
    Case("llama", precision="amp_bf16", gradient_checkpointing=True, seq_len=256),
    Case("gemma2", method="lora", gradient_checkpointing=True), Case("qwen2_moe", precision="amp_bf16"),
    Case("gemma3"), Case("gemma3", gradient_checkpointing=True),
    # LoRA on fp32 weights under autocast (Trainer --bf16 on an fp32 load): 0.929 of PyTorch's count before each
    # frozen linear's 16-bit weight cast was counted (autocast caches trained leaves' casts only; the frozen
    # one's is a fresh tensor, kept by the linear's mm while the input needs a gradient), 0.898 with a chunked
    # loss (the frozen head cast again in each chunk's recompute, the fp32 hidden states' gradient)
    Case("llama", precision="amp_bf16", method="lora"),
    Case("llama", precision="amp_bf16", method="lora", gradient_checkpointing=True),
    Case("llama", precision="amp_bf16", method="lora", lora_targets=("all-linear",)),
    Case("llama", precision="amp_bf16", method="lora", lora_targets=("all-linear",), gradient_checkpointing=True),
    Case("llama", precision="amp_bf16", method="lora", loss="chunked"),
    # (0.985 and 0.956 before; 1.032 and 1.022 with the casts counted, until the recomputed layer's first norm,
    # which saves the checkpoint's own fp32 input, was no longer counted twice)
    Case("llama", precision="amp_bf16", method="lora", loss="chunked", gradient_checkpointing=True),
    Case("gemma2", precision="amp_bf16", method="lora", gradient_checkpointing=True),
    Case("qwen3", precision="amp_bf16", method="lora"), Case("qwen2_moe", precision="amp_bf16", method="lora"),
    # LoRA without checkpointing whose first adapter is not in q/k/v: the first layer's input (the frozen
    # embedding's output) needs no gradient, so nothing above its first adapter saves anything; and in fp32
    # down_proj's adapter keeps the product as it is (saved by nothing else). Before: gate+down under autocast
    # 1.059, MLP-only 1.043, down_proj-only 1.136 (1.122 under autocast), o_proj-only 1.032, Gemma-2 o_proj-only
    # 1.261, Phi-3 gate_up_proj 1.081, fp32 all-linear 0.939 (the product uncounted)
    Case("llama", precision="amp_bf16", method="lora", lora_targets=("gate_proj", "down_proj")),
    Case("llama", method="lora", lora_targets=("gate_proj", "up_proj", "down_proj")),
    Case("llama", method="lora", lora_targets=("down_proj",)),
    Case("llama", precision="amp_bf16", method="lora", lora_targets=("down_proj",)),
    Case("llama", method="lora", lora_targets=("o_proj",)),
    Case("gemma2", method="lora", lora_targets=("o_proj",)), Case("phi3", method="lora", lora_targets=("gate_up_proj",)),
    # (Gemma-3's only sliding-window layer is its first: its mask then kept by none; 1.104 before, 1.037 with it kept)
    Case("gemma3", method="lora", lora_targets=("o_proj",)),
    Case("llama", precision="fp32", method="lora", lora_targets=("all-linear",)),
    # Qwen2-MoE: peft adapts neither the experts (3-D parameters) nor the router (a TopKRouter, no nn.Linear),
    # and the first layer's routed block below no adapter saves nothing: MLP-only 1.248, all-linear 1.033 before
    Case("qwen2_moe", method="lora", lora_targets=("gate_proj", "up_proj", "down_proj")),
    Case("qwen2_moe", method="lora", lora_targets=("all-linear",)),
]

#: Cases where gpulaunch is off by more than the target, and why (measured; see the final report's table).
KNOWN_OFF: dict[str, str] = {}


def _id(case: Case) -> str:
    return case.name + ("" if case.lora_targets == ("q_proj", "v_proj") else "-" + "+".join(case.lora_targets)) \
        + ("" if case.optimizer == "adamw_torch" else "-" + case.optimizer)


@pytest.mark.parametrize("case", [pytest.param(c, id=_id(c), marks=[pytest.mark.xfail(
    reason=KNOWN_OFF[_id(c)], strict=True)] if _id(c) in KNOWN_OFF else []) for c in QUICK])
def test_peak_is_pytorchs_count_within_3_percent_never_1_percent_under(case, tmp_path):
    if case.method == "qlora":
        pytest.importorskip("bitsandbytes", reason="QLoRA's 4-bit base: pip install -e '.[test]'")
    r = compare(case, write_model(case, tmp_path))
    ours, torch_count = r["peak"]
    assert 0.99 * torch_count <= ours <= 1.03 * torch_count, (ours / torch_count, r)
    # the weights as loaded are exact (the rules read them from the headers), in both phases; the
    # optimizer's states too at the step (PyTorch's count adds AdamW's host-side step scalars, 4 bytes each)
    for phase in ("backward", "optimizer step"):
        got, want = r[phase]["weights"]
        # (QLoRA: within 0.2 %, the quant state's small tensors, its nf4 code table among them)
        # (the buffers no file holds: RoPE's inv_freq, two for Gemma-3, one a kind of layer, and its embed_scale)
        assert abs(got - want) <= (0.002 * want if case.method == "qlora" else 128), (phase, got, want)
    got, want = r["optimizer step"]["optimizer"]
    assert abs(got - want) <= 4 * 64 or abs(got - want) <= 0.002 * want, (got, want)
