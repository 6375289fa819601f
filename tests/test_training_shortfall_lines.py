"""The line a training step that no set here holds ends in (choose/training_shortfall.py), with its numbers: the
step's need a GPU, what the tightest GPU tried has free, what would fit. On the bundled dgx-h100 (80 GB H100s,
GPUs 0, 1 and 5 others') with a header-only Llama-3.1-8B, written at test time."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import clean_env
from tests.docs_fixtures import llama_8b_safetensors


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("training")
    llama_8b_safetensors(root / "Llama-3.1-8B")
    return root


def refused(work: Path, *argv: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "--fit", "model", "--explain", "--",
                           "torchrun", "--nproc-per-node", "{n}", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
                           "--bf16", *argv], capture_output=True, text=True, env=clean_env(), timeout=120, cwd=work)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    return proc.stderr.strip()


def test_full_fine_tuning_that_no_free_gpu_holds_says_their_room_and_only_what_fits_it(work: Path) -> None:
    # An 8B model's full fine-tuning at micro-batch 8 needs more than a whole H100: no wait can help, and the line
    # says what each GPU has when free (81555 MiB, 79.6 GiB) and, as fitting, only steps that need no more (seed 39:
    # with twice the room, ZeRO-3 and LoRA were offered too).
    line = refused(work, "--per_device_train_batch_size", "8")
    assert line.startswith("gpulaunch: error: ./Llama-3.1-8B: one training step needs ") and "\n" not in line
    need = float(re.search(r"one training step needs ([0-9.]+) GiB a GPU on 1 GPU at micro-batch 8 ", line)[1])
    assert need > 79.6
    assert "; these GPUs have 79.6 GiB each when free; no wait can help (hint: what would fit: " in line
    fits = line.split("(hint: what would fit: ")[1].rstrip(")").split("; ")
    assert len(fits) >= 2 and all(re.fullmatch(r".+: [0-9.]+ GiB a GPU", what) for what in fits), fits
    assert all(float(what.rsplit(": ", 1)[1].split()[0]) <= 79.6 for what in fits), fits
