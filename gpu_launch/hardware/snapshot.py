"""Snapshot files: the machine as JSON (schema version 1), read, validated and written.

`gpulaunch ls --json` writes one; `--snapshot FILE|NAME` (or ``GPULAUNCH_SNAPSHOT``) makes every
command read it instead of NVML. NAME is one of the example machines shipped in
``gpu_launch/examples``. A bad file gets one clear error naming the file and the field.
"""

from __future__ import annotations

import json
import os
import re

from gpu_launch.errors import SnapshotError
from gpu_launch.hardware.files import read_utf8
from gpu_launch.hardware.host import cpulist_ranges
from gpu_launch.hardware.model import Gpu, GpuProcess, Machine, MigDevice, coherent_used
from gpu_launch.base.text import printable

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SCHEMA_VERSION", "WIDE_KEYS", "load", "loads", "dump", "to_dict", "example_names", "resolve", "is_example"]

SCHEMA_VERSION = 1
_MAX_INT = 2 ** 53  # the largest integer field accepted: exact as a float, far beyond any real value
MAX_BYTES = 64 * 1024 * 1024  # refuse absurd files up front instead of parsing for minutes
_LINK_RE = re.compile(r"^(X|NV[1-9][0-9]{0,3}|PIX|PXB|PHB|NODE|SYS|PSB)$")  # NV<k>: k bounded, ASCII
_MIG_MODES = ("enabled", "disabled", "unknown")


# The examples are read straight from the package directory: importlib.resources costs ~5 ms of
# imports (zipfile, tempfile, pathlib) on every launch. It remains the fallback for a zipped install.
_EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")


def example_names() -> list[str]:
    """Short names of the bundled example machines (``dgx-h100``, ...)."""
    try:
        names = os.listdir(_EXAMPLES_DIR)
    except OSError:
        from importlib import resources

        names = [p.name for p in resources.files("gpu_launch.hardware.examples").iterdir()]
    return sorted(name[:-5] for name in names if name.endswith(".json"))


def _example_text(name: str) -> str:
    try:
        with open(os.path.join(_EXAMPLES_DIR, f"{name}.json"), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        from importlib import resources

        return resources.files("gpu_launch.hardware.examples").joinpath(f"{name}.json").read_text("utf-8")


def is_example(value: str | None) -> bool:
    """Whether ``--snapshot value`` names a bundled example machine (not a file)."""
    if not value or _is_path(value):
        return False
    return value in example_names()


def _is_path(value: str) -> bool:
    return os.path.exists(value) or os.sep in value or value.endswith(".json")


def resolve(value: str) -> Machine:
    """Load ``value`` as a file path, or else as the short name of a bundled example."""
    if _is_path(value):
        return load(value)
    if value in example_names():
        return loads(_example_text(value), source=value)
    raise SnapshotError(
        f"snapshot {value!r}: no such file, and not an example name",
        hint="examples: " + ", ".join(example_names()),
    )


def load(path: str) -> Machine:
    """Read the snapshot file at ``path`` (a regular file, or a pipe named /dev/stdin or /dev/fd/N)."""
    try:
        text = read_utf8(path, "snapshot", SnapshotError, MAX_BYTES, pipes=True, what="JSON file")
    except FileNotFoundError:
        raise SnapshotError(
            f"snapshot {path}: no such file", hint="write one with `gpulaunch ls --json > FILE`"
        ) from None
    return loads(text, source=path)


def loads(text: str, source: str = "<snapshot>") -> Machine:
    if not text.strip():
        raise SnapshotError(f"snapshot {source}: file is empty", hint="write one with `gpulaunch ls --json > FILE`")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: also an integer of more than 4300 digits
        detail = (f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError)
                  else "nested too deeply" if isinstance(exc, RecursionError) else "a number is too long")
        raise SnapshotError(f"snapshot {source}: not valid JSON ({detail})") from None
    return _Reader(source).machine(data)


