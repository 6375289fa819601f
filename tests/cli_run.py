"""Run the real CLI in a subprocess for the robustness tests (bad input, environment hygiene).

Kept apart from ``conftest.py`` so that it merges cleanly: it adds bytes argv and an env that is
exactly what the caller says (no inherited GPULAUNCH_/CUDA_ variables), which those tests need.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A private reservation directory (issue 3), so no test takes or sees the machine's real reservations.
LOCK_DIR = os.path.join(tempfile.mkdtemp(prefix="gpulaunch-robust-"), "locks")

#: An empty directory for XDG_CONFIG_HOME, so that no helper can find the tester's own config file.
CONFIG_HOME = os.path.join(os.path.dirname(LOCK_DIR), "config-home")

__all__ = ["ROOT", "LOCK_DIR", "CONFIG_HOME", "HERMETIC", "clean_env", "scrubbed", "run_gpulaunch", "gpulaunch_argv",
           "run_in_terminal", "start_in_terminal", "Terminal", "has_option"]

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


class Terminal:
    """gpulaunch on a pseudo-terminal (its stdin, stdout and stderr), driven step by step: wait for some
    output, then type, resize or signal. ``columns``/``rows``: its size; every wait ends by ``timeout``
    seconds after the start (the process is then killed)."""

    def __init__(self, argv: list[str], env: dict[str, str], columns: int | None = None, rows: int = 50,
                 timeout: float = 30) -> None:
        import pty
        import signal
        import time

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: as a terminal starts a program (a runner under nohup ignores SIGHUP), exec
            for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            os.execve(sys.executable, [sys.executable, "-m", "gpu_launch", *argv], env)
        if columns is not None:
            self.resize(columns, rows)
        self.out = b""
        self.deadline = time.monotonic() + timeout
        self.status: int | None = None

    def resize(self, columns: int, rows: int = 50) -> None:
        """Set the terminal's size: the kernel sends SIGWINCH to the program in it."""
        import fcntl
        import struct
        import termios

        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)  # b"\x03": Ctrl-C, the terminal sends SIGINT to the foreground job

    def _read(self) -> bool:
        """Read what is there (waiting up to 0.5 s); False once the program closed the terminal or the time is up."""
        import select
        import time

        if time.monotonic() >= self.deadline:
            return False
        ready, _, _ = select.select([self.fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: every copy of the terminal's other end is closed
                return False
            if not chunk:
                return False
            self.out += chunk
        return True

    def wait_for(self, predicate: Callable[[bytes], bool]) -> bytes:
        """Read until ``predicate(all output so far)`` holds; fails the test if the program ends or the time is up."""
        while not predicate(self.out):
            if not self._read():
                out, status = self.finish()
                raise AssertionError(f"gave up waiting (exit status {status}); the terminal showed: "
                                     f"{out.decode(errors='replace')[-3000:]!r}")
        return self.out

    def finish(self) -> tuple[bytes, int]:
        """Read to the end (killed when the time is up); what the terminal got and the exit status."""
        import signal
        import time

        while self._read():
            pass
        if self.status is None:
            if time.monotonic() >= self.deadline:
                os.kill(self.pid, signal.SIGKILL)
            _, status = os.waitpid(self.pid, 0)
            self.status = os.waitstatus_to_exitcode(status)
            os.close(self.fd)
        return self.out, self.status


def run_in_terminal(argv: list[str], env: dict[str, str], columns: int | None = None,
                    interrupt_after: bytes | None = None, timeout: float = 30, rows: int = 50) -> tuple[bytes, int]:
    """Run gpulaunch with a terminal for its stdin, stdout and stderr (``columns`` wide, if given); with
    ``interrupt_after``, type Ctrl-C once that text showed twice (two ``--watch`` frames). Returns what the
    terminal got and the exit status; killed after ``timeout`` seconds."""
    term = Terminal(argv, env, columns, rows, timeout)
    if interrupt_after is not None:
        term.wait_for(lambda out: out.count(interrupt_after) >= 2)
        term.type(b"\x03")
    return term.finish()


def start_in_terminal(argv: list[str], env: dict[str, str], columns: int | None = None,
                      rows: int = 50, program: bool = False) -> tuple[int, int]:
    """Start ``gpulaunch ARGV`` (``program``: ARGV itself, e.g. a shell) on a new terminal of its own (a pty:
    its session, its controlling terminal); returns its pid and the terminal's descriptor. The caller reads
    the descriptor and reaps the pid."""
    import fcntl
    import pty
    import struct
    import termios

    import signal

    argv = argv if program else [sys.executable, "-m", "gpu_launch", *argv]
    pid, fd = pty.fork()
    if pid == 0:  # the child: as a terminal starts a program (a runner under nohup ignores SIGHUP), exec
        for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        os.execve(argv[0], argv, env)
    if columns is not None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return pid, fd


def has_option(name: str) -> bool:
    """Whether the option table has ``name`` (tests for options other issues add skip until then)."""
    from gpu_launch.options import args

    return any(name in opt.names for opt in args.OPTIONS)
