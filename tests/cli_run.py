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

#: An empty directory for XDG_CONFIG_HOME, so that no helper can find the tester's own config file.
CONFIG_HOME = os.path.join(os.path.dirname(LOCK_DIR), "config-home")

__all__ = ["ROOT", "LOCK_DIR", "CONFIG_HOME", "HERMETIC", "clean_env", "scrubbed", "run_gpulaunch", "gpulaunch_argv",
           "has_option"]

#: What every test process and child runs with (tests/conftest.py puts it in os.environ for the whole session):
#: a private lock directory, no config file. So another gpulaunch job on this machine, holding GPUs in the
#: default /tmp/gpulaunch-locks, or the tester's own ~/.config/gpulaunch, cannot change any test's outcome.
#: An admin's hardened /var/lib/gpulaunch/locks on the test machine is moved out of sight too, so a test
#: that drops GPULAUNCH_LOCK_DIR to exercise the /tmp default gets that default.
NO_HARDENED_DIR = LOCK_DIR + "-no-hardened-dir"
HERMETIC = {"GPULAUNCH_LOCK_DIR": LOCK_DIR, "GPULAUNCH_HARDENED_LOCK_DIR": NO_HARDENED_DIR, "GPULAUNCH_CONFIG": "",
            "XDG_CONFIG_HOME": CONFIG_HOME}


def scrubbed(drop: tuple[str, ...] = ("GPULAUNCH_",), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without the variables starting with ``drop``, the private
    lock directory kept. A helper that builds its child's environment this way cannot fall back to the
    machine's shared default lock directory."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if not k.startswith(drop)}
    env.pop("COLUMNS", None)  # the tester's terminal width must not change `ls`'s layout or the help's
    env["GPULAUNCH_LOCK_DIR"] = LOCK_DIR
    env["GPULAUNCH_HARDENED_LOCK_DIR"] = NO_HARDENED_DIR
    return env


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without anything that steers gpulaunch, plus ``extra``."""
    env = scrubbed(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE", "SLURM_", "PYTEST_"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("NO_COLOR", None)
    env["GPULAUNCH_CONFIG"] = ""  # empty: no config file, so the tester's own defaults cannot leak in
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
