#!/usr/bin/env python3
"""gpulaunch's benchmarks: whole-process wall-clock medians, side by side, in one run.

    python benchmarks/run.py [--repeat N] [--json FILE] [--compare OLD.json]

Every row is a whole process started with ``subprocess`` and timed on the wall clock, because a
launcher's cost is what the user waits for: interpreter start-up, imports, reading the machine,
selection and the exec. The commands of one group run interleaved (round robin), so load from other
work on the machine falls on all of them alike and the ratios stay meaningful even when the
absolute numbers drift. Medians are reported, with the 25th-75th percentile range as the noise.

Groups:
  launch     gpulaunch --snapshot dgx-h100 --auto 2 -q -- true, against `python -c pass` (the
             interpreter's floor) and `python -c "import nvitop"` (the peer's import floor)
  ls         gpulaunch --snapshot dgx-h100 ls, plain, on a terminal (rich), and --json
  gpu        on a machine with the NVIDIA driver: gpulaunch ls vs nvidia-smi vs gpustat, and
             gpulaunch --auto 1 -q -- true vs nvisel -n 1
  nvml       seconds per NVML query kind, as `gpulaunch -v ls --topo` reports them
  selection  selection time on synthetic 8-64 GPU machines (benchmarks/selection.py)
  queue      24 concurrent `--auto 1 --wait` launches of 1 s jobs on 8 GPUs: wall time and GPU
             occupancy, started cold and all queued first (benchmarks/queue_burst.py; target ≥ 80 %)

The JSON (``--json FILE``) holds the commit, Python version, machine and load average, every
row's samples and the targets, so two runs can be compared (``--compare OLD.json``). Standard
library only; it measures the gpulaunch installed beside the running interpreter (the console
script), so run it with the interpreter of the environment you want to measure.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import inspect
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = "dgx-h100"  # the 8-GPU example machine the issue asks for
SCHEMA = 1
NO_DRIVER = "skipped: no NVIDIA driver"


@dataclass
class Bench:
    """One command to time. ``tty``: stdout is a pseudo-terminal (what a user typing it sees)."""

    key: str
    label: str
    argv: list[str]
    tty: bool = False
    samples: list[float] = field(default_factory=list)  # wall-clock seconds
    cpu: list[float] = field(default_factory=list)  # the child's user+system CPU seconds
    error: str | None = None
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None and bool(self.samples)

    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "label": self.label, "argv": self.argv, "tty": self.tty}
        if self.skipped:
            out["status"] = self.skipped
        elif self.error:
            out["status"] = f"failed: {self.error}"
        else:
            ms = sorted(s * 1000 for s in self.samples)
            q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
            out.update(status="ok", runs=len(ms), median_ms=round(statistics.median(ms), 3),
                       p25_ms=round(q[0], 3), p75_ms=round(q[2], 3), min_ms=round(ms[0], 3),
                       max_ms=round(ms[-1], 3), cpu_median_ms=round(statistics.median(self.cpu) * 1000, 3),
                       samples_ms=[round(s, 3) for s in ms])
        return out


# ---------------------------------------------------------------------------------------------
# Running processes


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GPULAUNCH_SNAPSHOT", None)  # the GPU rows must read NVML, the snapshot rows say so
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    # An installed package has its bytecode cached (pip compiles it); without the cache every run
    # would recompile gpu_launch from source (~10 ms) while nvitop's cache, made by pip, is used.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass  # EIO: the child closed the terminal


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_once(bench: Bench, env: dict[str, str], capture: bool = False) -> tuple[float, int, str, float]:
    """Run ``bench`` once: (wall seconds, exit code, stderr if ``capture``, the child's CPU seconds)."""
    cpu_before = _children_cpu()
    if bench.tty:
        master, slave = os.openpty()
        reader = threading.Thread(target=_drain, args=(master,), daemon=True)
        reader.start()
        try:
            start = time.perf_counter()
            proc = subprocess.run(bench.argv, stdin=subprocess.DEVNULL, stdout=slave,
                                  stderr=subprocess.PIPE if capture else subprocess.DEVNULL, env=env, cwd=REPO)
            elapsed = time.perf_counter() - start
        finally:
            os.close(slave)
            reader.join(timeout=5)
            os.close(master)
    else:
        start = time.perf_counter()
        proc = subprocess.run(bench.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE if capture else subprocess.DEVNULL, env=env, cwd=REPO)
        elapsed = time.perf_counter() - start
    err = proc.stderr.decode("utf-8", "replace") if capture and proc.stderr else ""
    return elapsed, proc.returncode, err, _children_cpu() - cpu_before


def measure(benches: Sequence[Bench], repeat: int, warmup: int = 2) -> None:
    """Time every runnable bench ``repeat`` times, interleaved; a failing command is marked, not timed."""
    env = _child_env()
    live = [b for b in benches if b.skipped is None]
    for b in live:
        try:
            _, code, err, _ = _run_once(b, env, capture=True)
        except OSError as exc:
            b.error = str(exc)
            continue
        if code != 0:
            last = err.strip().splitlines()[-1] if err.strip() else ""
            b.error = f"exit {code}" + (f": {last}" if last else "")
    live = [b for b in live if b.error is None]
    for _ in range(max(warmup - 1, 0)):  # the check above was the first warm-up run
        for b in live:
            _run_once(b, env)
    for _ in range(repeat):
        for b in live:
            elapsed, _, _, cpu = _run_once(b, env)
            b.samples.append(elapsed)
            b.cpu.append(cpu)


# ---------------------------------------------------------------------------------------------
# What to run


def _script(name: str) -> str | None:
    """A console script beside this interpreter (its environment), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def gpulaunch_argv(use_module: bool) -> list[str]:
    script = None if use_module else _script("gpulaunch")
    return [script] if script else [sys.executable, "-m", "gpu_launch"]


def measured_package() -> str | None:
    """Where the measured interpreter imports gpu_launch from (to warn about another checkout)."""
    try:
        proc = subprocess.run([sys.executable, "-c", "import gpu_launch, os; print(os.path.dirname(gpu_launch.__file__))"],
                              capture_output=True, text=True, cwd="/", env=_child_env(), timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None


def nvidia_driver() -> bool:
    """True when the NVML library of a driver loads (the GPU rows need it)."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def nvitop_installed() -> bool:
    proc = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(bool(u.find_spec('nvitop')))"],
                          capture_output=True, text=True, env=_child_env())
    return proc.stdout.strip() == "True"


