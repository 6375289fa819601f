"""Run the real CLI in a subprocess for the robustness tests (bad input, environment hygiene).

Kept apart from ``conftest.py`` so that it merges cleanly: it adds bytes argv and an env that is
exactly what the caller says (no inherited GPULAUNCH_/CUDA_ variables), which those tests need.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A private reservation directory (issue 3), so no test takes or sees the machine's real reservations.
LOCK_DIR = os.path.join(tempfile.mkdtemp(prefix="gpulaunch-robust-"), "locks")

__all__ = ["ROOT", "LOCK_DIR", "clean_env", "run_gpulaunch", "gpulaunch_argv", "has_option"]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without anything that steers gpulaunch, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE", "SLURM_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("NO_COLOR", None)
    env["GPULAUNCH_CONFIG"] = ""  # empty: no config file, so the tester's own defaults cannot leak in
    env["GPULAUNCH_LOCK_DIR"] = LOCK_DIR
    env.update(extra or {})
    return env


def gpulaunch_argv(*args: str | bytes) -> list[str | bytes]:
    return [sys.executable, "-m", "gpu_launch", *args]


def run_gpulaunch(*args: str, env: Mapping[str, str] | None = None,
                  timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`python -m gpu_launch ARGS`; output decoded leniently so odd bytes cannot fail the test itself."""
    return subprocess.run(gpulaunch_argv(*args), capture_output=True, text=True, errors="backslashreplace",
                          env=clean_env(env), timeout=timeout, cwd=ROOT)


def has_option(name: str) -> bool:
    """Whether the option table has ``name`` (tests for options other issues add skip until then)."""
    from gpu_launch.options import args

    return any(name in opt.names for opt in args.OPTIONS)
