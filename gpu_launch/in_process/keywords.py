"""Keyword arguments -> an invocation, through the command line's converters.

The Python API takes a launch's options under their Python names (``n`` is ``--auto``): text as the
command line reads it (``"20GiB"``, ``"30m"``, ``"4-7"``), or Python values (ints, lists, bytes,
seconds, a timedelta, ``True`` for ever); defaults come from ``GPULAUNCH_*`` and the config file.
"""

from __future__ import annotations

import os

from gpu_launch.errors import UsageError
from gpu_launch.base.units import MAX_GPUS, MAX_MIB, MAX_SECONDS, bounded, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpu_launch.options.args import Invocation
    from gpu_launch.base.units import Size

__all__ = ["invocation", "wait_seconds"]

_MIB = 1024 * 1024
#: The largest ctx= and parallel=: what their command-line options take (9 digits)
_MAX_TOKENS = 999_999_999

#: option dest -> the keyword argument's name, where they differ
_NAMES = {"auto": "n"}


def _pythonic(exc: UsageError, name: str) -> UsageError:
    """The converter's hint spells a flag (``e.g. n 2``); here it is a keyword argument (``n=2``)."""
    if exc.hint:
        exc.hint = exc.hint.replace(f"{name} ", f"{name}=")
    return exc


def _convert(dest: str, name: str, value: object) -> object:
    """The option value for ``value``: strings as the command line reads them, Python values as documented."""
    from gpu_launch.options.args import OPTIONS

    opt = next(o for o in OPTIONS if o.dest == dest)
    text: str
    if not opt.takes_value:  # a flag: idle, mig, uuid, quiet ("no" would be a true string)
        if not isinstance(value, bool):
            raise UsageError(f"{name}: expected True or False, got {shown(value)}", hint=f"e.g. {name}=True")
        return value
    if dest == "account_as_free" and not isinstance(value, str):
        if value is True:
            return ""  # your own processes, as the bare flag
        if value is False:
            return None
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{name}: expected True or user names, got {shown(value)}",
                             hint=f'e.g. {name}=True (your own processes) or {name}=["alice", "bob"]')
        text = ",".join(value)
    elif isinstance(value, str):
        text = value
    elif dest in ("snapshot", "lock_dir") and isinstance(value, os.PathLike):
        return os.fspath(value)
    elif dest == "wait":
        return wait_seconds(value, name)
    elif isinstance(value, bool):
        raise UsageError(f"{name}: expected {_WANTED.get(dest, 'a string')}, got {value!r}")
    elif dest == "fit" and isinstance(value, os.PathLike):  # model=Path(...): a model, as --fit ./model.gguf
        return os.fspath(value)
    elif dest in ("fit", "min_free", "reserve", "min_total_memory"):
        return _size(value, name, allow_percent=dest == "min_free")
    elif dest in ("ctx", "parallel", "train_seq", "micro_batch") and isinstance(value, int):
        text = str(bounded(value, name, 1, _MAX_TOKENS, limits=f"1 to {_MAX_TOKENS}"))  # (str(10**5000) raises)
    elif dest in ("gpus", "exclude") and isinstance(value, int):
        text = str(bounded(value, name, 0, MAX_GPUS))
    elif dest in ("gpus", "exclude") and isinstance(value, (list, tuple, range)):
        if not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
            raise UsageError(f"{name}: expected GPU indices or UUIDs, got {shown(value)}", hint=f"e.g. {name}=[0, 1]")
        text = ",".join(str(bounded(v, name, 0, MAX_GPUS) if isinstance(v, int) else v) for v in value)
    elif dest in ("auto", "max_util", "min_count", "max_count") and isinstance(value, int):
        text = str(bounded(value, name, 0, 100 if dest == "max_util" else MAX_GPUS))
    else:
        raise UsageError(f"{name}: expected {_WANTED.get(dest, 'a string')}, got {type(value).__name__}",
                         hint=f"e.g. {name}={_EXAMPLES.get(dest, repr('...'))}")
    if opt.convert is None:
        return text
    try:
        return opt.convert(text, name)
    except UsageError as exc:
        raise _pythonic(exc, name) from None


_WANTED = {"auto": "a whole number", "gpus": "GPU indices or UUIDs", "exclude": "GPU indices or UUIDs",
           "fit": "a size", "min_free": "a size", "max_util": "a percentage", "snapshot": "a file or example name",
           "lock_dir": "a directory", "min_count": "a whole number", "max_count": "a whole number",
           "min_total_memory": "a size", "account_as_free": "True or user names"}
_EXAMPLES = {"auto": "2", "gpus": '"4-7"', "exclude": "[0]", "fit": '"60GiB"', "min_free": '"20GiB"',
             "max_util": "30", "snapshot": '"dgx-h100"', "lock_dir": '"/tmp/gpulaunch-locks"', "min_count": "1",
             "max_count": "4", "min_total_memory": '"80GB"', "account_as_free": "True"}


def _size(value: object, name: str, allow_percent: bool) -> Size:
    from gpu_launch.base.units import Size

    if isinstance(value, Size):
        if value.percent is not None and not allow_percent:
            raise UsageError(f"{name}: a percentage makes no sense here", hint=f'write it like {name}="60GiB"')
        return value
    if not isinstance(value, (int, float)):
        raise UsageError(f"{name}: {shown(value)} is not a size", hint=f'a number of bytes, or text: {name}="20GiB"')
    return Size(mib=bounded(value, name, 0, MAX_MIB * _MIB, limits="at most 1 PiB") / _MIB)


def wait_seconds(value: object, name: str) -> float | None:
    from datetime import timedelta

    if value is None or value is False:
        return None
    if value is True:
        return float("inf")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, str):
        from gpu_launch.base.units import parse_duration

        try:
            return parse_duration(value, name)
        except UsageError as exc:
            raise _pythonic(exc, name) from None
    if isinstance(value, (int, float)):
        return float("inf") if value == float("inf") else float(
            bounded(value, name, 0, MAX_SECONDS, limits="at most 366 days", hint="wait=True waits for ever"))
    raise UsageError(f"{name}: {shown(value)} is not a duration",
                     hint=f'seconds, True (for ever), or text: {name}="30m"')


def invocation(command: str, given: dict[str, object]) -> Invocation:
    """The invocation the keyword arguments ``given`` (by option dest; None: not given) make, defaults filled in."""
    from gpu_launch.options import args, config

    options: dict[str, Any] = {}
    names = {dest: _NAMES.get(dest, dest) for dest in given}  # for the messages: n, not --auto
    for dest, value in given.items():
        if value is None:
            continue
        converted = _convert(dest, names[dest], value)
        if converted is not None or value is False:  # wait=False: no wait, whatever the defaults say
            options[dest] = converted
    inv = args.invocation(command, options, names)
    return config.apply(inv, os.environ)  # as for gpulaunch: GPULAUNCH_* variables, then the config file