def launch_group(gl: list[str]) -> list[Bench]:
    py = sys.executable
    nvitop = Bench("nvitop_import", 'python -c "import nvitop"', [py, "-c", "import nvitop"])
    if not nvitop_installed():
        nvitop.skipped = "skipped: nvitop not installed (pip install nvitop)"
    return [
        Bench("python_floor", "python -c pass", [py, "-c", "pass"]),
        nvitop,
        Bench("launch_snapshot", f"gpulaunch --snapshot {SNAPSHOT} --auto 2 -q -- true",
              [*gl, "--snapshot", SNAPSHOT, "--auto", "2", "-q", "--", "true"]),
        Bench("launch_snapshot_gpus", f"gpulaunch --snapshot {SNAPSHOT} --gpus 0,1 -q -- true",
              [*gl, "--snapshot", SNAPSHOT, "--gpus", "0,1", "-q", "--", "true"]),
        Bench("launch_snapshot_mapping", f"gpulaunch --snapshot {SNAPSHOT} --auto 2 -- true (table)",
              [*gl, "--snapshot", SNAPSHOT, "--auto", "2", "--", "true"]),
    ]


def ls_group(gl: list[str]) -> list[Bench]:
    return [
        Bench("ls_snapshot", f"gpulaunch --snapshot {SNAPSHOT} ls (pipe: plain text)", [*gl, "--snapshot", SNAPSHOT, "ls"]),
        Bench("ls_snapshot_tty", f"gpulaunch --snapshot {SNAPSHOT} ls (terminal: rich)",
              [*gl, "--snapshot", SNAPSHOT, "ls"], tty=True),
        Bench("ls_snapshot_json", f"gpulaunch --snapshot {SNAPSHOT} ls --json", [*gl, "--snapshot", SNAPSHOT, "ls", "--json"]),
    ]


