"""`each` runs the lines users write (issue 26 items 3 and 4): through /bin/sh -c, placeholders filled in and quoted
for the shell, a placeholder inside a word refused before anything is reserved; `--no-shell` keeps the direct exec."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from sharing_helpers import run

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def _each(tmp_path: Path, locks: Path, text: str, *args: str):
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(text)
    return run(["--snapshot", "workstation-4x", "each", str(jobs), "--log-dir", str(tmp_path / "logs"), *args], locks,
               cwd=tmp_path)


def test_redirects_cd_pipes_and_variables_work_and_a_failing_line_says_its_exit_code(tmp_path: Path,
                                                                                       locks: Path) -> None:
    """Was: `echo hello > out.txt` printed "hello > out.txt" into the log, "done, exit 0", and no file; `cd` was
    "command not found"."""
    (tmp_path / "exp 1").mkdir()
    q = shlex.quote
    out, where, up, var = (q(str(tmp_path / name)) for name in ("out.txt", "where.txt", "up.txt", "var.txt"))
    result = _each(tmp_path, locks, f"""echo hello > {out}
cd {q(str(tmp_path / "exp 1"))} && pwd > {where}
printf 'abc\\n' | tr a-z A-Z > {up}
GREETING=hi sh -c 'echo "$GREETING, $CUDA_VISIBLE_DEVICES"' > {var}
sh -c 'exit 3'
""")
    assert result.returncode == 9, result.stderr
    assert (tmp_path / "out.txt").read_text() == "hello\n"
    assert (tmp_path / "where.txt").read_text() == f"{tmp_path / 'exp 1'}\n"
    assert (tmp_path / "up.txt").read_text() == "ABC\n"
    greeting, gpu = (tmp_path / "var.txt").read_text().strip().split(", ")
    assert greeting == "hi" and gpu in {"0", "1", "2", "3"}  # the job's own GPU, set for the whole line
    assert "gpulaunch: error: 1 of 5 jobs failed: 5" in result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("5 "))
    assert row.split()[1:4] == ["failed", "exit", "3"], result.stdout
    assert "job 5/5 failed: exit 3" in result.stderr


def test_no_shell_execs_the_words(tmp_path: Path, locks: Path) -> None:
    result = _each(tmp_path, locks, f"echo hello > {tmp_path / 'out.txt'}\n", "--no-shell")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out.txt").exists()
    assert (tmp_path / "logs" / "job-1.log").read_text() == f"hello > {tmp_path / 'out.txt'}\n"


def test_a_line_that_is_one_command_is_the_jobs_process(tmp_path: Path, locks: Path) -> None:
    """The shell execs a line that is one command, so its pid, signals and status are the command's own."""
    result = _each(tmp_path, locks, "sh -c 'kill -9 $$'\nsh -c 'kill -9 $$'; true\n", "--json")
    assert result.returncode == 9, result.stderr
    first, second = json.loads(result.stdout)["jobs"]
    assert (first["exit_code"], first["signal"]) == (None, "SIGKILL")
    assert first["argv"] == ["/bin/sh", "-c", "exec sh -c 'kill -9 $$'"]
    # Two commands: the shell stays, and says how its command ended (128 + 9).
    assert (second["status"], second["exit_code"]) == ("done", 0)


def test_placeholders_are_filled_in_and_quoted_for_the_shell(tmp_path: Path, locks: Path) -> None:
    line = (f"export NPROC={{n}}; {shlex.quote(sys.executable)} -c {shlex.quote(ECHO_ARGV)} --nproc_per_node={{n}} {{gpus}} "
            "'{{n}}' \"$NPROC\" ${HOME:+home} > got.json")
    result = _each(tmp_path, locks, line + "\n", "--gpus-per-job", "2")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "got.json").read_text()) == ["--nproc_per_node=2", "0,1", "{n}", "2", "home"]
    start = next(line for line in result.stderr.splitlines() if "job 1/1 started" in line)
    assert start.endswith(" --nproc_per_node=2 0,1 {n} \"$NPROC\" ${HOME:+home} > got.json"), start


def test_braces_of_the_shell_and_of_awk_are_not_placeholders(tmp_path: Path, locks: Path) -> None:
    result = _each(tmp_path, locks, "echo 'a b' | awk '{print $2}' > awk.txt; echo ${HOME} {a,b} {} > more.txt\n")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "awk.txt").read_text() == "b\n"
    assert (tmp_path / "more.txt").read_text().split()[0] == os.environ.get("HOME", "")


@pytest.mark.parametrize("line, word", [
    ("python3 train.py --out=run-{n}.txt", "'--out=run-{n}.txt'"),
    ("python3 train.py > log-{gpus}.txt", "'log-{gpus}.txt'"),
    ("python3 -c 'print({n})'", "'print({n})'"),
])
def test_a_placeholder_inside_a_word_is_refused_before_any_lock(tmp_path: Path, locks: Path, line: str,
                                                                 word: str) -> None:
    """Was: the line ran with the literal {n} (not even a warning)."""
    result = _each(tmp_path, locks, f"true\n{line}\n")
    assert result.returncode == 2, result.stderr
    name = line.split("{")[1].split("}")[0]
    assert result.stderr.startswith(f"gpulaunch: error: {tmp_path / 'jobs.txt'}, line 2: {{{name}}} inside the word "
                                    f"{word} would be passed on as it is"), result.stderr
    assert result.stderr.count("\n") == 1 and f"{{{{{name}}}}} is a literal {{{name}}}" in result.stderr
    assert not locks.exists() or os.listdir(locks) == []  # nothing reserved, nothing waited for
    assert not (tmp_path / "logs").exists()


def test_a_plan_placeholder_is_refused_in_a_sweep(tmp_path: Path, locks: Path) -> None:
    result = _each(tmp_path, locks, "true serve m --tensor-parallel-size {tp}\n", "--no-shell")
    assert result.returncode == 2, result.stderr
    assert "line 1: {tp} is filled in only when --fit names a model" in result.stderr
    assert not locks.exists() or os.listdir(locks) == []
