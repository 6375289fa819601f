"""``ls --watch``: redraw a listing in place until Ctrl-C, as ``watch nvidia-smi`` and ``gpustat -i`` do.

On a terminal each frame overwrites the last (cursor home, clear to the end of each line and below),
with the cursor hidden while it runs and shown again however the loop ends; the last frame stays on
the screen. A resized terminal gets a new frame at once, at its new width (however narrow: every
line is cut to fit, :mod:`gpu_launch.views.ls_table` picks the columns). Not on a terminal (a pipe,
a log file) the frames follow one another, each after a line ``--- HH:MM:SS`` so that a log can be
read back. Ctrl-C is the way out, so it exits 0 and prints nothing more: the cursor already waits on
the line below the last frame. SIGTERM and SIGHUP (``timeout 60 gpulaunch ls --watch``) show the
cursor again too, then end the process as their default action would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

from gpu_launch.views.ls_table import fit_line, fit_width

__all__ = ["run", "HIDE_CURSOR", "SHOW_CURSOR"]

HIDE_CURSOR = "\x1b[?25l"
SHOW_CURSOR = "\x1b[?25h"
_HOME = "\x1b[H"
_CLEAR_SCREEN = "\x1b[2J"
_CLEAR_LINE = "\x1b[K"
_CLEAR_BELOW = "\x1b[J"


def _clip(lines: list[str]) -> list[str]:
    """At most the terminal's height less one line: a taller frame would scroll, and the next redraw
    (from the top of the screen) would then leave the old one's tail behind."""
    import shutil

    rows = shutil.get_terminal_size().lines
    if rows < 3 or len(lines) < rows:
        return lines
    return lines[: rows - 2] + [f"… {len(lines) - rows + 2} more lines: make the terminal taller"]


def _stamp(interval: float, width: int | None = None) -> str:
    stamp = f"every {interval:g}s  {time.strftime('%H:%M:%S')}"
    return stamp if width is not None and width < len(stamp) + 18 else stamp + "  (Ctrl-C to stop)"


def _leaving() -> None:
    """After the Ctrl-C that ends the watch, ignore another: we are already leaving with 0. A second
    SIGINT in that moment (Ctrl-C pressed twice, or `timeout -s INT`, which signals the command and
    then its whole process group) would otherwise end the process by SIGINT, status 130, silently."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to guard
        pass


class _Ended(BaseException):
    """SIGTERM or SIGHUP (``timeout``, ``kill``, a closed terminal): leave as Ctrl-C leaves, the cursor
    shown again, then let the signal end the process as it would have (status 128 + N to a shell)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_end(signum: int, frame: object) -> None:
    raise _Ended(signum)


def _catch() -> tuple[dict[int, object], set[int], set[int] | None]:
    """Handle SIGTERM and SIGHUP, whose default action would end us with the cursor hidden, and hold
    SIGWINCH back (blocked) for :func:`_wait`. Returns the handlers to put back, the signals a wait
    takes itself, and the signal mask to put back (None: no waiting for signals here)."""
    import signal

    before: dict[int, object] = {}
    try:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:  # an ignored one (nohup) stays ignored
                before[signum] = signal.signal(signum, _on_end)
    except ValueError:  # not the main thread: signals are not ours
        return before, set(), None
    if not hasattr(signal, "sigtimedwait"):
        return before, set(), None
    taken = {signal.SIGWINCH, *before}
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        taken.add(signal.SIGINT)
    return before, taken, signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})


def _wait(interval: float, taken: set[int]) -> None:
    """Until the next frame is due, the terminal is resized (return), or Ctrl-C, SIGTERM or SIGHUP come
    (raise). The signals are blocked before the wait begins and taken by it, so that none can come
    just before it and be handled only once it is over (a whole interval late). SIGWINCH stays
    blocked while a frame is drawn too: a resize then is taken by the next wait, at once."""
    import signal

    if not taken:
        time.sleep(interval)
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, taken)
    try:
        got = signal.sigtimedwait(taken, interval)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if got is None or got.si_signo == signal.SIGWINCH:
        return
    if got.si_signo == signal.SIGINT:
        raise KeyboardInterrupt
    raise _Ended(got.si_signo)


def run(frame: Callable[[int | None], str], interval: float, out: IO[str]) -> int:
    """Draw ``frame(width)`` every ``interval`` seconds (on a terminal, at once when it is resized) until
    Ctrl-C; returns the exit code (0). SIGTERM and SIGHUP end it too, the terminal put back first."""
    import signal

    tty = bool(getattr(out, "isatty", lambda: False)())
    before, taken, mask = _catch() if tty else ({}, set(), None)
    ended: int | None = None
    try:
        if tty:
            out.write(HIDE_CURSOR + _CLEAR_SCREEN)
        while True:
            _draw(frame, interval, out, tty)
            _wait(interval, taken)
    except KeyboardInterrupt:
        _leaving()
        return 0
    except _Ended as end:
        ended = end.signum
    finally:
        if tty:
            try:
                out.write(SHOW_CURSOR)
                out.flush()
            except (OSError, ValueError):  # (a hung-up terminal)
                pass
        for signum, handler in before.items():  # first: a SIGTERM still held back now gets its default action
            signal.signal(signum, handler)  # type: ignore[arg-type]
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    assert ended is not None  # (the one way out of the loop that comes here)
    signal.signal(ended, signal.SIG_DFL)
    os.kill(os.getpid(), ended)
    return 128 + ended  # (not reached: the signal's default action ends the process)


def _draw(frame: Callable[[int | None], str], interval: float, out: IO[str], tty: bool) -> None:
    width = fit_width(out)
    text = _stamp(interval, width) + "\n" + frame(width)
    if tty:
        lines = _clip(text.rstrip("\n").split("\n"))
        if width is not None:  # a longer line would wrap, and the next redraw would not cover it
            lines = [fit_line(line, width) for line in lines]
        out.write(_HOME + "".join(line + _CLEAR_LINE + "\n" for line in lines) + _CLEAR_BELOW)
    else:
        out.write(f"--- {time.strftime('%H:%M:%S')}\n" + text.split("\n", 1)[1])
    out.flush()
