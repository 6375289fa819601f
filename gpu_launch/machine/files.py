"""Reading the small text files gpulaunch takes from users (snapshots, the config file)."""

from __future__ import annotations

from gpu_launch.errors import GpuLaunchError

__all__ = ["read_utf8"]


def read_utf8(path: str, label: str, error: type[GpuLaunchError]) -> str:
    """The text of ``path``; ``error("LABEL PATH: …")`` when it cannot be read or is not UTF-8.

    FileNotFoundError is left to the caller: a missing snapshot is an error, a missing config
    file is simply no configuration.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{label} {path}: cannot read it ({exc.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{label} {path}: not UTF-8 text") from None
