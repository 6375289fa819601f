"""The "waiting…" line on stderr: a live rich line on a terminal, plain periodic lines otherwise.

In a Jupyter notebook (the Python API's ``wait=``), stderr is ipykernel's stream: no terminal, but
its output area redraws a line on a carriage return, so the line is rewritten in place with ``\r``
(no rich, no widgets). Only renders; :mod:`gpu_launch.reservations.acquire` decides what it says. Nothing
at all with ``-q``.
"""

from __future__ import annotations

import sys

from gpu_launch.base.units import fmt_duration

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a --wait launch ~3 ms
    from typing import IO, Any

__all__ = ["StatusLine", "PLAIN_EVERY", "in_notebook"]

PLAIN_EVERY = 60.0  # seconds between repeated plain lines when nothing changes


def in_notebook(stream: object) -> bool:
    """Whether ``stream`` is a Jupyter kernel's output stream (ipykernel's ``OutStream``).

    Looks at the stream's class only: nothing is imported to find out.
    """
    return type(stream).__module__.split(".")[0] == "ipykernel"


class StatusLine:
    """``waiting 1m20s: need 2 GPUs with ≥ 20 GiB free; eligible now: GPU 3``.

    On a terminal (and without NO_COLOR) it is one rich line redrawn in place and removed at the
    end; in a notebook one plain line redrawn with ``\r`` and blanked at the end; otherwise a line
    is printed when the situation changes, and once a minute regardless.
    """

    def __init__(self, stream: IO[str] | None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self._live: Any = None
        self._redraw = False  # carriage-return updates (a notebook's output area)
        self._width = 0  # of the line last drawn with \r, to blank it out
        self._last_what: str | None = None
        self._last_printed = 0.0

    def __enter__(self) -> StatusLine:
        if self.quiet:
            return self
        from gpu_launch.views.render import use_color

        # A notebook first: its stream may claim to be a terminal, but rich would draw HTML there.
        if in_notebook(self.stream):
            self._redraw = True
        elif use_color(self.stream):
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self.stream, highlight=False), transient=True,
                              auto_refresh=False)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._width:
            # Blank the line and go back to its start: what is printed next takes its place.
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def update(self, elapsed: float, what: str) -> None:
        if self.quiet:
            return
        text = f"waiting {fmt_duration(elapsed)}: {what}"
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text.assemble(("gpulaunch: ", "bold"), (text, "yellow")), refresh=True)
            return
        if self._redraw:
            line = f"gpulaunch: {text}"
            self.stream.write("\r" + line.ljust(self._width))
            self.stream.flush()
            self._width = max(self._width, len(line))
            return
        if what != self._last_what or elapsed - self._last_printed >= PLAIN_EVERY:
            print(f"gpulaunch: {text}", file=self.stream, flush=True)
            self._last_what = what
            self._last_printed = elapsed
