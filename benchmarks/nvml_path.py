#!/usr/bin/env python3
"""A quiet launch on NVML against the minimal NVML read, paired round by round (issue 21: ≤ 1.3×).

    python benchmarks/nvml_path.py [--rounds 40] [--source DIR ...] [--json FILE]

Each round runs benchmarks/minimal_nvml.py (import pynvml, initialise NVML, read each GPU's memory)
and, for every ``--source`` (a gpulaunch checkout, first on PYTHONPATH; default: the gpu_launch this
interpreter imports), ``python -m gpu_launch -q --auto 1 -- true``, ``-q --auto 2 -- true`` and
``-q --gpus 1 -- true`` on the NVML library the dynamic loader finds (a driver's, or NVIDIA's mock
NVML through ``LD_LIBRARY_PATH`` and ``MOCK_NVML_CONFIG``). Printed: median wall and CPU ms with the
25th-75th percentiles, and per launch the median and spread of the per-round ratios to the minimal
read. The launches take their locks in a private temporary directory. Skips (exit 0, with the
reason) where no libnvidia-ml.so.1 can be loaded. Standard library only.
"""

from __future__ import annotations

import ctypes
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however it is started

from timing import Bench, paired_args, paired_report  # noqa: E402

MINIMAL = Path(__file__).resolve().parent / "minimal_nvml.py"
LAUNCHES = {"--auto 1": ["--auto", "1"], "--auto 2": ["--auto", "2"], "--gpus 1": ["--gpus", "1"]}


def nvml_loadable() -> str | None:
    """None when libnvidia-ml.so.1 loads, else why not."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return f"no NVML library to load ({exc})"
    return None


def main(argv: list[str] | None = None) -> int:
    args = paired_args(__doc__.split("\n\n")[0], argv)
    why = nvml_loadable()
    if why is not None:
        print(f"nvml_path: skipped: {why}")
        return 0
    py = sys.executable
    locks = tempfile.mkdtemp(prefix="gpulaunch-bench-locks-")
    minimal = Bench("minimal", "minimal NVML read (benchmarks/minimal_nvml.py)", [py, str(MINIMAL)], cwd="/")
    launches = []
    for i, src in enumerate(args.source or [None]):
        env = {"GPULAUNCH_LOCK_DIR": locks, "GPULAUNCH_CONFIG": ""}
        if src is not None:
            env["PYTHONPATH"] = str(Path(src).resolve())
        for name, selection in LAUNCHES.items():
            # Run from / : `python -m` puts the working directory first on sys.path, before PYTHONPATH.
            launches.append(Bench(f"launch{i}{name}", f"-q {name} -- true ({src or 'installed'})",
                                  [py, "-m", "gpu_launch", "-q", *selection, "--", "true"], env=env, cwd="/"))
    benches = [minimal, *launches]
    return paired_report(benches, launches, minimal, "minimal", args.rounds, args.json)


if __name__ == "__main__":
    sys.exit(main())
