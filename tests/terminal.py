"""A program on a terminal of its own (a pty), for the tests that need real terminals: several at once,
read while they run, typed into."""

from __future__ import annotations

import os
import select
import signal
import time

from cli_run import start_in_terminal

__all__ = ["Terminal"]


class Terminal:
    """A gpulaunch (``program``: any program, e.g. a shell) on a terminal of its own (a pty), read as it goes."""

    def __init__(self, argv: list[str], environ: dict[str, str], columns: int = 80, program: bool = False) -> None:
        self.pid, self.fd = start_in_terminal(argv, environ, columns, program=program)
        self.out = b""

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # the terminal's other side closed: the program ended
            return False
        self.out += chunk
        return bool(chunk)

    def wait_for(self, text: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while text.encode() not in self.out:
            if time.monotonic() > end or not self._read(0.2):
                raise AssertionError(f"no {text!r} on the terminal: {self.out.decode(errors='replace')!r}")

    def finish(self, timeout: float = 60) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self._read(0.2):
            pass
        if time.monotonic() >= end:
            os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)

    def type(self, line: str) -> None:
        """Type a line, as a user at the terminal would."""
        os.write(self.fd, line.encode() + b"\n")
