"""What ``gpulaunch each`` shows: progress on stderr, the summary table on stdout.

On a terminal: a live rich panel (done / running / queued / failed, and the running jobs); otherwise
one plain line per event, and a waiting line only when the reason to wait changes. ``-q``: no
progress and no summary (the exit status and the error line still tell). ``--json``: the summary is
a JSON document (:func:`summary_doc`, schema ``EACH`` in views/schemas.py) instead of the table,
whatever ``-q`` says. Commands are shown as they ran (``{n}`` and ``{gpus}`` replaced), escaped for
the terminal. On a terminal the summary and the running jobs fit its width, one line a job
(:func:`fit_rows`: the command is cut with "…", then whole columns are left out, least useful first,
down to 20 columns); in a pipe or file the summary has every column in full. Times are shown to a
tenth of a second under a minute. Only renders; :mod:`gpu_launch.commands.each` decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpu_launch.base.units import fmt_duration

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs ~3 ms of every start
    from typing import IO, Any

__all__ = ["View", "counts", "summary_rows", "summary_doc", "fit_rows", "took", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_PREFIX = "gpulaunch each:"


def counts(scheduler: Any) -> dict[str, int]:
    states = scheduler.states
    return {
        "done": sum(1 for s in states if s.status == "done"),
        "running": sum(1 for s in states if s.status == "running"),
        "queued": sum(1 for s in states if s.status == "queued"),
        "failed": sum(1 for s in states if s.status == "failed"),
        "timeout": sum(1 for s in states if s.status == "timeout"),  # ended at its --time: apart, as `jobs` counts
        "not_started": sum(1 for s in states if s.status == "not started"),
    }


def took(seconds: float) -> str:
    """A job's time: ``2.0s`` (a tenth of a second under a minute: a 1.96 s job is no "1s"), ``1m05s``, ``2h03m``."""
    return f"{seconds:.1f}s" if seconds < 59.95 else fmt_duration(seconds)


#: Columns left out first when a terminal is too narrow for the summary (the title names the log
#: directory, and job N's log is job-N.log in it); the command is cut with "…" before it goes.
_GIVE_UP = ("LOG", "NODE", "GPUS", "COMMAND", "TIME", "RESULT")
_CUT_NO_SHORTER = 12  # the command column is left out rather than cut below this many characters


