"""Text from other people, made safe for a terminal.

GPU names and process lines in a snapshot, other users' command lines (NVML, psutil) and the holder
line in someone else's lock file are foreign text: an escape sequence in them must never reach the
terminal raw (it could rewrite the screen, fake a line, or set the window title). Every such string
goes through :func:`printable` where it enters gpulaunch, so every view (``ls`` plain and rich,
``--explain``, the mapping table, warnings and errors) shows it escaped, ``repr``-style (``\\x1b``).
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """``text`` with every non-printable character (C0/C1 controls, DEL, line and paragraph separators,
    format characters) written as a backslash escape; printable text, accents and symbols unchanged."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
