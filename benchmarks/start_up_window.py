#!/usr/bin/env python3
"""The Ctrl-C window before gpulaunch's first statement, per console entry: CPU time of each entry's start-up.

    python benchmarks/start_up_window.py [--runs 80]

Before gpulaunch's first statement no program can have a SIGINT handler: a Ctrl-C there is Python's
(docs/exit-codes.md, "Ctrl-C"). What comes before it depends on the entry: the interpreter and ``site``
(always), then pip's console-script wrapper (``import re``, ``import sys``), or ``python -m``'s runpy.
Each case runs the interpreter of this process on an empty module, so only the entry's own cost is
timed, as CPU time (user + system) of the child: on a shared machine wall time says more about the
neighbours than about the entry. Issue 33: a smaller entry is kept only if it is measurably smaller.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=80)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as top:
        open(os.path.join(top, "empty.py"), "w").close()
        cases = {"a script with nothing before the package (a custom entry)": [sys.executable, "empty.py"],
                 "pip's console-script preamble (import re, sys)": [sys.executable, "-c", "import re\nimport sys"],
                 "python -m (runpy)": [sys.executable, "-m", "empty"]}
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(runs):
            for name, argv in cases.items():  # interleaved: a busy moment costs every case alike
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(argv, cwd=top, check=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[name].append(1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
    for name, values in times.items():
        values.sort()
        print(f"{name}: CPU median {statistics.median(values):.1f} ms, p10 {values[len(values) // 10]:.1f} ms")
    probe = "import sys; print('re' in sys.modules, len(sys.modules))"
    imported, count = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.split()
    print(f"before the first statement: {count} modules imported by the interpreter and site; 're' among them: {imported}")


if __name__ == "__main__":
    main()
