"""How long `--auto N` takes to choose, on synthetic 8, 16, 32 and 64-GPU machines.

Run ``python benchmarks/selection.py`` for a table of median milliseconds per machine size, topology
and N, or ``python benchmarks/selection.py --json FILE`` to also write the rows as JSON.
``benchmarks/run.py`` calls :func:`run_selection_benchmark`.

What is timed is :func:`gpu_launch.choose.select.choose_auto` on an in-memory snapshot: eligibility, the
link matrix lookups and the ranking, which is everything `--auto` adds between reading the machine
and exec. The machines are built here, not read from files:

* ``nvswitch``: every pair NV18, two NUMA nodes (DGX/HGX H100-like, scaled up);
* ``cube-mesh``: DGX-1 hybrid cube-mesh islands of 8 (NV1/NV2), SYS between islands and sockets;
* ``pcie``: dual-socket PCIe, PIX pairs, PXB quads, NODE within a socket, SYS across;
* ``mixed``: two GPU models, NVLink bridge pairs (NV4), PHB within a socket, SYS across.

Loads are random but seeded (so runs compare): most GPUs idle, some partly used, a few busy.
Targets (issue 8): under 5 ms for 8 GPUs, under 100 ms for 64.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_launch.hardware.model import Gpu, GpuProcess, Machine  # noqa: E402
from gpu_launch.choose.ranking import EXACT_LIMIT  # noqa: E402
from gpu_launch.choose.select import Constraints, choose_auto  # noqa: E402

__all__ = ["SIZES", "COUNTS", "LOADS", "TOPOLOGIES", "synthetic_machine", "run_selection_benchmark", "main"]

SIZES = (8, 16, 32, 64)
COUNTS = (1, 2, 4, 5, 8)
LOADS = ("idle", "loaded")
_TOTAL_MIB = 81559
# The DGX-1 hybrid cube-mesh inside one island of 8 (`nvidia-smi topo -m` of a DGX-1V).
_CUBE = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
         (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}


def _socket(i: int, m: int) -> int:
    return 0 if i < m // 2 else 1


def _nvswitch(i: int, j: int, m: int) -> str:
    return "NV18"


def _cube_mesh(i: int, j: int, m: int) -> str:
    if i // 8 == j // 8:
        a, b = sorted((i % 8, j % 8))
        if (a, b) in _CUBE:
            return f"NV{_CUBE[a, b]}"
    return "SYS"


def _pcie(i: int, j: int, m: int) -> str:
    if i // 2 == j // 2:
        return "PIX"
    if i // 4 == j // 4:
        return "PXB"
    return "NODE" if _socket(i, m) == _socket(j, m) else "SYS"


def _mixed(i: int, j: int, m: int) -> str:
    if i // 2 == j // 2:
        return "NV4"
    return "PHB" if _socket(i, m) == _socket(j, m) else "SYS"


TOPOLOGIES: dict[str, Callable[[int, int, int], str]] = {
    "nvswitch": _nvswitch, "cube-mesh": _cube_mesh, "pcie": _pcie, "mixed": _mixed,
}


def _numa(topology: str, i: int, m: int) -> int:
    if topology == "cube-mesh":  # each island has two sockets' worth: GPUs 0-3 and 4-7
        return (i // 8) * 2 + (i % 8) // 4
    return _socket(i, m)


def synthetic_machine(topology: str, m: int, seed: int = 0, load: str = "loaded") -> Machine:
    """An ``m``-GPU machine of ``topology``: ``load`` "idle" (every GPU idle, the hardest case for
    the search, since availability then rules nothing out) or "loaded" (seeded random loads)."""
    rng = random.Random(f"{topology}-{m}-{seed}-{load}")
    link = TOPOLOGIES[topology]
    gpus = []
    for i in range(m):
        roll = rng.random() if load == "loaded" else 0.0
        if roll < 0.6:  # idle: a few MiB used by the driver
            used, util, procs = rng.randint(3, 600), 0, ()
        elif roll < 0.85:  # partly used: a process, little compute
            used, util = rng.randint(2000, 30000), rng.randint(0, 40)
            procs = (GpuProcess(10000 + i, used - 500, "someone"),)
        else:  # busy
            used, util = rng.randint(40000, 80000), rng.randint(60, 100)
            procs = (GpuProcess(20000 + i, used - 500, "someone-else"),)
        name = "NVIDIA H100 80GB HBM3"
        if topology == "mixed" and i % 4 == 3:
            name = "NVIDIA A100-SXM4-80GB"
        gpus.append(Gpu(index=i, uuid=f"GPU-{topology}-{m}-{i:04d}", name=name, pci_bus_id=f"00000000:{i:02X}:00.0",
                        memory_total_mib=_TOTAL_MIB, memory_used_mib=used, memory_free_mib=_TOTAL_MIB - used,
                        utilization_gpu=util, numa_node=_numa(topology, i, m), processes=procs))
    links = tuple(tuple("X" if i == j else link(min(i, j), max(i, j), m) for j in range(m)) for i in range(m))
    return Machine(gpus=tuple(gpus), links=links, source=f"synthetic {topology} {m}", nvswitch=topology == "nvswitch")


#: The clocks a run may use: wall time (what a user waits), or this process's CPU time, which other
#: load on a shared machine inflates far less (it still pays for cache and frequency effects).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def _time_once(machine: Machine, n: int, clock: Callable[[], float] = time.perf_counter) -> tuple[float, bool]:
    start = clock()
    selection = choose_auto(machine, n, Constraints())
    elapsed = (clock() - start) * 1000
    return elapsed, bool(getattr(selection.ranking, "exact", True))


def run_selection_benchmark(sizes: Sequence[int] = SIZES, counts: Sequence[int] = COUNTS,
                            repeats: int = 15, machines: int = 3, clock: str = "wall") -> list[dict[str, Any]]:
    """One row per (GPUs, N, topology): the median milliseconds of ``choose_auto`` and whether the
    search was exact. ``topology`` names the shape and the load (``pcie/idle``, ``pcie/loaded``);
    each row times ``repeats`` runs on each of ``machines`` seeded loadings."""
    rows: list[dict[str, Any]] = []
    for m in sizes:
        for topology in TOPOLOGIES:
            for load in LOADS:
                loaded = [synthetic_machine(topology, m, seed, load) for seed in range(machines)]
                for n in counts:
                    if n > m:
                        continue
                    times: list[float] = []
                    exact = True
                    for machine in loaded:
                        choose_auto(machine, n, Constraints())  # warm-up
                        for _ in range(repeats):
                            ms, was_exact = _time_once(machine, n, CLOCKS[clock])
                            times.append(ms)
                            exact = exact and was_exact
                    rows.append({"gpus": m, "n": n, "topology": f"{topology}/{load}",
                                 "median_ms": round(statistics.median(times), 3), "exact": exact})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    counts = sorted({r["n"] for r in rows})
    header = ["GPUs", "topology/load"] + [f"n={n}" for n in counts] + ["search"]
    lines = [header]
    for m in sorted({r["gpus"] for r in rows}):
        names = list(dict.fromkeys(r["topology"] for r in rows if r["gpus"] == m))
        for name in names:
            cells = {r["n"]: r for r in rows if r["gpus"] == m and r["topology"] == name}
            inexact = [str(n) for n, r in cells.items() if not r["exact"]]
            search = "exact" if not inexact else f"heuristic for n={','.join(inexact)}"
            lines.append([str(m), name] + [f"{cells[n]['median_ms']:.2f}" if n in cells else "–" for n in counts]
                         + [search])
        worst = max(r["median_ms"] for r in rows if r["gpus"] == m)
        lines.append([str(m), "slowest", f"{worst:.2f}"] + [""] * len(counts))
    widths = [max(len(row[c]) for row in lines) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per machine (default 15)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time (default) or this process's CPU time (steadier on a loaded machine)")
    args = parser.parse_args(argv)
    rows = run_selection_benchmark(repeats=args.repeats, clock=args.clock)
    print(f"median ms ({args.clock} clock) of choose_auto per N (exact search up to {EXACT_LIMIT} GPUs; "
          f"Python {sys.version.split()[0]})")
    print(_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
