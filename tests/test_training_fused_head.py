"""TRL's fused LM head (``trl sft``, trl >= 1.15) as a user planning a fine-tune sees it, on Llama-3.1-8B's real
layout, no torch: no logits, one 4,096 × 32,768 tile, the hidden states' fp32 gradient; and how a ``trl sft``
command line picks it (the trl in the command's own interpreter, label smoothing). PyTorch's count of
SFTTrainer's real step is tests/test_training_memory_trl.py's."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.fit.training import memory_fused
from gpu_launch.fit.training.forms import read_launch
from gpu_launch.fit.training.forms_common import to_setup
from gpu_launch.fit.training.memory import peak
from gpu_launch.fit.training.memory_activations import loss_bytes, saved
from gpu_launch.fit.training.memory_params import linears, param_counts
from test_training_memory_rules import BASE, CONFIG, GiB, H, V, llama8b

SFT = replace(BASE, launcher="trl sft", micro_batch=8, seq_len=1024, gradient_checkpointing=True,
              mixed_precision=True)


def test_trl_sft_lora_holds_no_logits_a_tile_and_the_hidden_states_fp32_gradient() -> None:
    lora = replace(SFT, method="lora", lora_r=16, lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"))
    plain = peak(llama8b(), CONFIG, lora, 1)
    fused = peak(llama8b(), CONFIG, replace(lora, loss="fused"), 1)
    n = 8 * 1023
    # the plain rule's 12 bytes a token and vocabulary entry: 11.7 GiB at 8 × 1024 tokens
    assert plain.loss_bytes == 12 * 8 * 1024 * V
    # TRL's: the 4096 × 32768 bf16 tile, the fp32 gradient of the hidden states and its bf16 cast, the
    # incoming fp32 gradient of the log-probabilities: 0.45 GiB (the peak is then in the layers' backward)
    assert loss_bytes(llama8b(), CONFIG, replace(lora, loss="fused")) == 4096 * 32768 * 2 + (4 + 2) * H * n + 4 * n
    assert plain.peak_bytes > 28 * GiB and fused.peak_bytes < 20 * GiB  # 29.0 GiB -> 19.4 GiB
    assert fused.peak_at == "backward" and "TRL's fused LM head" in fused.rules[-1]


def test_a_full_fine_tune_adds_the_heads_fp32_accumulator_and_keeps_no_16bit_copy_of_the_head() -> None:
    full = peak(llama8b(), CONFIG, replace(SFT, loss="fused", gradient_checkpointing=False), 1)
    n = 8 * 1023
    assert full.loss_bytes == 4096 * 32768 * 2 + (4 + 2) * H * n + 4 * n + 4 * V * H
    block, linear = linears(llama8b(), CONFIG), param_counts(llama8b(), CONFIG, SFT).linear
    amp = saved(llama8b(), CONFIG, replace(SFT, loss="fused", precision="amp_bf16"), block, linear)
    plain_amp = saved(llama8b(), CONFIG, replace(SFT, precision="amp_bf16"), block, linear)
    # under autocast the plain head keeps its bf16 weight cast (2 · V · h); the fused one casts a tile at a time
    assert (plain_amp.fixed_outside, amp.fixed_outside) == (2 * V * H, 0)


def test_the_tile_is_as_wide_whatever_the_vocabulary_and_as_tall_as_4096_tokens() -> None:
    small = replace(SFT, loss="fused", micro_batch=1, seq_len=129)
    assert memory_fused.backward_bytes(small, 64, 512, False) == 128 * 32768 * 2 + 6 * 64 * 128 + 4 * 128
    long = replace(small, seq_len=20001)
    assert memory_fused.backward_bytes(long, 64, 512, False) == 4096 * 32768 * 2 + 6 * 64 * 20000 + 4 * 20000


def _trl(tmp_path: Path, version: str | None) -> dict[str, str]:
    """A PATH whose ``trl`` runs a venv's python with trl ``version`` installed (a dist-info directory)."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if version:
        (site / f"trl-{version}.dist-info").mkdir()
    (venv / "bin").mkdir()
    python = venv / "bin" / "python"
    python.write_text("")
    script = venv / "bin" / "trl"
    script.write_text(f"#!{python}\n")
    script.chmod(0o755)
    return {"PATH": str(venv / "bin") + os.pathsep + os.defpath}


@pytest.mark.parametrize("version, words, loss", [
    ("1.16.0", [], "fused"), (None, [], "fused"), ("1.15.0", ["--use_liger_kernel"], "fused"),
    ("1.16.0", ["--loss_type", "dft"], "fused"), ("1.16.0", ["--label_smoothing_factor", "0.1"], "plain"),
    ("1.14.0", [], "plain"), ("1.14.0", ["--loss_type", "chunked_nll"], "chunked"),
])
def test_trl_sft_takes_the_loss_of_the_trl_it_runs(tmp_path: Path, version, words, loss) -> None:
    env = _trl(tmp_path, version)
    launch = read_launch(["trl", "sft", "--model_name_or_path", "M", *words], env)
    assert to_setup(launch, "M", "bf16", {}).loss == loss


def test_trl_sft_refuses_a_loss_type_its_trl_refuses_and_dpo_takes_the_head_of_its_trl(tmp_path: Path) -> None:
    env = _trl(tmp_path, "1.16.0")
    with pytest.raises(UsageError, match="takes loss_type nll or dft"):
        read_launch(["trl", "sft", "--model_name_or_path", "M", "--loss_type", "chunked_nll"], env)
    dpo = to_setup(read_launch(["trl", "dpo", "--model_name_or_path", "M"], env), "M", "bf16", {})
    assert dpo.loss == "fused"  # trl 1.16's DPOTrainer: add_fused_lm_head on the policy and the reference
    old = to_setup(read_launch(["trl", "dpo", "--model_name_or_path", "M"], _trl(tmp_path / "old", "1.10.0")), "M",
                   "bf16", {})
    assert old.loss == "plain"  # 1.10 made both models' logits (selective_log_softmax)


def test_trl_sft_lora_takes_trls_dropout_and_a_mask_an_adapter() -> None:
    setup = to_setup(read_launch(["trl", "sft", "--model_name_or_path", "M", "--use_peft"], {}), "M", "bf16", {})
    assert setup.lora_dropout == 0.05
    off = to_setup(read_launch(["trl", "sft", "--model_name_or_path", "M", "--use_peft", "--lora_dropout", "0"],
                               {}), "M", "bf16", {})
    base = dict(method="lora", lora_r=16, lora_targets=("q_proj", "v_proj"), loss="fused")
    with_masks = peak(llama8b(), CONFIG, replace(SFT, lora_dropout=setup.lora_dropout, **base), 1)
    without = peak(llama8b(), CONFIG, replace(SFT, lora_dropout=off.lora_dropout, **base), 1)
    assert with_masks.peak_bytes > without.peak_bytes
    with pytest.raises(UsageError, match="not a dropout probability"):
        read_launch(["trl", "sft", "--model_name_or_path", "M", "--use_peft", "--lora_dropout", "2"], {})
