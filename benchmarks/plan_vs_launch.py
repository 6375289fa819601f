#!/usr/bin/env python3
"""`gpulaunch plan` of a 70B model's headers against a dry-run launch, paired round by round (target ≤ 1.6× in CPU time).

    python benchmarks/plan_vs_launch.py [--rounds 40] [--source DIR ...] [--json FILE]

Writes, in a temporary directory, the header-only 70B files of benchmarks/model_headers.py (a
Llama-3.1-70B-layout GGUF with its 128,256-token vocabulary, and the same layout as 30 safetensors
shards; the test extra's ``gguf`` writer), then, for every ``--source`` (a gpulaunch checkout, put first
on PYTHONPATH; default: the gpu_launch this interpreter imports), runs round by round:

* ``python -m gpu_launch --snapshot dgx-h100 --auto 1 --dry-run -- true``: a dry-run launch;
* ``python -m gpu_launch --snapshot dgx-h100 plan 70B.gguf`` and ``plan 70B-safetensors/``.

Printed per row: median wall and CPU ms with the 25th-75th percentiles; per source and model: the plan
over the dry-run launch of the same source, the median and spread of the per-round ratios (wall and
CPU; the target is on CPU time, the steadier figure on a shared machine). Several sources in one run
compare two versions under the same load. Run it with an interpreter that has ``gguf`` and no editable
install of gpulaunch (its import finder preloads modules for every process). Standard library and the
test extra only.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # its sibling modules, however it is started

from timing import Bench, measure, paired_args, paired_ratio, ratio_line, row_line  # noqa: E402

TARGET = 1.6
SNAPSHOT = ["--snapshot", "dgx-h100"]
DRY_RUN = [*SNAPSHOT, "--auto", "1", "--dry-run", "--", "true"]


def _models(root: Path) -> dict[str, Path]:
    """The 70B header-only files (model_headers.py writes them; it imports gpu_launch only to read them)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from model_headers import _fixtures

    files = _fixtures(root)
    return {"gguf-70b": files["gguf-70b"], "safetensors-70b": files["safetensors-70b"]}


def paired_plans(cases: dict[str, list[str]], sources: list[str | None], rounds: int, json_path: str | None) -> int:
    """Time ``plan`` with each case's words (after ``--snapshot dgx-h100``) against a dry-run launch of the same
    source, round by round; print the rows and the ratios; 1 if a command failed. benchmarks/training_plan.py
    measures its training launches with it too."""
    py = sys.executable
    floor = Bench("floor", "python -c pass", [py, "-c", "pass"])
    per_source: list[tuple[str, Bench, list[tuple[str, Bench]]]] = []
    for i, src in enumerate(sources):
        name = src or "installed"
        # Run from / : `python -m` puts the working directory first on sys.path, before PYTHONPATH.
        env = {"PYTHONPATH": src, "GPULAUNCH_CONFIG": ""} if src else {"GPULAUNCH_CONFIG": ""}
        launch = Bench(f"dry{i}", f"dry-run launch ({name})", [py, "-m", "gpu_launch", *DRY_RUN], env=env, cwd="/")
        plans = [(case, Bench(f"plan{i}-{case}", f"plan {case} ({name})",
                              [py, "-m", "gpu_launch", *SNAPSHOT, "plan", *words], env=env, cwd="/"))
                 for case, words in cases.items()]
        per_source.append((name, launch, plans))
    benches = [floor] + [b for _, launch, plans in per_source for b in (launch, *(p for _, p in plans))]
    measure(benches, rounds)
    failed = [b for b in benches if b.error]
    for b in failed:
        print(f"{b.label}: {b.error}", file=sys.stderr)
    if failed:
        return 1
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    for b in benches:
        print(row_line(b))
    doc: dict[str, object] = {"rounds": rounds, "python": sys.version.split()[0], "target": TARGET,
                              "rows": [b.as_json() for b in benches], "ratios": {}}
    for name, launch, plans in per_source:
        for case, plan in plans:
            r = paired_ratio(plan, launch)
            doc["ratios"][plan.label] = r  # type: ignore[index]
            met = "met" if r["cpu"]["median"] <= TARGET else "NOT met"
            print(ratio_line(f"plan {case} / dry-run launch ({name})", r) + f"  (target ≤ {TARGET}× CPU: {met})")
        print(f"  dry-run launch ({name}) CPU median {statistics.median(launch.cpu) * 1000:.1f} ms")
    if json_path:
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = paired_args(__doc__.split("\n\n")[0], argv)
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("skipped: the gguf package is not installed (pip install -e '.[test]')")
        return 0
    sources = [str(Path(s).resolve()) for s in args.source] or [None]
    with tempfile.TemporaryDirectory(prefix="gpulaunch-bench-plan-") as tmp:
        cases = {model: [str(path)] for model, path in _models(Path(tmp)).items()}
        return paired_plans(cases, sources, args.rounds, args.json)


if __name__ == "__main__":
    sys.exit(main())
