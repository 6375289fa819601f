"""What ``gpulaunch jobs`` shows: a table of the user's detached jobs, one job in full, or JSON.

Takes the statuses :mod:`gpu_launch.jobs.status` worked out (a job record, its state now, its place
in the queue); only renders. The table fits ``width`` (the command is cut with "…"); commands are
shown shell-quoted and escaped for the terminal.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from gpu_launch.base.text import printable
from gpu_launch.base.units import fmt_duration

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    #: a gpu_launch.jobs.status.Status (job, state, position, note); views import nothing above them
    Status = Any

__all__ = ["table", "detail", "as_json", "HEADER", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
HEADER = ("ID", "STATE", "EXIT", "GPUS", "SUBMITTED", "TIME", "COMMAND")
#: the outcomes in the order the count line names them ("12 jobs: 10 done, 2 failed")
STATES = ("waiting", "running", "done", "failed", "killed", "timeout", "failed to start", "cancelled", "lost",
          "lost at reboot")
#: SGR colours of the outcomes on a terminal (none for waiting and running): green, red, yellow, magenta
_COLOURS = {"done": "32", "failed": "31", "killed": "31", "timeout": "31", "failed to start": "31", "cancelled": "33",
            "lost": "35", "lost at reboot": "35"}


def _state(s: Status) -> str:
    return s.label  # type: ignore[no-any-return]


def _paint(text: str, outcome: str, colour: bool) -> str:
    """``text`` (already padded) in the outcome's colour; the padding stays outside the colour."""
    code = _COLOURS.get(outcome) if colour else None
    if not code:
        return text
    bare = text.rstrip()
    return f"\033[{code}m{bare}\033[0m" + text[len(bare):]


def _exit(s: Status) -> str:
    job = s.job
    if job.signal:
        return job.signal
    return str(job.exit_code) if job.exit_code is not None else "–"


def _gpus(s: Status, backfilled: bool = False) -> str:
    gpus = s.job.gpus
    text = "–" if gpus is None else gpus or "cpu"
    return f"{text} (backfilled)" if backfilled and gpus else text  # lent by the head of the queue


def _when(t: float, now: float) -> str:
    """``14:02:11`` today, ``Mar 03 14:02`` on an earlier day."""
    lt = time.localtime(t)
    return time.strftime("%H:%M:%S" if time.localtime(now)[:3] == lt[:3] else "%b %d %H:%M", lt)


def _time(s: Status, now: float) -> str:
    """How long it has run (or ran); while it waits, how long it has waited."""
    job = s.job
    if job.started is not None:
        return fmt_duration((job.ended or now) - job.started)
    if s.state == "waiting":
        return fmt_duration(now - job.submitted)
    return "–"


def command_text(argv: Sequence[str]) -> str:
    return printable(shlex.join(argv))


def table(statuses: Sequence[Status], width: int | None, now: float | None = None, colour: bool = False,
          backfilled: frozenset[str] = frozenset()) -> str:
    """The jobs, oldest first, then a line counting them by outcome; ``colour``: the states coloured
    (the caller decides: a terminal, no NO_COLOR, never --json); ``backfilled``: the ids of the jobs that
    started ahead of earlier waiters, on GPUs the head of the queue lent (their GPUS say so)."""
    now = time.time() if now is None else now
    rows = [(s.job.id, _state(s), _exit(s), _gpus(s, s.job.id in backfilled), _when(s.job.submitted, now), _time(s, now),
             command_text(s.job.argv)) for s in statuses]
    widths = [max(len(HEADER[i]), *(len(r[i]) for r in rows)) for i in range(6)]
    lines = []
    for k, row in enumerate((HEADER, *rows)):
        cells = [row[i].rjust(widths[i]) if i in (0, 5) else row[i].ljust(widths[i]) for i in range(6)]
        line = "  ".join(cells) + "  " + row[6]
        if width is not None and len(line) > width:
            line = line[:width - 1] + "…"
        line = line.rstrip()
        if k and colour:  # the state's cell only, after the cut (which counts what is seen, not codes)
            start = len(cells[0]) + 2
            cell = line[start:start + len(cells[1])]
            line = line[:start] + _paint(cell, statuses[k - 1].outcome, True) + line[start + len(cells[1]):]
        lines.append(line)
    counts = [(state, sum(1 for s in statuses if s.outcome == state)) for state in STATES]
    total = len(statuses)
    lines.append(f"{total} job{'s' if total != 1 else ''}: " + ", ".join(f"{n} {state}" for state, n in counts if n))
    return "\n".join(lines) + "\n"


def detail(s: Status, log: str, now: float | None = None, backfilled: str | None = None) -> str:
    """One job in full: its state and why, what it runs, where, when, on which GPUs, its log."""
    now = time.time() if now is None else now
    job = s.job
    head = _state(s)
    if s.state in ("cancelled", "failed to start") and (job.exit_code is not None or job.signal) \
            or s.outcome == "done" and job.exit_code is not None:
        head += f", {'exit ' + str(job.exit_code) if job.exit_code is not None else 'killed by ' + str(job.signal)}"
    rows = [("command", command_text(job.argv)),
            ("launch", command_text(["gpulaunch", *job.options, "--", "COMMAND"])),
            ("directory", printable(job.cwd)),
            ("submitted", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.submitted)))]
    if job.started is not None:
        rows.append(("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.started))
                     + f" (waited {fmt_duration(job.started - job.submitted)})"))
    if job.ended is not None:
        ran = f" (ran {fmt_duration(job.ended - job.started)})" if job.started is not None else ""
        rows.append(("ended", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.ended)) + ran))
    elif s.state in ("waiting", "running"):
        rows.append(("for", _time(s, now)))
    if job.limit is not None:  # its --time: the supervisor ends it there (timeout)
        grace = f" (then SIGTERM, SIGKILL {job.grace:g}s later)" if job.grace is not None else ""
        rows.append(("limit", fmt_duration(job.limit) + grace))
    rows += [("gpus", _gpus(s)), ("pid", str(job.pid) if job.pid else "–"), ("host", printable(job.host)),
             ("log", printable(log))]
    if backfilled:  # it started ahead of earlier waiters, on GPUs the head of the queue lent
        rows.append(("backfill", printable(backfilled)))
    if s.note:
        rows.append(("note", printable(s.note)))
    return f"job {job.id}: {head}\n" + "".join(f"  {k:<10} {v}\n" for k, v in rows)


def as_json(statuses: Sequence[Status], job_dir: str, logs: Sequence[str],
            backfilled: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``jobs --json`` (schema ``JOBS`` in views/schemas.py); ``backfilled`` as for :func:`table`."""
    return {"schema": SCHEMA_VERSION, "job_dir": job_dir, "jobs": [{
        "id": s.job.id, "state": s.state, "outcome": s.outcome, "position": s.position, "exit_code": s.job.exit_code,
        "signal": s.job.signal, "note": s.note, "gpus": s.job.gpus, "submitted": s.job.submitted,
        "started": s.job.started, "ended": s.job.ended, "pid": s.job.pid, "host": s.job.host, "cwd": s.job.cwd,
        "argv": list(s.job.argv), "options": list(s.job.options), "log": log,
        "backfilled": s.job.id in backfilled, "limit_s": s.job.limit,
    } for s, log in zip(statuses, logs)]}
