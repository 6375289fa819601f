"""What the host (not NVML) knows: who runs a pid, and where a PCI device sits (NUMA node, CPUs).

Process details come from psutil, imported inside the functions so that commands which never list
processes do not pay for it. PCI facts come from sysfs (``/sys/bus/pci/devices/<bdf>/``); every
function takes ``sysfs_root`` so tests can point it at a temporary directory. Anything that cannot be
read is ``None``, never an exception.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

from gpu_launch.base.text import printable

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar

    _T = TypeVar("_T")

__all__ = [
    "cpulist_from_mask",
    "format_cpulist",
    "parse_bus_id",
    "parse_cpulist",
    "pci_local_cpulist",
    "pci_numa_node",
    "pci_sysfs_name",
    "possible_cpu_count",
    "process_user",
    "process_user_and_command",
]

_CPULIST_RE = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")  # ASCII digits only
# NVML writes "00000000:07:00.0" (32-bit domain); sysfs names the device "0000:07:00.0".
_BUS_ID_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def process_user_and_command(pid: int) -> tuple[str | None, str | None]:
    """The user name and command line of ``pid``, each None when it cannot be seen from here.

    A pid NVML reports may live in another container or PID namespace, may have exited, or may
    belong to another user whose command line we may not read (psutil ``AccessDenied``).
    """
    try:
        import psutil
    except ImportError:
        return None, None
    errors = (psutil.Error, OSError)
    try:
        proc = psutil.Process(pid)
    except (*errors, ValueError):
        return None, None
    user = _call(proc.username, errors)
    cmdline = _call(proc.cmdline, errors)
    command = " ".join(cmdline) if cmdline else _call(proc.name, errors)
    # Another user's command line: escape sequences in it must never reach a terminal raw (gpu_launch/base/text.py).
    return printable(user) if user else None, printable(command) if command else None


def process_user(pid: int, proc_root: str = "/proc") -> str | None:
    """The user name of ``pid`` (its real uid, as psutil reports it), or None when it cannot be seen.

    Reads ``/proc/PID/status`` and the password database: no psutil import, so a launch can name
    who is on a GPU it warns about. A pid in another PID namespace is not seen here, as with psutil.
    """
    try:
        fd = os.open(os.path.join(proc_root, str(int(pid)), "status"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            status = os.read(fd, 65536)  # one read: the kernel writes the whole file (~1.5 kB) at once
        finally:
            os.close(fd)
        at = status.find(b"\nUid:")
        uid = int(status[at + 5:].split(None, 1)[0]) if at >= 0 else None
    except (OSError, ValueError, IndexError):
        return None
    if uid is None:
        return None
    if uid not in _NAMES:  # once per user, not per process: on a cluster the database may be LDAP
        import pwd

        try:
            _NAMES[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:  # no name for that uid (a container's user); psutil gives the number then
            _NAMES[uid] = str(uid)
    return _NAMES[uid]


_NAMES: dict[int, str] = {}  # uid -> user name, as process_user found it


def _call(method: Callable[[], _T], errors: tuple[type[BaseException], ...]) -> _T | None:
    try:
        return method()
    except errors:
        return None


def parse_bus_id(bus_id: str | bytes | None) -> tuple[int, int, int, int] | None:
    """``"00000000:07:00.0"`` (any domain width, case; bytes too) → ``(0, 7, 0, 0)``, else None."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    if not isinstance(bus_id, str):
        return None
    match = _BUS_ID_RE.match(bus_id.strip().rstrip("\x00"))
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16), int(function)


def pci_sysfs_name(bus_id: str) -> str | None:
    """``00000000:07:00.0`` (NVML) → ``0000:07:00.0`` (sysfs), or None if ``bus_id`` is not a bus id."""
    parts = parse_bus_id(bus_id)
    if parts is None:
        return None
    domain, bus, device, function = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def _read_ascii(path: str) -> str:
    """A sysfs file's text, stripped. Plain ``open``: pathlib costs ~3 ms of every launch to import."""
    with open(path, encoding="ascii") as fh:
        return fh.read().strip()


