"""Parsing and printing of sizes (``20GiB``, ``20GB``, ``80%``) and durations (``2h``, ``90s``), and the
bounds every number a user gives is checked against.

A number reaches gpulaunch from the command line, ``GPULAUNCH_*`` variables, the config file and the
Python API. Each is checked against a bound where it comes in (:func:`bounded`), so that no value
can reach a conversion that overflows (``int(inf)``, ``float(10**400)``, ``str(10**5000)``), a
``time.sleep`` that raises, or a comparison that is always false: one error line instead.
"""

from __future__ import annotations

import re

from gpu_launch.base.records import dataclass
from gpu_launch.errors import UsageError

__all__ = ["Size", "parse_size", "parse_duration", "fmt_mib", "fmt_duration", "bounded", "shown", "MAX_SECONDS",
           "MAX_MIB", "MAX_GPUS"]

#: The longest duration gpulaunch takes (``--wait 30d``; a GPULAUNCH_* variable): a year. Waiting
#: longer means waiting for ever, which ``--wait`` without a value (``wait=True``) says.
MAX_SECONDS = 366 * 86400.0
#: The largest memory size (``--min-free``, ``--fit``): 1 PiB, far above any GPU set's memory.
MAX_MIB = 1024.0**3
#: The most GPUs, and the largest GPU index, any request can name (choose/spec.py: the same bound).
MAX_GPUS = 4096

_MIB = 1024 * 1024
# Binary units count in MiB directly; decimal ones (GB) are converted from bytes. A bare K/M/G/T
# means the binary unit, as nvidia-smi and PyTorch users mean it.
_UNITS: dict[str, float] = {
    "b": 1 / _MIB, "kib": 1 / 1024, "mib": 1.0, "gib": 1024.0, "tib": 1024.0**2, "pib": 1024.0**3,
    "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2, "p": 1024.0**3,
    "kb": 1e3 / _MIB, "mb": 1e6 / _MIB, "gb": 1e9 / _MIB, "tb": 1e12 / _MIB, "pb": 1e15 / _MIB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z%]*)\s*$")  # ASCII digits only
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Size:
    """A memory amount: absolute (``mib``) or a share of each GPU's total (``percent``)."""

    mib: float | None = None
    percent: float | None = None

    def of(self, total_mib: int | None) -> float | None:
        """The amount in MiB for a GPU of ``total_mib``; None when a percentage meets an unknown total."""
        if self.mib is not None:
            return self.mib
        if total_mib is None or self.percent is None:
            return None
        return total_mib * self.percent / 100.0

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else fmt_mib(self.mib)


def parse_size(text: str, option: str = "size", allow_percent: bool = True) -> Size:
    m = _SIZE_RE.match(text)
    example = "20GiB, 512MiB, 20GB" + (" or 80%" if allow_percent else "")
    if not m:
        raise UsageError(f"{option}: {text!r} is not a size", hint=f"write it like {example}")
    number, unit = float(m.group(1)), m.group(2).lower()  # (a float: "9"*400 is inf, bounded below)
    if unit == "%":
        if not allow_percent:
            raise UsageError(f"{option}: a percentage makes no sense here", hint="write it like 20GiB")
        if number > 100:
            raise UsageError(f"{option}: {text!r} is over 100%")
        return Size(percent=number)
    if unit == "":
        raise UsageError(f"{option}: {text!r} has no unit", hint=f"write it like {example}")
    if unit not in _UNITS:
        raise UsageError(f"{option}: unknown unit {m.group(2)!r} in {text!r}", hint=f"write it like {example}")
    return Size(mib=bounded(number * _UNITS[unit], option, 0, MAX_MIB, as_written=repr(text.strip()),
                            limits="at most 1 PiB"))


def parse_duration(text: str, option: str = "duration") -> float:
    """Seconds in ``text``: ``90``, ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d``; at most :data:`MAX_SECONDS`."""
    compact = text.strip().lower()
    pos = 0
    total = 0.0
    for m in _DURATION_RE.finditer(compact):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _SECONDS[m.group(2)]
        pos = m.end()
    if not compact or pos != len(compact):
        raise UsageError(f"{option}: {text!r} is not a duration", hint="write it like 90s, 30m, 2h or 1h30m")
    waiting = "wait" in option.lower()
    return bounded(total, option, 0, MAX_SECONDS, as_written=repr(text.strip()), limits="at most 366 days",
                   hint="to wait for ever, give --wait without a TIMEOUT (wait=True in Python)" if waiting else None)


def bounded(value: float, what: str, low: float, high: float, *, as_written: str | None = None, limits: str = "",
            hint: str | None = None) -> float:
    """``value`` when it is a real number within ``[low, high]``; else one UsageError line naming ``what``.

    The one check every number a user gives goes through where it comes in (see the module
    docstring). ``value`` may be any int or float: an int of 5000 digits is never turned into text
    (Python refuses to) nor into a float (it overflows). ``limits`` says the range in words,
    ``as_written`` the value as the user wrote it (default: :func:`shown`).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high:  # NaN: False
        return value
    text = as_written if as_written is not None else shown(value)
    if len(text) > 40:
        text = text[:37] + "…"
    raise UsageError(f"{what}: {text} is out of range ({limits or f'{low:g} to {high:g}'})", hint=hint)


def shown(value: object) -> str:
    """``repr(value)`` for a message, at most 40 characters, never failing: ``str(10**5000)`` raises
    (Python refuses to write an int of over 4300 digits), so a huge int is described instead."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"{'-' if value < 0 else ''}a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value)
    except ValueError:  # a list holding such an int
        text = f"a {type(value).__name__} holding a number too long to show"
    return text if len(text) <= 40 else text[:37] + "…"


def fmt_mib(mib: float | None) -> str:
    if mib is None:
        return "–"
    if mib >= 1024:
        return f"{mib / 1024:.1f} GiB"
    return f"{mib:.0f} MiB"


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
