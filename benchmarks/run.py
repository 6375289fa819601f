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

Beside it, paired round by round (the ratios of issue 21, with medians and spreads):
  launch_vs_nvitop.py  the quiet launch against `python -c "import nvitop"` (target ≤ 0.5×)
  nvml_path.py         quiet launches on NVML against minimal_nvml.py (import pynvml, init, each
                       GPU's memory; target ≤ 1.3×), e.g. on NVIDIA's mock NVML (LD_LIBRARY_PATH,
                       MOCK_NVML_CONFIG); it skips where no libnvidia-ml.so.1 loads
  plan_vs_launch.py    `gpulaunch plan` of a 70B model's headers (GGUF with its 128k-token vocabulary,
                       and 30 safetensors shards) against a dry-run launch (target ≤ 1.6× in CPU time)
  each_vs_simple.py    `gpulaunch each` against simple-gpu-scheduler on 48 short jobs (target ≤ 1.05×)

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
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however it is started

from breakdowns import SNAPSHOT, import_breakdown, nvml_timings  # noqa: E402
from report import compare, report  # noqa: E402
from timing import REPO, Bench, by_key, child_env, measure  # noqa: E402

SCHEMA = 1
NO_DRIVER = "skipped: no NVIDIA driver"


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
                              capture_output=True, text=True, cwd="/", env=child_env(), timeout=30)
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
                          capture_output=True, text=True, env=child_env())
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


def _ratio(b: dict[str, Bench], num: str, den: str) -> float | None:
    if num in b and den in b and b[num].ok and b[den].ok:
        return b[num].median_ms() / b[den].median_ms()
    return None


def ratios(benches: Sequence[Bench]) -> dict[str, float | None]:
    b = by_key(benches)
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
        row("launch ≤ 0.5× nvitop import (issue 21)", r["launch_vs_nvitop_import"], 0.5),
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