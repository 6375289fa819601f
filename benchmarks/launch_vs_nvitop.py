#!/usr/bin/env python3
"""A quiet launch against ``python -c "import nvitop"``, paired round by round (issue 21: ≤ 0.5×).

    python benchmarks/launch_vs_nvitop.py [--rounds 40] [--source DIR ...] [--launch "ARGS" ...] [--json FILE]

Each round runs ``python -c "import nvitop"`` and then, for every ``--source`` (a gpulaunch checkout,
put first on PYTHONPATH; default: the gpu_launch this interpreter imports) and every ``--launch``
(how the GPUs are given; default ``--auto 1``; e.g. ``--launch "--gpus 0" --launch "--auto 2"``),
``python -m gpu_launch --snapshot dgx-h100 -q ARGS -- true``. Printed per row: median wall and
CPU ms with the 25th-75th percentiles; per source: the launch over nvitop's import, the median and
spread of the per-round ratios (wall and CPU). Several sources in one run compare two versions
under the same load. Run it with the interpreter of an environment that has nvitop (pip install
nvitop) and, for honest start-up numbers, no editable install of gpulaunch (its import finder
preloads modules for every process, the floor included). Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however it is started

from timing import Bench, paired_args, paired_report  # noqa: E402

LAUNCH = ["-m", "gpu_launch", "--snapshot", "dgx-h100", "-q"]


def main(argv: list[str] | None = None) -> int:
    rest = list(sys.argv[1:] if argv is None else argv)
    forms = []  # --launch "ARGS", taken out before the common options are parsed (ARGS start with a dash)
    while "--launch" in rest:
        at = rest.index("--launch")
        forms.append(rest[at + 1].split())
        del rest[at:at + 2]
    args = paired_args(__doc__.split("\n\n")[0], rest)
    py = sys.executable
    nvitop = Bench("nvitop", 'python -c "import nvitop"', [py, "-c", "import nvitop"])
    floor = Bench("floor", "python -c pass", [py, "-c", "pass"])
    # Run from / : `python -m` puts the working directory first on sys.path, before PYTHONPATH.
    sources = [str(Path(src).resolve()) for src in args.source] or [None]
    launches = [Bench(f"launch{i}-{j}", f"launch {' '.join(form)} ({src or 'installed'})",
                      [py, *LAUNCH, *form, "--", "true"], env={"PYTHONPATH": src} if src else {}, cwd="/")
                for i, src in enumerate(sources) for j, form in enumerate(forms or [["--auto", "1"]])]
    benches = [floor, nvitop, *launches]
    return paired_report(benches, launches, nvitop, "nvitop import", args.rounds, args.json)


if __name__ == "__main__":
    sys.exit(main())
