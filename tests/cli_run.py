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
           "run_in_terminal", "start_in_terminal", "has_option"]

#: What every test process and child runs with (tests/conftest.py puts it in os.environ for the whole session):
#: a private lock directory, no config file. So another gpulaunch job on this machine, holding GPUs in the
#: default /tmp/gpulaunch-locks, or the tester's own ~/.config/gpulaunch, cannot change any test's outcome.
#: An admin's hardened /var/lib/gpulaunch/locks on the test machine is moved out of sight too, so a test
#: that drops GPULAUNCH_LOCK_DIR to exercise the /tmp default gets that default.
NO_HARDENED_DIR = LOCK_DIR + "-no-hardened-dir"
#: XDG_STATE_HOME: where detached jobs keep their records and logs (gpulaunch submit), never the tester's own.
STATE_HOME = os.path.join(os.path.dirname(LOCK_DIR), "state-home")
HERMETIC = {"GPULAUNCH_LOCK_DIR": LOCK_DIR, "GPULAUNCH_HARDENED_LOCK_DIR": NO_HARDENED_DIR, "GPULAUNCH_CONFIG": "",
            "XDG_CONFIG_HOME": CONFIG_HOME, "XDG_STATE_HOME": STATE_HOME}


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


def run_in_terminal(argv: list[str], env: dict[str, str], columns: int | None = None,
                    interrupt_after: bytes | None = None, timeout: float = 30, rows: int = 50) -> tuple[bytes, int]:
    """Run gpulaunch with a terminal for its stdin, stdout and stderr (``columns`` wide, if given); with
    ``interrupt_after``, type Ctrl-C once that text showed twice (two ``--watch`` frames). Returns what the
    terminal got and the exit status; killed after ``timeout`` seconds."""
    import select
    import signal
    import time

    pid, fd = start_in_terminal(argv, env, columns, rows)
    out = b""
    sent = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        if interrupt_after is not None and not sent and out.count(interrupt_after) >= 2:
            os.write(fd, b"\x03")  # Ctrl-C, as typed: the terminal sends SIGINT to the foreground job
            sent = True
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out, os.waitstatus_to_exitcode(status)


def start_in_terminal(argv: list[str], env: dict[str, str], columns: int | None = None,
                      rows: int = 50, program: bool = False) -> tuple[int, int]:
    """Start ``gpulaunch ARGV`` (``program``: ARGV itself, e.g. a shell) on a new terminal of its own (a pty:
    its session, its controlling terminal); returns its pid and the terminal's descriptor. The caller reads
    the descriptor and reaps the pid."""
    import fcntl
    import pty
    import struct
    import termios

    argv = argv if program else [sys.executable, "-m", "gpu_launch", *argv]
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, nothing else
        os.execve(argv[0], argv, env)
    if columns is not None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return pid, fd


def has_option(name: str) -> bool:
    """Whether the option table has ``name`` (tests for options other issues add skip until then)."""
    from gpu_launch.options import args

    return any(name in opt.names for opt in args.OPTIONS)