def fit_rows(rows: list[list[str]], width: int, give_up: tuple[str, ...] = _GIVE_UP) -> list[str]:
    """``rows`` (the first one the header) as aligned lines of at most ``width`` characters, one a row:
    the last column is cut with "…"; columns in ``give_up`` are left out, in that order, while the rest
    does not fit (the first column always stays)."""
    names = rows[0]
    keep = list(range(len(names)))
    while True:
        natural = [max(len(row[c]) for row in rows) for c in keep]
        room = width - sum(natural[:-1]) - 2 * (len(keep) - 1)
        last = names[keep[-1]]
        least = min(natural[-1], _CUT_NO_SHORTER if last.upper() == "COMMAND" else 4)
        left = [names.index(n) for n in give_up if n in names and names.index(n) in keep[1:]]
        if room >= least or not left:
            break
        keep.remove(left[0])
    widths = natural[:-1] + [max(1, min(natural[-1], room))]
    lines = []
    for row in rows:
        cells = [_cut(row[c], w) for c, w in zip(keep, widths)]
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip())
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(0, width - 1)] + "…"


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken after ", " or "; " where it can be."""
    import textwrap

    return textwrap.wrap(text, max(1, width), break_on_hyphens=False) or [""]


def _use_color(stream: IO[str]) -> bool:
    from gpu_launch.views.render import use_color  # (not even imported with -q)

    return use_color(stream)


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _counts_text(scheduler: Any) -> str:
    """``9 done, 0 running, 0 queued, 3 failed (2 exit 3, 1 killed by SIGTERM), 1 timeout (SIGTERM)``: how the
    failures failed, apart; the jobs ended at their --time apart from them (as `jobs` counts ``timeout``);
    ``, 2 not started`` when an interrupted sweep left some."""
    c = counts(scheduler)
    kinds: dict[str, int] = {}
    ends: dict[str, int] = {}  # how the timeouts ended: SIGTERM, or SIGKILL after the grace
    for s in scheduler.states:
        if s.status == "failed":
            kind = "never ran" if s.returncode is None else s.outcome
            kinds[kind] = kinds.get(kind, 0) + 1
        elif s.status == "timeout":
            end = s.outcome.removeprefix("timeout ").strip("()")
            ends[end] = ends.get(end, 0) + 1
    how = f" ({', '.join(f'{n} {kind}' for kind, n in kinds.items())})" if kinds else ""
    timeouts = ""
    if ends:
        timeouts = f", {c['timeout']} timeout ({next(iter(ends))})" if len(ends) == 1 else \
            f", {c['timeout']} timeout ({', '.join(f'{n} {end}' for end, n in ends.items())})"
    left = f", {c['not_started']} not started" if c["not_started"] else ""
    return f"{c['done']} done, {c['running']} running, {c['queued']} queued, {c['failed']} failed{how}{timeouts}{left}"


def summary_rows(scheduler: Any) -> list[list[str]]:
    """One row a job; a NODE column when the jobs ran elsewhere (``each --slurm``)."""
    nodes = any(getattr(s, "node", "") for s in scheduler.states)
    rows = [["JOB", "STATUS", "RESULT", *(["NODE"] if nodes else []), "GPUS", "TIME", "LOG", "COMMAND"]]
    for s in scheduler.states:
        seconds = s.seconds
        rows.append([str(s.job.number), s.status, s.outcome, *([s.node or "–"] if nodes else []), s.gpus or "–",
                     took(seconds) if seconds is not None else "–", s.log or "–", s.text])
    return rows


def summary_doc(scheduler: Any, log_dir: str) -> dict[str, Any]:
    """``each --json``: every job with what it ran, where, how it ended and how long it took."""
    submitted = getattr(scheduler, "submitted", None)  # each --slurm
    jobs = []
    for s in scheduler.states:
        seconds = s.seconds
        signal_name = _signal_name(-s.returncode) if s.returncode is not None and s.returncode < 0 else None
        jobs.append({
            "job": s.job.number, "line": s.job.line, "status": s.status,
            "exit_code": s.returncode if s.returncode is not None and s.returncode >= 0 else None,
            "signal": signal_name, "note": s.note or None, "node": s.node or None,
            "gpus": [int(g) for g in s.gpus.split(",") if g.isascii() and g.isdigit() and len(g) <= 9],
            "seconds": round(seconds, 3) if seconds is not None else None, "log": s.log or None,
            "argv": list(s.argv if s.argv is not None else s.job.argv),
        })
    return {"schema": SCHEMA_VERSION, "log_dir": log_dir,
            "slurm_job_id": submitted.job_id if submitted is not None else None,
            "counts": counts(scheduler), "jobs": jobs}


class View:
    def __init__(self, err: IO[str], out: IO[str], quiet: bool, total: int | None, log_dir: str, intro: bool = True,
                 json: bool = False) -> None:
        self.err = err
        self.out = out
        self.quiet = quiet
        self.total = total  # None while ``each -`` still reads its jobs (then "job 3", not "job 3/12")
        self.log_dir = log_dir
        self.intro = intro  # "N jobs, logs in DIR" (each --slurm has said so on submitting)
        self.json = json  # the summary as a JSON document
        self.rich = not quiet and _use_color(err)
        self._live: Any = None
        self._last_refresh = 0.0
        self._last_waiting = ""

    def __enter__(self) -> View:
        if self.rich:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self.err, highlight=False), auto_refresh=False, transient=True)
            self._live.start()
        elif not self.quiet and self.intro and self.total is None:
            self._say(f"starting each job line of stdin as it arrives, logs in {self.log_dir}")
        elif not self.quiet and self.intro:
            self._say(f"{self.total} job{'s' if self.total != 1 else ''}, logs in {self.log_dir}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def say(self, text: str) -> None:
        self._say(text)

    def ask(self, question: str) -> bool:
        """Ask on the terminal (the live display paused); True for y/yes."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()
        try:
            self.err.write(f"{_PREFIX} {question}")
            self.err.flush()
            answer = input()
        except (EOFError, KeyboardInterrupt):
            answer = ""
            self.err.write("\n")
        finally:
            if live is not None:
                live.start()
                self._live = live
        return answer.strip().lower() in ("y", "yes")

    def _say(self, text: str, always: bool = False) -> None:
        """A line of progress (``always``: one that ``-q`` does not hide either)."""
        if self._live is not None:
            self._live.console.print(f"{_PREFIX} {text}", markup=False, highlight=False)
        elif always or not self.quiet:
            print(f"{_PREFIX} {text}", file=self.err, flush=True)

    def started(self, scheduler: Any, state: Any) -> None:
        """``job 2/8 started on GPU 0 (log ...): CMD``, then one warning per GPU of it someone else computes on
        (``--max-util 100``), which ``-q`` does not hide: as a launch's (placing/pick.py ``tell``)."""
        where = f"{state.node} " if getattr(state, "node", "") else ""
        job = self._job(state)
        self._say(f"{job} started on {where}GPU {state.gpus or '?'} (log {state.log or '–'}): {state.text}")
        for warning in getattr(state, "notices", ()):  # a partly used GPU: as a launch warns, -q hides it
            self._say(f"{job}: warning: {warning}")
        for warning in getattr(state, "warnings", ()):
            self._say(f"{job}: warning: {warning}", always=True)
        self.refresh(scheduler, force=True)

    def _job(self, state: Any) -> str:
        return f"job {state.job.number}/{self.total}" if self.total is not None else f"job {state.job.number}"

    def finished(self, scheduler: Any, state: Any) -> None:
        after = f" after {took(state.seconds)}" if state.seconds is not None else ""
        if state.status == "done":
            self._say(f"{self._job(state)} done{after}")
        elif state.status == "not started":
            self._say(f"{self._job(state)} not started: {state.outcome}")
        elif state.status == "timeout":
            self._say(f"{self._job(state)} {state.outcome}{after}: ended at its --time (log {state.log or '–'})")
        else:
            self._say(f"{self._job(state)} failed: {state.outcome}{after} (log {state.log or '–'})")
        self.refresh(scheduler, force=True)

    def waiting(self, scheduler: Any, reason: Callable[[], str]) -> None:
        """Why the queued jobs wait (``waiting: all 8 GPUs in use by this sweep``, ``waiting for others'
        GPUs: ...``): said once, and again only when the reason changes, not after every start. The
        reason is worked out only when it is shown (not with ``-q``)."""
        if self.quiet:
            return
        why = reason()
        if why == self._last_waiting:
            return
        self._last_waiting = why
        if not self._live:
            self._say(f"{why} ({_counts_text(scheduler)})")

    def stopping(self, scheduler: Any, signal_name: str) -> None:
        running = len(scheduler.running)
        self._say(f"stopping: no more jobs start; sending {signal_name} to {running} running "
                  f"job{'s' if running != 1 else ''} and waiting for them")

    def refresh(self, scheduler: Any, force: bool = False) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        if not force and now - self._last_refresh < 0.25:
            return
        self._last_refresh = now
        from rich.console import Group
        from rich.text import Text

        c = counts(scheduler)
        width = self._live.console.width
        title = Text.assemble(("gpulaunch each  ", "bold"), (f"{c['done']} done", "green"), "  ",
                              (f"{c['running']} running", "cyan"), "  ", (f"{c['queued']} queued", "yellow"), "  ",
                              (f"{c['failed']} failed", "red" if c["failed"] else "dim"),
                              *(("  ", (f"{c['timeout']} timeout", "red")) if c["timeout"] else ()))
        lines: list[Any] = [title]
        if scheduler.running:
            rows = [["JOB", "GPUS", "TIME", "COMMAND"]]
            for state in scheduler.running:
                where = f"{state.node} " if getattr(state, "node", "") else ""
                rows.append([f"job {state.job.number}", f"{where}GPU {state.gpus}", took(state.seconds or 0),
                             state.text])
            lines += [Text(line) for line in fit_rows(rows, width, ("GPUS", "COMMAND", "TIME"))[1:]]
        if self._last_waiting and c["queued"]:
            lines.append(Text(_cut(self._last_waiting, width), style="dim"))
        self._live.update(Group(*lines), refresh=True)

    def summary(self, scheduler: Any) -> None:
        if self.json:
            import json

            self.out.write(json.dumps(summary_doc(scheduler, self.log_dir), indent=2) + "\n")
            self.out.flush()
            return
        if self.quiet:
            return
        from gpu_launch.views.render import use_color

        rows = summary_rows(scheduler)
        if use_color(self.out):
            self._terminal_summary(scheduler, rows)
            return
        widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        self.out.write("\n".join([_counts_text(scheduler), *lines]) + "\n")

    def _terminal_summary(self, scheduler: Any, rows: list[list[str]]) -> None:
        """The summary on a terminal: one line a job, within its width (:func:`fit_rows`), coloured."""
        from rich.console import Console
        from rich.text import Text

        console = Console(file=self.out, highlight=False)
        width = console.width
        # The log directory once, in the title, and each LOG cell as the file in it: a whole path
        # per row took ~40 columns and was folded mid-path at 80.
        prefix = self.log_dir.rstrip("/") + "/"
        log = rows[0].index("LOG")
        tally = _counts_text(scheduler)
        title = _wrapped(tally, width)
        if all(row[log].startswith(prefix) for row in rows[1:] if row[log] != "–"):
            rows = [rows[0], *([*row[:log], row[log].removeprefix(prefix), *row[log + 1:]] for row in rows[1:])]
            one = f"{tally}; logs in {prefix}"
            title = [one] if len(one) <= width else [*title, *_wrapped(f"logs in {prefix}", width)]
        header = [name.capitalize() if name != "GPUS" else "GPUs" for name in rows[0]]
        lines = fit_rows([header, *rows[1:]], width, tuple(n.capitalize() if n != "GPUS" else "GPUs" for n in _GIVE_UP))
        style = {"done": "green", "failed": "red", "timeout": "red", "running": "cyan"}
        out = [Text(line) for line in title] + [Text(lines[0], style="bold")]
        for row, line in zip(rows[1:], lines[1:]):
            text = Text(line)
            status = line.find(row[1], len(row[0]))
            if row[1] in style and status >= 0:
                text.stylize(style[row[1]], status, status + len(row[1]))
            out.append(text)
        for text in out:
            console.print(text, no_wrap=True, overflow="crop")
