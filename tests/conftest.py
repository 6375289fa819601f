"""Shared helpers: run the real CLI in a subprocess, as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cli_run import CONFIG_HOME, HERMETIC, LOCK_DIR, ROOT, clean_env  # noqa: F401  (one hermetic environment)


# The Ctrl-C tests send SIGINT to a child gpulaunch, as a terminal does. A runner that starts the suite as
# a background job (nohup, `cmd &` in a script, some CI agents) has SIGINT ignored, an ignored signal stays
# ignored across exec, and gpulaunch, like any program, keeps it so (tests/test_hostile.py checks that). Handled
# here, it is back to its default action in every child, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: What a tester's shell or a CI machine may happen to set that changes how Python, a terminal library or
#: gpulaunch behaves: dropped for the whole session, so that no test comes to depend on it (with
#: PYTHONUNBUFFERED set, a test that read a child's prints in the wrong order passed in CI and failed
#: for everyone else). .ci/run runs the suite under `env -i` too, for what this list misses.
UNSTEADY = ("PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONWARNINGS", "PYTHONSTARTUP", "PYTHONINSPECT",
            "PYTHONDEVMODE", "PYTHONUTF8", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE",
            "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")
UNSTEADY_PREFIXES = ("GPULAUNCH_", "SLURM_")


@pytest.fixture(scope="session", autouse=True)
def hermetic_environment() -> Iterator[None]:
    """Every test, and every child it starts, uses a private lock directory and no config file.

    Set in os.environ for the whole session, so a test that runs gpulaunch in-process or hands
    os.environ to a child inherits it; helpers that build an environment from scratch go through
    ``cli_run.scrubbed``/``clean_env``, which keep the private lock directory. The tester's own
    GPULAUNCH_* settings (GPULAUNCH_WAIT=1h, ...) are dropped, and so are the UNSTEADY variables (a
    Slurm job's, an exported CUDA_VISIBLE_DEVICES, PYTHONUNBUFFERED, ...). tests/test_undisturbed.py
    checks that reservations held in the default /tmp/gpulaunch-locks change no test's outcome.
    """
    os.makedirs(CONFIG_HOME, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        for name in [k for k in os.environ if k in UNSTEADY or k.startswith(UNSTEADY_PREFIXES)]:
            mp.delenv(name)
        for name, value in HERMETIC.items():
            mp.setenv(name, value)
        yield

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
