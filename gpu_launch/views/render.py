"""Everything the user reads: the `ls` table, the mapping table, --dry-run and --explain output.

Deciding happens elsewhere; these functions only format. Plain text is the default (it is what
scripts and pipes get, and it needs no import of rich); the rich table is used for `ls` on a
terminal. Colour follows NO_COLOR and whether the stream is a terminal.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from gpu_launch.hardware.model import Device, Gpu, Machine
from gpu_launch.units import fmt_mib

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

__all__ = ["use_color", "mapping_lines", "dry_run_text", "devices_json", "dry_run_json", "ls_plain", "ls_rich", "topo_plain",
           "topo_rich", "LEGEND", "process_text", "gpu_notes", "mem_text"]

LEGEND = (
    ("X", "self"),
    ("NV#", "bonded set of # NVLinks"),
    ("PIX", "at most a single PCIe bridge"),
    ("PXB", "multiple PCIe bridges, without the host bridge"),
    ("PHB", "PCIe and a PCIe host bridge (typically the CPU)"),
    ("NODE", "PCIe and the interconnect between host bridges within a NUMA node"),
    ("SYS", "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI)"),
)


def use_color(stream: IO[str]) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to something (no-color.org)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _table(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def mem_text(gpu: Gpu) -> str:
    if gpu.memory_total_mib is None:
        return "–"
    return f"{fmt_mib(gpu.memory_used_mib)} / {fmt_mib(gpu.memory_total_mib)}"


def process_text(gpu: Gpu) -> str:
    """``alice:4242 14.2 GiB, ...``; ``–`` for none, ``?`` when NVML could not list them."""
    if not gpu.processes_known:
        return "?"
    parts = []
    for p in gpu.processes:
        who = p.user or "?"
        mem = f" {fmt_mib(p.used_memory_mib)}" if p.used_memory_mib is not None else ""
        parts.append(f"{who}:{p.pid}{mem}")
    return ", ".join(parts) if parts else "–"


def gpu_notes(gpu: Gpu) -> list[tuple[str, str]]:
    """What ``ls`` says about a GPU before its processes, each with a rich style: MIG mode (a GPU
    in MIG mode runs CUDA work only on its MIG devices) and what is wrong with its health."""
    notes = []
    if gpu.in_mig_mode:
        notes.append(("MIG mode" if gpu.mig_devices else "MIG mode, 0 MIG devices", "cyan"))
    if gpu.health:
        notes.append((f"unhealthy: {', '.join(gpu.health)}", "bold red"))
    return notes


def _last_column(gpu: Gpu, styled: bool = False) -> str:
    """The PROCESSES cell: notes first, then the processes (``–`` is left out after a note, and
    ``?`` becomes ``processes ?`` so that it cannot be read as part of the note)."""
    notes = gpu_notes(gpu)
    processes = process_text(gpu)
    if notes and processes == "?":
        processes = "processes ?"
    if styled:
        from rich.markup import escape

        parts = [f"[{style}]{escape(text)}[/]" for text, style in notes]
        shown = f"[yellow]{escape(processes)}[/]" if not gpu.processes_known else escape(processes)
    else:
        parts = [text for text, _ in notes]
        shown = processes
    if processes != "–" or not parts:
        parts.append(shown)
    return "; ".join(parts)


def mapping_lines(devices: Sequence[Device], parent_labels: Mapping[str, str] | None = None) -> list[str]:
    """One row per logical device: ``cuda:0 → GPU 4  NAME  BUS-ID  79.1 GiB free``."""
    rows = []
    for i, d in enumerate(devices):
        row = [f"cuda:{i} → {d.label}", d.gpu.name, d.gpu.pci_bus_id or "–", f"{fmt_mib(d.memory_free_mib)} free"]
        if parent_labels is not None:  # the parent's numbering right after ours: cuda:0 → GPU 3 (parent cuda:1)
            row.insert(1, parent_labels.get(d.uuid, ""))
        rows.append(row)
    return _table(rows, "  ")


def dry_run_text(env: Mapping[str, str], changed: Sequence[str], argv: Sequence[str]) -> str:
    lines = [f"{name}={shlex.quote(env[name])}" if env[name] else f"{name}=" for name in changed if name in env]
    lines.append("exec " + shlex.join(argv) if argv else "exec (no command)")
    return "\n".join(lines) + "\n"


def devices_json(devices: Sequence[Device]) -> list[dict[str, Any]]:
    """The chosen devices in CUDA order, as the dry-run and env JSON documents list them."""
    return [
        {"cuda": f"cuda:{i}", "index": d.gpu.index, "uuid": d.uuid, "name": d.gpu.name,
         "pci_bus_id": d.gpu.pci_bus_id, "memory_free_mib": d.memory_free_mib}
        for i, d in enumerate(devices)
    ]


def dry_run_json(devices: Sequence[Device], env: Mapping[str, str], changed: Sequence[str],
                 argv: Sequence[str]) -> dict[str, Any]:
    return {
        "schema": 1,
        "devices": devices_json(devices),
        "env": {name: env[name] for name in changed if name in env},
        "argv": list(argv),
    }


def _header(machine: Machine) -> str:
    bits = [machine.hostname or "", f"driver {machine.driver_version}" if machine.driver_version else "",
            f"CUDA {machine.cuda_driver_version}" if machine.cuda_driver_version else "",
            f"{len(machine.gpus)} GPU{'s' if len(machine.gpus) != 1 else ''}",
            f"snapshot {machine.source}" if machine.source != "nvml" else ""]
    return "  ".join(b for b in bits if b)


def _free(free_mib: int | None) -> str:
    """The FREE column, shown first after the name: it is what users look for first."""
    return fmt_mib(free_mib)


def _util(gpu: Gpu) -> str:
    return f"{gpu.utilization_gpu}%" if gpu.utilization_gpu is not None else "–"


def _temp(gpu: Gpu) -> str:
    return f"{gpu.temperature_c}°C" if gpu.temperature_c is not None else "–"


def ls_plain(machine: Machine, reserved: Mapping[str, str] | None = None) -> str:
    """The `ls` table; with ``reserved`` (uuid -> holder) non-empty, a RESERVED BY column is added."""
    extra = bool(reserved)
    rows = [["GPU", "NAME", "FREE", "MEMORY USED/TOTAL", "UTIL", "TEMP", *(["RESERVED BY"] if extra else []),
             "PROCESSES"]]
    for g in machine.gpus:
        held = [(reserved or {}).get(g.uuid) or "–"] if extra else []
        if not g.available:
            rows.append([str(g.index), g.name, "", "unavailable", "", "", *held, g.error or "NVML could not read it"])
            continue
        rows.append([str(g.index), g.name, _free(g.memory_free_mib), mem_text(g), _util(g), _temp(g), *held,
                     _last_column(g)])
        for m in g.mig_devices:
            rows.append(["", f"└ MIG {m.profile or ''}".rstrip(), _free(m.memory_free_mib),
                         f"{fmt_mib(m.memory_used_mib)} / {fmt_mib(m.memory_total_mib)}",
                         "", "", *([(reserved or {}).get(m.uuid) or "–"] if extra else []), m.uuid])
    out = [_header(machine)] + _table(rows)
    out.extend(f"warning: {w}" for w in machine.warnings)
    return "\n".join(out) + "\n"


def _bar(used: int | None, total: int | None, width: int = 12) -> str:
    if not total or used is None:
        return " " * width
    filled = round(width * min(used / total, 1.0))
    return "█" * filled + "░" * (width - filled)


def ls_rich(machine: Machine, stream: IO[str], reserved: Mapping[str, str] | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=stream, highlight=False)
    table = Table(title=escape(_header(machine)), title_justify="left", box=None, header_style="bold", pad_edge=False)
    extra = bool(reserved)
    for column in ("GPU", "Name", "Free", "Memory", "", "Util", "Temp", *(["Reserved by"] if extra else []), "Processes"):
        table.add_column(column, justify="right" if column in ("GPU", "Free", "Util", "Temp") else "left")
    for g in machine.gpus:
        holder = (reserved or {}).get(g.uuid)
        held = [f"[magenta]{escape(holder)}[/]" if holder else "–"] if extra else []
        if not g.available:
            table.add_row(str(g.index), escape(g.name), "", "[red]unavailable[/]", "", "", "", *held,
                          f"[red]{escape(g.error or '')}[/]")
            continue
        share = (g.memory_used_mib or 0) / g.memory_total_mib if g.memory_total_mib else 0
        colour = "red" if share >= 0.5 else "yellow" if share > 0.05 else "green"
        table.add_row(str(g.index), escape(g.name), f"[bold]{_free(g.memory_free_mib)}[/]", mem_text(g),
                      f"[{colour}]{_bar(g.memory_used_mib, g.memory_total_mib)}[/]",
                      _util(g), _temp(g), *held, _last_column(g, styled=True))
        for m in g.mig_devices:
            table.add_row("", escape(f"└ MIG {m.profile or ''}"), _free(m.memory_free_mib),
                          f"{fmt_mib(m.memory_used_mib)} / {fmt_mib(m.memory_total_mib)}",
                          "", "", "", *([escape((reserved or {}).get(m.uuid) or "–")] if extra else []), escape(m.uuid))
    console.print(table)
    for w in machine.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")


def _topo_rows(machine: Machine) -> list[list[str]]:
    assert machine.links is not None
    header = [""] + [f"GPU{g.index}" for g in machine.gpus] + ["CPU Affinity", "NUMA Affinity"]
    rows = [header]
    for g, row in zip(machine.gpus, machine.links):
        rows.append([f"GPU{g.index}", *row, g.cpu_affinity or "N/A",
                     str(g.numa_node) if g.numa_node is not None else "N/A"])
    return rows


def topo_plain(machine: Machine) -> str:
    if machine.links is None:
        return "no topology in this snapshot\n"
    out = _table(_topo_rows(machine)) + ["", "Legend:"] + [f"  {code:<5} = {text}" for code, text in LEGEND]
    return "\n".join(out) + "\n"


_CODE_STYLE = {"X": "dim", "PIX": "cyan", "PXB": "blue", "PHB": "yellow", "NODE": "magenta", "SYS": "red"}


def topo_rich(machine: Machine, stream: IO[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream, highlight=False)
    if machine.links is None:
        console.print("no topology in this snapshot")
        return
    rows = _topo_rows(machine)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in rows[0]:
        table.add_column(column)
    for row in rows[1:]:
        cells = [f"[bold]{row[0]}[/]"]
        for code in row[1:-2]:
            style = "bold green" if code.startswith("NV") else _CODE_STYLE.get(code, "")
            cells.append(f"[{style}]{code}[/]" if style else code)
        table.add_row(*cells, row[-2], row[-1])
    console.print(table)
    console.print("\nLegend:")
    for code, text in LEGEND:
        console.print(f"  {code:<5} = {text}")
