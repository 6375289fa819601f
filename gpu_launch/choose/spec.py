"""The ``--gpus`` grammar: physical GPUs as nvidia-smi numbers them, by index, range, UUID or MIG UUID.

    SPEC  := "all" | ITEM ("," ITEM)*
    ITEM  := INDEX | INDEX "-" INDEX | "GPU-" HEX... | "MIG-" ...

Order is kept as written (``3,1`` makes cuda:0 = GPU 3). UUIDs may be abbreviated to any
unambiguous prefix that keeps the ``GPU-``/``MIG-`` head, as CUDA itself accepts. Parsing is pure
syntax (:func:`parse`); :func:`resolve` matches the items against a machine.
"""

from __future__ import annotations

import re

from gpu_launch.base.records import dataclass
from gpu_launch.errors import UsageError
from gpu_launch.hardware.model import Device, Machine

__all__ = ["Item", "parse", "format_items", "resolve"]

_INDEX_RE = re.compile(r"^[0-9]+$")  # ASCII digits only: "٣" is not GPU 3
_RANGE_RE = re.compile(r"^([0-9]+)-([0-9]+)$")
_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]*$")
_MAX_INDEX = 4096  # no machine has more; keeps `0-99999999` from allocating a huge list


@dataclass(frozen=True)
class Item:
    """One comma-separated item: ``kind`` is "all", "index" (first..last, inclusive) or "uuid"."""

    kind: str
    first: int = 0
    last: int = 0
    uuid: str = ""


def parse(text: str, option: str = "--gpus") -> tuple[Item, ...]:
    """Parse a spec into items; raises UsageError naming the bad item."""
    if not text.strip():
        raise UsageError(f"{option}: empty GPU list", hint=f"e.g. {option} 0,1 or {option} 4-7 or {option} all")
    if text.strip().lower() == "all":
        return (Item("all"),)
    items = []
    for raw in text.split(","):
        word = raw.strip()
        if not word:
            raise UsageError(f"{option} {text!r}: empty item between commas", hint="write it like 0,1,2")
        items.append(_parse_item(word, option))
    return tuple(items)


def _parse_item(word: str, option: str) -> Item:
    if _INDEX_RE.match(word):
        index = _index(word, word, option)
        return Item("index", index, index)
    m = _RANGE_RE.match(word)
    if m:
        first, last = _index(m.group(1), word, option), _index(m.group(2), word, option)
        if first > last:
            raise UsageError(f"{option}: range {word!r} runs backwards", hint=f"write {last}-{first}")
        return Item("index", first, last)
    if word.lower() == "all":
        raise UsageError(f"{option}: 'all' cannot be combined with other GPUs")
    if word.startswith("-"):
        raise UsageError(f"{option}: {word!r} is not a GPU index (indices start at 0)")
    if word.upper().startswith(("GPU-", "MIG-")) and _UUID_RE.match(word[:4].upper() + word[4:]):
        return Item("uuid", uuid=word[:4].upper() + word[4:])
    raise UsageError(
        f"{option}: {word!r} is not a GPU index, range or UUID",
        hint="use indices as `gpulaunch ls` shows them (0,2 or 4-7), 'all', or GPU-/MIG- UUIDs",
    )


def _index(digits: str, word: str, option: str) -> int:
    # Length first: int() refuses strings of over 4300 digits with a ValueError (Python >= 3.11).
    if len(digits.lstrip("0")) > len(str(_MAX_INDEX)) or int(digits) > _MAX_INDEX:
        raise UsageError(f"{option}: {word[:40]!r} is not a plausible GPU index")
    return int(digits)


def format_items(items: tuple[Item, ...]) -> str:
    """The canonical spelling of ``items`` (parse(format_items(x)) == x)."""
    parts = []
    for item in items:
        if item.kind == "all":
            parts.append("all")
        elif item.kind == "uuid":
            parts.append(item.uuid)
        elif item.first == item.last:
            parts.append(str(item.first))
        else:
            parts.append(f"{item.first}-{item.last}")
    return ",".join(parts)


def resolve(items: tuple[Item, ...], machine: Machine, option: str = "--gpus") -> tuple[Device, ...]:
    """Match items against ``machine`` (its GPUs by NVML index, UUID or MIG UUID), in order."""
    out: list[Device] = []
    for item in items:
        if item.kind == "all":
            out.extend(Device(g) for g in sorted(machine.gpus, key=lambda g: g.index))
        elif item.kind == "index":
            for index in range(item.first, item.last + 1):
                gpu = machine.by_index(index)
                if gpu is None:
                    raise UsageError(f"{option}: there is no GPU {index}; {_have(machine)}",
                                     hint="`gpulaunch ls` lists them")
                out.append(Device(gpu))
        else:
            out.append(_by_uuid(item.uuid, machine, option))
    seen: dict[str, Device] = {}
    for device in out:
        if device.uuid in seen:
            raise UsageError(f"{option}: {device.label} is named twice", hint="name each GPU once")
        seen[device.uuid] = device
    return tuple(out)


def _by_uuid(prefix: str, machine: Machine, option: str) -> Device:
    matches: list[Device] = []
    for gpu in machine.gpus:
        if gpu.uuid.lower().startswith(prefix.lower()):
            matches.append(Device(gpu))
        for mig in gpu.mig_devices:
            if mig.uuid.lower().startswith(prefix.lower()):
                matches.append(Device(gpu, mig))
    exact = [d for d in matches if d.uuid.lower() == prefix.lower()]
    if exact:
        return exact[0]
    if not matches:
        raise UsageError(f"{option}: no GPU has a UUID starting with {prefix!r}", hint="`gpulaunch ls --json` shows the UUIDs")
    if len(matches) > 1:
        names = ", ".join(d.label for d in matches[:4]) + (", ..." if len(matches) > 4 else "")
        raise UsageError(f"{option}: UUID prefix {prefix!r} is ambiguous ({names})", hint="give more characters of the UUID")
    return matches[0]


def _have(machine: Machine) -> str:
    indices = sorted(g.index for g in machine.gpus)
    if not indices:
        return "this machine shows no GPUs"
    if indices == list(range(indices[0], indices[-1] + 1)):
        span = f"{indices[0]}-{indices[-1]}" if len(indices) > 1 else str(indices[0])
        return f"this machine has GPU {span}"
    return "this machine has GPUs " + ",".join(map(str, indices))

