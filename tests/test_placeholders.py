"""{n} and {gpus} in the command: whole arguments only, {{n}} escapes, nothing else touched."""

from __future__ import annotations

import json
import sys

from conftest import run_cli
from gpu_launch.run.placeholders import near_misses, substitute

ECHO_ARGV = "import sys, json; print(json.dumps(sys.argv[1:]))"


def test_whole_arguments_are_replaced():
    argv = ("vllm", "serve", "m", "--tensor-parallel-size", "{n}", "--devices", "{gpus}")
    assert substitute(argv, 4) == ("vllm", "serve", "m", "--tensor-parallel-size", "4", "--devices", "0,1,2,3")


def test_gpus_is_the_logical_list():
    assert substitute(("x", "{gpus}"), 1) == ("x", "0")
    assert substitute(("x", "{gpus}"), 3) == ("x", "0,1,2")


def test_nothing_inside_a_longer_argument_is_touched():
    argv = ("python", "-c", "print('{n}'.format(n=1))", "--tp={n}", "{n}x", "x{gpus}", "{ n }", "{N}", "{}", "{")
    assert substitute(argv, 2) == argv


def test_double_braces_escape():
    assert substitute(("x", "{{n}}", "{{gpus}}", "{{{n}}}"), 2) == ("x", "{n}", "{gpus}", "{{n}}")
    assert substitute(("x", "{{n}", "{n}}"), 2) == ("x", "{{n}", "{n}}")  # unbalanced: left alone


def test_program_name_is_never_replaced():
    assert substitute(("{n}", "{n}"), 2) == ("{n}", "2")
    assert substitute((), 2) == ()


def test_near_misses_find_option_equals_placeholder():
    assert near_misses(("vllm", "--tp={n}", "-g={gpus}", "{n}", "x={n}", "--a={n}x")) == ("--tp={n}", "-g={gpus}")


def test_child_receives_the_replaced_argv():
    result = run_cli("--snapshot", "dgx-h100", "--fit", "100GiB", "-q", "--", sys.executable, "-c", ECHO_ARGV,
                     "--tensor-parallel-size", "{n}", "{gpus}", "{{n}}", "--tp={n}")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["--tensor-parallel-size", "2", "0,1", "{n}", "--tp={n}"]


def test_explicit_gpus_fill_placeholders_too():
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "4-6", "-q", "--", sys.executable, "-c", ECHO_ARGV, "{n}",
                     "{gpus}")
    assert json.loads(result.stdout) == ["3", "0,1,2"]


def test_dry_run_shows_the_replaced_command():
    result = run_cli("--snapshot", "workstation-4x", "--auto", "2", "--dry-run", "--", "torchrun",
                     "--nproc-per-node", "{n}", "train.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "exec torchrun --nproc-per-node 2 train.py"
    result = run_cli("--snapshot", "workstation-4x", "--auto", "2", "--dry-run", "--json", "--", "torchrun",
                     "--nproc-per-node", "{n}", "{{n}}")
    assert json.loads(result.stdout)["argv"] == ["torchrun", "--nproc-per-node", "2", "{n}"]


def test_option_equals_placeholder_is_warned_about():
    result = run_cli("--snapshot", "workstation-4x", "--auto", "2", "--dry-run", "--", "vllm", "--tp={n}")
    assert "gpulaunch: warning: '--tp={n}' is passed on unchanged" in result.stderr
    assert "write --tp {n}" in result.stderr
    assert result.stdout.splitlines()[-1] == "exec vllm '--tp={n}'"
    quiet = run_cli("--snapshot", "workstation-4x", "--auto", "2", "--dry-run", "-q", "--", "vllm", "--tp={n}")
    assert quiet.stderr == ""
