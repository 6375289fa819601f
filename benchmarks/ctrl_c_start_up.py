#!/usr/bin/env python3
"""Ctrl-C during gpulaunch's start-up: how many of N launches end with one line and exit 130.

    python benchmarks/ctrl_c_start_up.py [--runs 200] [--spread-ms 80] [--how script|module] [--repo CHECKOUT]

Each run starts ``gpulaunch --snapshot dgx-h100 --auto 1 -- sleep 5`` under ``-X importtime``, waits
until the interpreter's own start-up is over (the ``site`` line; with ``--how module``, ``runpy``'s),
then sends SIGINT after a random delay of 0 to ``--spread-ms`` ms: inside the console script's own
imports, the package's, the choice, the reservation or the hand-over. Outcomes:

* ``interrupted``: exit 130 and ``gpulaunch: interrupted`` as the last line, nothing else but the mapping;
* ``in the command``: the signal reached ``sleep`` after the exec (death by SIGINT, nothing printed
  but the mapping);
* ``before gpulaunch``: a KeyboardInterrupt traceback with no frame in gpulaunch's own code: the
  signal came while Python was still finding the package (runpy, the console-script wrapper's
  ``import re``, an editable install's finder), before gpulaunch's first statement, where no
  program can have a handler yet (docs/exit-codes.md); the process dies of SIGINT, 130 to a shell;
* ``FAILED``: anything else (a traceback through gpulaunch's code, another line, another exit status,
  a lost Ctrl-C that let ``sleep`` finish); shown.

``--how script`` runs pip's console-script wrapper (the text pip writes for ``gpulaunch``, what a
user types), ``--how module`` runs ``python -m gpu_launch``; both import the package from ``--repo``
(default: this checkout), so two checkouts can be compared. Issue 27's target: no ``FAILED`` in 200.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: what pip (23 and later) writes as the console script for ``gpulaunch = "gpu_launch.cli:main"``
PIP_WRAPPER = """# -*- coding: utf-8 -*-
import re
import sys
from gpu_launch.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""
ARGS = ("--snapshot", "dgx-h100", "--auto", "1", "--", "sleep", "5")
MAPPING = ("gpulaunch: CUDA_VISIBLE_DEVICES=", "  cuda:")

__all__ = ["one_run", "main"]


def _argv(how: str, top: str) -> list[str]:
    if how == "module":
        return [sys.executable, "-X", "importtime", "-m", "gpu_launch", *ARGS]
    script = Path(top) / "gpulaunch"
    script.write_text(PIP_WRAPPER)
    return [sys.executable, "-X", "importtime", str(script), *ARGS]


def _as_from_a_terminal() -> None:
    """In the child: SIGINT at its default action, as a program typed at a terminal starts (this script run
    in the background, `cmd &` or nohup, would hand its children an ignored SIGINT, which gpulaunch keeps)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def one_run(argv: list[str], delay_s: float, env: dict[str, str], repo: Path = REPO) -> tuple[str, int, list[str]]:
    """One launch interrupted ``delay_s`` after the interpreter's start-up: (outcome, exit status, lines)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=repo,
                            preexec_fn=_as_from_a_terminal)
    anchor = b"| runpy\n" if "-m" in argv else b"| site\n"
    seen = b""
    try:
        while anchor not in seen:
            chunk = os.read(proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:
                break
            seen += chunk
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    lines = [line for line in (seen + err).decode(errors="replace").splitlines() if not line.startswith("import time:")]
    rest = [line for line in lines if not line.startswith(MAPPING)]
    if proc.returncode == 130 and rest == ["gpulaunch: interrupted"]:
        return "interrupted", proc.returncode, lines
    if proc.returncode == -signal.SIGINT and not rest:
        return "in the command", proc.returncode, lines
    ours = str(repo / "gpu_launch") + os.sep
    if proc.returncode == -signal.SIGINT and rest[:1] == ["Traceback (most recent call last):"] \
            and rest[-1] == "KeyboardInterrupt" and not any(ours in line for line in rest):
        return "before gpulaunch", proc.returncode, lines
    if proc.returncode == 1 and rest == ["KeyboardInterrupt"]:  # pending as Python was about to run the script
        return "before gpulaunch", proc.returncode, lines
    return "FAILED", proc.returncode, lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--spread-ms", type=float, default=80.0, help="largest delay after start-up (default 80)")
    parser.add_argument("--how", choices=("script", "module"), default="script")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose gpu_launch runs (default: this one)")
    opts = parser.parse_args(argv)
    rng = random.Random(opts.seed)
    with tempfile.TemporaryDirectory(prefix="gpulaunch-ctrl-c-") as top:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE"))}
        env.update({"PYTHONPATH": str(opts.repo.resolve()), "GPULAUNCH_CONFIG": "", "GPULAUNCH_LOCK_DIR": os.path.join(top, "locks"),
                    "GPULAUNCH_HARDENED_LOCK_DIR": os.path.join(top, "none")})
        command = _argv(opts.how, top)
        outcomes: Counter[str] = Counter()
        failures = []
        for _ in range(opts.runs):
            delay = rng.uniform(0, opts.spread_ms / 1000)
            outcome, code, lines = one_run(command, delay, env, opts.repo.resolve())
            outcomes[outcome] += 1
            if outcome == "FAILED":
                failures.append((delay, code, lines))
    shown = "gpulaunch (pip's wrapper)" if opts.how == "script" else "python -m gpu_launch"
    print(f"{shown} {' '.join(ARGS)} from {opts.repo}: {opts.runs} runs, SIGINT 0-{opts.spread_ms:g} ms after "
          "the interpreter's start-up")
    for outcome in ("interrupted", "in the command", "before gpulaunch", "FAILED"):
        print(f"  {outcome:17} {outcomes[outcome]}")
    for delay, code, lines in failures[:5]:
        print(f"\n  after {delay * 1000:.1f} ms: exit {code}\n    " + "\n    ".join(lines[-8:]))
    ok = opts.runs - outcomes["FAILED"]
    print(f"\n{ok} of {opts.runs} without a failure (target: all)")
    return 0 if ok == opts.runs else 1


if __name__ == "__main__":
    sys.exit(main())
