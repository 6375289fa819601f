"""Every number a user gives is bounded where it comes in; job lines split in linear time; foreign text escaped.

Each case runs the real CLI (or a real Python child for the API) and asserts what the user sees: one
error line and exit 2 (the API: the typed exception), never a traceback; the limits are documented in
gpu_launch/base/units.py (durations at most 366 days, sizes at most 1 PiB, GPUs at most 4096) and
reservations/waiting.py (GPULAUNCH_POLL_INTERVAL from 0.05 to 3600 seconds).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_launch.sweeps.jobfile import parse_jobs
from gpu_launch.base.text import split_words
from sharing_helpers import env, gl

NINES = "9" * 400
ESC = "\x1b[31mRED\nfake line"  # a colour and a newline: both must reach the terminal escaped


def _cli(*args: str, timeout: float = 60, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gl(*args), env=env(**extra), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _one_error_line(proc: subprocess.CompletedProcess[str], code: int, fragment: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: "), proc.stderr
    assert fragment in lines[0], proc.stderr


# ------------------------------------------------------------------- environment, config, command line

@pytest.mark.parametrize("args, variables, fragment", [
    # GPULAUNCH_TIME is converted for every command (config defaults are read first): it broke even `ls`.
    (["ls"], {"GPULAUNCH_TIME": f"{NINES}s"}, "GPULAUNCH_TIME: '999"),
    (["ls"], {"GPULAUNCH_TIME": "3000000-00:00:00"}, "is out of range (at most 366 days)"),
    (["ls"], {"GPULAUNCH_WAIT": f"{NINES}s"}, "GPULAUNCH_WAIT: '999"),
    (["ls"], {"GPULAUNCH_MIN_FREE": f"{NINES}GiB"}, "is out of range (at most 1 PiB)"),
    (["ls"], {"GPULAUNCH_SBATCH_ARG": '--comment="x'}, "cannot split '--comment=\"x' into arguments (No closing"),
    (["--auto", "1", f"--wait={NINES}s", "--", "true"], {}, "--wait: '999"),
    (["--auto", "1", "--wait=400d", "--", "true"], {}, "to wait for ever, give --wait without a TIMEOUT"),
    (["--auto", "1", "--min-free", f"{NINES}.5TiB", "--", "true"], {}, "--min-free: '999"),
    (["--fit", "2048TiB", "--", "true"], {}, "--fit: '2048TiB' is out of range (at most 1 PiB)"),
    (["--auto", "1", "--wait=1s", "--", "true"], {"GPULAUNCH_POLL_INTERVAL": "1e-300"},
     "GPULAUNCH_POLL_INTERVAL: '1e-300' is out of range (from 0.05 to 3600 seconds)"),
])
def test_an_unbounded_number_is_one_error_line(args: list[str], variables: dict[str, str], fragment: str) -> None:
    proc = _cli("--snapshot", "dgx-h100", *args, **variables)
    _one_error_line(proc, 2, fragment)


@pytest.mark.parametrize("time", [f"{NINES}s", f"{NINES}-00:00:00", "3000000-00:00:00", "400d", "99999999:00"])
def test_each_slurm_time_is_bounded_before_slurm_is_asked(tmp_path: Path, time: str) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    proc = _cli("each", str(jobs), "--slurm", "--time", time, cwd=tmp_path)
    _one_error_line(proc, 2, "--time: ")
    assert "is out of range (at most 366 days)" in proc.stderr


def test_a_config_file_value_is_bounded_and_named(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'wait = "{NINES}s"\n')
    proc = _cli("--snapshot", "dgx-h100", "ls", GPULAUNCH_CONFIG=str(config))
    _one_error_line(proc, 7, f"config {config}:1: wait: '999")


def test_the_slurm_task_entry_takes_only_ascii_digits(tmp_path: Path) -> None:
    proc = _cli("__slurm-task", str(tmp_path / "jobs.txt"), str(tmp_path), "1", SLURM_ARRAY_TASK_ID="²")
    _one_error_line(proc, 2, "SLURM_ARRAY_TASK_ID: '²'")
    proc = _cli("__slurm-task", str(tmp_path / "jobs.txt"), str(tmp_path), "²", SLURM_ARRAY_TASK_ID="1")
    _one_error_line(proc, 2, "__slurm-task needs JOBFILE LOGDIR GPUS")


# ----------------------------------------------------------------------------------------- Python API

API_CHILD = r'''
import json, sys
import gpu_launch
calls = {
    "use(10**5000)": lambda: gpu_launch.use(10**5000, quiet=True),
    "use(gpus=10**5000)": lambda: gpu_launch.use(gpus=10**5000, quiet=True),
    "use(gpus=[1, 10**5000])": lambda: gpu_launch.use(gpus=[1, 10**5000], quiet=True),
    "use(max_util=10**5000)": lambda: gpu_launch.use(1, max_util=10**5000, quiet=True),
    "use(wait=10**400)": lambda: gpu_launch.use(1, wait=10**400, quiet=True),
    "use(wait=1e308)": lambda: gpu_launch.use(1, wait=1e308, quiet=True),
    "use(min_free=10**400)": lambda: gpu_launch.use(1, min_free=10**400, quiet=True),
    "reserve(fit=1e300)": lambda: gpu_launch.reserve(fit=1e300, quiet=True),
    "select(wait=timedelta.max)": lambda: gpu_launch.select(1, wait=__import__("datetime").timedelta.max, quiet=True),
    "use(idle=10**5000)": lambda: gpu_launch.use(1, idle=10**5000, quiet=True),
}
out = {}
for name, call in calls.items():
    try:
        call()
        out[name] = "no error"
    except gpu_launch.GpuLaunchError as exc:
        out[name] = [type(exc).__name__, exc.message]
    gpu_launch.release()
print(json.dumps(out))
'''


def test_the_api_bounds_every_number_with_the_typed_exception() -> None:
    proc = subprocess.run([sys.executable, "-c", API_CHILD], env=env(GPULAUNCH_SNAPSHOT="dgx-h100"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    got = json.loads(proc.stdout)
    want = {
        "use(10**5000)": "n: a number of about 5001 digits is out of range (0 to 4096)",
        "use(gpus=10**5000)": "gpus: a number of about 5001 digits is out of range (0 to 4096)",
        "use(gpus=[1, 10**5000])": "gpus: a number of about 5001 digits is out of range (0 to 4096)",
        "use(max_util=10**5000)": "max_util: a number of about 5001 digits is out of range (0 to 100)",
        "use(wait=10**400)": "wait: a number of about 401 digits is out of range (at most 366 days)",
        "use(wait=1e308)": "wait: 1e+308 is out of range (at most 366 days)",
        "use(min_free=10**400)": "min_free: a number of about 401 digits is out of range (at most 1 PiB)",
        "reserve(fit=1e300)": "fit: 1e+300 is out of range (at most 1 PiB)",
        "select(wait=timedelta.max)": "is out of range (at most 366 days)",
        "use(idle=10**5000)": "idle: expected True or False, got a number of about 5001 digits",
    }
    for name, message in want.items():
        assert got[name][0] == "UsageError" and message in got[name][1], (name, got[name])


# ------------------------------------------------------------------------------------ job line splitting

_LINES = st.text(alphabet=st.sampled_from(list(" \t\r\n#'\"\\ab{}é\x0c")), max_size=24)


@settings(max_examples=3000, deadline=None)
@given(_LINES, st.booleans())
def test_split_words_is_shlex_split_word_for_word_and_error_for_error(line: str, comments: bool) -> None:
    def outcome(split):  # type: ignore[no-untyped-def]
        try:
            return ("words", split(line, comments=comments))
        except ValueError as exc:
            return ("error", str(exc))

    assert outcome(split_words) == outcome(shlex.split)


def test_a_job_line_with_a_4_mb_word_is_split_at_once(tmp_path: Path) -> None:
    """shlex took 8.3 s for a 0.8 MB word and grew with the square of it (a 4 MB one: minutes)."""
    word = "x" * (4 * 1024 * 1024)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(f"true '{word}' \"{word}\"\n")
    proc = _cli("--snapshot", "dgx-h100", "each", str(jobs), "-q", "--log-dir", str(tmp_path / "logs"), timeout=60)
    # The word reached exec (which refuses an argument that long): the line was split, quotes and all.
    assert proc.returncode == 9 and "Traceback" not in proc.stderr, proc.stderr[-500:]
    assert "1 of 1 job failed: 1" in proc.stderr


def test_a_utf8_bom_is_not_part_of_the_first_command(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_bytes(b"\xef\xbb\xbftrue\ntrue\n")
    proc = _cli("--snapshot", "dgx-h100", "each", str(jobs), "--log-dir", str(tmp_path / "logs"))
    assert proc.returncode == 0, proc.stderr
    assert parse_jobs("\ufefftrue a\n", "x")[0].argv == ("true", "a")


# ---------------------------------------------------------------------------- foreign text is escaped

@pytest.mark.parametrize("variables, args", [
    ({"CUDA_VISIBLE_DEVICES": ESC}, ["--gpus", "1", "--", "true"]),
    ({"CUDA_VISIBLE_DEVICES": f"0,{ESC}"}, ["--auto", "1", "--", "true"]),
    ({"NVIDIA_VISIBLE_DEVICES": ESC}, ["--gpus", "1", "--", "true"]),
    ({"NVIDIA_VISIBLE_DEVICES": f"0,{ESC}"}, ["--auto", "2", "--", "true"]),
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": ESC, "SLURM_JOB_GPUS": f"0,1{ESC}"}, ["--auto", "1", "--", "true"]),
    ({"SLURM_JOB_ID": ESC, "SLURM_JOB_GPUS": ESC}, ["--auto", "1", "--", "true"]),
    ({"CUDA_VISIBLE_DEVICES": f"0,1{ESC}"}, ["check"]),
])
def test_inherited_variables_reach_the_terminal_escaped(variables: dict[str, str], args: list[str]) -> None:
    proc = _cli("--snapshot", "dgx-h100", *args, **variables)
    assert "Traceback" not in proc.stderr, proc.stderr
    shown = proc.stderr + proc.stdout
    assert "\x1b" not in shown and "\\x1b[31mRED\\nfake line" in shown, shown
    assert not any(line.startswith("fake line") for line in shown.splitlines()), shown


def test_a_holder_line_with_a_400_digit_time_or_pid_is_no_traceback(tmp_path: Path) -> None:
    """The holder line in a lock file is someone else's text: its numbers are bounded too (float() overflowed)."""
    import fcntl
    import os

    from gpu_launch.hardware import snapshot

    locks = tmp_path / "locks"
    assert _cli("--snapshot", "dgx-h100", "-q", "--gpus", "0", "--", "true", GPULAUNCH_LOCK_DIR=str(locks)).returncode == 0
    lock = locks / f"{snapshot.resolve('dgx-h100').gpus[0].uuid}.lock"
    fd = os.open(lock, os.O_RDWR)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f'{{"pid": {NINES}, "user": "mallory", "started": {NINES}}}\n'.encode())
        fcntl.flock(fd, fcntl.LOCK_EX)
        listing = _cli("--snapshot", "dgx-h100", "ls", GPULAUNCH_LOCK_DIR=str(locks))
        assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
        assert "mallory" in listing.stdout and NINES[:20] not in listing.stdout
        launch = _cli("--snapshot", "dgx-h100", "--gpus", "0", "--", "true", GPULAUNCH_LOCK_DIR=str(locks))
        _one_error_line(launch, 6, "mallory")
    finally:
        os.close(fd)
