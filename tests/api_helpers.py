"""Helpers for the Python API tests (test_api.py, test_notebook.py): the CLI as another user runs it."""

from __future__ import annotations

import subprocess
import sys
import time

from cli_run import ROOT, clean_env

SNAP = "dgx-h100"  # GPUs 0, 1 busy, 5 partly used: use(2) takes 2 and 3


def cli(locks: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m gpu_launch --snapshot dgx-h100 --lock-dir LOCKS ARGS``, as another user of the machine would."""
    return subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", SNAP, "--lock-dir", locks, *args],
                          capture_output=True, text=True, env=clean_env({"NO_COLOR": "1"}), timeout=timeout, cwd=ROOT)


def hold(locks: str, gpus: str) -> subprocess.Popen[str]:
    """Another job holding ``gpus`` (a real launch of ``sleep``) until killed."""
    proc = subprocess.Popen([sys.executable, "-m", "gpu_launch", "--snapshot", SNAP, "--lock-dir", locks, "-q",
                             "--gpus", gpus, "--", "sleep", "120"], env=clean_env(), cwd=ROOT)
    deadline = time.monotonic() + 30
    while f"(pid {proc.pid}, " not in cli(locks, "ls").stdout:  # ls only looks: it never takes a lock
        assert time.monotonic() < deadline and proc.poll() is None, "the holder did not take its GPUs"
        time.sleep(0.05)
    return proc
