"""Where a launch's time goes, for benchmarks/run.py: NVML seconds per query kind (``gpulaunch -v``)
and the quiet launch's imports (``python -X importtime``), median ms per module."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from typing import Any

from timing import REPO, child_env

SNAPSHOT = "dgx-h100"  # the 8-GPU example machine the issue asks for


_READ_RE = re.compile(r"read nvml in ([\d.]+) ms(?: \((.*)\))?")


def nvml_timings(gl: list[str], repeat: int) -> dict[str, Any]:
    """Median ms per NVML query kind over ``repeat`` runs of ``gpulaunch -v ls --topo``."""
    per_kind: dict[str, list[float]] = {}
    totals: list[float] = []
    env = child_env()
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
                              text=True, env=child_env(), cwd=REPO)
        if proc.returncode != 0:
            return {"status": f"failed: exit {proc.returncode}"}
        for name, ms in _attribute(proc.stderr).items():
            per_module.setdefault(name, []).append(ms)
    medians = {name: round(statistics.median(v), 3) for name, v in per_module.items()}
    return {"status": "ok", "runs": repeat, "total_ms": round(sum(medians.values()), 3),
            "modules_ms": dict(sorted(medians.items(), key=lambda kv: -kv[1]))}

