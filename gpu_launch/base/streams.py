"""Standard streams that are closed or full: one error line for output, never a lost launch.

gpulaunch's contract (docs/exit-codes.md):

- **stdout** is what ``ls``, ``env``, ``config``, ``--help``, ``--json`` and ``--dry-run`` produce. If it
  cannot be written (closed: ``>&-``; a full disk: ``> /dev/full``) the command fails with one
  ``gpulaunch: error: cannot write to stdout (...)`` line and exit code 10, as coreutils fail.
- **stderr** carries the mapping table, warnings and errors: best effort. A closed or full stderr
  never stops a launch; the command runs, and an error still sets the exit code.
- A standard descriptor (0, 1, 2) that is **closed** at start is held open on ``/dev/null`` while
  gpulaunch runs, so that no lock or snapshot file it opens can take its number (a lock file would
  otherwise become the command's stdout); it is closed again just before the exec, so the command
  inherits exactly the descriptors it was given.
"""

from __future__ import annotations

import os
import sys

from gpu_launch.errors import OutputFailed

__all__ = ["install", "CLOSED", "close_again", "settle"]

#: The standard descriptors that were closed at start (held on /dev/null until the exec).
CLOSED: list[int] = []


class _Stdout:
    """sys.stdout whose write errors become :class:`OutputFailed` (one line, exit 10)."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def _failed(self, exc: OSError | None) -> OutputFailed:
        why = "it is closed" if exc is None else exc.strerror or str(exc)
        return OutputFailed(f"cannot write to stdout ({why})",
                            hint="write to a file on a disk with space, or a pipe" if exc is not None
                            and exc.errno is not None and exc.errno != 9 else "do not close stdout (>&-)")

    def write(self, text: str) -> int:
        if self._stream is None:
            raise self._failed(None)
        try:
            return self._stream.write(text)  # type: ignore[attr-defined,no-any-return]
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except OSError as exc:
            raise self._failed(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> object:
        if self._stream is None:
            raise self._failed(None)
        return getattr(self._stream, name)


class _Stderr:
    """sys.stderr as best effort: a closed or full stderr swallows what is written."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            if self._stream is not None:
                self._stream.write(text)  # type: ignore[attr-defined]
        except OSError:
            pass
        return len(text)

    def flush(self) -> None:
        try:
            if self._stream is not None:
                self._stream.flush()  # type: ignore[attr-defined]
        except OSError:
            pass

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()  # type: ignore[attr-defined,no-any-return]

    def fileno(self) -> int:
        return 2

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def install() -> None:
    """Hold closed standard descriptors on /dev/null and wrap sys.stdout/sys.stderr (see the module doc)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            CLOSED.append(fd)
    if not isinstance(sys.stdout, _Stdout):  # main() run twice in one process (tests): wrap once
        sys.stdout = _Stdout(None if 1 in CLOSED else sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, _Stderr):
        sys.stderr = _Stderr(None if 2 in CLOSED else sys.stderr)  # type: ignore[assignment]


def close_again() -> None:
    """Just before the exec: the command gets the closed descriptors it was given, closed."""
    for fd in CLOSED:
        try:
            os.close(fd)
        except OSError:
            pass


def settle() -> None:
    """After a failed write to stdout: point descriptor 1 at /dev/null, so that the interpreter's own
    flush at exit cannot fail a second time ("Exception ignored ... BrokenPipeError" and the like)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass
