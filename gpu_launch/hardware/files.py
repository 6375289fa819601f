"""Reading the small text files gpulaunch takes from users (snapshots, the config file, job files).

Every read is bounded before anything is read whole: the file is opened without blocking (a FIFO
with no writer would hang ``open``), ``fstat`` says what it is, and at most ``limit`` bytes are read.
Only regular files are read, plus pipes where the caller allows them (``-``/stdin, ``/dev/stdin``,
``/dev/fd/N`` of a shell's ``<(...)``): ``/dev/zero``, a directory, a named FIFO or a socket gets
one error naming what it is, instead of a hang or unbounded memory.
"""

from __future__ import annotations

import os
import stat

from gpu_launch.errors import GpuLaunchError

__all__ = ["read_utf8", "read_bytes", "read_fd", "check_path", "file_kind"]

MIB = 1024 * 1024
_CHUNK = 1024 * 1024
#: Paths that name an already open descriptor (stdin, a shell's process substitution): pipes are fine there.
_DESCRIPTOR_PATHS = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/")


def check_path(path: str, label: str, error: type[GpuLaunchError]) -> None:
    """``error`` for a path no file can have: empty, or holding a NUL byte (``open`` would raise ValueError)."""
    if not path:
        raise error(f"{label}: the path is empty")
    if "\0" in path:
        raise error(f"{label} {path!r}: the path contains a NUL byte")


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (for "X is a FIFO, not a snapshot file")."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_fd(fd: int, label: str, error: type[GpuLaunchError], limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` until end of file; ``error`` when there is more."""
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        except BlockingIOError:  # a non-blocking pipe with no data yet: wait for it like any reader
            os.set_blocking(fd, True)
            continue
        except OSError as exc:
            raise error(f"{label}: cannot read it ({exc.strerror})") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise error(f"{label}: more than the limit of {_size(limit)}",
                        hint="is this the right input? it should be a small text file")


def read_bytes(path: str, label: str, error: type[GpuLaunchError], limit: int, pipes: bool = False,
               what: str = "text file") -> bytes:
    """The bytes of ``path`` (``label`` names it in errors: "snapshot x.json"), read with a bound.

    FileNotFoundError is left to the caller: a missing snapshot is an error, a missing config
    file is simply no configuration. ``pipes``: also read a pipe named by a descriptor path.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{label}: cannot read it ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            size = os.fstat(fd).st_size
            if size > limit:
                raise error(f"{label}: {_size(size)} is too large (limit {_size(limit)})",
                            hint=f"is this the right file? it should be a small {what}")
        elif not (pipes and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) and path.startswith(_DESCRIPTOR_PATHS)):
            raise error(f"{label}: is {file_kind(mode)}, not a {what}",
                        hint="give a regular file" + (" (or a pipe as /dev/stdin)" if pipes else ""))
        os.set_blocking(fd, True)
        return read_fd(fd, label, error, limit)
    finally:
        os.close(fd)


def read_utf8(path: str, label: str, error: type[GpuLaunchError], limit: int = 64 * MIB,
              pipes: bool = False, what: str = "text file") -> str:
    """The text of ``path``; ``error("LABEL PATH: …")`` when it cannot be read, is too large or not UTF-8."""
    check_path(path, label, error)
    raw = read_bytes(path, f"{label} {path}", error, limit, pipes, what)
    return decode(raw, f"{label} {path}", error)


def decode(raw: bytes, label: str, error: type[GpuLaunchError]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label}: not UTF-8 text (byte {exc.start + 1} is {raw[exc.start]:#04x})") from None


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"
