"""Defaults from the config file, then GPULAUNCH_* variables, then flags; bad files name file, line, key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import scrubbed


def gpulaunch(*argv: str, env: dict[str, str] | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = scrubbed()  # the private lock directory stays (tests/conftest.py)
    base.pop("NO_COLOR", None)
    if home is not None:  # else XDG_CONFIG_HOME stays the session's empty directory: never the tester's file
        base.pop("XDG_CONFIG_HOME", None)
        base["HOME"] = str(home)
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True, env=base,
                          timeout=60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def settings(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    assert proc.returncode == 0, proc.stderr
    return {s["option"]: s for s in json.loads(proc.stdout)["settings"]}


def chosen(proc: subprocess.CompletedProcess[str]) -> list[int]:
    assert proc.returncode == 0, proc.stderr
    return [d["index"] for d in json.loads(proc.stdout)["devices"]]


def test_precedence_file_then_env_then_flag(tmp_path: Path) -> None:
    cfg = write(tmp_path / "xdg" / "gpulaunch" / "config.toml",
                '# team defaults\nsnapshot = "workstation-4x"\n\nexclude = "0"\nmin-free = "1GiB"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    launch = ["--auto", "1", "--dry-run", "--json", "--", "true"]
    # file: GPU 0 excluded, the snapshot comes from the file
    assert chosen(gpulaunch(*launch, env=env)) == [1]
    # env beats file
    assert chosen(gpulaunch(*launch, env={**env, "GPULAUNCH_EXCLUDE": "1"})) == [0]
    # flag beats env and file
    assert chosen(gpulaunch("--exclude", "0,1", *launch, env={**env, "GPULAUNCH_EXCLUDE": "1"})) == [2]
    # and `gpulaunch config` says where each value came from
    shown = settings(gpulaunch("config", "--json", "--min-free", "2GiB", env={**env, "GPULAUNCH_EXCLUDE": "1"}))
    assert (shown["--snapshot"]["value"], shown["--snapshot"]["source"], shown["--snapshot"]["where"]) == \
        ("workstation-4x", "file", f"{cfg}:2")
    assert (shown["--exclude"]["value"], shown["--exclude"]["source"], shown["--exclude"]["where"]) == \
        ("1", "env", "GPULAUNCH_EXCLUDE")
    assert (shown["--min-free"]["source"], shown["--min-free"]["where"]) == ("flag", "--min-free")
    assert shown["--idle"]["source"] == "default"


def test_config_text_names_sources(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", "idle = true\n")
    proc = gpulaunch("config", env={"GPULAUNCH_CONFIG": str(cfg), "GPULAUNCH_MAX_UTIL": "30"})
    assert proc.returncode == 0
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("--")}
    assert "on" in lines["--idle"] and f"file {cfg}:1" in lines["--idle"]
    assert "30" in lines["--max-util"] and "env GPULAUNCH_MAX_UTIL" in lines["--max-util"]
    assert lines["--uuid"].split()[1:] == ["off", "default"]
    # 80 columns hold every line but the ones that show the user's own paths
    own = (str(cfg), os.environ["GPULAUNCH_LOCK_DIR"])
    assert [line for line in proc.stdout.splitlines() if len(line) > 80 and not any(p in line for p in own)] == []


def test_default_location_is_home_dot_config(tmp_path: Path) -> None:
    write(tmp_path / ".config" / "gpulaunch" / "config.toml", 'snapshot = "pcie-8x"\n')
    proc = gpulaunch("ls", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["gpus"]) == 8
    # GPULAUNCH_CONFIG="" switches the file off
    off = gpulaunch("config", "--json", home=tmp_path, env={"GPULAUNCH_CONFIG": ""})
    assert settings(off)["--snapshot"]["source"] == "default"
    # and the table says so once, without calling the switched-off file "not found"
    first = gpulaunch("config", home=tmp_path, env={"GPULAUNCH_CONFIG": ""}).stdout.splitlines()[0]
    assert first == "config file: (none: GPULAUNCH_CONFIG is empty)"


def test_environment_snapshot_and_flags(tmp_path: Path) -> None:
    proc = gpulaunch("--auto", "1", "-q", "--", sys.executable, "-c",
                     "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])",
                     env={"GPULAUNCH_SNAPSHOT": "workstation-4x", "GPULAUNCH_EXCLUDE": "0,1", "GPULAUNCH_CONFIG": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2\n" and proc.stderr == ""


def test_quiet_from_config_silences_the_table(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", "quiet = true\nsnapshot = 'workstation-4x'\n")
    proc = gpulaunch("--auto", "1", "--", "true", env={"GPULAUNCH_CONFIG": str(cfg)})
    assert proc.returncode == 0 and proc.stderr == ""
    loud = gpulaunch("--auto", "1", "--", "true", env={"GPULAUNCH_CONFIG": str(cfg), "GPULAUNCH_QUIET": "0"})
    assert "cuda:0 →" in loud.stderr


def test_a_default_exclude_gives_way_to_gpus(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", 'exclude = "0"\nsnapshot = "workstation-4x"\n')
    proc = gpulaunch("--gpus", "0", "--dry-run", "--json", env={"GPULAUNCH_CONFIG": str(cfg)})
    assert chosen(proc) == [0]


@pytest.mark.parametrize(("text", "line", "words"), [
    ('snapshot = "dgx-h100"\n\nmin_fre = "20GiB"\n', 3, ["unknown key 'min_fre'", "did you mean 'min-free'"]),
    ('idle = true\nmin-free = "20XB"\n', 2, ["min-free", "'20XB'"]),
    ('max-util = 300\n', 1, ["max-util", "300"]),
    ('idle = "yes"\n', 1, ["idle", "true/false"]),
    ('\nauto = 2\n', 2, ["'auto' cannot have a default", "--auto"]),
    ('idle = true\n\nquiet = \n', 3, ["not valid TOML", "key 'quiet'"]),
    ('[defaults]\nidle = true\n', 1, ["unknown key 'defaults'"]),
    ('exclude = ["0"]\n', 1, ["exclude", "expected a string"]),
])
def test_bad_file_names_file_line_and_key(tmp_path: Path, text: str, line: int, words: list[str]) -> None:
    cfg = write(tmp_path / "config.toml", text)
    proc = gpulaunch("--snapshot", "dgx-h100", "ls", env={"GPULAUNCH_CONFIG": str(cfg)})
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"gpulaunch: error: config {cfg}:{line}")
    for word in words:
        assert word in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_missing_explicit_file_and_bad_variable(tmp_path: Path) -> None:
    proc = gpulaunch("ls", env={"GPULAUNCH_CONFIG": str(tmp_path / "nope.toml")})
    assert proc.returncode == 7 and "nope.toml: no such file" in proc.stderr
    proc = gpulaunch("--snapshot", "dgx-h100", "--auto", "1", "--dry-run",
                     env={"GPULAUNCH_CONFIG": "", "GPULAUNCH_MIN_FREE": "lots"})
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulaunch: error: GPULAUNCH_MIN_FREE: 'lots' is not a size")


def test_help_never_reads_a_broken_config(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", "this is not toml\n")
    assert gpulaunch("--help", env={"GPULAUNCH_CONFIG": str(cfg)}).returncode == 0
    assert gpulaunch("--version", env={"GPULAUNCH_CONFIG": str(cfg)}).returncode == 0


def test_config_rejects_per_command_flags() -> None:
    proc = gpulaunch("config", "--dry-run", env={"GPULAUNCH_CONFIG": ""})
    assert proc.returncode == 2 and "--dry-run has no default" in proc.stderr


PROBE = ("import sys; from gpu_launch import cli; "
         "cli.run(['--snapshot', 'workstation-4x', '--auto', '1', '-q', '--dry-run', '--', 'true']); "
         "print('tomllib' in sys.modules, 'tomli' in sys.modules)")


def test_no_config_file_means_no_toml_import(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPULAUNCH_CONFIG": "", "XDG_CONFIG_HOME": str(tmp_path)})
    assert proc.stdout.splitlines()[-1] == "False False"
    cfg = write(tmp_path / "c.toml", "idle = false\n")
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPULAUNCH_CONFIG": str(cfg)})
    assert "True" in proc.stdout.splitlines()[-1]
