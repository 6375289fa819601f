"""The child gets the parent's environment plus exactly the documented variables, and its argv byte for byte.

Every test runs the real CLI (``python -m gpu_launch --snapshot dgx-h100 ... -- CHILD``) and reads
what a real child process wrote: its whole ``os.environb``, its ``sys.argv`` as bytes, its pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import clean_env, gpulaunch_argv
from gpu_launch.run import environment

# The child writes its argv and environment (as os.fsencode'd bytes, hex in JSON) and its pid next to OUT.
CHILD = r"""
import json, os, sys
out = sys.argv[1]
with open(out + ".argv", "w") as fh:
    json.dump([os.fsencode(a).hex() for a in sys.argv[2:]], fh)
with open(out + ".env", "w") as fh:
    json.dump({k.hex(): v.hex() for k, v in os.environb.items()}, fh)
with open(out + ".pid", "w") as fh:
    fh.write(str(os.getpid()))
"""

NASTY_ARGS: list[bytes] = [
    b"plain",
    b"two words",
    b"  leading and trailing  ",
    b"'single' \"double\" `back`",
    b"$(touch PWNED)",
    b"`touch PWNED`",
    b"; touch PWNED; #",
    b"&& echo hi || true | cat > PWNED",
    b"$HOME ${PATH} $1 $$ $?",
    b"*",
    b"*.py ?[a-z] {a,b} ~ ~root",
    b"line one\nline two\n",
    b"tab\there\rcarriage",
    b"",
    b"\xff\xfe not utf-8 \x80",
    b"caf\xc3\xa9 \xe2\x86\x92 utf-8",
    b"--gpus",
    b"3",
    b"-q",
    b"--",
    b"\\back\\slash\\",
    b"%s %n %x",
    b"\x01\x1b[31mescape",
    b"=",
    b"a=b",
]


def _child_files(tmp: Path) -> tuple[Path, Path]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    return script, tmp / "out"


def _run(tmp: Path, gpulaunch_args: list[bytes | str], child_args: list[bytes], env: dict[bytes, bytes],
         ) -> tuple[subprocess.CompletedProcess[bytes], subprocess.Popen[bytes]]:
    script, out = _child_files(tmp)
    argv = gpulaunch_argv(*gpulaunch_args, sys.executable, str(script), str(out), *child_args)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp)
    stdout, stderr = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), proc


def _read(tmp: Path) -> tuple[list[bytes], dict[bytes, bytes], int]:
    argv = [bytes.fromhex(a) for a in json.loads((tmp / "out.argv").read_text())]
    env = {bytes.fromhex(k): bytes.fromhex(v) for k, v in json.loads((tmp / "out.env").read_text()).items()}
    return argv, env, int((tmp / "out.pid").read_text())


def _bytes_env(extra: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    env = {os.fsencode(k): os.fsencode(v) for k, v in clean_env().items()}
    env.update(extra or {})
    return env


PARENT_EXTRA = {
    b"HYGIENE_PLAIN": b"value",
    b"HYGIENE_EMPTY": b"",
    b"HYGIENE_SPACES": b"  a b  ",
    b"HYGIENE_SHELL": b"$(touch PWNED) `id` ; * ~",
    b"HYGIENE_NEWLINE": b"one\ntwo",
    b"HYGIENE_EQUALS": b"a=b=c",
    b"HYGIENE_BYTES": b"\xff\xfe\x80 not utf-8",
    b"HYGIENE_\xc3\xa9": b"non-ascii name",
}


@pytest.mark.parametrize("how", [["--gpus", "4,5"], ["--auto", "2"], ["--gpus", "3,1", "--uuid"]], ids=" ".join)
def test_child_env_is_parent_plus_exactly_the_documented_variables(tmp_path: Path, how: list[str]) -> None:
    parent = _bytes_env(PARENT_EXTRA)
    assert not any(os.fsencode(name) in parent for name in environment.SET_VARIABLES)
    result, _ = _run(tmp_path, ["--snapshot", "dgx-h100", "-q", *how, "--"], [], parent)
    assert result.returncode == 0, result.stderr
    _, child, _ = _read(tmp_path)
    added = {k for k in child if k not in parent}
    changed = {k for k in child if k in parent and child[k] != parent[k]}
    removed = {k for k in parent if k not in child}
    assert removed == set()
    assert changed == set()
    assert added == {os.fsencode(name) for name in environment.SET_VARIABLES}
    for key, value in PARENT_EXTRA.items():
        assert child[key] == value, key  # byte for byte, odd bytes included
    assert child[b"CUDA_DEVICE_ORDER"] == b"PCI_BUS_ID"
    gpus = {"4,5": b"4,5", "3,1": b"3,1"}.get(how[1])
    if how[0] == "--gpus":
        assert child[b"GPULAUNCH_GPUS"] == gpus
        if "--uuid" in how:
            assert child[b"CUDA_VISIBLE_DEVICES"].count(b"GPU-") == 2
        else:
            assert child[b"CUDA_VISIBLE_DEVICES"] == gpus
    else:
        assert len(child[b"CUDA_VISIBLE_DEVICES"].split(b",")) == 2


def test_documented_variables_replace_the_parents_values(tmp_path: Path) -> None:
    parent = _bytes_env({**PARENT_EXTRA, b"CUDA_DEVICE_ORDER": b"FASTEST_FIRST", b"GPULAUNCH_GPUS": b"stale"})
    result, _ = _run(tmp_path, ["--snapshot", "dgx-h100", "-q", "--gpus", "6", "--"], [], parent)
    assert result.returncode == 0, result.stderr
    _, child, _ = _read(tmp_path)
    assert child[b"CUDA_DEVICE_ORDER"] == b"PCI_BUS_ID"
    assert child[b"GPULAUNCH_GPUS"] == b"6"
    assert child[b"CUDA_VISIBLE_DEVICES"] == b"6"
    assert {k for k in child if parent.get(k) != child[k]} == {os.fsencode(n) for n in environment.SET_VARIABLES}


@pytest.mark.parametrize("separator", [["--"], []], ids=["after --", "first word"])
def test_argv_reaches_the_child_byte_for_byte_without_a_shell(tmp_path: Path, separator: list[str]) -> None:
    result, proc = _run(tmp_path, ["--snapshot", "dgx-h100", "-q", "--gpus", "2", *separator], NASTY_ARGS,
                        _bytes_env())
    assert result.returncode == 0, result.stderr
    argv, _, pid = _read(tmp_path)
    assert argv == NASTY_ARGS
    assert pid == proc.pid, "the command replaced gpulaunch (exec): no shell or other process in between"
    assert not list(tmp_path.glob("PWNED*")), "something ran the arguments through a shell"
    assert result.stdout == b"" and result.stderr == b""


def test_dry_run_quotes_what_it_would_run_and_runs_nothing(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, ["--snapshot", "dgx-h100", "--dry-run", "--gpus", "2", "--"],
                     [b"$(touch PWNED)", b"two words"], _bytes_env())
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out.argv").exists()
    assert not list(tmp_path.glob("PWNED*"))
    assert b"'$(touch PWNED)' 'two words'" in result.stdout


def test_program_found_on_a_path_entry_with_shell_characters(tmp_path: Path) -> None:
    """PATH lookup is done by gpulaunch itself: a directory named like shell syntax is just a name."""
    odd = tmp_path / "bin with space $(touch PWNED) *"
    odd.mkdir()
    tool = odd / "hygiene-tool"
    tool.write_text(f"#!{sys.executable}\n" + CHILD)
    tool.chmod(0o755)
    env = _bytes_env()
    env[b"PATH"] = os.fsencode(odd) + b":" + env[b"PATH"]
    out = tmp_path / "out"
    proc = subprocess.run(gpulaunch_argv("--snapshot", "dgx-h100", "-q", "--gpus", "0", "--", "hygiene-tool",
                                         str(out), b"x y"), capture_output=True, env=env, cwd=tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert _read(tmp_path)[0] == [b"x y"]
    assert not list(tmp_path.glob("PWNED*"))


def test_the_commands_exit_code_is_returned(tmp_path: Path) -> None:
    for code in (0, 1, 3, 42, 126, 127, 255):
        proc = subprocess.run(gpulaunch_argv("--snapshot", "dgx-h100", "-q", "--gpus", "0", "--", sys.executable,
                                             "-c", f"raise SystemExit({code})"), capture_output=True,
                              env=clean_env(), timeout=30)
        assert proc.returncode == code, proc.stderr
