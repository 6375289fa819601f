"""Ctrl-C in the gpulaunch program: a KeyboardInterrupt, and a trace that one came.

A Ctrl-C must end the launch (``gpulaunch: interrupted``, 130) or reach the command; never be lost
in between. Python's own handler only marks the signal at C level, to raise KeyboardInterrupt at a
later check between bytecodes, and a mark that is never turned into one (an exec that comes first,
a KeyboardInterrupt dropped in a finaliser) would let the command run on as if no Ctrl-C had come.
So the C-level handler also writes to a pipe (:func:`signal.set_wakeup_fd`), and ``run.execute``
reads the pipe once SIGINT is blocked, just before the exec: every SIGINT that reached gpulaunch
is seen there, whatever became of it in Python. (Without it, the test of this in CI once saw 1
launch in 10 run its command to the end after a Ctrl-C.)
"""

from __future__ import annotations

import os
import signal

__all__ = ["install", "ours", "seen"]

#: the pipe's read end, made once per process (``cli.main`` may run more than once in tests)
_read_end: int | None = None


def install() -> None:
    """Ctrl-C raises KeyboardInterrupt from now on, unless SIGINT was ignored when we started (a
    background job of a script): then gpulaunch and the command it execs ignore it too.

    Called after ``streams.install``: a closed standard descriptor is held on /dev/null by then, so
    the pipe cannot take its number. Its ends are close-on-exec: the command never sees them.
    """
    global _read_end
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if _read_end is not None:
        return
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)  # a full pipe must never block the handler
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except (OSError, ValueError):  # ValueError: not the main thread (an embedding program's)
        os.close(read_end)
        os.close(write_end)
        return
    _read_end = read_end


def ours() -> bool:
    """Whether Ctrl-C is still Python's KeyboardInterrupt (not ignored, not an embedder's handler)."""
    return signal.getsignal(signal.SIGINT) is signal.default_int_handler


def seen() -> bool:
    """Whether a SIGINT reached this process since :func:`install` and the pipe was last read.

    Every KeyboardInterrupt ends a launch, so one seen at the hand-over is one that was lost.
    """
    if _read_end is None:
        return False
    try:
        data = os.read(_read_end, 4096)
    except OSError:  # BlockingIOError: nothing came
        return False
    return bytes([signal.SIGINT]) in data
