"""``gpulaunch each -``: job lines read from a pipe as they arrive, so each one can start at once.

simple-gpu-scheduler starts a line as soon as it reads it; ``tail -f queue | gpulaunch each -`` and
``(echo job1; sleep 4; echo job2) | gpulaunch each -`` need that. :func:`open_stdin` waits for the first
line (or the end of input), then takes what has already arrived without waiting. If the input has
ended by then, the whole list is known and checked up front, exactly as a job file is; otherwise the
sweep *streams*: the lines so far were checked up front (a bad one still refuses the sweep before
anything starts), and each later line is checked when it arrives: a bad one is that job's failure
(counted as failed, named by its line) while the others go on. The sweep ends when the input has
ended and its jobs are done.

Bounds: a job file's 64 MiB hold for all the input known up front; a streamed line may be at most
:data:`MAX_LINE` bytes (an endless stream has no total to bound).
"""

from __future__ import annotations

import os
import select

from gpu_launch.errors import GpuLaunchError, UsageError
from gpu_launch.sweeps.jobfile import MAX_JOB_BYTES, Job, parse_line

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable

__all__ = ["Feed", "MAX_LINE"]

MAX_LINE = 1024 * 1024
_CHUNK = 65536


class Feed:
    """Lines of a job list from a descriptor, parsed into jobs as they complete (see the module docstring)."""

    def __init__(self, fd: int, source: str, shell: bool) -> None:
        self.fd = fd
        self.source = source
        self.shell = shell
        self.open = True  # input has not ended yet
        self._buffer = b""
        self._lineno = 0
        self._number = 0
        self._read = 0  # bytes read in all
        self._first = True  # (a UTF-8 byte order mark starts only the first line)
        self._skipping = False  # the rest of a line too long to take is still arriving: dropped up to its newline
        self._consumed = 0  # bytes of the lines taken so far, newlines included
        self._starts: dict[int, int] = {}  # line number -> where it starts in the input (for "byte N", as a file's)
        self.check: Callable[[Job], None] | None = None  # how each later line is checked (each.check_job)

    def _lines(self, final: bool) -> list[tuple[int, bytes]]:
        """Complete lines in the buffer (and the last unfinished one once input has ended)."""
        *complete, self._buffer = self._buffer.split(b"\n")
        if final and self._buffer:
            complete, self._buffer = [*complete, self._buffer], b""
        lines = []
        for raw in complete:
            self._lineno += 1
            lines.append((self._lineno, raw))
            self._starts[self._lineno] = self._consumed
            self._consumed += len(raw) + 1
        return lines

    def _chunk(self, block: bool) -> bool:
        """Read what there is (waiting for some only with ``block``); False when nothing could be read now."""
        if not block and not select.select([self.fd], [], [], 0)[0]:
            return False
        try:
            chunk = os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise UsageError(f"{self.source}: cannot read it ({exc.strerror})") from None
        if not chunk:
            self.open = False
        self._read += len(chunk)
        self._buffer += chunk
        return True

    def take(self, check: Callable[[Job], None], block: bool = False, strict: bool = False) -> list[tuple[Job, str]]:
        """The jobs of the lines that have arrived, each with "" or why it cannot run (``strict``: raise
        that instead, as for a job file). ``block``: wait until a job, or the end of input, arrives."""
        jobs: list[tuple[Job, str]] = []
        while self.open:
            if not self._chunk(block and not jobs):
                break
            if strict and self._read > MAX_JOB_BYTES:
                raise UsageError(f"{self.source}: more than the limit of {MAX_JOB_BYTES // 1024 // 1024} MiB",
                                 hint="is this the right input? it should be a small text file")
            if self._skipping:
                self._skip_rest()
            for lineno, raw in self._lines(final=not self.open):
                job, why = self._job(lineno, raw, check, strict)
                if job is not None:
                    jobs.append((job, why))
            if len(self._buffer) > MAX_LINE:
                self._lineno += 1
                self._consumed += len(self._buffer)
                self._buffer, self._skipping = b"", True  # its rest is no line of its own
                why = f"{self.source}, line {self._lineno}: longer than {MAX_LINE // 1024} KiB"
                if strict:
                    raise UsageError(why, hint="one command a line")
                self._number += 1
                jobs.append((Job(self._number, self._lineno, ("?",), "?"), why))
        return jobs

    def _skip_rest(self) -> None:
        """Drop what is left of the line too long to take, up to and with its newline (or all that came)."""
        end = self._buffer.find(b"\n")
        dropped = len(self._buffer) if end < 0 else end + 1
        self._consumed += dropped
        self._buffer, self._skipping = self._buffer[dropped:], end < 0

    def _job(self, lineno: int, raw: bytes, check: Callable[[Job], None], strict: bool) -> tuple[Job | None, str]:
        start = self._starts.pop(lineno, 0)
        if self._first:
            stripped, self._first = raw.removeprefix(b"\xef\xbb\xbf"), False
            start, raw = start + len(raw) - len(stripped), stripped
        job: Job | None = None
        text = "?"
        try:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:  # the byte counted in the whole input, as for a job file
                where = start + exc.start + 1
                raise UsageError(f"{self.source}: not UTF-8 text (byte {where} is {raw[exc.start]:#04x})") from None
            job = parse_line(text, lineno, self._number + 1, self.source, self.shell)
            if job is None:
                return None, ""
            self._number += 1
            check(job)
        except GpuLaunchError as exc:
            if strict:
                raise
            if job is None:  # (a line that did not parse still takes its job number: job-N.log stays N's)
                self._number += 1
                job = Job(self._number, lineno, (text,), text)
            return job, exc.message
        return job, ""
