"""``trl sft`` as TRL computes it: gpulaunch's per-GPU peak against PyTorch's count of a real step of TRL 1.16's
own SFTTrainer (tests/training_oracle_trl.py: SFTTrainer.train() on CPU, its fused LM head's Triton folds and
dropout stood in by what CUDA allocates), within 3 % and never more than 1 % under.

The tiny models' 32,768-wide tile buffer outweighs all else they hold, so most cases narrow it to 512 in both
TRL and gpulaunch (``tile``); one keeps TRL's own width. Skipped without trl (pip install trl==1.16.0: it pulls
datasets, pandas and pyarrow, so it is not in the ``oracle`` extra). About 5 s a case once trl is imported.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the oracle runs real PyTorch steps: pip install torch==2.13.0")
pytest.importorskip("peft", reason="the LoRA cases run the real peft: pip install -e '.[test,oracle]'")
trl = pytest.importorskip("trl", reason="the real SFTTrainer: pip install trl==1.16.0")

from training_oracle import Case, write_model  # noqa: E402
from training_oracle_trl import TRL_VERSION, compare_sft, measure_sft  # noqa: E402

#: (case, tile, lora_dropout): full fine-tunes in each precision, checkpointing, a tied head (Qwen3), Gemma-2's
#: soft-capped head, two sequences, more tokens than one token tile (4,096), LoRA with TRL's default dropout
CASES = [
    (Case("llama"), None, 0.0), (Case("llama"), 512, 0.0), (Case("llama", precision="amp_bf16"), 512, 0.0),
    (Case("llama", precision="fp32"), 512, 0.0), (Case("llama", gradient_checkpointing=True), 512, 0.0),
    (Case("qwen3"), 512, 0.0), (Case("gemma2"), 512, 0.0), (Case("llama", micro_batch=2), 512, 0.0),
    (Case("llama", seq_len=4200), 512, 0.0), (Case("llama", seq_len=4200, gradient_checkpointing=True), 512, 0.0),
    (Case("llama", method="lora", lora_targets=("all-linear",), gradient_checkpointing=True), 512, 0.05),
    (Case("llama", method="lora", gradient_checkpointing=True), 512, 0.05),
    # LoRA without checkpointing: 1.060 (q,v) and 1.113 (all-linear) while the adapters' inputs were counted in
    # fp32 (the Trainer's autocast saves them in 16 bits), 0.959 for all-linear with only those in 16 bits (the
    # forward at down_proj's adapter holds its unsaved input, the base output, the layer's input and residual)
    (Case("llama", method="lora"), 512, 0.05), (Case("llama", method="lora", lora_targets=("all-linear",)), 512, 0.05),
    (Case("llama", method="lora", gradient_checkpointing=True), 512, 0.0),
    # TRL's tile wider than the 512-entry vocabulary (its buffer is the tile's width whatever the vocabulary:
    # chunked_logprob.py ``torch.empty((min(N, TOKEN_CHUNK_SIZE), chunk_size))``) and narrower: 1.0004, 1.0005
    (Case("llama"), 2048, 0.0), (Case("llama"), 256, 0.0),
]

#: Over by more than 3 %, measured: none. (The long checkpointed step, once 1.081 with the product down_proj saved
#: counted at its MulBackward0, is 0.999: memory_backward.py; LoRA with checkpointing, once 1.0385 with its
#: adapters' inputs counted in fp32, is 0.9999: memory_activations._lora_bytes.)
KNOWN_OFF: dict[str, str] = {}


def _id(case: Case, tile: int | None, drop: float) -> str:
    targets = "" if case.lora_targets == ("q_proj", "v_proj") or case.method == "full" else "-all-linear"
    return f"{case.name}{targets}-{tile or 'trl'}-{drop}"


def test_the_oracle_runs_the_pinned_trl() -> None:
    assert trl.__version__ == TRL_VERSION, f"measured with trl {TRL_VERSION}: re-measure before moving the pin"


@pytest.mark.parametrize("case, tile, drop", [pytest.param(c, t, d, id=_id(c, t, d), marks=[pytest.mark.xfail(
    reason=KNOWN_OFF[_id(c, t, d)], strict=True)] if _id(c, t, d) in KNOWN_OFF else []) for c, t, d in CASES])
def test_trl_sft_peak_is_pytorchs_count_of_sfttrainer_within_3_percent(case, tile, drop, tmp_path) -> None:
    r = compare_sft(case, write_model(case, tmp_path), tile=tile, lora_dropout=drop)
    ours, torch_count = r["peak"]
    assert 0.99 * torch_count <= ours <= 1.03 * torch_count, (ours / torch_count, r)
    for phase in ("backward", "optimizer step"):  # the weights are read from the headers: exact
        got, want = r[phase]["weights"]
        assert abs(got - want) <= 128, (phase, got, want)


def test_cpus_torch_fallback_holds_more_than_cudas_kernels() -> None:
    """Why the oracle stands the tile folds in: off CUDA, TRL folds each tile with torch ops
    (chunked_logprob.py _forward_tile/_backward_tile, _addmm_fp32's fp32 upcasts), tile-sized temporaries
    a CUDA step never makes."""
    case = Case("llama")
    assert measure_sft(case, "cpu").peak > measure_sft(case, "cuda").peak


def test_trls_tile_buffer_is_as_wide_as_its_chunk_even_past_the_vocabulary() -> None:
    """What the plan's tile rule (memory_fused.backward_bytes) rests on: TRL allocates its projection buffer
    ``chunk_size`` wide, not ``min(chunk_size, vocab)``: a 2,048-wide tile on a 512-entry vocabulary holds 127
    scored tokens × 1,536 more bf16 columns than a 512-wide one."""
    from training_oracle_trl import vocab_tile

    case = Case("llama")
    with vocab_tile(2048):
        wide = measure_sft(case).peak
    with vocab_tile(512):
        exact = measure_sft(case).peak
    assert wide - exact == 127 * (2048 - 512) * 2, (wide, exact)


#: A 64-wide tile, so that the final norm's backward (or the last layer's MLP's) is the step's peak, within 1 %
#: over: main's plan kept the fused head's saved tensors and the norm's own released ones alive there (amp 1.0208,
#: LoRA 1.0198) and left down_proj's and the final norm's gradients out of the last layer's MLP moment (fp32: 0.988
#: once the norm's moment was right; 1.002 on main, hidden by the norm's over-count). Now 1.0003, 1.0028, 1.0002.
NORM_CASES = [Case("llama", precision="amp_bf16"), Case("llama", method="lora"), Case("llama", precision="fp32")]


@pytest.mark.parametrize("case", NORM_CASES, ids=[c.name for c in NORM_CASES])
def test_the_final_norms_backward_is_pytorchs_count_within_1_percent(case, tmp_path) -> None:
    r = compare_sft(case, write_model(case, tmp_path), tile=64)
    ours, torch_count = r["peak"]
    assert 0.99 * torch_count <= ours <= 1.01 * torch_count, (ours / torch_count, r)