class _Reader:
    """Validates the parsed JSON; every error names the file and the JSON path of the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> SnapshotError:
        return SnapshotError(f"snapshot {self.source}: {where}: {problem}")

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def int_(self, d: dict[str, Any], key: str, where: str, *, required: bool = False,
             lo: int | None = 0, hi: int | None = None) -> int | None:
        value = d.get(key)
        if value is None:
            if required:
                raise self.fail(f"{where}.{key}", "missing (required)")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{where}.{key}", f"expected an integer, got {_kind(value)}")
        if lo is not None and value < lo:
            raise self.fail(f"{where}.{key}", f"{value} is below {lo}")
        limit = _MAX_INT if hi is None else hi
        if value > limit:  # a 400-digit memory size would overflow every float computed from it
            shown = str(value) if value < 10 ** 30 else f"a {len(str(value))}-digit number"
            raise self.fail(f"{where}.{key}", f"{shown} is above {limit}")
        return value

    def str_(self, d: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
        value = d.get(key)
        if value is None:
            if required:
                raise self.fail(f"{where}.{key}", "missing (required)")
            return None
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key}", f"expected a string, got {_kind(value)}")
        return printable(value)  # foreign text: never a raw escape sequence on a terminal (gpu_launch/base/text.py)

    def bool_(self, d: dict[str, Any], key: str, where: str) -> bool:
        value = d.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}" if where != "top level" else key, f"expected true or false, got {_kind(value)}")
        return value

    def machine(self, data: Any) -> Machine:
        d = self.obj(data, "top level")
        if "schema" not in d:
            raise self.fail("schema", "missing; is this a `gpulaunch ls --json` file?")
        if isinstance(d["schema"], bool) or d["schema"] != SCHEMA_VERSION:  # true == 1 in Python, not in the schema
            raise self.fail("schema", f"version {d['schema']!r} is not supported (this gpulaunch reads {SCHEMA_VERSION})")
        raw_gpus = d.get("gpus")
        if not isinstance(raw_gpus, list):
            raise self.fail("gpus", f"expected a list, got {_kind(raw_gpus)}")
        gpus = tuple(self.gpu(g, f"gpus[{i}]") for i, g in enumerate(raw_gpus))
        seen_index: set[int] = set()
        seen_uuid: set[str] = set()
        for i, gpu in enumerate(gpus):
            if gpu.index in seen_index:
                raise self.fail(f"gpus[{i}].index", f"duplicate index {gpu.index}")
            if gpu.uuid in seen_uuid:
                raise self.fail(f"gpus[{i}].uuid", f"duplicate uuid {gpu.uuid}")
            seen_index.add(gpu.index)
            seen_uuid.add(gpu.uuid)
        return Machine(
            gpus=gpus,
            links=self.links(d.get("links"), len(gpus)),
            driver_version=self.str_(d, "driver_version", "top level"),
            cuda_driver_version=self.str_(d, "cuda_driver_version", "top level"),
            hostname=self.str_(d, "hostname", "top level"),
            source=self.source,
            nvswitch=self.bool_(d, "nvswitch", "top level"),
            host_memory_available_mib=self.int_(d, "host_memory_available_mib", "top level"),
        )

    def gpu(self, raw: Any, where: str) -> Gpu:
        d = self.obj(raw, where)
        available = d.get("available", True)
        if not isinstance(available, bool):
            raise self.fail(f"{where}.available", f"expected true or false, got {_kind(available)}")
        # Memory may be null even on a usable GPU (NotSupported, no permission, unified memory);
        # such a GPU is listed but never chosen by --auto.
        total, used, free, reserved = self.memory(d, where, ("total", "used", "free", "reserved"))
        uuid = self.str_(d, "uuid", where, required=True)
        assert uuid is not None
        if not uuid.startswith("GPU-"):
            raise self.fail(f"{where}.uuid", f"{uuid!r} does not start with 'GPU-'")
        affinity = self.str_(d, "cpu_affinity", where)
        if affinity is not None:
            try:
                cpulist_ranges(affinity)  # bounded: "0-99999999999" is refused, never expanded
            except ValueError as exc:
                raise self.fail(f"{where}.cpu_affinity", str(exc)) from None
        # null: NVML could not list them (unknown, never "none"); absent: none, as files before it had.
        procs = d.get("processes", [])
        if procs is not None and not isinstance(procs, list):
            raise self.fail(f"{where}.processes", f"expected a list or null, got {_kind(procs)}")
        migs = d.get("mig_devices", [])
        if not isinstance(migs, list):
            raise self.fail(f"{where}.mig_devices", f"expected a list, got {_kind(migs)}")
        mig_mode = self.mig_mode(d, where, bool(migs))
        health = d.get("health", [])
        if not isinstance(health, list) or not all(isinstance(h, str) and h for h in health):
            raise self.fail(f"{where}.health", f"expected a list of problems (strings), got {_kind(health)}")
        return Gpu(
            index=self.int_(d, "index", where, required=True),  # type: ignore[arg-type]
            uuid=uuid,
            name=self.str_(d, "name", where) or "unknown GPU",
            pci_bus_id=self.str_(d, "pci_bus_id", where),
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=free,
            memory_reserved_mib=reserved,
            utilization_gpu=self.int_(d, "utilization_gpu", where, hi=100),
            temperature_c=self.int_(d, "temperature_c", where, lo=-50, hi=200),
            compute_capability=self.str_(d, "compute_capability", where),
            numa_node=self.int_(d, "numa_node", where),
            cpu_affinity=affinity,
            processes=tuple(self.process(p, f"{where}.processes[{j}]") for j, p in enumerate(procs or ())),
            processes_known=procs is not None,
            mig_devices=tuple(self.mig(m, f"{where}.mig_devices[{j}]") for j, m in enumerate(migs)),
            mig_mode=mig_mode,
            health=tuple(printable(h) for h in health),  # foreign text, as every string field
            available=available,
            error=self.str_(d, "error", where),
            **{key: self.int_(d, key, where, hi=hi) for key, hi in WIDE_KEYS.items()},
        )

    def memory(self, d: dict[str, Any], where: str, kinds: tuple[str, ...]) -> list[int | None]:
        """``memory_<kind>_mib`` for each kind (total first), none above the total, and used made
        coherent with the rest as the NVML adapter does (free is trusted; see ``coherent_used``)."""
        values = [self.int_(d, f"memory_{kind}_mib", where) for kind in kinds]
        total = values[0]
        for kind, value in zip(kinds[1:], values[1:]):
            if total is not None and value is not None and value > total:
                raise self.fail(f"{where}.memory_{kind}_mib", f"{value} exceeds memory_total_mib {total}")
        named = dict(zip(kinds, values))
        values[1] = coherent_used(total, named["used"], named["free"], named.get("reserved"))
        return values

    def mig_mode(self, d: dict[str, Any], where: str, has_mig_devices: bool) -> str:
        """``mig_mode``; absent (files from before it existed): in MIG mode exactly when MIG devices are listed."""
        mode = self.str_(d, "mig_mode", where)
        if mode is None:
            return "enabled" if has_mig_devices else "disabled"
        if mode not in _MIG_MODES:
            raise self.fail(f"{where}.mig_mode", f"{mode!r} is not one of {', '.join(_MIG_MODES)}")
        if mode == "disabled" and has_mig_devices:
            raise self.fail(f"{where}.mig_mode", "'disabled', but the GPU lists MIG devices")
        return mode

    def process(self, raw: Any, where: str) -> GpuProcess:
        d = self.obj(raw, where)
        return GpuProcess(
            pid=self.int_(d, "pid", where, required=True),  # type: ignore[arg-type]
            used_memory_mib=self.int_(d, "used_memory_mib", where),
            user=self.str_(d, "user", where),
            command=self.str_(d, "command", where),
        )

    def mig(self, raw: Any, where: str) -> MigDevice:
        d = self.obj(raw, where)
        uuid = self.str_(d, "uuid", where, required=True)
        assert uuid is not None
        if not uuid.startswith("MIG-"):
            raise self.fail(f"{where}.uuid", f"{uuid!r} does not start with 'MIG-'")
        total, used, free = self.memory(d, where, ("total", "used", "free"))
        return MigDevice(
            uuid=uuid,
            profile=self.str_(d, "profile", where),
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=free,
            gpu_instance_id=self.int_(d, "gpu_instance_id", where),
            compute_instance_id=self.int_(d, "compute_instance_id", where),
        )

    def links(self, raw: Any, n: int) -> tuple[tuple[str, ...], ...] | None:
        if raw is None:
            return None
        if not isinstance(raw, list) or len(raw) != n:
            got = f"{len(raw)} rows" if isinstance(raw, list) else _kind(raw)
            raise self.fail("links", f"expected {n}x{n} matrix (one row per GPU), got {got}")
        rows = []
        for i, row in enumerate(raw):
            if not isinstance(row, list) or len(row) != n:
                got = f"{len(row)} entries" if isinstance(row, list) else _kind(row)
                raise self.fail(f"links[{i}]", f"expected {n} entries, got {got}")
            # Fast path: a row is a handful of distinct codes; the cell loop only finds the culprit.
            if not (_all_codes(row) and row[i] == "X" and row.count("X") == 1):
                self.link_row(row, i)
            rows.append(tuple(row))
        if list(zip(*rows)) != rows:  # not symmetric: find the first differing pair
            for i in range(n):
                for j in range(i):
                    if rows[i][j] != rows[j][i]:
                        raise self.fail(f"links[{i}][{j}]", f"{rows[i][j]!r} differs from links[{j}][{i}] {rows[j][i]!r}")
        return tuple(rows)

    def link_row(self, row: list[Any], i: int) -> None:
        for j, code in enumerate(row):
            if not isinstance(code, str) or not _LINK_RE.match(code):
                raise self.fail(f"links[{i}][{j}]", f"{code!r} is not a topology code (X, NV<k>, PIX, PXB, PHB, NODE, SYS)")
            if (code == "X") != (i == j):
                raise self.fail(f"links[{i}][{j}]", "'X' belongs on the diagonal and only there")


def _all_codes(row: list[Any]) -> bool:
    """Whether every entry of ``row`` is a topology code (checked once per distinct entry)."""
    try:
        distinct = set(row)
    except TypeError:  # a list or object in the row
        return False
    return all(isinstance(code, str) and _LINK_RE.match(code) for code in distinct)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


#: Optional GPU keys read for ``ls --wide`` (schema 1 still: absent means unknown), with their bounds.
WIDE_KEYS = {"power_draw_w": 100_000, "power_limit_w": 100_000, "fan_percent": 255, "clock_sm_mhz": 100_000,
             "clock_memory_mhz": 100_000}


def to_dict(machine: Machine) -> dict[str, Any]:
    """The schema-1 form of ``machine``; key order is stable."""
    gpus = []
    for g in machine.gpus:
        entry: dict[str, Any] = {
            "index": g.index, "uuid": g.uuid, "name": g.name, "pci_bus_id": g.pci_bus_id,
            "memory_total_mib": g.memory_total_mib, "memory_used_mib": g.memory_used_mib,
            "memory_free_mib": g.memory_free_mib,
            **({"memory_reserved_mib": g.memory_reserved_mib} if g.memory_reserved_mib is not None else {}),
            "utilization_gpu": g.utilization_gpu,
            "temperature_c": g.temperature_c, "compute_capability": g.compute_capability,
            "numa_node": g.numa_node, "cpu_affinity": g.cpu_affinity,
            "processes": [
                {"pid": p.pid, "used_memory_mib": p.used_memory_mib, "user": p.user, "command": p.command}
                for p in g.processes
            ] if g.processes_known else None,
            "mig_mode": g.mig_mode,
        }
        if g.mig_devices:
            entry["mig_devices"] = [
                {"uuid": m.uuid, "profile": m.profile, "memory_total_mib": m.memory_total_mib,
                 "memory_used_mib": m.memory_used_mib, "memory_free_mib": m.memory_free_mib,
                 "gpu_instance_id": m.gpu_instance_id, "compute_instance_id": m.compute_instance_id}
                for m in g.mig_devices
            ]
        entry["health"] = list(g.health)
        entry.update({key: getattr(g, key) for key in WIDE_KEYS if getattr(g, key) is not None})
        if not g.available:
            entry["available"] = False
            entry["error"] = g.error
        gpus.append(entry)
    out: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "hostname": machine.hostname,
        "driver_version": machine.driver_version,
        "cuda_driver_version": machine.cuda_driver_version,
        "gpus": gpus,
    }
    if machine.links is not None:  # whether NVLinks go through NVSwitches is known with the links
        out["nvswitch"] = machine.nvswitch
        out["links"] = [list(row) for row in machine.links]
    return out


def dump(machine: Machine) -> str:
    return json.dumps(to_dict(machine), indent=2) + "\n"
