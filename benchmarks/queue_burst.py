#!/usr/bin/env python3
"""How well the `--wait` queue keeps GPUs busy: a burst of waiters on an idle 8-GPU machine.

    python benchmarks/queue_burst.py [--waiters 24] [--job 1.0] [--json FILE] [--repo CHECKOUT]

Starts ``--waiters`` gpulaunch processes at once, each ``--snapshot dgx-h100 --auto 1 --wait 60s -q
-- JOB`` where JOB notes when it started and ended on which GPU and sleeps ``--job`` seconds, all in
a private lock directory, with the default poll interval (what a user gets). Reported:

* wall: from starting the burst to the last gpulaunch exiting;
* occupancy: busy GPU-seconds / (8 GPUs × the span from the first job's start to the last job's
  end), i.e. how little time GPUs sit idle while waiters queue for them (target ≥ 80 %);
  with ``--queued`` every waiter is in the queue before the GPUs free, and the span starts then;
* how long a GPU sits idle between one job's end and the next job's start on it (the hand-over);
* the largest number of jobs that ran at once, and any GPU given to two jobs at once (must be 0).

Issue 12's target: 24 waiters × 1 s jobs on 8 GPUs in ~3 s, occupancy ≥ 80 %. Standard library
only; ``--repo`` measures another checkout (e.g. the main branch, for before/after numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = "dgx-h100"
GPUS = 8
TARGET_OCCUPANCY = 0.80

__all__ = ["run_burst", "main", "TARGET_OCCUPANCY"]

#: The job: note start (CUDA_VISIBLE_DEVICES and time), sleep, note the end. `sh` starts in ~1 ms.
JOB = 'echo "$CUDA_VISIBLE_DEVICES $(date +%s.%N)" > "$1.start"; sleep "$2"; date +%s.%N > "$1.end"'


def _wait_until(predicate: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def run_burst(waiters: int = 24, job_s: float = 1.0, repo: Path = REPO, python: str = sys.executable,
              queued: bool = False) -> dict[str, Any]:
    """Run one burst; the measurements as a dict (see the module docstring).

    ``queued``: first hold all 8 GPUs, start the waiters, and free the GPUs only once every waiter
    is in the queue; time from that moment. This leaves out the interpreters' start-up (which on a
    small, busy machine spreads the cold burst's first round) and measures the queue alone.
    """
    with tempfile.TemporaryDirectory(prefix="gpulaunch-burst-") as top:
        rec = Path(top) / "rec"
        rec.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE"))}
        env.update({"PYTHONPATH": str(repo), "GPULAUNCH_CONFIG": "", "GPULAUNCH_LOCK_DIR": str(Path(top) / "locks")})
        argv = [python, "-m", "gpu_launch", "--snapshot", SNAPSHOT, "--auto", "1", "--wait", "60s", "-q", "--",
                "sh", "-c", JOB, "sh"]
        # Warm up (byte-compile, page cache) with one launch, so the burst measures the queue.
        subprocess.run([*argv, str(rec / "warmup"), "0"], env=env, cwd=top, capture_output=True, timeout=120)
        blocker = None
        if queued:
            ready, release = Path(top) / "ready", Path(top) / "release"
            hold = f'touch "{ready}"; while [ ! -e "{release}" ]; do sleep 0.01; done'
            blocker = subprocess.Popen([python, "-m", "gpu_launch", "--snapshot", SNAPSHOT, "--gpus", "all", "-q", "--",
                                        "sh", "-c", hold], env=env, cwd=top)
            _wait_until(ready.exists, 120, "the blocker to hold every GPU")
        began = time.time()
        procs = [subprocess.Popen([*argv, str(rec / f"job{i}"), str(job_s)], env=env, cwd=top,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(waiters)]
        if blocker is not None:
            locks = Path(top) / "locks"
            _wait_until(lambda: len(list(locks.glob("ticket-*"))) >= waiters, 300, "every waiter to queue")
            began = time.time()
            release.touch()
            blocker.wait(timeout=60)
        codes = [p.wait(timeout=300) for p in procs]
        wall = time.time() - began
        errors = [p.stderr.read().strip() for p in procs if p.stderr is not None]
        spans = []
        for i in range(waiters):
            try:
                cvd, start = (rec / f"job{i}.start").read_text().split()
                end = float((rec / f"job{i}.end").read_text())
            except (OSError, ValueError):
                continue
            spans.append((cvd, float(start), end))
    busy = sum(end - start for _, start, end in spans)
    first = began if queued else min((s for _, s, _ in spans), default=began)
    last = max((e for _, _, e in spans), default=began)
    span = max(last - first, 1e-9)
    events = sorted([(s, 1) for _, s, _ in spans] + [(e, -1) for _, _, e in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    overlaps = 0
    idle_gaps: list[float] = []  # a GPU's end of one job to the start of its next: the hand-over cost
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for cvd, start, end in spans:
        by_gpu.setdefault(cvd, []).append((start, end))
    for runs in by_gpu.values():
        runs.sort()
        overlaps += sum(1 for a, b in zip(runs, runs[1:]) if b[0] < a[1])
        idle_gaps += [b[0] - a[1] for a, b in zip(runs, runs[1:])]
    return {
        "mode": "queued" if queued else "cold", "waiters": waiters, "job_s": job_s, "gpus": GPUS, "ok": sum(1 for c in codes if c == 0),
        "wall_s": round(wall, 2), "jobs_span_s": round(span, 2), "ideal_s": round(job_s * -(-waiters // GPUS), 2),
        "occupancy": round(busy / (GPUS * span), 3), "peak_running": peak, "double_booked": overlaps,
        "first_job_after_s": round(first - began, 2),
        "starts_s": [round(s - first, 3) for s in sorted(s for _, s, _ in spans)],
        "handover_ms_median": round(1000 * sorted(idle_gaps)[len(idle_gaps) // 2], 1) if idle_gaps else None,
        "handover_ms_max": round(1000 * max(idle_gaps), 1) if idle_gaps else None,
        "errors": sorted({e.splitlines()[-1] for e in errors if e})[:5],
    }


def summary(r: dict[str, Any]) -> str:
    met = "met" if r["occupancy"] >= TARGET_OCCUPANCY and r["ok"] == r["waiters"] else "NOT met"
    return (f"{r['mode']}: {r['waiters']} waiters × {r['job_s']:g} s jobs on {r['gpus']} GPUs: wall {r['wall_s']:.2f} s "
            f"(ideal {r['ideal_s']:.2f} s), jobs span {r['jobs_span_s']:.2f} s, occupancy {r['occupancy']:.0%} "
            f"(target ≥ {TARGET_OCCUPANCY:.0%}: {met}), GPU idle between jobs median {r['handover_ms_median']} ms "
            f"(max {r['handover_ms_max']} ms), at most {r['peak_running']} at once, "
            f"{r['ok']}/{r['waiters']} exited 0, double-booked: {r['double_booked']}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waiters", type=int, default=24)
    ap.add_argument("--job", type=float, default=1.0, help="seconds each job runs")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--queued", action="store_true", help="free the GPUs only once every waiter is queued (the queue "
                    "alone, without the interpreters' start-up)")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    results = []
    for _ in range(args.repeat):
        r = run_burst(args.waiters, args.job, args.repo, queued=args.queued)
        print(summary(r))
        for error in r["errors"]:
            print(f"  error: {error}")
        results.append(r)
    if args.json:
        args.json.write_text(json.dumps({"repo": str(args.repo), "load": os.getloadavg(), "runs": results}, indent=2))
    return 0 if all(r["double_booked"] == 0 and r["ok"] == r["waiters"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
