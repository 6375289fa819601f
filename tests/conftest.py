"""Shared helpers: run the real CLI in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cli_run import LOCK_DIR, ROOT, clean_env  # noqa: F401  (one hermetic environment for every helper)

# The child prints what it received, so tests read the environment the command really got.
PRINT_CVD = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))"


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m gpu_launch ARGS` with a clean snapshot/config environment."""
    return subprocess.run([sys.executable, "-m", "gpu_launch", *args], capture_output=True, text=True,
                          env=clean_env(env), input=input, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