def gpu_group(gl: list[str], driver: bool) -> list[Bench]:
    def tool(key: str, label: str, name: str, args: list[str], how: str) -> Bench:
        path = _script(name)
        bench = Bench(key, label, [path or name, *args])
        if not driver:
            bench.skipped = NO_DRIVER
        elif path is None:
            bench.skipped = f"skipped: {name} not installed ({how})"
        return bench

    benches = [
        Bench("gpu_ls", "gpulaunch ls", [*gl, "ls"]),
        Bench("gpu_ls_tty", "gpulaunch ls (terminal: rich)", [*gl, "ls"], tty=True),
        tool("nvidia_smi", "nvidia-smi", "nvidia-smi", [], "it comes with the NVIDIA driver"),
        tool("gpustat", "gpustat", "gpustat", [], "pip install gpustat"),
        Bench("gpu_launch_auto1", "gpulaunch --auto 1 -q -- true", [*gl, "--auto", "1", "-q", "--", "true"]),
        Bench("gpu_launch_gpus0", "gpulaunch --gpus 0 -q -- true", [*gl, "--gpus", "0", "-q", "--", "true"]),
        tool("nvisel", "nvisel -n 1", "nvisel", ["-n", "1"], "pip install nvitop"),
    ]
    if not driver:
        for b in benches:
            b.skipped = NO_DRIVER
    return benches


_READ_RE = re.compile(r"read nvml in ([\d.]+) ms(?: \((.*)\))?")


def nvml_timings(gl: list[str], repeat: int) -> dict[str, Any]:
    """Median ms per NVML query kind over ``repeat`` runs of ``gpulaunch -v ls --topo``."""
    per_kind: dict[str, list[float]] = {}
    totals: list[float] = []
    env = _child_env()
    for _ in range(repeat):
        proc = subprocess.run([*gl, "-v", "ls", "--topo"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        match = _READ_RE.search(proc.stderr)
        if proc.returncode != 0 or match is None:
            last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            return {"status": f"failed: {last}"}
        totals.append(float(match.group(1)))
        for part in (match.group(2) or "").split("  "):
            name, _, value = part.strip().rpartition(" ms")[0].rpartition(" ")
            if name:
                per_kind.setdefault(name, []).append(float(value))
    return {"status": "ok", "runs": repeat, "total_ms": round(statistics.median(totals), 3),
            "kinds_ms": {k: round(statistics.median(v), 3) for k, v in per_kind.items()}}


_IMPORTTIME_RE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)\s*$")


def _attribute(stderr: str) -> dict[str, float]:
    """ms per import after start-up: gpu_launch modules by their own time, anything else they import
    (stdlib, third party) by its cumulative time, so the entries add up to the whole."""
    pending: dict[int, list[tuple[str, int, int, list[Any]]]] = {}
    for line in stderr.splitlines():
        match = _IMPORTTIME_RE.match(line)
        if match is None:
            continue
        own, cumulative, indent, name = match.groups()
        depth = len(indent) // 2
        node = (name, int(own), int(cumulative), pending.pop(depth + 1, []))
        if depth == 0 and name == "site":
            pending.clear()  # the interpreter's own start-up (and .pth files) came before
            continue
        pending.setdefault(depth, []).append(node)
    out: dict[str, float] = {}

    def walk(nodes: list[Any]) -> None:
        for name, own, cumulative, children in nodes:
            if name == "gpu_launch" or name.startswith("gpu_launch."):
                out[name] = out.get(name, 0.0) + own / 1000
                walk(children)
            else:
                out[name] = out.get(name, 0.0) + cumulative / 1000

    walk(pending.get(0, []))
    return out


def import_breakdown(gl: list[str], repeat: int) -> dict[str, Any]:
    """Where the quiet launch's import time goes: median ms per module (``-X importtime``)."""
    argv = [sys.executable, "-X", "importtime", *(gl[1:] if len(gl) > 1 else gl),
            "--snapshot", SNAPSHOT, "--auto", "2", "-q", "--", "true"]
    per_module: dict[str, list[float]] = {}
    for _ in range(repeat):
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, env=_child_env(), cwd=REPO)
        if proc.returncode != 0:
            return {"status": f"failed: exit {proc.returncode}"}
        for name, ms in _attribute(proc.stderr).items():
            per_module.setdefault(name, []).append(ms)
    medians = {name: round(statistics.median(v), 3) for name, v in per_module.items()}
    return {"status": "ok", "runs": repeat, "total_ms": round(sum(medians.values()), 3),
            "modules_ms": dict(sorted(medians.items(), key=lambda kv: -kv[1]))}


