#!/usr/bin/env python3
"""A queue of detached jobs (`gpulaunch submit`) on an idle 8-GPU machine: overlaps, exit codes, occupancy.

    python benchmarks/queue_jobs.py [--jobs 100] [--job 2.0] [--json FILE]

First holds all 8 GPUs of the bundled ``dgx1-v100`` (8 idle V100s) with a foreground launch, then
submits ``--jobs`` jobs, each ``gpulaunch --snapshot dgx1-v100 submit --auto 1 -- JOB``, where JOB
notes when it started and ended on which GPU, sleeps ``--job`` seconds and exits with ``i % 4``.
Once every job waits in the queue (``ls --json`` lists them all), the GPUs are freed and the clock
starts. All in a private lock directory and a private job directory (XDG_STATE_HOME), with the
default poll interval (what a user gets). Reported:

* overlaps: two jobs on one GPU at once (must be 0);
* exit codes: jobs whose recorded exit code (``gpulaunch jobs --json``) is the one the job exited
  with (must be all);
* occupancy: busy GPU-seconds / the GPU-seconds possible, i.e. the integral over the run of
  min(8, jobs not yet ended): while 8 or more jobs are left every GPU could be busy, in the last
  round only as many as are left (target ≥ 95 %); also busy / (8 GPUs × span);
* hand-over: how long a GPU sits idle between one job's end and the next job's start on it
  (median target ≤ 0.1 s), and its maximum.

Issue 26's targets: 100 jobs on 8 GPUs, 0 overlaps, every exit code recorded, occupancy ≥ 95 %,
hand-over ≤ 0.1 s median. Standard library only.
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
SNAPSHOT = "dgx1-v100"
GPUS = 8
TARGET_OCCUPANCY = 0.95
TARGET_HANDOVER_S = 0.1

__all__ = ["run_queue", "measure", "main"]

#: The job: note start (CUDA_VISIBLE_DEVICES and time), sleep, note the end, exit with the code given.
JOB = ('echo "$CUDA_VISIBLE_DEVICES $(date +%s.%N)" > "$1.start"; sleep "$2"; date +%s.%N > "$1.end"; exit "$3"')


def _wait_until(predicate: Any, timeout: float, what: str, every: float = 0.2) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def measure(spans: list[tuple[str, float, float]], began: float) -> dict[str, Any]:
    """Overlaps, occupancy and hand-over from (gpu, start, end) of every job that ran, the clock started at ``began``."""
    if not spans:
        return {"overlaps": 0, "occupancy": 0.0, "occupancy_of_8": 0.0, "handover_ms_median": None,
                "handover_ms_max": None, "span_s": 0.0}
    last = max(end for _, _, end in spans)
    busy = sum(end - start for _, start, end in spans)
    ends = sorted(end for _, _, end in spans)
    possible, t, left = 0.0, began, len(spans)  # ∫ min(8, jobs not yet ended) dt
    for end in ends:
        possible += min(GPUS, left) * (end - t)
        t, left = end, left - 1
    overlaps, gaps = 0, []
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for gpu, start, end in spans:
        by_gpu.setdefault(gpu, []).append((start, end))
    for runs in by_gpu.values():
        runs.sort()
        overlaps += sum(1 for a, b in zip(runs, runs[1:]) if b[0] < a[1])
        gaps += [b[0] - a[1] for a, b in zip(runs, runs[1:])]
    gaps.sort()
    return {"overlaps": overlaps, "occupancy": round(busy / possible, 4),
            "occupancy_of_8": round(busy / (GPUS * (last - began)), 4), "span_s": round(last - began, 2),
            "handover_ms_median": round(1000 * gaps[len(gaps) // 2], 1) if gaps else None,
            "handover_ms_max": round(1000 * gaps[-1], 1) if gaps else None}


def run_queue(jobs: int = 100, job_s: float = 2.0, python: str = sys.executable) -> dict[str, Any]:
    """Submit ``jobs`` detached jobs behind a blocker, free the GPUs, and measure (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="gpulaunch-jobs-") as top:
        rec = Path(top) / "rec"
        rec.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE"))}
        env.update({"PYTHONPATH": str(REPO), "GPULAUNCH_CONFIG": "", "GPULAUNCH_LOCK_DIR": str(Path(top) / "locks"),
                    "XDG_STATE_HOME": str(Path(top) / "state"), "NO_COLOR": "1"})
        gl = [python, "-m", "gpu_launch", "--snapshot", SNAPSHOT]
        ready, release = Path(top) / "ready", Path(top) / "release"
        hold = f'touch "{ready}"; while [ ! -e "{release}" ]; do sleep 0.01; done'
        blocker = subprocess.Popen([*gl, "--gpus", "all", "-q", "--", "sh", "-c", hold], env=env, cwd=top)
        _wait_until(ready.exists, 120, "the blocker to hold every GPU", 0.01)
        submitted_at = time.time()
        for i in range(jobs):
            subprocess.run([*gl, "submit", "-q", "--auto", "1", "--", "sh", "-c", JOB, "sh", str(rec / f"job{i}"),
                            str(job_s), str(i % 4)], env=env, cwd=top, check=True, stdout=subprocess.DEVNULL)
        submitting = time.time() - submitted_at

        def queued() -> int:
            out = subprocess.run([*gl, "ls", "--json"], env=env, capture_output=True, text=True).stdout
            return len(json.loads(out)["queue"])

        _wait_until(lambda: queued() >= jobs, 600, "every job to wait in the queue", 0.5)
        began = time.time()
        release.touch()
        blocker.wait(timeout=60)
        job_dir = Path(top) / "state" / "gpulaunch" / "jobs"

        def over() -> bool:
            states = [json.loads(p.read_text())["state"] for p in job_dir.glob("*.json")]
            return len(states) == jobs and all(s in ("done", "failed", "cancelled") for s in states)

        _wait_until(over, 600 + 2 * jobs * job_s, "every job to end", 0.25)
        listed = json.loads(subprocess.run([*gl, "jobs", "--json"], env=env, capture_output=True, text=True).stdout)
        spans, recorded, missing = [], 0, []
        for n, job in enumerate(sorted(listed["jobs"], key=lambda j: int(j["id"]))):
            i = int(job["argv"][4].rsplit("job", 1)[1])
            recorded += job["state"] == "done" and job["exit_code"] == i % 4
            try:
                gpu, start = (rec / f"job{i}.start").read_text().split()
                spans.append((gpu, float(start), float((rec / f"job{i}.end").read_text())))
            except (OSError, ValueError):
                missing.append(job["id"])
    return {"jobs": jobs, "job_s": job_s, "gpus": GPUS, "submit_s": round(submitting, 1), "ran": len(spans),
            "exit_codes_recorded": recorded, "did_not_run": missing[:10], **measure(spans, began)}


