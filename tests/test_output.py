"""Output manners: tables and status on stderr, the child alone on stdout, -q, -v, colour rules."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cli_run import run_in_terminal, scrubbed

CHILD = [sys.executable, "-c", "import os; print('child', os.environ['CUDA_VISIBLE_DEVICES'])"]


def gpulaunch(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = scrubbed()
    base.pop("NO_COLOR", None)
    base["GPULAUNCH_CONFIG"] = ""
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True, env=base,
                          timeout=60)


def test_mapping_table_on_stderr_child_alone_on_stdout() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--gpus", "4,5", "--", *CHILD)
    assert proc.returncode == 0
    assert proc.stdout == "child 4,5\n"
    assert "cuda:0 → GPU 4" in proc.stderr and "cuda:1 → GPU 5" in proc.stderr


def test_quiet_silences_all_but_errors() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--gpus", "4", "-q", "-v", "--", *CHILD)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "child 4\n", "")
    bad = gpulaunch("--snapshot", "dgx-h100", "--gpus", "99", "-q", "--", *CHILD)
    assert bad.returncode == 2 and bad.stderr.startswith("gpulaunch: error: --gpus: there is no GPU 99")


def test_quiet_keeps_warnings_off_too() -> None:
    # GPU 0 of pcie-8x is busy: an explicit choice of it warns, unless -q
    loud = gpulaunch("--snapshot", "pcie-8x", "--gpus", "0", "--", *CHILD)
    quiet = gpulaunch("--snapshot", "pcie-8x", "--gpus", "0", "-q", "--", *CHILD)
    assert loud.stdout == quiet.stdout == "child 0\n"
    assert quiet.stderr == "" and loud.stderr


def test_verbose_shows_read_timing_on_stderr() -> None:
    proc = gpulaunch("--snapshot", "workstation-4x", "--auto", "1", "-v", "--", *CHILD)
    assert proc.stdout == "child 0\n"
    assert proc.stderr.startswith("gpulaunch: read workstation-4x in ") and " ms" in proc.stderr.splitlines()[0]
    assert "read" not in gpulaunch("--snapshot", "workstation-4x", "--auto", "1", "--", *CHILD).stderr


def run_in_pty(argv: list[str], env: dict[str, str]) -> bytes:
    """Run gpulaunch with stdout on a terminal; returns what the terminal got."""
    return run_in_terminal(argv, env)[0]


@pytest.mark.parametrize(("no_color", "coloured"), [(None, True), ("1", False), ("", True)])  # "" is unset
def test_colour_only_on_a_terminal_without_no_color(no_color: str | None, coloured: bool) -> None:
    env = scrubbed()
    env.pop("NO_COLOR", None)
    env.update(GPULAUNCH_CONFIG="", TERM="xterm-256color", COLUMNS="160")
    env.pop("FORCE_COLOR", None)
    if no_color is not None:
        env["NO_COLOR"] = no_color
    out = run_in_pty(["--snapshot", "pcie-8x", "ls"], env)
    assert (b"\x1b[" in out) is coloured, out[:300]
    assert b"GPU" in out
    assert b"FREE" in out.upper() and b"27.6 GiB" in out  # the FREE column, rich or plain (GPU 2 has 27.6 GiB free)
    piped = gpulaunch("--snapshot", "pcie-8x", "ls")
    assert "\x1b[" not in piped.stdout and piped.stdout.startswith("gpu-a6000-03  driver")


FAKE_PYNVML = """
import sys
sys.path.insert(0, {tests!r})
from fake_pynvml import workstation_nvlink
_fake = workstation_nvlink()


def __getattr__(name):
    return getattr(_fake, name)
"""


@pytest.fixture
def fake_nvml_path(tmp_path) -> str:
    """A directory whose `pynvml` is the fake (a 4-GPU NVLink workstation), for real subprocesses."""
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML.format(tests=os.path.dirname(os.path.abspath(__file__))))
    return str(tmp_path)


def test_verbose_shows_nvml_timings_on_stderr(fake_nvml_path: str) -> None:
    env = {"PYTHONPATH": fake_nvml_path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = gpulaunch("ls", "--json", "-v", env=env)
    assert proc.returncode == 0, proc.stderr
    assert len(__import__("json").loads(proc.stdout)["gpus"]) == 4  # stdout: the JSON and nothing else
    first = proc.stderr.splitlines()[0]
    assert first.startswith("gpulaunch: read nvml in ") and "init" in first and " ms" in first, proc.stderr
    child = gpulaunch("--auto", "1", "-v", "--", *CHILD, env=env)
    assert child.stdout == "child 0\n" and child.stderr.startswith("gpulaunch: read nvml in ")
    quiet = gpulaunch("--auto", "1", "-v", "-q", "--", *CHILD, env=env)
    assert (quiet.stdout, quiet.stderr) == ("child 0\n", "")


def test_completion_helper_reads_nvml(fake_nvml_path: str) -> None:
    env = {"PYTHONPATH": fake_nvml_path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = gpulaunch("__complete", "gpus", env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "0\n1\n2\n3\nall\n", "")


HANGING_PYNVML = FAKE_PYNVML + """
import time


def _hang(*args, **kwargs):
    time.sleep(120)


def __getattr__(name):
    return _hang if name.startswith("nvmlInit") else getattr(_fake, name)
"""


def test_completion_helper_gives_up_on_a_hung_nvml(tmp_path) -> None:
    """A completion must never hang the shell: the helper leaves (silently) when NVML does not answer.

    Not a timing test: the 60 s subprocess limit only turns a hang into a failure instead of a stall.
    """
    (tmp_path / "pynvml.py").write_text(HANGING_PYNVML.format(tests=os.path.dirname(os.path.abspath(__file__))))
    proc = gpulaunch("__complete", "gpus", env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
