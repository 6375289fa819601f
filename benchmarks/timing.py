"""Timing whole processes for benchmarks/run.py (and the paired benchmarks beside it): one command
is a :class:`Bench`; :func:`measure` runs a group of them interleaved, round robin, so that load from
other work falls on all of them alike. Standard library only."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


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
    env: dict[str, str] = field(default_factory=dict)  # variables set for this command only
    cwd: str | None = None  # where it runs (default: the checkout; `python -m` imports from there first)

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


def by_key(benches: Sequence[Bench]) -> dict[str, Bench]:
    return {b.key: b for b in benches}


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, 25th and 75th percentile of ``values``."""
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "p25": q[0], "p75": q[2]}


def row_line(b: Bench) -> str:
    """One timed row: median wall and CPU ms, each with its 25th-75th percentiles."""
    wall, cpu = spread([s * 1000 for s in b.samples]), spread([s * 1000 for s in b.cpu])
    return (f"{b.label:<60} wall {wall['median']:6.1f} ms [{wall['p25']:6.1f} – {wall['p75']:6.1f}]"
            f"  cpu {cpu['median']:6.1f} ms [{cpu['p25']:6.1f} – {cpu['p75']:6.1f}]")


def ratio_line(label: str, r: dict[str, dict[str, float]]) -> str:
    """A :func:`paired_ratio`'s medians and spreads, wall and CPU."""
    return "  ".join(f"{kind} {r[kind]['median']:.3f}× [{r[kind]['p25']:.3f} – {r[kind]['p75']:.3f}]"
                     for kind in ("wall", "cpu")).join((f"{label}: ", ""))


def paired_ratio(a: Bench, b: Bench) -> dict[str, dict[str, float]]:
    """``a`` over ``b`` round by round (both timed in the same rounds by :func:`measure`), wall and CPU:
    load that falls on one round falls on both of its runs, so the ratio's spread is the honest one."""
    return {"wall": spread([x / y for x, y in zip(a.samples, b.samples)]),
            "cpu": spread([x / y for x, y in zip(a.cpu, b.cpu) if y > 0])}


def child_env() -> dict[str, str]:
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


def run_once(bench: Bench, env: dict[str, str], capture: bool = False) -> tuple[float, int, str, float]:
    """Run ``bench`` once: (wall seconds, exit code, stderr if ``capture``, the child's CPU seconds)."""
    if bench.env:
        env = {**env, **bench.env}
    cpu_before = _children_cpu()
    if bench.tty:
        master, slave = os.openpty()
        reader = threading.Thread(target=_drain, args=(master,), daemon=True)
        reader.start()
        try:
            start = time.perf_counter()
            proc = subprocess.run(bench.argv, stdin=subprocess.DEVNULL, stdout=slave,
                                  stderr=subprocess.PIPE if capture else subprocess.DEVNULL, env=env,
                                  cwd=bench.cwd or REPO)
            elapsed = time.perf_counter() - start
        finally:
            os.close(slave)
            reader.join(timeout=5)
            os.close(master)
    else:
        start = time.perf_counter()
        proc = subprocess.run(bench.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE if capture else subprocess.DEVNULL, env=env, cwd=bench.cwd or REPO)
        elapsed = time.perf_counter() - start
    err = proc.stderr.decode("utf-8", "replace") if capture and proc.stderr else ""
    return elapsed, proc.returncode, err, _children_cpu() - cpu_before


def measure(benches: Sequence[Bench], repeat: int, warmup: int = 2) -> None:
    """Time every runnable bench ``repeat`` times, interleaved; a failing command is marked, not timed."""
    env = child_env()
    live = [b for b in benches if b.skipped is None]
    for b in live:
        try:
            _, code, err, _ = run_once(b, env, capture=True)
        except OSError as exc:
            b.error = str(exc)
            continue
        if code != 0:
            last = err.strip().splitlines()[-1] if err.strip() else ""
            b.error = f"exit {code}" + (f": {last}" if last else "")
    live = [b for b in live if b.error is None]
    for _ in range(max(warmup - 1, 0)):  # the check above was the first warm-up run
        for b in live:
            run_once(b, env)
    for _ in range(repeat):
        for b in live:
            elapsed, _, _, cpu = run_once(b, env)
            b.samples.append(elapsed)
            b.cpu.append(cpu)


def paired_report(benches: Sequence[Bench], launches: Sequence[Bench], baseline: Bench, baseline_name: str,
                  rounds: int, json_path: str | None) -> int:
    """Measure ``benches`` round by round, print one row each and each launch's ratio to ``baseline``
    (paired per round), and write them as JSON when asked; 1 if any of them failed to run."""
    import json
    import sys
    from pathlib import Path

    measure(benches, rounds)
    failed = [b for b in benches if b.error]
    for b in failed:
        print(f"{b.label}: {b.error}", file=sys.stderr)
    if failed:
        return 1
    doc: dict[str, object] = {"rounds": rounds, "python": sys.version.split()[0],
                              "rows": [b.as_json() for b in benches], "ratios": {}}
    for b in benches:
        print(row_line(b))
    for b in launches:
        doc["ratios"][b.label] = r = paired_ratio(b, baseline)  # type: ignore[index]
        print(ratio_line(f"{b.label} / {baseline_name}", r))
    if json_path:
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def paired_args(description: str, argv: list[str] | None) -> argparse.Namespace:
    """The options every paired benchmark takes: --rounds, --source (repeatable), --json."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rounds", type=int, default=40, help="timed rounds (default 40)")
    ap.add_argument("--source", action="append", default=[], metavar="DIR",
                    help="a gpulaunch checkout to measure (repeatable; default: the installed one)")
    ap.add_argument("--json", metavar="FILE", help="also write the samples and ratios as JSON")
    return ap.parse_args(argv)
