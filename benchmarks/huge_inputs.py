"""Wall-clock seconds of the real CLI on the huge and bad inputs of the catalogue (issue 7).

``python benchmarks/huge_inputs.py`` writes the catalogue's files to a temporary directory, runs
every ``huge-*`` and ``snapshot-*`` row of ``tests/test_bad_input.py`` as a subprocess (median of
``--repeat`` runs) and prints seconds, exit code and the first line of stderr. Target: each is
handled or refused within a second. The tests only assert that they finish (timeout 30 s) with the
documented code; speed is measured here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_bad_input import CATALOGUE, FILES, SPARSE, Bad  # noqa: E402

from cli_run import run_gpulaunch  # noqa: E402


def _write_files(root: Path) -> None:
    for name, content in FILES.items():
        (root / name).write_bytes(content() if callable(content) else content)
    for name, size in SPARSE.items():
        with open(root / name, "wb") as fh:
            fh.truncate(size)


def time_row(row: Bad, root: Path, repeat: int) -> tuple[float, int, str]:
    times, code, first = [], 0, ""
    for _ in range(repeat):
        argv = [a.replace("{dir}", str(root)) for a in row.argv]
        start = time.perf_counter()
        result = run_gpulaunch(*argv, env={k: v.replace("{dir}", str(root)) for k, v in row.env.items()}, timeout=120)
        times.append(time.perf_counter() - start)
        code, first = result.returncode, (result.stderr.splitlines() or [""])[0]
    return statistics.median(times), code, first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--all", action="store_true", help="time every catalogue row, not just the file ones")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_files(root)
        rows = [r for r in CATALOGUE if args.all or r.id.startswith(("huge-", "snapshot-"))]
        print(f"{'row':40} {'seconds':>8} {'exit':>4}  stderr")
        for row in rows:
            seconds, code, first = time_row(row, root, args.repeat)
            print(f"{row.id:40} {seconds:8.3f} {code:>4}  {first[:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
