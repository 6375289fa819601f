"""Trainer flags read as the Trainer reads them (fit/training/forms_hf.py), the corners seed 38's mut-c sample
found untested (issue 37): a script's own one-letter long option, a loss_type read from its value and not from
the file's path, and a {micro_batch} left to gpulaunch beside a DeepSpeed config's number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_launch.fit.training.forms_hf import parse_flags

pytest.importorskip("yaml")

from test_training_forms import TORCHRUN, setup_of  # noqa: E402


def test_a_one_letter_long_option_is_an_option_not_the_value_of_a_bare_flag():
    assert parse_flags(["--bf16", "--r", "8"]) == {"bf16": (None, "--bf16"), "r": (["8"], "--r 8")}


def test_a_plain_loss_type_in_a_config_under_a_chunked_folder_is_plain(tmp_path: Path) -> None:
    cfg = tmp_path / "chunked-runs" / "sft.yaml"
    cfg.parent.mkdir()
    # (a TRL script behind torchrun: forms_hf's reading; ``trl sft`` itself has TRL's fused head, forms_trl.py)
    cfg.write_text("model_name_or_path: ./Q\nloss_type: nll\nmax_length: 4096\n")
    assert setup_of([*TORCHRUN, "--config", str(cfg)]).loss == "plain"
    cfg.write_text("model_name_or_path: ./Q\nloss_type: chunked_nll\nmax_length: 4096\n")
    assert setup_of([*TORCHRUN, "--config", str(cfg)]).loss == "chunked"


def test_micro_batch_left_to_gpulaunch_beside_a_deepspeed_number_is_no_disagreement(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}))
    s = setup_of([*TORCHRUN, "--deepspeed", str(ds), "--per_device_train_batch_size", "{micro_batch}"])
    assert s.sharding == "zero2"
