"""Everything the user reads: the `ls` table, the mapping table, --dry-run and --explain output.

Deciding happens elsewhere; these functions only format. Plain text is the default (it is what
scripts and pipes get, and it needs no import of rich); the rich table is used for `ls` on a
terminal. Colour follows NO_COLOR and whether the stream is a terminal.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from gpu_launch.hardware.model import Device, Machine
from gpu_launch.base.units import fmt_mib
from gpu_launch.views.ls_table import RIGHT, Held, fit_line, gpu_notes, holder_column, layout, used_mib

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

__all__ = ["use_color", "mapping_lines", "dry_run_text", "devices_json", "dry_run_json", "ls_plain", "ls_rich", "topo_plain",
           "topo_rich", "LEGEND"]

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
    """Colour (and rich's drawing) only on a terminal, and never when NO_COLOR is set to something
    (no-color.org). A pipe is never one, whatever FORCE_COLOR says; nor is a notebook cell reached
    through IPython's ``!`` (a pseudo-terminal that pexpect reads, shown as text), which a Jupyter
    kernel's children tell by the ``JPY_*`` variables its launcher sets (ipykernel also sets
    ``TERM=xterm-color`` and ``FORCE_COLOR=1`` there, so rich itself would draw)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    if os.environ.get("JPY_PARENT_PID") or os.environ.get("JPY_SESSION_NAME"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _table(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


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


def _header(machine: Machine, total: int | None = None) -> str:
    """``host  driver ...  CUDA ...  8 GPUs``; ``2 of 8 GPUs`` where ``ls --gpus`` shows some of the ``total``."""
    n = len(machine.gpus)
    some = f"{n} of " if total is not None and total != n else ""
    bits = [machine.hostname or "", f"driver {machine.driver_version}" if machine.driver_version else "",
            f"CUDA {machine.cuda_driver_version}" if machine.cuda_driver_version else "",
            f"{some}{total if some else n} GPU{'s' if (total if some else n) != 1 else ''}",
            f"snapshot {machine.source}" if machine.source != "nvml" else ""]
    return "  ".join(b for b in bits if b)


def ls_plain(machine: Machine, reserved: Mapping[str, str | Held] | None = None, width: int | None = None,
             wide: bool = False, total: int | None = None) -> str:
    """The `ls` table, one line per GPU within ``width`` columns (None: no limit); with ``reserved``
    (uuid -> holder) non-empty, a RESERVED BY column is added (:mod:`gpu_launch.views.ls_table`)."""
    table = layout(machine, reserved, width, wide)
    out = [_header(machine, total)] + table.lines()
    if width is not None:
        out = [fit_line(line, width) for line in out]
    out.extend(_wrapped(f"warning: {w}", width) for w in machine.warnings)
    return "\n".join(out) + "\n"


def _wrapped(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False))


def _bar(used: int | None, total: int | None, width: int = 12) -> str:
    if not total or used is None:
        return " " * width
    filled = round(width * min(used / total, 1.0))
    return "█" * filled + "░" * (width - filled)


_BAR = 12


def ls_rich(machine: Machine, stream: IO[str], reserved: Mapping[str, str | Held] | None = None,
            width: int | None = None, wide: bool = False, total: int | None = None) -> None:
    """The `ls` table for a terminal: the cells of :func:`ls_plain`, coloured, with a memory bar when there is room."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = layout(machine, reserved, width, wide)
    bar = width is None or table.width() + _BAR + 2 <= width
    cut = width is not None and table.width() > width  # (--wide at 80 columns) cut lines as ls_plain does
    console = Console(file=stream, highlight=False,
                      width=table.width() if cut else width or max(table.width() + _BAR + 2, 80))
    header = _header(machine, total)
    # The machine's line is printed, not the table's title: rich wraps a title at the table's width,
    # and a narrow table (a narrow terminal's) would fold it over two lines.
    console.print(f"[italic]{escape(fit_line(header, width) if width else header)}[/]", no_wrap=True, crop=False)
    grid = Table(box=None, header_style="bold", pad_edge=False)
    columns = list(table.header)
    if bar:
        columns.insert(columns.index("UTIL"), "")
    for column in columns:
        grid.add_column(column.title() if column not in ("GPU", "BUS ID", "SM/MEM MHz") else column,
                        justify="right" if column in RIGHT else "left", no_wrap=True, overflow="ellipsis")
    last = len(table.header) - 1
    held = holder_column(table)
    free = table.header.index("FREE")  # (a narrow table has no NAME: columns are found by name)
    said = table.header.index("USED/TOTAL") if "USED/TOTAL" in table.header else free  # "unavailable"
    for row, kind, g in zip(table.rows, table.kinds, table.gpus):
        cells = [escape(c) for c in row]
        if kind == "unavailable":
            cells[said] = "[red]unavailable[/]"
            cells[last] = f"[red]{cells[last]}[/]"
        elif kind == "gpu":
            cells[free] = f"[bold]{cells[free]}[/]"
            if not g.processes_known:
                cells[last] = f"[yellow]{cells[last]}[/]"
            for text, style in gpu_notes(g):
                cells[last] = cells[last].replace(escape(text), f"[{style}]{escape(text)}[/]", 1)
        if held is not None and kind == "gpu" and row[held] != "–":
            cells[held] = f"[magenta]{cells[held]}[/]"
        if bar:
            shown = ""
            if kind == "gpu":
                share = (used_mib(g) or 0) / g.memory_total_mib if g.memory_total_mib else 0
                colour = "red" if share >= 0.5 else "yellow" if share > 0.05 else "green"
                shown = f"[{colour}]{_bar(used_mib(g), g.memory_total_mib)}[/]"
            cells.insert(columns.index(""), shown)
        grid.add_row(*cells)
    if cut:  # rich would squeeze every column to "…" (the GPU number too): render whole, cut at the right
        from rich.segment import Segment, Segments

        assert width is not None
        for line in console.render_lines(grid, pad=False, new_lines=False):
            if len("".join(segment.text for segment in line).rstrip()) > width:
                line = [*Segment.adjust_line_length(line, width - 1, pad=False), Segment("…")]
            else:
                line = Segment.adjust_line_length(line, width, pad=False)
            console.print(Segments([*line, Segment.line()]), end="")
    else:
        console.print(grid)
    for w in machine.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", width=width)


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
