"""`gpulaunch env`: the chosen environment as shell code for eval, fish, or JSON."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from childproc import clean_env, gpulaunch, uuids
from gpu_launch.views import shellenv

GPULAUNCH = f"{shlex.quote(sys.executable)} -m gpu_launch"
SHOW = 'echo "cvd=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER gpus=$GPULAUNCH_GPUS"'


def _shell(shell: str, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    return subprocess.run([shell, "-c", script], env=clean_env(env), capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("shell", ["bash", "zsh", "sh"])
def test_eval_in_posix_shells_sets_the_variables(shell):
    done = _shell(shell, f'eval "$({GPULAUNCH} env --snapshot pcie-8x --auto 2 -q)"; {SHOW}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "cvd=0,1 order=PCI_BUS_ID gpus=0,1"


def test_fish_source_sets_the_variables():
    done = _shell("fish", f"{GPULAUNCH} env --snapshot pcie-8x --gpus 5,4 --shell fish -q | source; "
                          'echo "cvd=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER gpus=$GPULAUNCH_GPUS"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "cvd=5,4 order=PCI_BUS_ID gpus=5,4"


def test_env_prints_the_mapping_on_stderr_only():
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--gpus", "3"])
    assert done.returncode == 0
    assert done.stdout == "export CUDA_VISIBLE_DEVICES=3\nexport CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport GPULAUNCH_GPUS=3\n"
    assert "cuda:0 → GPU 3" in done.stderr


def test_env_json():
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--gpus", "7,6", "--json", "-q"])
    doc = json.loads(done.stdout)
    assert doc["schema"] == 1
    assert doc["env"] == {"CUDA_VISIBLE_DEVICES": "7,6", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GPULAUNCH_GPUS": "7,6"}
    assert [d["cuda"] for d in doc["devices"]] == ["cuda:0", "cuda:1"] and doc["devices"][0]["index"] == 7


def test_env_under_a_parent_cvd_writes_uuids():
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--auto", "1", "-q"], {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert done.returncode == 0
    cvd = done.stdout.splitlines()[0].removeprefix("export CUDA_VISIBLE_DEVICES=")
    assert cvd in uuids("pcie-8x")[4:6]


def test_env_takes_no_command():
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--auto", "1", "python"])
    assert done.returncode == 2 and "`env` runs no command" in done.stderr


def test_selection_before_env_makes_env_the_program():
    # the documented rule: after --auto/--gpus/--fit a word is the command, so this runs /usr/bin/env
    if shutil.which("env") is None:
        pytest.skip("no env program")
    done = gpulaunch(["--snapshot", "pcie-8x", "--gpus", "2", "-q", "env"])
    assert done.returncode == 0 and "CUDA_VISIBLE_DEVICES=2\n" in done.stdout


def test_env_errors_like_a_launch():
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--auto", "9"])
    assert done.returncode == 4 and done.stdout == ""
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--shell", "tcsh"])
    assert done.returncode == 2 and "--shell: 'tcsh' is not one of bash, zsh, sh, fish" in done.stderr
    done = gpulaunch(["--snapshot", "pcie-8x", "--shell", "fish", "--", "true"])
    assert done.returncode == 2 and "--shell does not apply to `run`" in done.stderr


def test_env_help_says_it_holds_no_reservation():
    done = gpulaunch(["env", "--help"])
    assert "no reservation" in done.stdout and "--shell" in done.stdout


NASTY = "a b'c\"$(touch /tmp/x)`x`\\n;$HOME\ttab"


def test_posix_quoting_survives_eval():
    text = shellenv.posix({"X": NASTY}, ["X"])
    done = _shell("bash", text + 'printf %s "$X"')
    assert done.stdout == NASTY


def test_fish_quoting_survives_source():
    text = shellenv.fish({"X": NASTY}, ["X"])
    done = _shell("fish", text + 'printf %s "$X"')
    assert done.stdout == NASTY