def selection_rows(repeat: int) -> tuple[str, list[dict[str, Any]]]:
    """Rows from benchmarks/selection.py (another issue's module), or why there are none.

    Its ``repeats`` (runs per case), where it takes one, is capped at ``--repeat``, so that a
    quick ``--repeat 1`` run is quick there too.
    """
    for path in (str(REPO), str(REPO / "benchmarks")):
        if path not in sys.path:
            sys.path.insert(0, path)
    if not (REPO / "benchmarks" / "selection.py").exists():
        return "pending (benchmarks/selection.py does not exist yet)", []
    try:
        from selection import run_selection_benchmark  # type: ignore[import-not-found]
    except ImportError as exc:
        return f"failed: {exc}", []
    kwargs: dict[str, Any] = {}
    try:
        default = inspect.signature(run_selection_benchmark).parameters["repeats"].default
        if isinstance(default, int):
            kwargs["repeats"] = min(repeat, default)
    except (KeyError, TypeError, ValueError):
        pass  # no such parameter: its own default
    try:
        rows = list(run_selection_benchmark(**kwargs))
    except Exception as exc:  # another module's failure must not lose this run's other numbers
        return f"failed: {type(exc).__name__}: {exc}", []
    return "ok", rows


def queue_burst() -> dict[str, Any]:
    """One burst of benchmarks/queue_burst.py (24 waiters × 1 s jobs on 8 GPUs), or why there is none."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import queue_burst as qb  # type: ignore[import-not-found]

        cold, queued = qb.run_burst(), qb.run_burst(queued=True)
    except Exception as exc:  # its failure must not lose this run's other numbers
        return {"status": f"failed: {type(exc).__name__}: {exc}"}
    return {"status": "ok", "summary": qb.summary(cold) + "\n  " + qb.summary(queued), "cold": cold, "queued": queued}


# ---------------------------------------------------------------------------------------------
# Results


def _by_key(benches: Sequence[Bench]) -> dict[str, Bench]:
    return {b.key: b for b in benches}


def _ratio(b: dict[str, Bench], num: str, den: str) -> float | None:
    if num in b and den in b and b[num].ok and b[den].ok:
        return b[num].median_ms() / b[den].median_ms()
    return None


def ratios(benches: Sequence[Bench]) -> dict[str, float | None]:
    b = _by_key(benches)
    out = {
        "launch_vs_nvitop_import": _ratio(b, "launch_snapshot", "nvitop_import"),
        "launch_vs_python_floor": _ratio(b, "launch_snapshot", "python_floor"),
        "gpu_ls_vs_nvidia_smi": _ratio(b, "gpu_ls", "nvidia_smi"),
        "gpu_ls_vs_gpustat": _ratio(b, "gpu_ls", "gpustat"),
        "gpu_launch_auto1_vs_nvisel": _ratio(b, "gpu_launch_auto1", "nvisel"),
    }
    if b["launch_snapshot"].ok and b["python_floor"].ok:
        out["launch_over_floor_ms"] = b["launch_snapshot"].median_ms() - b["python_floor"].median_ms()
    if b["nvitop_import"].ok and b["python_floor"].ok:
        out["nvitop_import_over_floor_ms"] = b["nvitop_import"].median_ms() - b["python_floor"].median_ms()
    return {k: (round(v, 3) if v is not None else None) for k, v in out.items()}


def targets(r: dict[str, float | None], sel: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and whether it is met (None: not measured)."""
    def row(name: str, value: float | None, limit: float, le: bool = True) -> dict[str, Any]:
        met = None if value is None else (value <= limit if le else value < limit)
        return {"target": name, "value": value, "limit": limit, "met": met}

    def worst(gpus: int) -> float | None:
        times = [float(x["median_ms"]) for x in sel if x.get("gpus") == gpus and x.get("median_ms") is not None]
        return max(times) if times else None

    small = [x for x in sel if isinstance(x.get("gpus"), int) and x["gpus"] <= 16]
    exact = None if not small else all(bool(x.get("exact")) for x in small)
    return [
        row("launch ≤ 1.0× nvitop import", r["launch_vs_nvitop_import"], 1.0),
        row("launch ≤ 0.6× nvitop import (stretch)", r["launch_vs_nvitop_import"], 0.6),
        row("selection < 5 ms at 8 GPUs (worst topology)", worst(8), 5.0, le=False),
        row("selection < 100 ms at 64 GPUs (worst topology)", worst(64), 100.0, le=False),
        {"target": "selection exact up to 16 GPUs", "value": exact, "limit": None, "met": exact},
        row("GPU: ls faster than gpustat", r["gpu_ls_vs_gpustat"], 1.0, le=False),
        row("GPU: ls no slower than nvidia-smi", r["gpu_ls_vs_nvidia_smi"], 1.0),
        row("GPU: --auto 1 launch faster than nvisel -n 1", r["gpu_launch_auto1_vs_nvisel"], 1.0, le=False),
    ]


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def environment_info(gl: list[str], driver: bool, repeat: int) -> dict[str, Any]:
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": None if dirty is None else bool(dirty),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "gpulaunch": gl,
        "gpu_launch_package": measured_package(),
        "machine": {"platform": platform.platform(), "arch": platform.machine(), "cpus": os.cpu_count(),
                    "node": platform.node(), "nvidia_driver": driver},
        "load_average_start": list(os.getloadavg()),
        "parent_had_PYTHONDONTWRITEBYTECODE": "PYTHONDONTWRITEBYTECODE" in os.environ,
        "repeat": repeat,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------
