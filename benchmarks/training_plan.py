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
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # its sibling modules, however it is started

from plan_vs_launch import paired_plans  # noqa: E402  (the same pairing as a model's plan)
from timing import paired_args  # noqa: E402


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
    sources = [str(Path(s).resolve()) for s in args.source] or [None]
    with tempfile.TemporaryDirectory(prefix="gpulaunch-bench-training-") as tmp:
        cases = {form: ["--", *words] for form, words in _files(Path(tmp)).items()}
        return paired_plans(cases, sources, args.rounds, args.json)


if __name__ == "__main__":
    sys.exit(main())
