#!/usr/bin/env python3
"""What a waiting detached job costs in memory: its supervisor and its waiting launch.

    python benchmarks/job_memory.py [--jobs 20] [--repo CHECKOUT] [--json FILE]

Holds all 4 GPUs of the bundled ``workstation-4x`` with a foreground launch, submits ``--jobs`` jobs
(``gpulaunch submit --auto 1 -- true``), waits until every one waits in the queue, and reads each
job's two processes from /proc: the supervisor (the record's ``supervisor`` pid) and the launch
waiting in the queue (``pid``). Reported per process, the median over the jobs of:

* RSS (``VmRSS``): what ``ps`` and ``top`` show, shared pages (the interpreter's code) counted in full;
* PSS (``smaps_rollup``): shared pages divided among the processes sharing them, so N jobs cost about
  N × PSS: the number to multiply;
* private (``Anonymous``): the process's own memory.

``--repo`` measures another checkout (e.g. main before a change) with this machine's interpreter, so
two runs compare like with like. All in a private lock and job directory. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = "workstation-4x"

__all__ = ["measure", "main"]


def _field(path: str, key: str) -> float:
    """``key:`` from a /proc status-like file, in MiB."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def _memory(pid: int) -> dict[str, float]:
    return {"rss": _field(f"/proc/{pid}/status", "VmRSS"), "pss": _field(f"/proc/{pid}/smaps_rollup", "Pss"),
            "private": _field(f"/proc/{pid}/smaps_rollup", "Anonymous")}


def _wait_until(predicate: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def measure(jobs: int = 20, repo: Path = REPO, python: str = sys.executable) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpulaunch-jobmem-") as top:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE"))}
        env.update({"PYTHONPATH": str(repo), "GPULAUNCH_CONFIG": "", "GPULAUNCH_LOCK_DIR": f"{top}/locks",
                    "XDG_STATE_HOME": f"{top}/state", "NO_COLOR": "1"})
        gl = [python, "-m", "gpu_launch", "--snapshot", SNAPSHOT]
        ready, release = Path(top) / "ready", Path(top) / "release"
        hold = f'touch "{ready}"; while [ ! -e "{release}" ]; do sleep 0.05; done'
        blocker = subprocess.Popen([*gl, "--gpus", "all", "-q", "--", "sh", "-c", hold], env=env, cwd=top)
        try:
            _wait_until(ready.exists, 120, "the blocker to hold every GPU")
            for _ in range(jobs):
                subprocess.run([*gl, "submit", "-q", "--auto", "1", "--", "true"], env=env, cwd=top, check=True,
                               stdout=subprocess.DEVNULL)

            def queued() -> int:
                out = subprocess.run([*gl, "ls", "--json"], env=env, capture_output=True, text=True).stdout
                return len(json.loads(out)["queue"])

            _wait_until(lambda: queued() >= jobs, 600, "every job to wait in the queue")
            time.sleep(1)  # past start-up: what a job costs while it waits
            records = [json.loads(p.read_text()) for p in (Path(top) / "state" / "gpulaunch" / "jobs").glob("*.json")]
            found = {"supervisor": [_memory(r["supervisor"]) for r in records],
                     "waiting launch": [_memory(r["pid"]) for r in records]}
        finally:
            release.touch()
            blocker.wait(timeout=60)
        _wait_until(lambda: all(json.loads(p.read_text())["state"] == "done"
                                for p in (Path(top) / "state" / "gpulaunch" / "jobs").glob("*.json")), 600,
                    "every job to end")
    return {"jobs": jobs, "repo": str(repo),
            **{who: {k: round(statistics.median(m[k] for m in ms), 1) for k in ("rss", "pss", "private")}
               for who, ms in found.items()}}


def summary(r: dict[str, Any]) -> str:
    lines = [f"{r['jobs']} waiting detached jobs ({r['repo']}), median MiB per process:"]
    for who in ("supervisor", "waiting launch"):
        m = r[who]
        lines.append(f"  {who:<15} RSS {m['rss']:5.1f}  PSS {m['pss']:5.1f}  private {m['private']:5.1f}")
    per_job = r["supervisor"]["pss"] + r["waiting launch"]["pss"]
    lines.append(f"  a job: {per_job:.1f} MiB PSS, so 100 waiting jobs ≈ {per_job * 100 / 1024:.2f} GiB")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    r = measure(args.jobs, args.repo.resolve())
    print(summary(r))
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