def summary(r: dict[str, Any]) -> str:
    ok = (r["overlaps"] == 0 and r["exit_codes_recorded"] == r["jobs"] and r["occupancy"] >= TARGET_OCCUPANCY
          and r["handover_ms_median"] is not None and r["handover_ms_median"] <= 1000 * TARGET_HANDOVER_S)
    return (f"{r['jobs']} detached jobs × {r['job_s']:g} s on {r['gpus']} GPUs (submitted in {r['submit_s']} s): "
            f"{r['ran']} ran, overlaps {r['overlaps']}, exit codes recorded {r['exit_codes_recorded']}/{r['jobs']}, "
            f"occupancy {r['occupancy']:.1%} of the GPU time possible ({r['occupancy_of_8']:.1%} of 8 GPUs × "
            f"{r['span_s']} s), hand-over median {r['handover_ms_median']} ms (max {r['handover_ms_max']} ms): "
            f"targets {'met' if ok else 'NOT met'}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--job", type=float, default=2.0, help="seconds each job runs")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    r = run_queue(args.jobs, args.job)
    print(summary(r))
    if args.json:
        args.json.write_text(json.dumps({"load": os.getloadavg(), "run": r}, indent=2))
    return 0 if r["overlaps"] == 0 and r["exit_codes_recorded"] == r["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
