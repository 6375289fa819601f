"""A second user for the sharing tests: run as `nobody` from a directory both users can reach.

Only root can become another user; elsewhere the tests that need one are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharing_helpers import env

NOBODY = 65534


def as_nobody() -> list[str]:
    """The argv prefix that runs a command as nobody, or skip the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second user (nobody)")
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
    pytest.skip("needs setpriv (util-linux) to act as a second user")


def python_for_nobody(prefix: list[str], top: Path) -> str:
    """An interpreter user nobody can run gpulaunch with, from a child process of its own (the test's
    venv may live under a directory only root can enter, e.g. /root/.pyenv), or skip the test."""
    check = "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-m', 'gpu_launch', '--version']).returncode)"
    for python in dict.fromkeys(p for p in (sys.executable, "/usr/bin/python3", shutil.which("python3")) if p):
        probe = subprocess.run([*prefix, python, "-c", check], env=env(top / "locks"), capture_output=True, timeout=60)
        if probe.returncode == 0:
            return python
    pytest.skip("user nobody cannot run gpulaunch from this checkout (its path is not readable to others)")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory both users can reach (pytest's tmp_path is private to root)."""
    top = Path(tempfile.mkdtemp(prefix="gpulaunch-two-users-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def nobody_gpulaunch(shared: Path, args: list[str], lock_dir: Path | None = None, timeout: float = 60,
                     **extra: str) -> subprocess.CompletedProcess[str]:
    """`gpulaunch ARGS` as nobody."""
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared)
    return subprocess.run([*prefix, python, "-m", "gpu_launch", *args], env=env(lock_dir, **extra),
                          capture_output=True, text=True, timeout=timeout, cwd=shared)
