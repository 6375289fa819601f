"""``ls --watch``: redraw a listing in place until Ctrl-C, as ``watch nvidia-smi`` and ``gpustat -i`` do.

On a terminal each frame overwrites the last (cursor home, clear to the end of each line and below),
with the cursor hidden while it runs and shown again however the loop ends; the last frame stays on
the screen. Not on a terminal (a pipe, a log file) the frames follow one another, each after a line
``--- HH:MM:SS`` so that a log can be read back. Ctrl-C is the way out, so it exits 0 and prints
nothing more: the cursor already waits on the line below the last frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

from gpu_launch.views.ls_table import fit_width

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


def _stamp(interval: float) -> str:
    return f"every {interval:g}s  {time.strftime('%H:%M:%S')}  (Ctrl-C to stop)"


def _leaving() -> None:
    """After the Ctrl-C that ends the watch, ignore another: we are already leaving with 0. A second
    SIGINT in that moment (Ctrl-C pressed twice, or `timeout -s INT`, which signals the command and
    then its whole process group) would otherwise end the process by SIGINT, status 130, silently."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to guard
        pass


def run(frame: Callable[[int | None], str], interval: float, out: IO[str]) -> int:
    """Draw ``frame(width)`` every ``interval`` seconds until Ctrl-C; returns the exit code (0)."""
    tty = bool(getattr(out, "isatty", lambda: False)())
    try:
        if tty:
            out.write(HIDE_CURSOR + _CLEAR_SCREEN)
        while True:
            width = fit_width(out)
            text = _stamp(interval) + "\n" + frame(width)
            if tty:
                lines = _clip(text.rstrip("\n").split("\n"))
                out.write(_HOME + "".join(line + _CLEAR_LINE + "\n" for line in lines) + _CLEAR_BELOW)
            else:
                out.write(f"--- {time.strftime('%H:%M:%S')}\n" + text.split("\n", 1)[1])
            out.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        _leaving()
        return 0
    finally:
        if tty:
            try:
                out.write(SHOW_CURSOR)
                out.flush()
            except (OSError, ValueError):
                pass
