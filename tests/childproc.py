"""Helpers for the launch-environment tests: run gpulaunch for real and read what its child saw."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cli_run
from gpu_launch.hardware import snapshot

#: A child that prints, as JSON, the GPU variables it received and the CPUs it may run on.
REPORT = ("import json, os; print(json.dumps({**{k: os.environ.get(k) for k in "
          "('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'GPULAUNCH_GPUS')}, "
          "'cpus': sorted(os.sched_getaffinity(0))}))")




def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without anything a parent could have narrowed the GPUs with."""
    return cli_run.clean_env(extra)


def gpulaunch(args: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m gpu_launch ARGS`` with a clean parent environment plus ``env``."""
    return subprocess.run([sys.executable, "-m", "gpu_launch", *args], env=clean_env(env), capture_output=True,
                          text=True, timeout=60, check=False)


def launch_report(args: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """Launch the REPORT child with ``args`` before ``--``; returns what it printed and gpulaunch's stderr."""
    done = gpulaunch([*args, "--", sys.executable, "-c", REPORT], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def example(name: str) -> dict[str, Any]:
    """A bundled example machine as the JSON document (to derive test machines from)."""
    return json.loads(snapshot.dump(snapshot.resolve(name)))


def write(tmp_path: Path, doc: dict[str, Any], name: str = "machine.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), "utf-8")
    return str(path)


def uuids(name: str) -> list[str]:
    return [g.uuid for g in snapshot.resolve(name).gpus]
