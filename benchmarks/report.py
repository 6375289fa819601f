"""The text benchmarks/run.py prints: the table of rows, the breakdowns, the targets, and the
comparison with an earlier run's JSON."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Any

from timing import REPO, Bench, by_key


def _fmt_row(b: Bench, note: str = "") -> str:
    if not b.ok:
        return f"  {b.label:<58} {b.skipped or 'failed: ' + str(b.error)}"
    ms = sorted(s * 1000 for s in b.samples)
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    cpu = statistics.median(b.cpu) * 1000
    return f"  {b.label:<58} {statistics.median(ms):7.1f} ms  [{q[0]:6.1f} – {q[2]:6.1f}]  cpu {cpu:6.1f}  {note}".rstrip()


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}×"


def report(info: dict[str, Any], groups: dict[str, list[Bench]], r: dict[str, float | None],
           nvml: dict[str, Any], imports: dict[str, Any], sel_status: str, sel: list[dict[str, Any]],
           tgts: list[dict[str, Any]]) -> str:
    lines = [
        f"gpulaunch benchmarks  commit {(info['commit'] or '?')[:10]}{' (dirty)' if info['dirty'] else ''}"
        f"  Python {info['python']}  {info['machine']['arch']}, {info['machine']['cpus']} CPUs"
        f"  load {info['load_average_start'][0]:.2f} → {info['load_average_end'][0]:.2f}",
        f"median wall ms of {info['repeat']} whole-process runs each (interleaved) [25th – 75th percentile];"
        " cpu: median user+system ms (less disturbed by other load)",
        f"gpulaunch = {' '.join(info['gpulaunch'])}",
    ]
    pkg = info.get("gpu_launch_package")
    if pkg and Path(pkg).resolve() != (REPO / "gpu_launch").resolve():
        lines.append(f"WARNING: that gpulaunch imports {pkg}, not this checkout's gpu_launch")
    b = {k: v for g in groups.values() for k, v in by_key(g).items()}
    notes = {
        "launch_snapshot": f"{_x(r['launch_vs_nvitop_import'])} nvitop import, {_x(r['launch_vs_python_floor'])} floor",
        "gpu_ls": f"{_x(r['gpu_ls_vs_nvidia_smi'])} nvidia-smi, {_x(r['gpu_ls_vs_gpustat'])} gpustat",
        "gpu_launch_auto1": f"{_x(r['gpu_launch_auto1_vs_nvisel'])} nvisel",
    }
    titles = {"launch": "Launch overhead (snapshot, no GPU needed)", "ls": "ls (snapshot)",
              "gpu": "On this machine's GPUs (NVML)"}
    for name, benches in groups.items():
        lines += ["", titles[name]]
        reasons = {x.skipped for x in benches}
        if benches and len(reasons) == 1 and None not in reasons:  # the whole group, for one reason
            lines.append(f"  {reasons.pop()}")
            continue
        lines += [_fmt_row(x, notes.get(x.key, "")) for x in benches]
        if name == "launch" and r.get("launch_over_floor_ms") is not None:
            extra = f"  gpulaunch costs {r['launch_over_floor_ms']:.1f} ms over the interpreter's floor"
            if r.get("nvitop_import_over_floor_ms") is not None:
                extra += f"; importing nvitop costs {r['nvitop_import_over_floor_ms']:.1f} ms"
            lines.append(extra)
    lines += ["", "Imports of the quiet launch after start-up (-X importtime, median ms; gpu_launch.*"
                  " own time, what they import cumulative)"]
    if imports.get("status") != "ok":
        lines.append(f"  {imports.get('status')}")
    else:
        shown = [(name, ms) for name, ms in imports["modules_ms"].items() if ms >= 0.3]
        text = ", ".join(f"{name} {ms:.1f}" for name, ms in shown)
        lines += textwrap.wrap(text, 100, initial_indent="  ", subsequent_indent="  ")
        lines.append(f"  total {imports['total_ms']:.1f} ms (importtime's own overhead inflates these)")
    lines += ["", "NVML time per query kind (gpulaunch -v ls --topo, median)"]
    if nvml.get("status") != "ok":
        lines.append(f"  {nvml.get('status')}")
    else:
        lines.append(f"  {'total (read_machine)':<40} {nvml['total_ms']:8.2f} ms")
        lines += [f"  {kind:<40} {ms:8.2f} ms" for kind, ms in nvml["kinds_ms"].items()]
    lines += ["", "Selection on synthetic machines (benchmarks/selection.py)"]
    if sel_status != "ok":
        lines.append(f"  selection: {sel_status}")
    else:
        lines += _selection_summary(sel)
    lines += ["", "Targets"]
    for t in tgts:
        verdict = {True: "met", False: "NOT MET", None: "not measured"}[t["met"]]
        value = "" if t["value"] is None or isinstance(t["value"], bool) else f"  ({t['value']:.3g})"
        lines.append(f"  {t['target']:<50} {verdict}{value}")
    if b.get("python_floor") and b["python_floor"].error:
        lines.append("WARNING: the interpreter floor failed; ratios are missing")
    return "\n".join(lines) + "\n"


def _selection_summary(sel: list[dict[str, Any]]) -> list[str]:
    """One line per machine size: the slowest case (all rows are in the JSON), the typical one, exactness."""
    lines = [f"  {'GPUs':>4}  {'slowest case':<40} {'median of all':>14}  exact"]
    for gpus in sorted({x["gpus"] for x in sel if isinstance(x.get("gpus"), int)}):
        rows = [x for x in sel if x.get("gpus") == gpus and isinstance(x.get("median_ms"), (int, float))]
        if not rows:
            continue
        worst = max(rows, key=lambda x: x["median_ms"])
        exact = {bool(x.get("exact")) for x in rows}
        where = f"{worst['median_ms']:.2f} ms ({worst.get('topology', '?')}, n={worst.get('n', '?')})"
        typical = statistics.median(x["median_ms"] for x in rows)
        lines.append(f"  {gpus:>4}  {where:<40} {typical:>11.2f} ms  "
                     f"{'all' if exact == {True} else 'none' if exact == {False} else 'some'} ({len(rows)} cases)")
    return lines


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Median per row, then and now, and each as a multiple of its own run's interpreter floor
    (which cancels most of the drift when the machine was busier in one of the two runs)."""
    def rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {row["key"]: row for row in doc.get("rows", []) if row.get("status") == "ok"}

    def floor_multiple(row: dict[str, Any], doc_rows: dict[str, dict[str, Any]]) -> str:
        floor = doc_rows.get("python_floor")
        return f"{row['median_ms'] / floor['median_ms']:.2f}" if floor else "?"

    then, now = rows(old), rows(new)
    lines = ["", f"Compared with {str(old.get('environment', {}).get('commit') or '?')[:10]} "
                 f"(run {old.get('environment', {}).get('timestamp', '?')}); × = multiple of that run's python -c pass"]
    for key, row in now.items():
        before = then.get(key)
        if before is None:
            continue
        change = (row["median_ms"] / before["median_ms"] - 1) * 100
        lines.append(f"  {row['label']:<58} {before['median_ms']:7.1f} → {row['median_ms']:7.1f} ms ({change:+4.0f}%)"
                     f"  ×{floor_multiple(before, then)} → ×{floor_multiple(row, now)}")
    return "\n".join(lines) + "\n"

