"""`gpulaunch ls` as a colleague reads it (issue 26 item 6): at 80 columns a reservation's holder reads as
its user and command word (the whole line with --wide), `--processes` lists every process with its
command, `--gpus SPEC` shows some GPUs, no escape codes where stdout is not a terminal (a pipe, Jupyter's
`!`), and USED is the memory nvidia-smi shows (without the driver's reserved memory).

Holders are real launches holding their GPUs; `ls` runs under a pseudo-terminal of 80 columns
(cli_run.run_in_terminal) and through a pipe.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_run import run_in_terminal
from sharing_helpers import Lines, env, run, start

from gpu_launch.reservations.holders import current_user

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TESTS = Path(__file__).resolve().parent
#: A training script stand-in: says it started, then holds its GPUs until the release file appears.
TRAIN = ("import os, sys, time\nprint('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
         "while not os.path.exists(sys.argv[1]): time.sleep(0.02)\n")


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """GPUs 2 and 3 of dgx-h100 held by `python3 …/train.py --lr 3e-4 RELEASE` (this user's): the lock dir
    and the holder's pid."""
    locks, release = tmp_path / "locks", tmp_path / "release"
    (tmp_path / "train.py").write_text(TRAIN)
    holder = start(["--snapshot", "dgx-h100", "--gpus", "2,3", "--", "python3", str(tmp_path / "train.py"),
                    str(release), "--lr", "3e-4"], locks)
    try:
        assert Lines(holder.stdout).wait("CVD=") == "CVD=2,3\n"
        yield locks, holder.pid
    finally:
        release.touch()
        holder.wait(timeout=30)


def _terminal_env(locks: Path, **extra: str) -> dict[str, str]:
    out = {**env(locks), "TERM": "xterm-256color", **extra}
    out.pop("NO_COLOR", None)
    return out


def _rows(text: str) -> dict[str, str]:
    """The table's GPU rows by index."""
    return {line.split()[0]: line for line in text.splitlines() if re.match(r"\d+ ", line)}


def _user_and_command(row: str, me: str) -> bool:
    """Whether ``row`` shows "USER train.py", or as much of it as the column holds, cut with "…" (a
    longer user name than root's leaves less room for the command word), the name at least whole."""
    whole = f"{me} train.py"
    return f" {whole} " in row + " " or any(f" {whole[:k]}…" in row for k in range(min(len(me), 8), len(whole)))


def test_at_80_columns_the_holder_reads_as_user_and_command_word(held: tuple[Path, int]) -> None:
    locks, pid = held
    me = current_user()
    raw, code = run_in_terminal(["--snapshot", "dgx-h100", "ls"], _terminal_env(locks), columns=80)
    assert code == 0
    text = ANSI.sub("", raw.decode()).replace("\r\n", "\n")
    assert max(len(line) for line in text.splitlines()) <= 80, text
    rows = _rows(text)
    assert len(rows) == 8
    for gpu in ("2", "3"):  # was: "root (pid…", cut before who ran what
        assert _user_and_command(rows[gpu], me), text
    assert "HELD BY" in text.upper() and "PROCESSES" in text.upper()  # (rich titles them: Held By)
    assert rows["0"].rstrip().endswith("alice") and rows["5"].rstrip().endswith("bob, ?")  # who, when no room
    # The same 80 columns through a pipe: the same cells, and no escape codes.
    piped = run(["--snapshot", "dgx-h100", "ls"], env=env(locks, COLUMNS="80"))
    assert "\x1b" not in piped.stdout and _user_and_command(_rows(piped.stdout)["2"], me)
    # A pipe with no width: the holder's line, as before.
    full = run(["--snapshot", "dgx-h100", "ls"], locks)
    assert f"{me} (pid {pid}, for " in _rows(full.stdout)["2"]


def test_wide_gives_each_holders_whole_line_under_the_table(held: tuple[Path, int]) -> None:
    locks, pid = held
    raw, code = run_in_terminal(["--snapshot", "dgx-h100", "ls", "--wide"], _terminal_env(locks), columns=80)
    assert code == 0
    lines = ANSI.sub("", raw.decode()).replace("\r\n", "\n").splitlines()
    assert max(len(line) for line in lines) <= 80
    at = next(i for i, line in enumerate(lines) if line.startswith("GPU 2, GPU 3 reserved by "))
    said = " ".join(line.strip() for line in lines[at:at + 4])  # wrapped, never cut
    assert f"{current_user()} (pid {pid}, for " in said and "/train.py" in said and "--lr 3e-4)" in said, lines


def test_processes_lists_every_process_with_its_command() -> None:
    raw, code = run_in_terminal(["--snapshot", "dgx-h100", "ls", "--processes"], _terminal_env(TESTS / "none"),
                                columns=80)
    assert code == 0
    text = ANSI.sub("", raw.decode()).replace("\r\n", "\n")
    assert max(len(line) for line in text.splitlines()) <= 80, text
    listing = text.split("\n\n", 1)[1].splitlines()
    assert listing[0].split() == ["GPU", "PID", "USER", "GPU", "MEMORY", "COMMAND"]
    assert listing[1].split() == ["0", "2841173", "alice", "64.7", "GiB", "python", "train.py", "--config",
                                  "llama.yaml"]
    assert listing[3].startswith("5 ") and "bob" in listing[3] and listing[3].endswith("…")  # cut to 80
    assert listing[4].split() == ["5", "3377102", "?", "2.0", "GiB", "?"]  # not visible from here
    # Through a pipe the command is whole, and -p is the short form.
    piped = run(["--snapshot", "dgx-h100", "ls", "-p"], TESTS / "none")
    assert piped.returncode == 0 and "\x1b" not in piped.stdout
    assert ("-f /home/bob/.local/share/jupyter/runtime/kernel-5e0c1a7d-2b9f-4c3e-8d61-0f4a9b2c7e15.json"
            in piped.stdout)
    idle = run(["--snapshot", "dgx-h100", "ls", "-p", "--gpus", "2-4"], TESTS / "none")
    assert idle.stdout.rstrip().endswith("no compute processes")


def test_gpus_shows_only_those_gpus_like_nvidia_smi_i() -> None:
    done = run(["--snapshot", "dgx-h100", "ls", "--gpus", "5,0"], TESTS / "none")
    assert done.returncode == 0, done.stderr
    assert sorted(_rows(done.stdout)) == ["0", "5"]  # in NVML order, as nvidia-smi -i shows them
    assert "  2 of 8 GPUs  " in done.stdout.splitlines()[0]  # was "2 GPUs": as if the machine had two
    assert "  8 GPUs  " in run(["--snapshot", "dgx-h100", "ls"], TESTS / "none").stdout.splitlines()[0]
    doc = json.loads(run(["--snapshot", "dgx-h100", "ls", "-g", "3", "--json"], TESTS / "none").stdout)
    assert [g["index"] for g in doc["gpus"]] == [3] and doc["links"] == [["X"]] and doc["gpu_count"] == 8
    topo = run(["--snapshot", "dgx-h100", "topo", "--gpus", "2,4"], TESTS / "none").stdout
    assert topo.splitlines()[0].split() == ["GPU2", "GPU4", "CPU", "Affinity", "NUMA", "Affinity"]
    missing = run(["--snapshot", "dgx-h100", "ls", "--gpus", "9"], TESTS / "none")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "GPU 9" in missing.stderr


def test_no_escape_codes_under_jupyters_bang_or_in_a_pipe() -> None:
    """IPython's `!` runs the command on a pexpect pseudo-terminal with TERM=xterm-color and FORCE_COLOR=1
    (ipykernel's init_environment), and shows what it reads as text in the cell."""
    jupyter = _terminal_env(TESTS / "none", TERM="xterm-color", FORCE_COLOR="1", CLICOLOR_FORCE="1",
                            JPY_PARENT_PID=str(os.getpid()), PAGER="cat")
    raw, code = run_in_terminal(["--snapshot", "dgx-h100", "ls"], jupyter, columns=80)
    assert code == 0 and b"\x1b" not in raw and b"H100 80GB HBM3" in raw  # was: bold and italic codes
    piped = run(["--snapshot", "dgx-h100", "ls"], env=env(TESTS / "none", FORCE_COLOR="1", TERM="xterm-256color"))
    assert "\x1b" not in piped.stdout and "NVIDIA H100 80GB HBM3" in piped.stdout
    # A real terminal still gets colour.
    colour, _ = run_in_terminal(["--snapshot", "dgx-h100", "ls"], _terminal_env(TESTS / "none"), columns=80)
    assert b"\x1b[" in colour


FAKE_PYNVML = """
import sys
sys.path.insert(0, {tests!r})
from fake_pynvml import FakeNvml, make_gpu
_fake = FakeNvml([make_gpu(0, memory_used_mib=600, memory_reserved_mib=583), make_gpu(1)])


def __getattr__(name):
    return getattr(_fake, name)
"""


def test_used_memory_is_what_nvidia_smi_shows_without_the_reserved_part(tmp_path: Path) -> None:
    """NVML v2 (driver >= R510): 17 MiB allocated, 583 MiB reserved by the driver, as `nvidia-smi` shows
    "17MiB / 81559MiB" and nvitop reads v2's used; v1 would say 600 used."""
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML.format(tests=str(TESTS)))
    nvml = env(TESTS / "none", PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = run(["ls"], env=nvml)
    assert done.returncode == 0, done.stderr
    row = _rows(done.stdout)["0"]
    assert "17 MiB / 79.6 GiB" in row, row  # was: 600 MiB (used + reserved)
    wide = run(["ls", "--wide"], env={**nvml, "COLUMNS": "200"})
    header = wide.stdout.splitlines()[1].split()
    assert "RESERVED" in header and "583 MiB" in _rows(wide.stdout)["0"]
    doc = json.loads(run(["ls", "--json"], env=nvml).stdout)
    assert (doc["gpus"][0]["memory_used_mib"], doc["gpus"][0]["memory_reserved_mib"]) == (17, 583)


def test_a_real_jupyter_kernels_bang_gets_plain_text(tmp_path: Path) -> None:
    pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    pytest.importorskip("pexpect")  # IPython's `!` on Linux
    from test_notebook import kernel

    with kernel(tmp_path, str(tmp_path / "locks")) as k:
        content, streams = k.run(f"!{sys.executable} -m gpu_launch --snapshot dgx-h100 ls")
    assert content["status"] == "ok", content
    out = streams["stdout"]
    assert "H100 80GB HBM3" in out and "\x1b" not in out, repr(out[:300])  # was: \x1b[1m… in the cell
    assert max(len(line) for line in out.splitlines()) <= 80  # pexpect's terminal is 80 wide


def test_a_holder_seen_by_another_user_is_short_too() -> None:
    """The short form comes from the lock file's record alone: user and command word."""
    from gpu_launch.commands.ls import _held
    from gpu_launch.reservations.holders import Holder

    held = _held(Holder(pid=4242, user="alice", started=0.0, command="/usr/bin/python3 -u train.py --lr 3e-4"))
    assert held.short == "alice train.py" and held.full.startswith("alice (pid 4242, for ")
    assert _held(Holder()).short == "another gpulaunch job"
    weird = _held(Holder(pid=1, user="eve\x1b[2J", command="\x1b]0;x\x07vllm serve M"))
    assert "\x1b" not in weird.short + weird.full
