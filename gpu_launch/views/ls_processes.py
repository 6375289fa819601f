"""``ls --processes``: every compute process on the GPUs shown, one line each, with its command.

Like ``gpustat -c`` or nvitop's process panel: GPU, pid, user, GPU memory and the command line, under
the GPU table. The command (another user's text, escaped where it was read) takes the room the
width leaves and is cut with ``…``; in a pipe (no width) it is whole.
"""

from __future__ import annotations

from gpu_launch.hardware.model import Machine
from gpu_launch.base.units import fmt_mib

__all__ = ["text", "HEADER"]

HEADER = ("GPU", "PID", "USER", "GPU MEMORY", "COMMAND")
GAP = "  "


def text(machine: Machine, width: int | None = None) -> str:
    """The process list for ``width`` columns (None: no limit)."""
    rows: list[tuple[str, ...]] = []
    unknown: list[str] = []
    for gpu in machine.gpus:
        if not gpu.available:
            continue
        if not gpu.processes_known:
            unknown.append(str(gpu.index))
            continue
        for p in gpu.processes:
            rows.append((str(gpu.index), str(p.pid), p.user or "?",
                         fmt_mib(p.used_memory_mib) if p.used_memory_mib is not None else "–",
                         p.command or ("?" if p.user is None else "–")))
    lines: list[str] = []
    if rows:
        widths = [max(len(r[c]) for r in (HEADER, *rows)) for c in range(len(HEADER) - 1)]
        for row in (HEADER, *rows):
            cells = [row[c].rjust(widths[c]) if HEADER[c] == "GPU MEMORY" else row[c].ljust(widths[c])
                     for c in range(len(widths))]
            line = GAP.join(cells) + GAP + row[-1]
            lines.append(_cut(line, width))
    else:
        lines.append("no compute processes" + (" on the GPUs NVML could list" if unknown else ""))
    if unknown:
        lines.append(_cut(f"GPU {', '.join(unknown)}: processes unknown (NVML could not list them)", width))
    return "\n".join(lines) + "\n"


def _cut(line: str, width: int | None) -> str:
    if width is None or len(line) <= width:
        return line
    return line[: max(width - 1, 0)] + "…"
