"""Bounded reads of model files: every count and length is checked against the file's size first.

A model file is untrusted input: a crafted header can claim a tensor count of 2^60 or a string of
2^40 bytes. Nothing here allocates on a claim before checking it against what the file can hold,
and every failure is one :class:`~gpu_launch.errors.ModelFileError` line. Only regular files are
opened (without blocking, so a FIFO with no writer cannot hang ``open``); reads go through
``os.pread`` on the descriptor, with no hidden read-ahead, so :attr:`Cursor.bytes_read` is exactly
what came off the disk.

Beyond the file's size, what one header may cost is capped outright (counts, names, the JSON items a
parse would build): a crafted file that fits its own size can still claim 15 million tensors or 50
million ``{}``, and each would cost seconds and gigabytes if believed. The caps sit far above any
published model (each says by how much) and are checked before the allocation they guard.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from gpu_launch.errors import ModelFileError
from gpu_launch.hardware.files import file_kind
from gpu_launch.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["Cursor", "open_cursor", "read_small", "load_json", "regular_size", "path_text", "joined", "user_path",
           "exists", "look", "plain_name", "overlap", "KIB", "MIB"]

KIB = 1024
MIB = 1024 * KIB
#: How far one read looks ahead. Small, so that the bytes read past a header's end stay small
#: (a test holds ``header_bytes`` to the header plus one read-ahead); large enough that a
#: 150k-entry tokenizer array costs a few dozen reads.
READ_AHEAD = 64 * KIB

#: The longest file name and path Linux takes (NAME_MAX, PATH_MAX).
NAME_MAX, PATH_MAX = 255, 4096
#: JSON is read a MiB at a time, its objects, lists and items counted as it comes (:meth:`Cursor.take_json`).
JSON_CHUNK = MIB
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _open_regular(path: str, label: str) -> tuple[int, int]:
    """(descriptor, size) of a regular file; ModelFileError for anything else."""
    if not path or "\0" in path:
        raise ModelFileError(f"{label}: not a usable path")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise ModelFileError(f"{label}: no such file") from None
    except OSError as exc:
        raise ModelFileError(f"{label}: cannot open it ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise ModelFileError(f"{label}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ModelFileError(f"{label}: is {file_kind(st.st_mode)}, not a model file", hint="name a regular file")
    return fd, st.st_size


def regular_size(path: str, label: str) -> int:
    """The size of a regular file, without reading it (ModelFileError when it is not one)."""
    fd, size = _open_regular(path, label)
    os.close(fd)
    return size


class Cursor:
    """A position in one file, reading forward through a small window.

    ``need(n)`` makes ``n`` bytes from the position available in ``buf`` (at ``off``), or raises
    "truncated" when the file ends first; ``skip(n)`` moves past bytes without reading them.
    """

    def __init__(self, fd: int, size: int, label: str) -> None:
        self.fd = fd
        self.size = size
        self.label = label
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # file offset of the next byte to parse
        self.bytes_read = 0
        #: bytes to read beyond what is needed; 0 where the caller knows the header's exact length
        self.read_ahead = READ_AHEAD

    # -- window management -------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def fail(self, what: str, hint: str | None = None) -> ModelFileError:
        """The error for this file; ``what`` may quote the file's own names, so it is made printable."""
        return ModelFileError(printable(f"{self.label}: {what}"), hint=hint)

    def truncated(self, what: str) -> ModelFileError:
        return self.fail(f"truncated or corrupt header ({what} runs past the end of the file at byte {self.size})",
                         hint="the file may be incomplete: download it again")

    def need(self, n: int, what: str = "a field", ahead: int = 0) -> int:
        """Make ``buf[off:off+n]`` the next ``n`` bytes; returns ``off``. A read takes at least
        ``read_ahead`` bytes, and the window reaches ``ahead`` bytes from the position (what the
        caller knows the header still holds) where that is more."""
        if n > self.size - self.pos:
            raise self.truncated(what)
        off = self.pos - self.base
        if off >= 0 and off + n <= len(self.buf):
            return off
        keep = self.buf[off:] if 0 <= off < len(self.buf) else b""
        start = self.pos + len(keep)
        want = min(max(max(n, ahead) - len(keep), self.read_ahead), self.size - start)
        chunks = [keep]
        got = 0
        while got < want:
            try:
                chunk = os.pread(self.fd, want - got, start + got)
            except OSError as exc:
                raise self.fail(f"cannot read it ({exc.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        self.bytes_read += got
        self.buf = b"".join(chunks)
        self.base = self.pos
        if n > len(self.buf):
            raise self.truncated(what)  # the file shrank under us
        return 0

    def take(self, n: int, what: str = "a field") -> bytes:
        off = self.need(n, what)
        self.pos += n
        return self.buf[off:off + n]

    def skip(self, n: int, what: str = "a field") -> None:
        """Move past ``n`` bytes; reads nothing that is not already in the window."""
        if n < 0 or n > self.size - self.pos:
            raise self.truncated(what)
        self.pos += n

    def u32(self, what: str = "a field") -> int:
        off = self.need(4, what)
        self.pos += 4
        return int(_U32.unpack_from(self.buf, off)[0])

    def u64(self, what: str = "a field") -> int:
        off = self.need(8, what)
        self.pos += 8
        return int(_U64.unpack_from(self.buf, off)[0])

    def unpack(self, fmt: struct.Struct, what: str = "a value") -> Any:
        off = self.need(fmt.size, what)
        self.pos += fmt.size
        return fmt.unpack_from(self.buf, off)[0]

    def count(self, n: int, min_each: int, what: str, most: int | None = None) -> int:
        """``n`` items of at least ``min_each`` bytes each must fit in the rest of the file, and be at
        most ``most`` (a cap far above any real file's, for counts the file's size cannot bound)."""
        if n * min_each > self.size - self.pos:
            raise self.fail(f"corrupt header: {what} is {n}, more than the file's {self.size} bytes can hold",
                            hint="the file is damaged or not a model file")
        if most is not None and n > most:
            raise self.fail(f"corrupt header: {what} is {n}, more than gpulaunch reads ({most})",
                            hint="the file is damaged or crafted: no published model comes near")
        return n

    def take_json(self, n: int, what: str, max_items: int) -> bytes:
        """The next ``n`` bytes, JSON text, read a MiB at a time and refused as soon as they hold more
        than ``max_items`` objects, lists and items (``{``, ``[`` and ``,``, strings' own included:
        an upper bound on what ``json.loads`` would build). 99.9 MB of ``{}`` would be 2.5 GB of dicts;
        it is refused after the first MiB or so, holding no more than that."""
        if n > self.size - self.pos:
            raise self.truncated(what)
        chunks, items, got = [], 0, 0
        while got < n:
            try:
                chunk = os.pread(self.fd, min(JSON_CHUNK, n - got), self.pos + got)
            except OSError as exc:
                raise self.fail(f"cannot read it ({exc.strerror})") from None
            if not chunk:
                raise self.truncated(what)  # the file shrank under us
            self.bytes_read += len(chunk)
            got += len(chunk)
            items += chunk.count(b"{") + chunk.count(b"[") + chunk.count(b",")
            if items > max_items:
                raise self.fail(f"{what}: more than {max_items} JSON objects, lists and items in its first {got} "
                                f"bytes, more than any such file holds", hint="the file is damaged or crafted")
            chunks.append(chunk)
        self.pos += n
        return b"".join(chunks)

    def skip_strings(self, count: int, what: str) -> None:
        """Move past ``count`` length-prefixed strings (u64 length + bytes) without decoding them.

        The hot loop of a 128k-token vocabulary and its 280k merges. In a large array, runs of short
        strings (shorter than SHORT_STRING: nearly all of a vocabulary's) are passed SHORT_RUN at a
        time by a regular expression, in C (:func:`_short_run`, about twice as fast), and the array
        is read up to a MiB at a time (at least 8 bytes a string are left of it, so nothing past it
        is read). The rest goes one string at a time, one ``unpack_from`` and one addition each:
        within a window, at most (window left) / 8 lengths can start, and the first length that
        does not fit raises ``struct.error``, which ends the round; bytes of a string that lie past
        the window are jumped over, not read. A crafted length sends the position past the end of
        the file, which the next ``need`` reports.
        """
        unpack = _U64.unpack_from
        run = _short_run() if count >= MANY_STRINGS else None
        left = count
        while left:
            off = self.need(8, f"a string of {what}", ahead=min(8 * left, MIB) if run else 0)
            buf, base = self.buf, self.base
            if run is not None:
                while left >= SHORT_RUN and (m := run(buf, off)) is not None:
                    off = m.end()
                    left -= SHORT_RUN
            # one at a time: the last few, the window's end, or after a run, up to the long string that ended it
            rounds = min(left, (len(buf) - off) // 8)
            done = 0
            try:
                if run is None:
                    for done in range(rounds):  # noqa: B007  (done counts the strings passed)
                        off += 8 + unpack(buf, off)[0]
                    done = rounds
                else:
                    while done < rounds:
                        size = unpack(buf, off)[0]
                        off += 8 + size
                        done += 1
                        if size >= SHORT_STRING:
                            break
            except struct.error:
                pass
            left -= done
            self.pos = base + off
            if self.pos > self.size:
                raise self.fail(f"corrupt header: a string of {what} runs past the end of the file",
                                hint="the file is damaged or not a model file")


#: Strings shorter than this (their u64 length: one byte, then seven zeros) are passed in runs of
#: SHORT_RUN by one regular expression; an array of MANY_STRINGS or more is worth compiling it (~1 ms).
SHORT_STRING = 64
SHORT_RUN = 128
MANY_STRINGS = 16384
#: The lengths in the order the expression tries them: each one tried costs a byte comparison, and a
#: BPE vocabulary's tokens and merges are mostly 4 to 15 bytes long (``Ġthe``, ``Ġt he``).
_BY_FREQUENCY = (*range(4, 16), *range(1, 4), *range(16, SHORT_STRING), 0)
_SHORT_RUN_MATCH: list[Any] = []


def _short_run() -> Any:
    """``match(buf, pos)`` of SHORT_RUN consecutive strings each shorter than SHORT_STRING: for every
    length L one alternative, the byte L, seven zero bytes and any L bytes. Compiled on first use."""
    if not _SHORT_RUN_MATCH:
        import re

        one = b"|".join(b"\\x%02x\\x00{7}" % n + (b".{%d}" % n if n else b"") for n in _BY_FREQUENCY)
        _SHORT_RUN_MATCH.append(re.compile(b"(?:%s){%d}" % (one, SHORT_RUN), re.DOTALL).match)
    return _SHORT_RUN_MATCH[0]


@contextmanager
def open_cursor(path: str, label: str) -> Iterator[Cursor]:
    fd, size = _open_regular(path, label)
    try:
        yield Cursor(fd, size, label)
    finally:
        os.close(fd)


def read_small(path: str, label: str, limit: int, max_items: int | None = None) -> bytes:
    """The whole of a small regular file (a config.json, an index), refused past ``limit`` bytes and,
    for JSON, past ``max_items`` objects, lists and items (:meth:`Cursor.take_json`)."""
    fd, size = _open_regular(path, label)
    try:
        if size > limit:
            raise ModelFileError(f"{label}: {size} bytes is too large for this kind of file (limit {limit})",
                                 hint="is this the right file?")
        cur = Cursor(fd, size, label)
        if max_items is not None:
            return cur.take_json(size, label, max_items)
        return cur.take(size, "the file") if size else b""
    finally:
        os.close(fd)


def load_json(raw: bytes, label: str, what: str = "JSON object") -> Any:
    """Parsed JSON; ModelFileError for bad UTF-8, bad JSON or nesting deep enough to exhaust recursion.

    CPython's JSON scanner counts its recursion, so a 5000-deep document raises RecursionError
    (caught here) instead of overflowing the C stack.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFileError(f"{label}: not UTF-8 text (byte {exc.start + 1})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ModelFileError(f"{label}: JSON nested too deeply") from None
    except ValueError as exc:
        raise ModelFileError(f"{label}: not valid JSON ({exc})", hint=f"it should be a {what}") from None


def path_text(text: str) -> str:
    """``str(pathlib.Path(text))`` without importing pathlib (~3 ms of a plan with its urllib.parse and
    ipaddress): empty and ``.`` parts dropped, so ``./m//x.gguf/`` reads ``m/x.gguf``; a root of exactly
    two slashes kept, as POSIX allows; ``..`` kept (never resolved)."""
    body = text.lstrip("/")
    slashes = len(text) - len(body)
    root = "//" if slashes == 2 else "/" if slashes else ""
    return root + "/".join(p for p in body.split("/") if p and p != ".") or "."


def joined(folder: str, *names: str) -> str:
    """``str(Path(folder, *names))``: the names joined under ``folder``, as :func:`path_text` writes it."""
    return path_text(os.path.join(folder, *names))


def user_path(text: str, label: str) -> str:
    """``text`` as a path (as :func:`path_text` writes it), a leading ``~`` or ``~user`` expanded as
    ``Path.expanduser`` does; ModelFileError when there is no such user or no home directory (where
    ``Path.expanduser`` raises RuntimeError)."""
    path = path_text(text)
    if not path.startswith("~"):
        return path
    first, _, rest = path.partition("/")
    home = os.path.expanduser(first)
    if home.startswith("~"):
        raise ModelFileError(printable(f"{label}: {first} names no home directory (no such user)"),
                             hint="write the path in full, or ~/ for your own home")
    return path_text(os.path.join(home, rest))


def exists(path: str) -> bool:
    """``Path(path).exists()`` without pathlib: False where nothing is there (or a link leads nowhere),
    an OSError such as no permission to look raised."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            raise
        return False
    except ValueError:
        return False
    return True


def look(path: str | os.PathLike[str], label: str) -> str:
    """What is at ``path``: "dir", "file" (anything else that exists, a dangling symlink included) or
    "" (nothing). One ModelFileError line where the name itself is unusable (too long, a loop, no
    permission to look), where ``Path.exists`` would raise a bare OSError."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "file" if os.path.islink(path) else ""
    except ValueError:  # a NUL byte
        raise ModelFileError(f"{label}: not a usable path") from None
    except OSError as exc:
        too_long = exc.errno == errno.ENAMETOOLONG
        raise ModelFileError(f"{label}: cannot look at it ({exc.strerror})",
                             hint=f"a path is at most {PATH_MAX} bytes, each of its parts at most {NAME_MAX}"
                             if too_long else "check the path and its permissions") from None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"




def plain_name(name: str, label: str, what: str) -> str:
    """``name`` when it names a file in the folder itself: no path separator, no NUL, not ``.`` or
    ``..``, at most NAME_MAX bytes; else one ModelFileError line (an index must not send the
    reader to ``../../etc/passwd``)."""
    if any(c in name for c in "/\\\0") or name in ("", ".", "..") or len(name.encode(errors="replace")) > NAME_MAX:
        raise ModelFileError(printable(f"{label}: {what} {name!r}, not a bare file name (a path could lead "
                                       "outside the folder)"),
                             hint="an index names its files by their bare names, in the same folder")
    return name


def overlap(spans: Iterable[tuple[int, int, str]], what: str) -> str | None:
    """Where two of ``spans`` (begin, end, name: a byte range of a file) share a byte, in words
    ("tensors a and b overlap by 1 byte (bytes 32 to 33)"); None where none do. An empty span shares
    nothing; adjacent spans (one ends where the next begins) do not overlap."""
    reach, far = 0, ""
    for begin, end, name in sorted(spans):
        if begin < reach and end > begin:
            shared = min(reach, end) - begin
            return printable(f"{what} {far} and {name} overlap by {shared} byte{'s' if shared != 1 else ''} "
                             f"(bytes {begin} to {begin + shared})")
        if end > reach:
            reach, far = end, name
    return None
