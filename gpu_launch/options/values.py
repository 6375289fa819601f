"""What an option's value may be: one converter per kind of value, each a clear line on bad input.

A converter takes the text and the option's name as the user spelled it (for the message) and
returns the value or raises :class:`~gpu_launch.errors.UsageError`. The option table in
:mod:`gpu_launch.options.args` names one for every option that takes a value.
"""

from __future__ import annotations

from gpu_launch.errors import UsageError
from gpu_launch.base.units import parse_duration, parse_size

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["whole_number", "count", "users", "is_user", "total_size", "bind_mode", "shell", "wait", "interval", "fallback", "positive", "slurm_time", "file_name", "directory", "lock_dir", "usable_path", "fit", "tokens", "kv_type", "engine", "percent", "head"]


def whole_number(text: str, option: str, example: str) -> int:
    """A whole number in ASCII digits (not '٣', not 5000 digits), or one usage error line."""
    try:
        if not (text.strip().isascii() and len(text.strip()) <= 9):
            raise ValueError(text)
        return int(text)
    except ValueError:
        shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "…"
        raise UsageError(f"{option}: {shown} is not a whole number", hint=f"e.g. {option} {example}") from None


def count(text: str, option: str) -> int:
    value = whole_number(text, option, "2")
    if value < 1:
        raise UsageError(f"{option}: {value} GPUs makes no sense", hint=f"ask for 1 or more, e.g. {option} 2")
    return value


def users(text: str, option: str) -> str:
    """``--account-as-free`` USER: one user name or several, comma-separated (``alice,bob``), as written
    once each; ``""`` (the option given alone) means the user running gpulaunch."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",")))
    bad = next((n for n in names if not n or not n.isprintable() or len(n) > 64 or n.startswith("-")), None)
    if bad is not None:
        shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "…"
        raise UsageError(f"{option}: {shown} is not a user name (or several, comma-separated)",
                         hint=f"e.g. {option}=alice, or {option} alone for your own")
    return ",".join(names)


def is_user(word: str) -> bool:
    """Whether ``word`` names users of this machine (``--account-as-free`` reads its optional USER from
    the next word only then: ``--account-as-free python train.py`` runs python)."""
    import pwd

    try:
        for name in word.split(","):
            pwd.getpwnam(name)
    except (KeyError, ValueError):
        return False
    return bool(word)


def total_size(text: str, option: str) -> Any:
    """``--min-total-memory`` SIZE: absolute (a percentage of the card's own total means nothing)."""
    return parse_size(text, option, allow_percent=False)


def bind_mode(text: str, option: str) -> str:
    from gpu_launch.run.affinity import parse_mode

    return parse_mode(text, option)


def shell(text: str, option: str) -> str:
    from gpu_launch.views.shellenv import parse_shell

    return parse_shell(text, option)


def wait(text: str, option: str) -> float:
    return parse_duration(text, option)


def interval(text: str, option: str) -> float:
    """``ls --watch`` SECONDS: a duration (2, 0.5, 1m) from 0.1 s to a day."""
    seconds = parse_duration(text, option)
    if not 0.1 <= seconds <= 86400:
        raise UsageError(f"{option}: {text!r} is not between 0.1s and 1d", hint=f"e.g. {option} 2")
    return seconds


def fallback(text: str, option: str) -> str:
    if text != "cpu":
        raise UsageError(f"{option}: {text!r} is not a fallback", hint=f"the only one is {option} cpu")
    return text


def train_method(text: str, option: str) -> str:
    word = text.strip().lower()
    if word not in ("full", "lora", "qlora"):
        raise UsageError(f"{option}: {text!r} is not a training method", hint=f"{option} full, lora or qlora")
    return word


def positive(text: str, option: str) -> int:
    value = whole_number(text, option, "4")
    if value < 1:
        raise UsageError(f"{option}: must be 1 or more, got {value}", hint=f"e.g. {option} 4")
    return value


def slurm_time(text: str, option: str) -> str:
    from gpu_launch.cluster import parse_time

    return parse_time(text, option)


def file_name(text: str, option: str) -> str:
    return usable_path(text, option, "file")


def directory(text: str, option: str) -> str:
    return usable_path(text, option, "directory")


def lock_dir(text: str, option: str) -> str:
    """An absolute directory: a relative lock dir would differ with each job's working directory, and
    two jobs started in different directories would both get the same GPU."""
    path = usable_path(text, option, "directory")
    if not path.startswith("/"):
        import os.path

        raise UsageError(f"{option}: {text!r} is a relative path: jobs started elsewhere would not see its locks",
                         hint=f"give an absolute path, e.g. {os.path.abspath(path)}")
    return path


def usable_path(text: str, option: str, kind: str) -> str:
    """A path as given; refused up front when no file can have it (before any GPU is reserved)."""
    if not text:
        raise UsageError(f"{option}: empty {kind} name", hint=f"give a {kind}, or leave the option out")
    if "\0" in text:
        raise UsageError(f"{option}: {text!r} contains a NUL byte", hint=f"no {kind} name can hold one")
    return text


def fit(text: str, option: str) -> Any:
    """``--fit``: a size (60GiB) as before, else a model: a path, a cached Hugging Face id, or ``model``
    (the one the command names). A word starting with a digit is a size, so a typo stays an error."""
    if text[:1].isdigit() or text[:1] in ".-" and text[1:2].isdigit():
        return parse_size(text, option, allow_percent=False)
    if not text or "\0" in text:
        raise UsageError(f"{option}: give a size (60GiB), a model (./model.gguf, org/name) or the word model")
    return text


def tokens(text: str, option: str) -> int:
    value = whole_number(text, option, "8192")
    if value < 1:
        raise UsageError(f"{option}: must be 1 or more, got {value}", hint=f"e.g. {option} 8192")
    return value


def kv_type(text: str, option: str) -> str:
    from gpu_launch.fit.kv import parse_kv_type

    return parse_kv_type(text, option)


def engine(text: str, option: str) -> Any:
    from gpu_launch.fit.engines import engine_named

    return engine_named(text, option)


def percent(text: str, option: str) -> int:
    try:
        digits = text.strip().rstrip("%")
        if not (digits.isascii() and len(digits) <= 9):  # not '٣', not 5000 digits
            raise ValueError(text)
        value = int(digits)
    except ValueError:
        shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "…"
        raise UsageError(f"{option}: {shown} is not a percentage", hint=f"e.g. {option} 20") from None
    if not 0 <= value <= 100:
        raise UsageError(f"{option}: {value} is not between 0 and 100")
    return value


def head(text: str, option: str) -> tuple[str, int | None]:
    """``--head HOST[:PORT]``: a host name or address, an IPv6 address in brackets when it has a port
    (``[fd00::1]:29400``), and a port from 1 to 65535."""
    host, port = text.strip(), None
    if host.startswith("["):
        inner, close, rest = host[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise UsageError(f"{option}: {text!r} is not HOST[:PORT]", hint=f"e.g. {option} [fd00::1]:29400")
        host, port_text = inner, rest[1:] if rest else None
    elif host.count(":") == 1:
        host, _, port_text = host.partition(":")
    else:
        port_text = None  # a bare IPv6 address, or a plain host
    if port_text is not None:
        port = whole_number(port_text, option, "node1:29400")
        if not 1 <= port <= 65535:
            raise UsageError(f"{option}: port {port} is not between 1 and 65535", hint=f"e.g. {option} node1:29400")
    if not host or any(ch.isspace() or ch in "/@\0" for ch in host):
        raise UsageError(f"{option}: {text!r} is not HOST[:PORT]", hint=f"e.g. {option} node1:29400")
    return host, port
