"""The cells of the ``ls`` table, laid out to fit a width: one line per GPU, whatever the terminal.

Three layouts, chosen by what fits (``gpustat`` fits in 62 columns, ``nvitop -1`` in 79):

- full: the whole model name, ``65.3 GiB / 79.6 GiB``, every process as ``user:pid memory``;
- compact (80 columns): the name without its ``NVIDIA``/``Tesla`` prefix, ``65.3/79.6 GiB``, processes as
  ``user memory``;
- then the PROCESSES and RESERVED BY cells are cut (``…``, ``+2``) to what is left;
- narrow (under ~70 columns, not ``--wide``): columns go, least needed first (:data:`NARROW_DROPS`),
  until the rest fits, down to GPU, FREE and UTIL; as a last resort any line is cut at the width, so
  that a GPU never takes two lines.

``--wide`` adds power, fan, clocks and the PCI bus id when they are known. Memory: USED counts what
the driver reserves for itself (NVML's ``reserved``), so USED + FREE = TOTAL as nvidia-smi's summary
shows it; ``--wide`` shows the reserved part in a column of its own.
Plain text and the rich table draw the same cells (:mod:`gpu_launch.views.render`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.units import fmt_mib

__all__ = ["Table", "Last", "layout", "fit_line", "fit_width", "short_name", "used_mib", "gpu_notes", "WIDE_HEADER",
           "NARROW_DROPS"]

#: Columns that are numbers, right-aligned.
RIGHT = frozenset({"FREE", "UTIL", "TEMP", "POWER", "FAN", "RESERVED"})
#: The narrowest a cut column gets before whole lines are cut instead.
MIN_CUT = 8
GAP = 2  # spaces between columns


@dataclass(frozen=True)
class Table:
    """Header and rows of equal length; ``kinds[i]`` says what row i is ("gpu", "mig", "unavailable")."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    kinds: tuple[str, ...]
    gpus: tuple[Gpu, ...]  # the GPU of each row (a MIG row: its parent)

    def widths(self) -> list[int]:
        return [max(len(r[c]) for r in (self.header, *self.rows)) for c in range(len(self.header))]

    def width(self) -> int:
        w = self.widths()
        return sum(w) + GAP * (len(w) - 1)

    def lines(self) -> list[str]:
        w = self.widths()
        out = []
        for row in (self.header, *self.rows):
            cells = [c.rjust(n) if h in RIGHT else c.ljust(n) for c, n, h in zip(row, w, self.header)]
            out.append((" " * GAP).join(cells).rstrip())
        return out


def fit_width(out: object) -> int | None:
    """The width ``ls`` fits: ``COLUMNS``, else the terminal's (asked again at each ``--watch`` frame, so
    a resized terminal is followed); None (no limit: the full layout) for a pipe or a file."""
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if getattr(out, "isatty", lambda: False)():
        import shutil

        return max(shutil.get_terminal_size().columns, 1)  # however narrow: a line wider would wrap
    return None


