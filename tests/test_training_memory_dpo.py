"""``trl dpo`` as TRL computes it: gpulaunch's per-GPU peak against PyTorch's count of a real step of TRL 1.16's
own DPOTrainer (tests/training_oracle_dpo.py: DPOTrainer.train() on CPU, its reference model loaded by TRL
itself, the fused LM head's Triton folds and dropout stood in by what CUDA allocates), within 3 % and never more
than 1 % under.

The chosen and rejected rows fill max_length after a one-token prompt (TRL scores only the completions; the plan,
which cannot know the prompts, scores every position: a longer prompt is over, never under). Most cases narrow
the 32,768-wide vocabulary tile to 512 in both TRL and gpulaunch, one keeps TRL's own. Skipped without trl
(pip install trl==1.16.0). About a second a case once trl is imported.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the oracle runs real PyTorch steps: pip install torch==2.13.0")
pytest.importorskip("peft", reason="the LoRA cases run the real peft: pip install -e '.[test,oracle]'")
trl = pytest.importorskip("trl", reason="the real DPOTrainer: pip install trl==1.16.0")

from training_oracle import Case, write_model  # noqa: E402
from training_oracle_dpo import compare_dpo  # noqa: E402
from training_oracle_trl import TRL_VERSION  # noqa: E402

#: (case, tile, DPOConfig fields): full fine-tunes in bf16, fp32 and under autocast, checkpointing off and on, two
#: lengths, two examples a device, a tied head (Qwen3), Gemma-2's eager soft-capped attention, TRL's own tile
#: width, precompute_ref_log_probs (no reference at the step), LoRA (its adapter disabled as the reference)
CASES = [
    (Case("llama"), 512, {}), (Case("llama", gradient_checkpointing=True), 512, {}),
    (Case("llama", seq_len=256), 512, {}), (Case("llama", seq_len=256, gradient_checkpointing=True), 512, {}),
    (Case("llama", precision="fp32"), 512, {}), (Case("llama", precision="fp32", gradient_checkpointing=True), 512, {}),
    (Case("llama", precision="amp_bf16"), 512, {}), (Case("llama", micro_batch=2), 512, {}),
    (Case("qwen3"), 512, {}), (Case("gemma2"), 512, {}), (Case("llama"), None, {}),
    (Case("llama"), 512, {"precompute_ref_log_probs": True}),
    (Case("llama", method="lora", gradient_checkpointing=True), 512, {}), (Case("llama", method="lora"), 512, {}),
]

#: Over by more than 3 %, measured. None: LoRA with checkpointing was 0.983 of MemTracker's count, 32,768 bytes
#: (one bf16 hidden state of the batch) above its count of the same step with precompute_ref_log_probs, where the
#: CPU allocator's own events (torch.profiler, profile_memory) put both at the same bytes: the reference's forward
#: under no_grad makes the embeddings a leaf that needs a gradient (enable_input_require_grads) and MemTracker's
#: ModTracker hooks kept it alive (training_oracle_grpo._generation_tracker now gives it them detached): 1.0069
#: of both counts since
KNOWN_OFF: dict[str, str] = {}


def _id(case: Case, tile: int | None, config: dict) -> str:
    return f"{case.name}-{tile or 'trl'}" + "".join(f"-{k}" for k in config)


def test_the_oracle_runs_the_pinned_trl() -> None:
    assert trl.__version__ == TRL_VERSION, f"measured with trl {TRL_VERSION}: re-measure before moving the pin"


@pytest.mark.parametrize("case, tile, config", [pytest.param(c, t, k, id=_id(c, t, k), marks=[pytest.mark.xfail(
    reason=KNOWN_OFF[_id(c, t, k)], strict=True)] if _id(c, t, k) in KNOWN_OFF else []) for c, t, k in CASES])
def test_trl_dpo_peak_is_pytorchs_count_of_dpotrainer_within_3_percent(case, tile, config, tmp_path) -> None:
    r = compare_dpo(case, write_model(case, tmp_path), tile=tile, **config)
    ours, torch_count = r["peak"]
    assert 0.99 * torch_count <= ours <= 1.03 * torch_count, (ours / torch_count, r)
    for phase in ("backward", "optimizer step"):  # the weights, the reference's copy among them: exact
        got, want = r[phase]["weights"]
        assert abs(got - want) <= 256, (phase, got, want)


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
def test_the_peak_is_the_reference_forward_after_the_policys(precision, tmp_path) -> None:
    """Where PyTorch's peak has no gradient at all (the reference running its layers beside every activation
    the policy saved), the plan's is the reference forward too, and within 1 %."""
    case = Case("llama", precision=precision)
    r = compare_dpo(case, write_model(case, tmp_path))
    assert r["backward"]["gradients"] == (0, 0) and r["moment"] == "reference forward", r
    ours, torch_count = r["peak"]
    assert 0.99 * torch_count <= ours <= 1.01 * torch_count, (ours / torch_count, r)


def test_a_reference_copy_is_loaded_for_a_full_fine_tune_and_not_with_precompute(tmp_path) -> None:
    case = Case("llama")
    folder = write_model(case, tmp_path)
    with_ref = compare_dpo(case, folder)
    pre = compare_dpo(case, folder, precompute_ref_log_probs=True)
    copy = with_ref["optimizer step"]["weights"][1] - pre["optimizer step"]["weights"][1]
    planned = with_ref["optimizer step"]["weights"][0] - pre["optimizer step"]["weights"][0]
    assert planned > 0 and abs(copy - planned) <= 256, (copy, planned)  # its RoPE buffers beside the weights


def test_a_longer_prompt_is_over_never_under(tmp_path) -> None:
    """TRL labels the prompt -100 and its fused head scores only the completions (add_fused_lm_head: ``labels !=
    -100``); the plan scores every position, the prompts being the data's."""
    case = Case("llama")
    ours, torch_count = compare_dpo(case, write_model(case, tmp_path), prompt=32)["peak"]
    assert ours >= torch_count
