"""The ``--wait`` queue under ``gpulaunch ls``: who waits for what, in the order they will be served.

Reads what :func:`gpu_launch.reservations.waitqueue.waiters` found (live tickets only) and renders it as a
section of its own below the GPU table, or as the ``queue`` list of ``ls --json``. The user and the
time come from the kernel (the ticket's owner and ctime); the request and command are the waiter's
own words, shown escaped and cut to the width.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from gpu_launch.base.text import printable
from gpu_launch.base.units import fmt_duration

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    #: a gpu_launch.reservations.waitqueue.Waiter (position, pid, uid, since_ns, note); views import nothing above them
    Waiter = Any

__all__ = ["as_json", "as_text", "HEADER"]

HEADER = ("QUEUE", "USER", "PID", "SINCE", "WAITING", "REQUEST")


def _user(uid: int, names: dict[int, str]) -> str:
    if uid not in names:
        try:
            import pwd

            names[uid] = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            names[uid] = str(uid)
    return names[uid]


def _note(text: str) -> tuple[str | None, str | None]:
    """(request, command) from a ticket's note; None for what it does not say (an older gpulaunch's ticket)."""
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    request, command = doc.get("request"), doc.get("command")
    return (request if isinstance(request, str) else None), (command if isinstance(command, str) else None)


def as_json(waiters: Sequence[Waiter], now: float | None = None) -> list[dict[str, Any]]:
    """``ls --json``'s ``queue``: one object per waiter, head of line first (schema: views/schemas.py)."""
    now = time.time() if now is None else now
    names: dict[int, str] = {}
    out = []
    for w in waiters:
        request, command = _note(w.note)
        since = w.since_ns / 1e9
        out.append({"position": w.position, "user": _user(w.uid, names), "uid": w.uid, "pid": w.pid,
                    "since": round(since, 3), "waited_s": round(max(0.0, now - since), 1),
                    "request": request, "command": command,
                    "kept": list(w.kept) if getattr(w, "kept", None) is not None else None,
                    "lends": list(w.lends) if getattr(w, "lends", None) is not None else None,
                    "expected_start": getattr(w, "shadow", None), "strict": bool(getattr(w, "strict", False))})
    return out


def _since(when: float, now: float) -> str:
    """``14:02:11`` today, ``Mar 03 14:02`` on an earlier day."""
    t = time.localtime(when)
    return time.strftime("%H:%M:%S" if time.localtime(now)[:3] == t[:3] else "%b %d %H:%M", t)


def as_text(waiters: Sequence[Waiter], width: int | None, now: float | None = None) -> str:
    """The queue section (a blank line, a header, a row per waiter); "" when nobody waits. Each row fits
    ``width`` (None: no limit): the request and command are cut with "…"."""
    if not waiters:
        return ""
    now = time.time() if now is None else now
    names: dict[int, str] = {}
    rows = []
    for w in waiters:
        request, command = _note(w.note)
        what = printable(" ".join(f"{request or '?'}: {command}".split()) if command else request or "?")
        since = w.since_ns / 1e9
        rows.append((str(w.position), printable(_user(w.uid, names))[:16], str(w.pid), _since(since, now),
                     fmt_duration(max(0.0, now - since)), what))
    widths = [max(len(HEADER[i]), *(len(r[i]) for r in rows)) for i in range(5)]
    right = (False, False, True, False, True)
    lines = []
    for row in (HEADER, *rows):
        cells = [row[i].rjust(widths[i]) if right[i] else row[i].ljust(widths[i]) for i in range(5)]
        line = "  ".join(cells) + "  " + row[5]
        if width is not None and len(line) > width:
            line = line[:width - 1] + "…"
        lines.append(line.rstrip())
    head = waiters[0]
    if getattr(head, "kept", None) is not None:  # it lends: say what it keeps, and how many GPUs it lends
        kept = ", ".join(printable(k) for k in head.kept) or "none yet"
        lent = len(head.lends or ())
        line = f"kept for the head: {kept}; lent to later waiters: {lent} GPU{'s' if lent != 1 else ''}" if lent \
            else f"kept for the head: {kept}; it lends no GPU"
        shadow = getattr(head, "shadow", None)
        if getattr(head, "strict", False):  # --no-backfill: nobody starts on a GPU it may use, --time or not
            line += " (strict first come, first served: --no-backfill)"
        elif shadow is not None and shadow > now:  # from the holders' declared --time: who ends by then may use kept GPUs
            line += f"; expected to start in {fmt_duration(shadow - now)} (declared limits)"
        lines.append(line if width is None or len(line) <= width else line[:width - 1] + "…")
    return "\n" + "\n".join(lines) + "\n"
