#!/usr/bin/env python3
"""Planning a training launch against a dry-run launch, paired round by round (target ≤ 1.6× in CPU time).

    python benchmarks/training_plan.py [--rounds 40] [--source DIR ...] [--json FILE]

Writes, in a temporary directory, a header-only Llama-3.1-8B (config.json + a safetensors header, as
tests/docs_fixtures.py writes it), a DeepSpeed ZeRO-3 JSON and a TRL YAML, then, for every ``--source``
(a gpulaunch checkout, put first on PYTHONPATH; default: the gpu_launch this interpreter imports), runs
round by round:

* ``python -m gpu_launch --snapshot dgx-h100 --auto 1 --dry-run -- true``: a dry-run launch;
* ``plan -- torchrun ... train.py --per_device_train_batch_size {micro_batch} --deepspeed ds.json``: Trainer
  flags, a DeepSpeed JSON, the micro-batch searched (the costliest form to plan);
* ``plan -- trl sft --config sft.yaml``: the TRL CLI with its YAML (PyYAML's import included).

Printed per row: median wall and CPU ms with the 25th-75th percentiles; per source and form: the plan over
the dry-run launch of the same source (median and spread of the per-round ratios, the target on CPU).
Standard library, the test extra's PyYAML, and gpulaunch.
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


def _files(root: Path) -> dict[str, list[str]]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from docs_fixtures import llama_8b_safetensors

    model = root / "Llama-3.1-8B"
    llama_8b_safetensors(model)
    (root / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                              "zero_optimization": {"stage": 3}}))
    (root / "sft.yaml").write_text(f"model_name_or_path: {model}\nuse_peft: true\nmax_length: 4096\n"
                                   "per_device_train_batch_size: 2\n")
    return {"torchrun-deepspeed": ["torchrun", "--nproc-per-node", "{nproc}", "train.py", "--model_name_or_path",
                                   str(model), "--per_device_train_batch_size", "{micro_batch}", "--bf16",
                                   "--gradient_checkpointing", "--deepspeed", str(root / "ds.json")],
            "trl-yaml": ["trl", "sft", "--config", str(root / "sft.yaml")]}


def main(argv: list[str] | None = None) -> int:
    args = paired_args(__doc__.split("\n\n")[0], argv)
    try:
        import yaml  # noqa: F401
    except ImportError:
        print("skipped: PyYAML is not installed (pip install -e '.[test]')")
        return 0
    py = sys.executable
    sources = [str(Path(s).resolve()) for s in args.source] or [None]
    with tempfile.TemporaryDirectory(prefix="gpulaunch-bench-training-") as tmp:
        forms = _files(Path(tmp))
        floor = Bench("floor", "python -c pass", [py, "-c", "pass"])
        per_source: list[tuple[str, Bench, list[tuple[str, Bench]]]] = []
        for i, src in enumerate(sources):
            name = src or "installed"
            env = {"PYTHONPATH": src, "GPULAUNCH_CONFIG": ""} if src else {"GPULAUNCH_CONFIG": ""}
            launch = Bench(f"dry{i}", f"dry-run launch ({name})", [py, "-m", "gpu_launch", *DRY_RUN], env=env, cwd="/")
            plans = [(form, Bench(f"plan{i}-{form}", f"plan {form} ({name})",
                                  [py, "-m", "gpu_launch", *SNAPSHOT, "plan", "--", *words], env=env, cwd="/"))
                     for form, words in forms.items()]
            per_source.append((name, launch, plans))
        benches = [floor] + [b for _, launch, plans in per_source for b in (launch, *(p for _, p in plans))]
        measure(benches, args.rounds)
    failed = [b for b in benches if b.error]
    for b in failed:
        print(f"{b.label}: {b.error}", file=sys.stderr)
    if failed:
        return 1
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    for b in benches:
        print(row_line(b))
    doc: dict[str, object] = {"rounds": args.rounds, "python": sys.version.split()[0], "target": TARGET,
                              "rows": [b.as_json() for b in benches], "ratios": {}}
    for name, launch, plans in per_source:
        for form, plan in plans:
            r = paired_ratio(plan, launch)
            doc["ratios"][plan.label] = r  # type: ignore[index]
            met = "met" if r["cpu"]["median"] <= TARGET else "NOT met"
            print(ratio_line(f"plan {form} / dry-run launch ({name})", r) + f"  (target ≤ {TARGET}× CPU: {met})")
        print(f"  dry-run launch ({name}) CPU median {statistics.median(launch.cpu) * 1000:.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
