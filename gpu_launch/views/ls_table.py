"""The cells of the ``ls`` table, laid out to fit a width: one line per GPU, whatever the terminal.

Three layouts, chosen by what fits (``gpustat`` fits in 62 columns, ``nvitop -1`` in 79):

- full: the whole model name, ``65.3 GiB / 79.6 GiB``, every process as ``user:pid memory``;
- compact (80 columns): the name without its ``NVIDIA``/``Tesla`` prefix, ``65.3/79.6 GiB``, processes as
  ``user memory``;
- then the holders' column (RESERVED BY, HELD BY at 80) shows each as its user and command word
  (``alice train.py``), and the PROCESSES cell keeps what fits: ``+2`` for the processes left out,
  then the users alone (``alice, bob``), then ``…``;
- narrow (under ~70 columns, not ``--wide``): columns go, least needed first (:data:`NARROW_DROPS`),
  until the rest fits, down to GPU, FREE and UTIL; as a last resort any line is cut at the width, so
  that a GPU never takes two lines.

``--wide`` adds power, fan, clocks and the PCI bus id when they are known. Memory: USED is what
nvidia-smi's Memory-Usage shows, NVML's allocated memory without what the driver reserves for itself
(``nvmlMemory_v2_t.used``; with the v1 call of a driver before R510, which has no ``reserved``, used
includes it): USED + FREE falls short of TOTAL by the reserved part, which ``--wide`` shows in a
column of its own (hardware/nvml.py reads v2, CUDA-FACTS B11).
Plain text and the rich table draw the same cells (:mod:`gpu_launch.views.render`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.base.units import fmt_mib

__all__ = ["Table", "Last", "Held", "layout", "fit_line", "fit_width", "short_name", "used_mib", "gpu_notes",
           "command_word", "holder_column", "WIDE_HEADER", "HELD_BY", "NARROW_DROPS"]

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
    """Used memory as ``ls`` shows it: as nvidia-smi and nvitop show it, NVML's used without the driver's
    reserved memory. The NVML docs' own words differ by page (the v2 struct's ``used`` is "Allocated
    device memory", v1's "Sum of Reserved and Allocated"; one note says v2's includes reserved), but
    on the drivers users compared, nvidia-smi shows 0 MiB used on an idle card where v1 says 300-900
    (gpustat #141, rust-nvml/nvml-wrapper #57), and nvitop reads v2's ``used``."""
    return gpu.memory_used_mib


@dataclass(frozen=True)
class Held:
    """Who reserves a GPU: ``full`` for the RESERVED BY cell (``alice (pid 4242, for 1h02m: python
    train.py)``, its command cut at 40 characters), ``short`` for the HELD BY cell of an 80-column
    layout (``alice train.py``), and ``whole``, the line with the whole command (``ls --wide``)."""

    full: str
    short: str
    whole: str = ""


#: Programs whose first argument (a script, or ``-m module``) says more than their own name.
_INTERPRETERS = ("python", "sh", "bash", "zsh", "node", "perl", "ruby", "uv", "uvx")


def command_word(command: str | None) -> str:
    """The word that names a command: ``torchrun --nproc-per-node 4 train.py`` → ``torchrun``,
    ``/usr/bin/python3 -u train.py`` → ``train.py``, ``python -m vllm.entrypoints.api_server`` →
    ``vllm.entrypoints.api_server`` (python's own options skipped as python reads them: ``-X dev``,
    ``-W ignore``, ``-um MODULE``); ``VAR=1`` assignments in front are skipped."""
    import os
    import shlex

    try:
        words = shlex.split(command or "")
    except ValueError:  # an unbalanced quote: the words as they are
        words = (command or "").split()
    while words and "=" in words[0] and not words[0].startswith(("-", "/", "=")):
        words = words[1:]
    if not words:
        return "?"
    program = os.path.basename(words[0]) or words[0]
    if program.rstrip("0123456789.") not in _INTERPRETERS:
        return program
    rest = iter(words[1:])
    for word in rest:
        if program.startswith("python") and word[:1] == "-" and word[1:2] not in ("-", ""):
            for j, letter in enumerate(word[1:], start=1):  # -u, -um M, -mM, -X dev, -Wignore
                if letter in "mcWX":
                    value = word[j + 1:] or next(rest, "")
                    if letter in "mc":
                        return (value or program) if letter == "m" else program
                    break
            continue
        if word == "-m":
            return next(rest, program)
        if word == "-c":  # code on the command line: the interpreter is all there is to name
            return program
        if word == "run" and program == "uv":
            continue
        if not word.startswith("-"):
            return os.path.basename(word) or word
    return program


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
    """The PROCESSES cell: notes (MIG mode, health; joined by ``;``), then processes (joined by ``,``);
    ``users``: the processes' users alone, each once, for a cell with no room for their memory."""

    notes: tuple[str, ...] = ()
    processes: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    def text(self, keep: int | None = None, items: tuple[str, ...] | None = None) -> str:
        items = self.processes if items is None else items
        shown = items if keep is None else items[:keep]
        more = f" +{len(items) - len(shown)}" if len(shown) < len(items) else ""
        parts = [*self.notes, ", ".join(shown) + more] if shown or more else list(self.notes)
        return "; ".join(p for p in parts if p) or "–"

    def cut(self, room: int) -> str:
        """As many processes as fit in ``room``, then ``+N`` for the rest; then the users alone (``alice,
        bob``: who is there matters more than how much each holds); at last a ``…``."""
        for items in (self.processes, self.users):
            for keep in range(len(items), 0, -1):
                if len(self.text(keep, items)) <= room:
                    return self.text(keep, items)
        return fit_line(self.text(1 if self.processes else None, self.users or None), room)


def _last(gpu: Gpu, compact: bool) -> Last:
    notes = tuple(text for text, _ in gpu_notes(gpu))
    procs = _processes(gpu, compact)
    if notes and procs == ["?"]:
        procs = ["processes ?"]
    users = tuple(dict.fromkeys(p.user or "?" for p in gpu.processes)) if gpu.processes_known else ()
    return Last(notes, tuple(procs), users)


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
#: The holders' column, in the full and the compact layout (where its four columns go to the holder).
HELD_BY = ("RESERVED BY", "HELD BY")


def holder_column(table: Table) -> int | None:
    """Where the holders' column is in ``table``, if it has one."""
    return next((c for c, name in enumerate(table.header) if name in HELD_BY), None)


def _holder(reserved: Mapping[str, str | Held], uuid: str, compact: bool) -> str:
    held = reserved.get(uuid)
    if isinstance(held, Held):
        return held.short if compact else held.full
    return held or "–"


def _build(machine: Machine, reserved: Mapping[str, str | Held], compact: bool,
           wide: bool) -> tuple[Table, list[Last]]:
    held = bool(reserved)
    header = ["GPU", "NAME", "FREE", "USED/TOTAL" if compact else "MEMORY USED/TOTAL", "UTIL", "TEMP",
              *(WIDE_HEADER if wide else ()), *([HELD_BY[compact]] if held else []), "PROCESSES"]
    rows: list[tuple[str, ...]] = []
    kinds: list[str] = []
    gpus: list[Gpu] = []
    lasts: list[Last] = []
    blank_wide = [""] * len(WIDE_HEADER) if wide else []
    for g in machine.gpus:
        name = short_name(g.name) if compact else g.name
        holder = [_holder(reserved, g.uuid, compact)] if held else []
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
                         "", "", *blank_wide, *([_holder(reserved, m.uuid, compact)] if held else [])))
            lasts.append(Last((m.uuid,)))
            kinds.append("mig")
            gpus.append(g)
    joined = tuple((*row, last.text()) for row, last in zip(rows, lasts))
    table = Table(tuple(header), joined, tuple(kinds), tuple(gpus))
    if wide and compact:  # a --wide column nothing here can fill (no fan on SXM boards) only takes room
        empty = {c for c, name in enumerate(header) if name in WIDE_HEADER and all(r[c] in ("–", "") for r in joined)}
        table = _without(table, empty)
    return table, lasts


