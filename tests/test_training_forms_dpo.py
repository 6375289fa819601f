"""``trl dpo`` read as TRL 1.16's DPOTrainer runs it (fit/training/forms_trl.py ``_dpo``, memory_preference.py):
two rows an example, max_length 1024 unless said, the reference model unless precompute_ref_log_probs (a frozen
copy for a full fine-tune, the adapter disabled under PEFT), TRL's fused LM head; beta and loss_type change no
byte. No torch, no trl: the plan's own numbers on Llama-3.1-8B's shapes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_launch.fit.training.forms import read_launch
from gpu_launch.fit.training.forms_common import to_setup
from gpu_launch.fit.training.memory import peak, phases
from test_training_memory_rules import CONFIG, llama8b

NO_HOME = {"HOME": "/nonexistent"}


def dpo(*words: str, **options) -> object:
    launch = read_launch(["trl", "dpo", "--model_name_or_path", "M", *words], NO_HOME)
    assert launch is not None
    return to_setup(launch, "M", "bf16", options)


def test_trl_dpo_takes_two_rows_an_example_trls_length_and_the_reference_model() -> None:
    s = dpo()
    assert (s.launcher, s.rows_per_example, s.seq_len, s.micro_batch, s.loss, s.reference_model,
            s.gradient_checkpointing, s.method) == ("trl dpo", 2, 1024, 8, "fused", True, True, "full")
    longer = dpo("--max_length", "2048", "--per_device_train_batch_size", "2")
    assert (longer.seq_len, longer.micro_batch, longer.rows_per_example) == (2048, 2, 2)


@pytest.mark.parametrize("words, reference", [
    ([], True), (["--precompute_ref_log_probs"], False), (["--precompute_ref_log_probs", "true"], False),
    (["--precompute_ref_log_probs", "False"], True), (["--use_peft"], True),
    (["--use_peft", "--precompute_ref_log_probs"], False),
])
def test_the_reference_model_is_there_unless_its_log_probs_are_precomputed(words: list[str], reference: bool) -> None:
    assert dpo(*words).reference_model is reference


def test_a_yaml_config_says_the_same_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "dpo.yaml"
    cfg.write_text("model_name_or_path: M\nmax_length: 512\nprecompute_ref_log_probs: true\n"
                   "per_device_train_batch_size: 4\n")
    launch = read_launch(["trl", "dpo", "--config", str(cfg)], NO_HOME)
    s = to_setup(launch, "M", "bf16", {})
    assert (s.seq_len, s.micro_batch, s.reference_model, s.rows_per_example) == (512, 4, False, 2)


def test_beta_and_loss_type_change_no_byte() -> None:
    base = peak(llama8b(), CONFIG, dpo(), 1)
    for words in (["--beta", "0.5"], ["--loss_type", "ipo"], ["--loss_type", "sigmoid", "hinge"]):
        assert peak(llama8b(), CONFIG, dpo(*words), 1).peak_bytes == base.peak_bytes, words


def test_two_rows_hold_twice_the_activations_of_one() -> None:
    s = dpo("--gradient_checkpointing", "false", "--per_device_train_batch_size", "2")
    two = phases(llama8b(), CONFIG, replace(s, reference_model=False), 1)["backward"]
    one = phases(llama8b(), CONFIG, replace(s, reference_model=False, rows_per_example=1), 1)["backward"]
    doubled = phases(llama8b(), CONFIG, replace(s, reference_model=False, rows_per_example=1, micro_batch=4), 1)
    assert two == doubled["backward"] and two["activations"] > 1.9 * one["activations"]


def test_a_full_fine_tune_holds_the_reference_copy_peft_and_precompute_none() -> None:
    full, pre = dpo(), dpo("--precompute_ref_log_probs")
    copy = llama8b().weights.total
    ph_full, ph_pre = phases(llama8b(), CONFIG, full, 1), phases(llama8b(), CONFIG, pre, 1)
    assert ph_full["optimizer step"]["weights"] - ph_pre["optimizer step"]["weights"] == copy
    peft = dpo("--use_peft")
    ph_peft = phases(llama8b(), CONFIG, peft, 1)
    ph_peft_pre = phases(llama8b(), CONFIG, dpo("--use_peft", "--precompute_ref_log_probs"), 1)
    assert ph_peft["optimizer step"] == ph_peft_pre["optimizer step"]  # no copy
    rules = peak(llama8b(), CONFIG, full, 1).rules
    assert any("reference model's (without precompute_ref_log_probs: a frozen copy as loaded)" in r for r in rules)
    assert any("the adapter disabled" in r for r in peak(llama8b(), CONFIG, peft, 1).rules)
    assert not any("reference" in r for r in peak(llama8b(), CONFIG, pre, 1).rules)
    assert any("x 2 rows (chosen and rejected)" in r for r in rules)


def test_the_reference_forward_after_the_policys_can_be_the_peak() -> None:
    """Without checkpointing every activation of the policy is alive while the reference runs its layers: a
    LoRA step's peak (no head gradient, no states to speak of) is there, and it goes with precompute."""
    s = dpo("--use_peft", "--gradient_checkpointing", "false", "--per_device_train_batch_size", "2")
    got = peak(llama8b(), CONFIG, s, 1)
    assert got.peak_at == "reference forward" and got.moment == "the reference forward"
    assert got.gradients_bytes == 0
    pre = peak(llama8b(), CONFIG, replace(s, reference_model=False), 1)
    assert pre.peak_at != "reference forward" and pre.peak_bytes < got.peak_bytes


def test_max_length_none_truncates_nothing_so_the_length_is_assumed(tmp_path: Path) -> None:
    cfg = tmp_path / "dpo.yaml"
    cfg.write_text("model_name_or_path: M\nmax_length: null\n")
    for s in (dpo("--max_length", "None"), to_setup(read_launch(["trl", "dpo", "--config", str(cfg)], NO_HOME), "M",
                                                       "bf16", {})):
        assert s.seq_len == 2048 and any("tokens a sequence: say --train-seq" in a for a in s.assumed), s
    assert dpo("--max_length", "None", train_seq=4096).seq_len == 4096
