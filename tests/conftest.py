"""Shared helpers: run the real CLI in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Reservations go to a private lock dir, never the machine's shared /tmp/gpulaunch-locks, so that
# other test runs or real jobs on this machine cannot change which GPUs a test gets.
LOCK_DIR = os.path.join(tempfile.mkdtemp(prefix="gpulaunch-test-"), "locks")
# The child prints what it received, so tests read the environment the command really got.
PRINT_CVD = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))"


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m gpu_launch ARGS` with a clean snapshot/config environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE", "SLURM_"))}
    base["PYTHONPATH"] = str(ROOT) + os.pathsep + base.get("PYTHONPATH", "")
    base.pop("NO_COLOR", None)
    base["GPULAUNCH_CONFIG"] = ""  # the developer's own ~/.config/gpulaunch/config.toml stays out of tests
    base["GPULAUNCH_LOCK_DIR"] = LOCK_DIR
    if env:
        base.update(env)
    return subprocess.run([sys.executable, "-m", "gpu_launch", *args], capture_output=True, text=True,
                          env=base, input=input, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