def _without(table: Table, columns: set[int]) -> Table:
    return Table(tuple(h for c, h in enumerate(table.header) if c not in columns),
                 tuple(tuple(x for c, x in enumerate(r) if c not in columns) for r in table.rows), table.kinds,
                 table.gpus)


def fit_line(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut shown by ``…``."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…" if width > 0 else ""


def _with_column(table: Table, column: int, cells: Sequence[str]) -> Table:
    rows = tuple((*r[:column], c, *r[column + 1:]) for r, c in zip(table.rows, cells))
    return Table(table.header, rows, table.kinds, table.gpus)




def layout(machine: Machine, reserved: Mapping[str, str | Held] | None = None, width: int | None = None,
           wide: bool = False) -> Table:
    """The ``ls`` table for ``width`` columns (None: no limit, the full layout). ``reserved``: who holds
    each GPU (uuid -> :class:`Held`, or the text to show as it is)."""
    reserved = reserved or {}
    table, lasts = _build(machine, reserved, compact=False, wide=wide)
    if width is None or table.width() <= width:
        return table
    table, lasts = _build(machine, reserved, compact=True, wide=wide)
    if table.width() <= width:
        return table
    fitted = _cut(table, lasts, width, wide)
    if fitted.width() <= width or wide:  # --wide asked for its columns: its lines are cut at the right instead
        return fitted
    return _narrow(table, lasts, width)


def _cut(table: Table, lasts: Sequence[Last], width: int, wide: bool = False) -> Table:
    """``table`` with its holders' and PROCESSES cells cut to what ``width`` leaves them (TEMP goes first
    when there is a holder to show, but not for ``--wide``)."""
    last = len(table.header) - 1
    col = holder_column(table)
    if col is not None and not wide and "TEMP" in table.header:  # who holds a GPU says more than its temperature (in the full layout)
        table = _without(table, {table.header.index("TEMP")})
        last, col = last - 1, col - 1
        if table.width() <= width:
            return table
    if col is not None:  # the holder ("alice train.py") first; the processes get the rest, down to their users
        widths = table.widths()
        left = width - (table.width() - widths[col] - widths[last])
        users = max(len(table.header[last]), *(len(cell.text(1, cell.users or None)) for cell in lasts))
        room = max(MIN_CUT, min(24, widths[col], left - users))
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
            table = _drop(table, table.header.index(name))
            fitted = _cut(table, lasts, width)
            if fitted.width() <= width:
                return fitted
    table = _drop(table, len(table.header) - 1)
    if table.header[-1] in HELD_BY:
        last = len(table.header) - 1
        room = width - (sum(table.widths()[:last]) + GAP * last)
        if room >= len(table.header[-1]):
            return _with_column(table, last, [fit_line(r[last], room) for r in table.rows])
        table = _drop(table, last)
    return table


def _drop(table: Table, col: int) -> Table:
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
