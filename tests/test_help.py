"""Help that teaches: real examples per subcommand (each one parses), --version, did-you-mean."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from cli_run import scrubbed

from gpu_launch import __version__

from gpu_launch.options import args


def gpulaunch(*argv: str) -> subprocess.CompletedProcess[str]:
    env = scrubbed()
    env["GPULAUNCH_CONFIG"] = ""
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True, env=env,
                          timeout=60)


def examples_in(text: str) -> list[str]:
    """The example commands of a help text, a long one joined back from its `` \\`` continuation lines."""
    block = text.split("\nExamples:\n", 1)[1].split("\n\n", 1)[0]
    found: list[str] = []
    going_on = False
    for line in block.splitlines():
        if going_on:
            found[-1] += " " + line.strip().removesuffix("\\").strip()
        elif line.startswith("  ") and not line.startswith("      "):
            found.append(line.strip().removesuffix("\\").strip())
        going_on = line.endswith("\\")
    return found


def example_argv(example: str) -> list[str]:
    """The gpulaunch argv of an example line: out of `eval "$(...)"`, no VAR=... prefix, no pipe or redirection."""
    inner = re.search(r"\$\((gpulaunch [^)]*)\)", example)
    words = shlex.split(inner.group(1) if inner else example)
    while words and "=" in words[0] and words[0] != "gpulaunch":
        words.pop(0)
    assert words[0] == "gpulaunch", example
    words = words[1:]
    ends = [i for i, w in enumerate(words) if w in (">", "|")]
    return words[: ends[0]] if ends else words


@pytest.mark.parametrize("topic", ["", *args.SUBCOMMANDS])
def test_every_help_shows_examples_that_parse(topic: str) -> None:
    proc = gpulaunch(*([topic, "--help"] if topic else ["--help"]))
    assert proc.returncode == 0 and proc.stderr == ""
    shown = examples_in(proc.stdout)
    assert len(shown) >= 2, proc.stdout
    for example in shown:
        inv = args.parse(example_argv(example))  # raises UsageError if an example is wrong
        if topic not in ("", "help"):
            assert inv.command == topic, example
    if topic:
        assert gpulaunch("help", topic).stdout == proc.stdout


def test_help_lists_every_subcommand_and_option() -> None:
    text = gpulaunch("--help").stdout
    for sub in args.SUBCOMMANDS:
        assert f"  {sub} " in text
    for opt in args.OPTIONS:
        if args.RUN in opt.commands:
            assert opt.names[0] in text


def test_bundled_example_from_help_runs() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--auto", "4", "--explain")
    assert proc.returncode == 0 and proc.stdout.startswith("chosen: GPU ")


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    proc = gpulaunch(flag)
    assert (proc.returncode, proc.stdout) == (0, f"gpulaunch {__version__}\n")


@pytest.mark.parametrize(("typo", "meant"), [("--gpu", "--gpus"), ("--min-fre", "--min-free"), ("--dryrun", "--dry-run"),
                                             ("--snapshots", "--snapshot"), ("--exlude=1", "--exclude")])
def test_unknown_option_did_you_mean(typo: str, meant: str) -> None:
    proc = gpulaunch(typo, "0", "--", "true")
    assert proc.returncode == 2
    assert proc.stderr == f"gpulaunch: error: unknown option {typo.split('=')[0]} (hint: did you mean {meant}?)\n"


def test_unknown_option_far_from_any() -> None:
    proc = gpulaunch("--zzzz")
    assert proc.returncode == 2 and "see `gpulaunch --help`" in proc.stderr


@pytest.mark.parametrize(("word", "meant"), [("lss", "ls"), ("topp", "topo"), ("confg", "config")])
def test_subcommand_typo_gets_a_hint(word: str, meant: str) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", word)
    assert proc.returncode == 127
    assert proc.stderr == (f"gpulaunch: error: {word}: command not found "
                           f"(hint: did you mean the subcommand `gpulaunch {meant}`?)\n")


def test_a_real_command_near_a_subcommand_still_runs() -> None:
    # `gpulaunch --gpus 0 ls` runs the program ls: a subcommand name after a selection is a command
    proc = gpulaunch("--snapshot", "workstation-4x", "--gpus", "0", "-q", "ls", "-d", "/")
    assert (proc.returncode, proc.stdout) == (0, "/\n")


def test_an_unrelated_missing_command_gets_the_usual_hint() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "zzqqxx-no-such-program")
    assert proc.returncode == 127 and "subcommand" not in proc.stderr and "check the spelling" in proc.stderr


@pytest.mark.parametrize("columns", [60, 80, 100])
@pytest.mark.parametrize("topic", ["", *args.SUBCOMMANDS])
def test_help_wraps_to_the_terminal_width(topic: str, columns: int) -> None:
    env = scrubbed()
    env.update(GPULAUNCH_CONFIG="", COLUMNS=str(columns))
    proc = subprocess.run([sys.executable, "-m", "gpu_launch", *([topic, "--help"] if topic else ["--help"])],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0
    too_long = [line for line in proc.stdout.splitlines() if len(line) > columns]
    assert too_long == []


def test_help_wraps_examples_so_that_they_still_parse() -> None:
    from gpu_launch.options import helptext

    text = helptext.usage("completions", columns=60)
    shown = examples_in(text)
    assert "gpulaunch completions bash > ~/.local/share/bash-completion/completions/gpulaunch" in shown
    assert max(map(len, text.splitlines())) <= 60


def test_help_lists_every_exit_code_from_the_one_table() -> None:
    from gpu_launch.errors import MEANINGS, ExitCode

    assert set(MEANINGS) == set(ExitCode)
    text = gpulaunch("--help").stdout
    section = text.split("\nExit codes", 1)[1]
    for code, meaning in MEANINGS.items():
        assert re.search(rf"^  {int(code)} +{re.escape(meaning[:30])}", section, re.M), code


def test_bare_gpulaunch_prints_a_short_usage_with_exit_2() -> None:
    proc = gpulaunch()
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("usage: gpulaunch")
    assert len(lines) <= 10 and max(map(len, lines)) <= 80
    assert "error" not in proc.stderr
    assert "gpulaunch ls" in proc.stderr and "--help" in proc.stderr