def _pci_attr(bus_id: str | None, attr: str, sysfs_root: str | os.PathLike[str]) -> str | None:
    name = pci_sysfs_name(bus_id) if bus_id else None
    if name is None:
        return None
    try:
        return _read_ascii(os.path.join(sysfs_root, "bus", "pci", "devices", name, attr))
    except (OSError, UnicodeDecodeError):
        return None


def pci_numa_node(bus_id: str | None, sysfs_root: str | os.PathLike[str] = "/sys") -> int | None:
    """The NUMA node the kernel assigns to the PCI device; None when absent or ``-1`` (unknown)."""
    text = _pci_attr(bus_id, "numa_node", sysfs_root)
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def pci_local_cpulist(bus_id: str | None, sysfs_root: str | os.PathLike[str] = "/sys") -> str | None:
    """The CPUs local to the PCI device, as the kernel's cpulist (``0-31,64-95``), or None."""
    text = _pci_attr(bus_id, "local_cpulist", sysfs_root)
    if not text or not _CPULIST_RE.match(text):
        return None
    return format_cpulist(parse_cpulist(text))  # normalise: sorted, ranges merged


def possible_cpu_count(sysfs_root: str | os.PathLike[str] = "/sys") -> int:
    """One more than the highest CPU id the kernel could bring online (offline CPUs included)."""
    try:
        text = _read_ascii(os.path.join(sysfs_root, "devices", "system", "cpu", "possible"))
        if _CPULIST_RE.match(text):
            return max(parse_cpulist(text)) + 1
    except (OSError, UnicodeDecodeError):
        pass
    return os.cpu_count() or 1


#: The largest CPU number accepted in a CPU list (Linux's NR_CPUS tops out at 8192): a list is expanded,
#: so "0-99999999999" must be refused, not turned into a hundred billion integers.
MAX_CPU = 65535


def cpulist_ranges(text: str) -> list[tuple[int, int]]:
    """``"0-2,8"`` → ``[(0, 2), (8, 8)]``, merged and sorted; ValueError on anything else or a CPU
    number above :data:`MAX_CPU` (checked on the digits, before any conversion or expansion)."""
    text = text.strip()
    if not _CPULIST_RE.match(text):
        raise ValueError(f"{text[:80]!r} is not a CPU list like '0-31,64-95'")
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        lo_text, _, hi_text = part.partition("-")
        for number in (lo_text, hi_text):
            if len(number.lstrip("0")) > len(str(MAX_CPU)) or (number and int(number) > MAX_CPU):
                raise ValueError(f"CPU {number[:20]}{'…' if len(number) > 20 else ''} in the CPU list is above {MAX_CPU}")
        lo, hi = int(lo_text), int(hi_text or lo_text)
        if hi < lo:
            raise ValueError(f"the range {part!r} in the CPU list runs backwards")
        ranges.append((lo, hi))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def parse_cpulist(text: str) -> list[int]:
    """``"0-2,8"`` → ``[0, 1, 2, 8]``. Raises ValueError on anything else (see :func:`cpulist_ranges`)."""
    return [cpu for lo, hi in cpulist_ranges(text) for cpu in range(lo, hi + 1)]


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 8]`` → ``"0-2,8"`` (the kernel's cpulist form)."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def cpulist_from_mask(words: Iterable[int], word_bits: int = 64) -> str | None:
    """A bitmask in words of ``word_bits`` CPUs (word 0 = CPUs 0..63) → cpulist; None if empty."""
    cpus = [
        base + bit
        for base, word in zip(range(0, 1 << 30, word_bits), words)
        for bit in range(word_bits)
        if int(word) >> bit & 1
    ]
    return format_cpulist(cpus) if cpus else None


def memory_available(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes of host memory available to a new process (``MemAvailable``), or None when unknown.

    The model plans check that the CPU's share of a partly offloaded model fits (llama.cpp ``-ngl``)."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    parts = line.split()
                    return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    except OSError:
        return None
    return None