# Printing


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
    b = {k: v for g in groups.values() for k, v in _by_key(g).items()}
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=30, help="timed runs per command (default 30)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument("--compare", metavar="OLD", help="print the change against an earlier --json FILE")
    ap.add_argument("--module", action="store_true", help="run `python -m gpu_launch` instead of the gpulaunch script")
    ap.add_argument("--only", action="append", choices=("launch", "ls", "gpu", "nvml", "selection", "queue"),
                    help="run only these groups (repeatable)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `run.py | head` ends quietly
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    wanted: Callable[[str], bool] = lambda g: not args.only or g in args.only  # noqa: E731
    gl = gpulaunch_argv(args.module)
    driver = nvidia_driver()
    info = environment_info(gl, driver, args.repeat)
    started = time.perf_counter()

    groups: dict[str, list[Bench]] = {}
    all_groups = {"launch": lambda: launch_group(gl), "ls": lambda: ls_group(gl), "gpu": lambda: gpu_group(gl, driver)}
    for name, make in all_groups.items():
        groups[name] = make()
        if not wanted(name):
            for b in groups[name]:
                b.skipped = "skipped: not selected (--only)"
        measure(groups[name], args.repeat)
    benches = [b for g in groups.values() for b in g]
    nvml = ({"status": NO_DRIVER} if not driver else nvml_timings(gl, min(args.repeat, 10))) if wanted("nvml") \
        else {"status": "skipped: not selected (--only)"}
    sel_status, sel = selection_rows(args.repeat) if wanted("selection") else ("skipped: not selected (--only)", [])
    imports = import_breakdown(gl, min(args.repeat, 10)) if wanted("launch") \
        else {"status": "skipped: not selected (--only)"}
    queue = queue_burst() if wanted("queue") else {"status": "skipped: not selected (--only)"}
    r = ratios(benches)
    tgts = targets(r, sel)
    for mode in ("queued", "cold"):
        occupancy = queue.get(mode, {}).get("occupancy")
        tgts.append({"target": f"queue burst ({mode}): GPU occupancy ≥ 80 %", "value": occupancy, "limit": 0.8,
                     "met": None if occupancy is None else occupancy >= 0.8})
    info["seconds"] = round(time.perf_counter() - started, 1)
    info["load_average_end"] = list(os.getloadavg())
    doc = {"schema": SCHEMA, "environment": info, "rows": [b.as_json() for b in benches], "ratios": r,
           "nvml": nvml, "imports": imports, "selection": {"status": sel_status, "rows": sel},
           "targets": tgts, "queue": queue}
    text = report(info, groups, r, nvml, imports, sel_status, sel, tgts)
    burst = "\nQueue burst (benchmarks/queue_burst.py)\n  " + queue.get("summary", queue.get("status", "")) + "\n"
    sys.stdout.write(text.replace("\nTargets\n", burst + "\nTargets\n", 1))
    if args.compare:
        try:
            with open(args.compare, encoding="utf-8") as fh:
                sys.stdout.write(compare(json.load(fh), doc))
        except (OSError, ValueError) as exc:
            print(f"run.py: cannot compare with {args.compare}: {exc}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"wrote {args.json} ({info['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
