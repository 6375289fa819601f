"""The start-up shortcuts behave exactly like what they replace.

The launch path finds the command on PATH without shutil (``launch._which``) and reads bundled
examples from the package directory without importlib.resources. These tests pin the behaviour a
user sees: which program a launch really runs, and the exit codes when none can be run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import scrubbed

from gpu_launch.hardware import snapshot
from gpu_launch.run.execute import _which

ROOT = Path(__file__).resolve().parent.parent


def _launch(path: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = scrubbed(("GPULAUNCH_", "CUDA_"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # gpulaunch itself starts from sys.executable; only the child is looked up on ``path``.
    env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "--gpus", "3", "-q", "--", *argv],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def _script(path: Path, text: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(mode)
    return path


def test_the_first_executable_on_path_runs_skipping_non_executables_and_directories(tmp_path: Path) -> None:
    _script(tmp_path / "a" / "mytrainer", "echo from-a", mode=0o644)  # not executable: skipped
    (tmp_path / "b" / "mytrainer").mkdir(parents=True)  # a directory of that name: skipped
    _script(tmp_path / "c" / "mytrainer", 'echo "from-c $CUDA_VISIBLE_DEVICES"')
    _script(tmp_path / "d" / "mytrainer", "echo from-d")
    path = os.pathsep.join(str(tmp_path / d) for d in "abcd")
    result = _launch(path + os.pathsep + "/usr/bin:/bin", "mytrainer", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "from-c 3\n"


def test_an_empty_path_entry_means_the_current_directory(tmp_path: Path) -> None:
    _script(tmp_path / "here", "echo ran-here")
    result = _launch(os.pathsep + "/usr/bin:/bin", "here", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ran-here\n"


def test_not_on_path_is_127_with_one_line(tmp_path: Path) -> None:
    _script(tmp_path / "elsewhere" / "mytrainer", "echo no")
    result = _launch(str(tmp_path / "nothing-here"), "mytrainer", cwd=tmp_path)
    assert result.returncode == 127
    assert result.stderr == ("gpulaunch: error: mytrainer: command not found "
                             "(hint: check the spelling, or activate the environment that has it)\n")


@pytest.mark.parametrize("name", ["sh", "true", "definitely-not-a-command-xyz"])
@pytest.mark.parametrize("path", ["/usr/bin:/bin", "/bin:/usr/bin", "", "/nonexistent"])
def test_which_agrees_with_shutil(name: str, path: str) -> None:
    assert _which(name, path) == shutil.which(name, path=path)


def test_examples_fall_back_to_importlib_resources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    direct = snapshot.resolve("pcie-8x")
    names = snapshot.example_names()
    assert {"dgx-h100", "pcie-8x", "workstation-4x", "dgx1-v100", "mig-a100"} <= set(names)
    monkeypatch.setattr(snapshot, "_EXAMPLES_DIR", str(tmp_path / "gone"))  # e.g. a zipped install
    assert snapshot.example_names() == names
    assert snapshot.resolve("pcie-8x") == direct
