"""Ctrl-C in the gpulaunch program: a KeyboardInterrupt, and a trace that one came.

A Ctrl-C must end the launch (``gpulaunch: interrupted``, 130) or reach the command; never be lost
in between. Python's own handler only marks the signal at C level, to raise KeyboardInterrupt at a
later check between bytecodes, and a mark that is never turned into one (an exec that comes first,
a KeyboardInterrupt dropped in a finaliser) would let the command run on as if no Ctrl-C had come.
So the C-level handler also writes to a pipe (:func:`signal.set_wakeup_fd`), and ``run.execute``
reads the pipe once SIGINT is blocked, just before the exec: every SIGINT that reached gpulaunch
is seen there, whatever became of it in Python. (Without it, the test of this in CI once saw 1
launch in 10 run its command to the end after a Ctrl-C.)

The handler is Python's, but for one place: while the import system's own code runs. At the end of
every import it runs a weakref callback (a module lock's), and a KeyboardInterrupt raised in a
callback cannot propagate: Python prints ``Exception ignored in: <function ... cb>`` with a traceback
and drops it (about 1 start-up Ctrl-C in 500, ``benchmarks/ctrl_c_start_up.py``). There the handler
raises nothing and asks again a millisecond later (SIGALRM), once the import is done; a retry whose
Ctrl-C has meanwhile become a KeyboardInterrupt another way (:func:`seen`) raises nothing.
"""

from __future__ import annotations

import os
import signal

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

__all__ = ["install", "ours", "seen", "settle"]

#: the pipe's read end, made once per process (``cli.main`` may run more than once in tests)
_read_end: int | None = None


def install() -> None:
    """Ctrl-C raises KeyboardInterrupt from now on (:func:`_interrupt`), unless SIGINT was ignored when
    we started (a background job of a script): then gpulaunch and the command it execs ignore it too.

    Called after ``streams.install``: a closed standard descriptor is held on /dev/null by then, so
    the pipe cannot take its number. Its ends are close-on-exec: the command never sees them.
    """
    global _read_end
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, _interrupt)
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


#: the retry's delay: an import's callback is over well within it, a person notices nothing
_RETRY_S = 0.001
#: a Ctrl-C waits for its retry; it is over once the Ctrl-C became a KeyboardInterrupt (:func:`settle`)
_retrying = False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT (and its retry, SIGALRM): raise KeyboardInterrupt, except inside the import system."""
    global _retrying
    if signum == signal.SIGALRM and not _retrying:
        return  # the Ctrl-C it was for is already a KeyboardInterrupt: one Ctrl-C, one exception
    if frame is not None and str(frame.f_globals.get("__name__")).startswith("importlib._bootstrap"):
        _retrying = True
        signal.signal(signal.SIGALRM, _interrupt)
        signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
        return
    settle()
    raise KeyboardInterrupt


def settle() -> bool:
    """The Ctrl-C has become a KeyboardInterrupt (here, or at the hand-over's :func:`seen`): no retry may
    raise another, in the ``except`` or ``finally`` that handles this one. True if one was waiting."""
    global _retrying
    if not _retrying:
        return False
    _retrying = False
    signal.setitimer(signal.ITIMER_REAL, 0)
    return True


def ours() -> bool:
    """Whether Ctrl-C is still a KeyboardInterrupt (not ignored, not an embedder's handler)."""
    return signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _interrupt)


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
    if bytes([signal.SIGINT]) not in data:
        return False
    settle()  # the caller raises it
    return True
