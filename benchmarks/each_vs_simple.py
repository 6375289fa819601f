#!/usr/bin/env python3
"""`gpulaunch each` against `simple_gpu_scheduler` on the same sweep (issue 20 item 14).

    python benchmarks/each_vs_simple.py [--jobs 48] [--job 0.5] [--runs 5] [--json FILE] [--repo CHECKOUT]

The sweep: ``--jobs`` × ``sleep JOB`` over the 8 idle GPUs of the bundled ``dgx1-v100`` machine
(``--snapshot``, so no GPU is needed), in a private lock directory. ``gpulaunch each`` reads the job
file; ``simple_gpu_scheduler --gpus 0 … 7`` (PyPI ``simple-gpu-scheduler``: it reads commands on stdin
and runs each through a shell on a free GPU) gets the same lines. Each of ``--runs`` pairs runs both,
alternating which goes first; reported: the median wall time of each, and their ratio (target: gpulaunch
≤ 1.05 × simple_gpu_scheduler; the ideal is jobs / 8 × JOB seconds). ``--repo`` measures another
checkout's gpulaunch (e.g. the main branch, for before/after numbers).

Skips (exit 0, saying why) when ``simple_gpu_scheduler`` is not installed. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = "dgx1-v100"  # 8 idle GPUs
GPUS = 8
TARGET_RATIO = 1.05

__all__ = ["pair", "main", "TARGET_RATIO"]


def _timed(argv: list[str], env: dict[str, str], cwd: str, stdin: str | None = None) -> float:
    start = time.perf_counter()
    # cwd outside any checkout: `python -m` puts the working directory first on sys.path, which would
    # shadow --repo's gpulaunch with the one the benchmark was started from.
    done = subprocess.run(argv, env=env, input=stdin, text=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=600, cwd=cwd)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]}… exited {done.returncode}: {done.stderr[-2000:]}")
    return wall


def pair(jobs: int, job: float, repo: Path, simple: str, gpulaunch_first: bool) -> tuple[float, float]:
    """One run of each scheduler on the same sweep: (gpulaunch seconds, simple_gpu_scheduler seconds)."""
    lines = f"sleep {job}\n" * jobs
    with tempfile.TemporaryDirectory(prefix="each-vs-simple-") as tmp:
        job_file = Path(tmp, "jobs.txt")
        job_file.write_text(lines)
        locks = Path(tmp, "locks")
        locks.mkdir()
        locks.chmod(0o1777)
        # As a user's installation: bytecode cached (a PYTHONDONTWRITEBYTECODE=1 shell would make gpulaunch
        # compile its modules at every start, ~0.2 s, while the peer's come compiled from its wheel).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPULAUNCH_", "CUDA_", "SLURM_")) and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(GPULAUNCH_CONFIG="", GPULAUNCH_LOCK_DIR=str(locks), PYTHONPATH=str(repo))
        ours = [sys.executable, "-m", "gpu_launch", "--snapshot", SNAPSHOT, "each", str(job_file), "-q",
                "--log-dir", str(Path(tmp, "logs"))]
        theirs = [simple, "--gpus", *map(str, range(GPUS))]
        if gpulaunch_first:
            a = _timed(ours, env, tmp)
            b = _timed(theirs, env, tmp, lines)
        else:
            b = _timed(theirs, env, tmp, lines)
            a = _timed(ours, env, tmp)
    return a, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=48)
    parser.add_argument("--job", type=float, default=0.5, help="seconds each job sleeps")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose gpulaunch is measured")
    args = parser.parse_args(argv)
    simple = shutil.which("simple_gpu_scheduler")
    if simple is None:
        print("skipped: simple_gpu_scheduler is not installed (pip install simple-gpu-scheduler)")
        return 0
    pair(GPUS, 0.0, args.repo, simple, True)  # warm-up: bytecode written, files in the page cache
    ours, theirs = [], []
    for run in range(args.runs):
        a, b = pair(args.jobs, args.job, args.repo, simple, gpulaunch_first=run % 2 == 0)
        ours.append(a)
        theirs.append(b)
        print(f"run {run + 1}: gpulaunch each {a:.3f} s, simple_gpu_scheduler {b:.3f} s")
    result = {"jobs": args.jobs, "job_s": args.job, "gpus": GPUS, "ideal_s": args.jobs / GPUS * args.job,
              "gpulaunch_median_s": statistics.median(ours), "simple_median_s": statistics.median(theirs),
              "gpulaunch_s": ours, "simple_s": theirs}
    result["ratio"] = result["gpulaunch_median_s"] / result["simple_median_s"]
    print(f"median: gpulaunch each {result['gpulaunch_median_s']:.3f} s, simple_gpu_scheduler "
          f"{result['simple_median_s']:.3f} s, ratio {result['ratio']:.3f} (target ≤ {TARGET_RATIO}; ideal "
          f"{result['ideal_s']:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