def short_name(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``H100 80GB HBM3``: the vendor says nothing on an NVIDIA-only list."""
    for prefix in ("NVIDIA ", "Tesla "):
        name = name.removeprefix(prefix)
    return name


def used_mib(gpu: Gpu) -> int | None:
    """Used memory as ``ls`` shows it: NVML's used plus what the driver reserves, so used + free = total."""
    if gpu.memory_used_mib is None:
        return None
    return gpu.memory_used_mib + (gpu.memory_reserved_mib or 0)


def _gib(mib: int | None) -> str:
    """``65.3`` (GiB without the unit), for the compact ``65.3/79.6 GiB``; small values keep their unit."""
    if mib is None:
        return "–"
    return f"{mib / 1024:.1f}" if mib >= 1024 else fmt_mib(mib)


def _memory(used: int | None, total: int | None, compact: bool) -> str:
    if total is None:
        return "–"
    if compact:
        return f"{_gib(used)}/{_gib(total)}" + (" GiB" if total >= 1024 else "")
    return f"{fmt_mib(used)} / {fmt_mib(total)}"


def gpu_notes(gpu: Gpu) -> list[tuple[str, str]]:
    """What ``ls`` says about a GPU before its processes, each with a rich style: MIG mode (a GPU
    in MIG mode runs CUDA work only on its MIG devices) and what is wrong with its health."""
    notes = []
    if gpu.in_mig_mode:
        notes.append(("MIG mode" if gpu.mig_devices else "MIG mode, 0 MIG devices", "cyan"))
    if gpu.health:
        notes.append((f"unhealthy: {', '.join(gpu.health)}", "bold red"))
    return notes


def _processes(gpu: Gpu, compact: bool) -> list[str]:
    if not gpu.processes_known:
        return ["?"]
    parts = []
    for p in gpu.processes:
        who = p.user or "?"
        mem = f" {fmt_mib(p.used_memory_mib)}" if p.used_memory_mib is not None else ""
        parts.append(f"{who}{mem}" if compact else f"{who}:{p.pid}{mem}")
    return parts


@dataclass(frozen=True)
class Last:
    """The PROCESSES cell: notes (MIG mode, health; joined by ``;``), then processes (joined by ``,``)."""

    notes: tuple[str, ...] = ()
    processes: tuple[str, ...] = ()

    def text(self, keep: int | None = None) -> str:
        shown = self.processes if keep is None else self.processes[:keep]
        more = f" +{len(self.processes) - len(shown)}" if len(shown) < len(self.processes) else ""
        parts = [*self.notes, ", ".join(shown) + more] if shown or more else list(self.notes)
        return "; ".join(p for p in parts if p) or "–"

    def cut(self, room: int) -> str:
        """As many processes as fit in ``room``, then ``+N`` for the rest; at last a ``…``."""
        for keep in range(len(self.processes), 0, -1):
            if len(self.text(keep)) <= room:
                return self.text(keep)
        return fit_line(self.text(1 if self.processes else None), room)


def _last(gpu: Gpu, compact: bool) -> Last:
    notes = tuple(text for text, _ in gpu_notes(gpu))
    procs = _processes(gpu, compact)
    if notes and procs == ["?"]:
        procs = ["processes ?"]
    return Last(notes, tuple(procs))


def _wide_cells(gpu: Gpu, compact: bool) -> list[str]:
    power = "–"
    if gpu.power_draw_w is not None:
        power = f"{gpu.power_draw_w}" + (f"/{gpu.power_limit_w}" if gpu.power_limit_w is not None else "") + " W"
    fan = f"{gpu.fan_percent}%" if gpu.fan_percent is not None else "–"
    clocks = "–"
    if gpu.clock_sm_mhz is not None or gpu.clock_memory_mhz is not None:
        clocks = f"{gpu.clock_sm_mhz if gpu.clock_sm_mhz is not None else '–'}/" \
                 f"{gpu.clock_memory_mhz if gpu.clock_memory_mhz is not None else '–'}"
    reserved = fmt_mib(gpu.memory_reserved_mib) if gpu.memory_reserved_mib is not None else "–"
    bus = gpu.pci_bus_id or "–"
    if compact and bus.startswith("00000000:"):  # PCI domain 0, as on nearly every machine
        bus = bus.removeprefix("00000000:")
    return [reserved, power, fan, clocks, bus]


WIDE_HEADER = ("RESERVED", "POWER", "FAN", "SM/MEM MHz", "BUS ID")


def _build(machine: Machine, reserved: Mapping[str, str], compact: bool, wide: bool) -> tuple[Table, list[Last]]:
    held = bool(reserved)
    header = ["GPU", "NAME", "FREE", "USED/TOTAL" if compact else "MEMORY USED/TOTAL", "UTIL", "TEMP",
              *(WIDE_HEADER if wide else ()), *(["RESERVED BY"] if held else []), "PROCESSES"]
    rows: list[tuple[str, ...]] = []
    kinds: list[str] = []
    gpus: list[Gpu] = []
    lasts: list[Last] = []
    blank_wide = [""] * len(WIDE_HEADER) if wide else []
    for g in machine.gpus:
        name = short_name(g.name) if compact else g.name
        holder = [reserved.get(g.uuid) or "–"] if held else []
        if not g.available:
            rows.append((str(g.index), name, "", "unavailable", "", "", *blank_wide, *holder))
            lasts.append(Last((g.error or "NVML could not read it",)))
            kinds.append("unavailable")
        else:
            util = f"{g.utilization_gpu}%" if g.utilization_gpu is not None else "–"
            temp = f"{g.temperature_c}°C" if g.temperature_c is not None else "–"
            rows.append((str(g.index), name, fmt_mib(g.memory_free_mib),
                         _memory(used_mib(g), g.memory_total_mib, compact), util, temp,
                         *(_wide_cells(g, compact) if wide else ()), *holder))
            lasts.append(_last(g, compact))
            kinds.append("gpu")
        gpus.append(g)
        for m in g.mig_devices:
            mig_name = f"└ MIG {m.profile or ''}".rstrip()
            rows.append(("", mig_name, fmt_mib(m.memory_free_mib), _memory(m.memory_used_mib, m.memory_total_mib, compact),
                         "", "", *blank_wide, *([reserved.get(m.uuid) or "–"] if held else [])))
            lasts.append(Last((m.uuid,)))
            kinds.append("mig")
            gpus.append(g)
    joined = tuple((*row, last.text()) for row, last in zip(rows, lasts))
    table = Table(tuple(header), joined, tuple(kinds), tuple(gpus))
    if wide and compact:  # a --wide column nothing here can fill (no fan on SXM boards) only takes room
        empty = {c for c, name in enumerate(header) if name in WIDE_HEADER and all(r[c] in ("–", "") for r in joined)}
        table = Table(tuple(h for c, h in enumerate(header) if c not in empty),
                      tuple(tuple(x for c, x in enumerate(r) if c not in empty) for r in joined), table.kinds, table.gpus)
    return table, lasts


def fit_line(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut shown by ``…``."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…" if width > 0 else ""


def _with_column(table: Table, column: int, cells: Sequence[str]) -> Table:
    rows = tuple((*r[:column], c, *r[column + 1:]) for r, c in zip(table.rows, cells))
    return Table(table.header, rows, table.kinds, table.gpus)


def layout(machine: Machine, reserved: Mapping[str, str] | None = None, width: int | None = None,
           wide: bool = False) -> Table:
    """The ``ls`` table for ``width`` columns (None: no limit, the full layout)."""
    reserved = reserved or {}
    table, lasts = _build(machine, reserved, compact=False, wide=wide)
    if width is None or table.width() <= width:
        return table
    table, lasts = _build(machine, reserved, compact=True, wide=wide)
    if table.width() <= width:
        return table
    fitted = _cut(table, lasts, width)
    if fitted.width() <= width or wide:  # --wide asked for its columns: its lines are cut at the right instead
        return fitted
    return _narrow(table, lasts, width)


def _cut(table: Table, lasts: Sequence[Last], width: int) -> Table:
    """``table`` with its RESERVED BY and PROCESSES cells cut to what ``width`` leaves them."""
    last = len(table.header) - 1
    if "RESERVED BY" in table.header:  # a holder reads well enough as "alice (pid 4242…"; it gets 60% of the room
        col = table.header.index("RESERVED BY")
        widths = table.widths()
        left = width - (table.width() - widths[col] - widths[last])
        room = max(MIN_CUT, min(24, widths[col], left * 3 // 5))
        table = _with_column(table, col, [fit_line(r[col], room) for r in table.rows])
    widths = table.widths()
    room = max(MIN_CUT, width - (sum(widths[:last]) + GAP * last))
    return _with_column(table, last, [cell.cut(room) for cell in lasts])


#: What a terminal too narrow for the cut compact table gives up, first to last: the temperature, the
#: name (a MIG row's profile moves to the GPU column), used/total (an unavailable GPU says so under
#: FREE). What a user picks GPUs by stays: GPU, FREE, UTIL, RESERVED BY, PROCESSES.
NARROW_DROPS = ("TEMP", "NAME", "USED/TOTAL")


def _narrow(table: Table, lasts: Sequence[Last], width: int) -> Table:
    """The compact ``table`` less the columns it takes to fit ``width``: then PROCESSES, then RESERVED BY;
    at the narrowest, GPU, FREE and UTIL."""
    for name in NARROW_DROPS:
        if name in table.header:
            table = _without(table, table.header.index(name))
            fitted = _cut(table, lasts, width)
            if fitted.width() <= width:
                return fitted
    table = _without(table, len(table.header) - 1)
    if table.header[-1] == "RESERVED BY":
        last = len(table.header) - 1
        room = width - (sum(table.widths()[:last]) + GAP * last)
        if room >= len("RESERVED BY"):
            return _with_column(table, last, [fit_line(r[last], room) for r in table.rows])
        table = _without(table, last)
    return table


def _without(table: Table, col: int) -> Table:
    name = table.header[col]
    rows = []
    for row, kind in zip(table.rows, table.kinds):
        cells = list(row)
        if name == "NAME" and kind == "mig":  # "└ MIG 3g.20gb" → "└ 3g.20gb" in the (empty) GPU cell
            cells[0] = cells[col].replace("└ MIG ", "└ ", 1)
        if name == "USED/TOTAL" and kind == "unavailable":  # the cell that said so
            cells[table.header.index("FREE")] = cells[col]
        del cells[col]
        rows.append(tuple(cells))
    return Table(table.header[:col] + table.header[col + 1:], tuple(rows), table.kinds, table.gpus)
