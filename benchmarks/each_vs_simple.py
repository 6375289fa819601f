#!/usr/bin/env python3
"""`gpulaunch each` against `simple_gpu_scheduler` on the same sweep (issue 20 item 14, issue 26 item 3).

    python benchmarks/each_vs_simple.py [--jobs 48] [--job 0.5] [--runs 5] [--json FILE] [--repo CHECKOUT]

The sweep: ``--jobs`` × ``sleep JOB`` over the 8 idle GPUs of the bundled ``dgx1-v100`` machine
(``--snapshot``, so no GPU is needed), in a private lock directory. ``gpulaunch each`` reads the job
file and runs each line through ``/bin/sh -c``, as ``simple_gpu_scheduler --gpus 0 … 7`` (PyPI
``simple-gpu-scheduler``: it reads commands on stdin and runs each through a shell on a free GPU) does
with the same lines; ``gpulaunch each --no-shell`` (direct exec, no shell in between) is timed too where
the checkout has it. Each of ``--runs`` rounds runs all of them, rotating which goes first; reported: the
median wall time of each, and the ratios (target: gpulaunch each, shell in between, ≤ 1.05 ×
simple_gpu_scheduler; the ideal is jobs / 8 × JOB seconds). ``--repo`` measures another checkout's
gpulaunch (e.g. the main branch, for before/after numbers; before issue 26 its `each` had no shell).

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

__all__ = ["one_round", "main", "TARGET_RATIO"]


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


def _has_no_shell(repo: Path) -> bool:
    """Whether ``repo``'s `each` takes --no-shell (a checkout from before issue 26 runs lines without a shell)."""
    done = subprocess.run([sys.executable, "-m", "gpu_launch", "help", "each"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(repo)}, cwd=tempfile.gettempdir(), timeout=60)
    return "--no-shell" in done.stdout


def one_round(jobs: int, job: float, repo: Path, simple: str, order: tuple[str, ...]) -> dict[str, float]:
    """Each of ``order`` (``each``, ``each --no-shell``, ``simple``) once on the same sweep: name -> seconds."""
    lines = f"sleep {job}\n" * jobs
    times: dict[str, float] = {}
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
        for name in order:
            if name == "simple":
                times[name] = _timed([simple, "--gpus", *map(str, range(GPUS))], env, tmp, lines)
                continue
            ours = [sys.executable, "-m", "gpu_launch", "--snapshot", SNAPSHOT, "each", str(job_file), "-q",
                    "--log-dir", str(Path(tmp, f"logs-{len(times)}")), *name.split()[1:]]
            times[name] = _timed(ours, env, tmp)
    return times


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
    names = ["each", "simple", *(["each --no-shell"] if _has_no_shell(args.repo) else [])]
    one_round(GPUS, 0.0, args.repo, simple, tuple(names))  # warm-up: bytecode written, files in the page cache
    times: dict[str, list[float]] = {name: [] for name in names}
    for run in range(args.runs):
        order = tuple(names[run % len(names):] + names[:run % len(names)])  # who goes first rotates
        got = one_round(args.jobs, args.job, args.repo, simple, order)
        for name in names:
            times[name].append(got[name])
        print(f"run {run + 1}: " + ", ".join(f"{_label(name)} {got[name]:.3f} s" for name in names))
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {"jobs": args.jobs, "job_s": args.job, "gpus": GPUS, "ideal_s": args.jobs / GPUS * args.job,
              "shell": "each --no-shell" in names, "gpulaunch_median_s": median["each"],
              "simple_median_s": median["simple"], "gpulaunch_s": times["each"], "simple_s": times["simple"]}
    result["ratio"] = result["gpulaunch_median_s"] / result["simple_median_s"]
    if "each --no-shell" in names:
        result.update(no_shell_median_s=median["each --no-shell"], no_shell_s=times["each --no-shell"],
                      no_shell_ratio=median["each --no-shell"] / median["simple"])
    print("median: " + ", ".join(f"{_label(name)} {median[name]:.3f} s" for name in names) +
          f"; ratio {result['ratio']:.3f} (target ≤ {TARGET_RATIO}; ideal {result['ideal_s']:.1f} s)" +
          (f", --no-shell {result['no_shell_ratio']:.3f}" if "no_shell_ratio" in result else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _label(name: str) -> str:
    return {"each": "gpulaunch each", "simple": "simple_gpu_scheduler"}.get(name, f"gpulaunch {name}")


if __name__ == "__main__":
    sys.exit(main())
