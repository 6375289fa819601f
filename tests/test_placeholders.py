"""{n} and {gpus} in the command: whole arguments and KEY={n} values, {{n}} escapes, any other placeholder inside an
argument refused before anything is reserved (issue 26 item 4), shell text read word by word."""

from __future__ import annotations

import json
import sys

from conftest import run_cli
import pytest

from gpu_launch.errors import UsageError
from gpu_launch.run.placeholders import check, check_shell, protect, substitute, substitute_shell

ECHO_ARGV = "import sys, json; print(json.dumps(sys.argv[1:]))"


def test_whole_arguments_are_replaced():
    argv = ("vllm", "serve", "m", "--tensor-parallel-size", "{n}", "--devices", "{gpus}")
    assert substitute(argv, 4) == ("vllm", "serve", "m", "--tensor-parallel-size", "4", "--devices", "0,1,2,3")


def test_gpus_is_the_logical_list():
    assert substitute(("x", "{gpus}"), 1) == ("x", "0")
    assert substitute(("x", "{gpus}"), 3) == ("x", "0,1,2")


def test_braces_that_are_no_placeholder_are_never_touched():
    argv = ("python", "-c", "d = {'n': 1}; print(d)", "{ n }", "{N}", "{}", "{", "${n}", "a${gpus}b", "{a,b}",
            "{print $1}", "{{n}", "{n}}", "{nope}")
    assert substitute(argv, 2) == argv
    check(argv)


def test_option_and_key_values_are_replaced():
    argv = ("x", "--tp={n}", "-g={gpus}", "NPROC={n}", "trainer.devices={n}", "+x.y={gpus}", "--lit={{n}}")
    assert substitute(argv, 2) == ("x", "--tp=2", "-g=0,1", "NPROC=2", "trainer.devices=2", "+x.y=0,1", "--lit={n}")


@pytest.mark.parametrize("arg", ["--tp={n}x", "run-{n}.txt", "print({n})", "x{gpus}", "--a={n}{n}", "{n}/{gpus}",
                                 "a=b={n}"])
def test_a_placeholder_inside_an_argument_is_refused(arg: str):
    with pytest.raises(UsageError) as err:
        check(("prog", arg))
    assert "inside the argument" in err.value.message and "only a whole argument" in err.value.message
    assert "{{" in (err.value.hint or "")
    assert substitute(("prog", f"a{{{{n}}}}b"), 2) == ("prog", "a{n}b")  # the escape works inside too


def test_model_placeholders_need_a_model():
    with pytest.raises(UsageError, match=r"\{tp\} is filled in only when --fit names a model"):
        check(("vllm", "--tensor-parallel-size={tp}"))
    check(("vllm", "--tensor-parallel-size={tp}"), ("n", "gpus", "tp"))
    assert substitute(("vllm", "--tensor-parallel-size={tp}"), 2, {"tp": "2"}) == ("vllm", "--tensor-parallel-size=2")


def test_program_name_is_never_replaced():
    assert substitute(("{n}", "{n}"), 2) == ("{n}", "2")
    assert substitute((), 2) == ()


def test_child_receives_the_replaced_argv():
    result = run_cli("--snapshot", "dgx-h100", "--fit", "100GiB", "-q", "--", sys.executable, "-c", ECHO_ARGV,
                     "--tensor-parallel-size", "{n}", "{gpus}", "{{n}}", "--tp={n}", "--devices={gpus}",
                     "trainer.devices={n}", "print({{n}})")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["--tensor-parallel-size", "2", "0,1", "{n}", "--tp=2", "--devices=0,1",
                                         "trainer.devices=2", "print({n})"]


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


def test_a_placeholder_inside_an_argument_is_refused_before_any_lock_or_wait(tmp_path):
    """Was: a warning, then the GPUs reserved (or waited for) and the literal {n} exec'd."""
    import os
    import subprocess

    locks = tmp_path / "locks"
    argv = [sys.executable, "-m", "gpu_launch", "--snapshot", "workstation-4x", "--auto", "1", "--wait", "1h", "--",
            sys.executable, "-c", "pass", "--nproc_per_node=x{n}"]
    from cli_run import clean_env

    result = subprocess.run(argv, env=clean_env({"GPULAUNCH_LOCK_DIR": str(locks)}), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("gpulaunch: error: {n} inside the argument '--nproc_per_node=x{n}' would be passed "
                                    "on as it is"), result.stderr
    assert result.stderr.count("\n") == 1
    assert not locks.exists() or os.listdir(locks) == []


def test_the_shell_reads_words_as_sh_splits_them():
    line = "cd exp && NPROC={n} python t.py --tp {n} --devices=\"{gpus}\" '{n}' > out-{{n}}.txt 2>&1 # {n} {x"
    assert substitute_shell(line, 2) == ("cd exp && NPROC=2 python t.py --tp 2 --devices=0,1 2 > 'out-{n}.txt' 2>&1 "
                                         "# {n} {x")
    assert substitute_shell("echo {n}>n.txt|cat", 4) == "echo 4>n.txt|cat"
    assert substitute_shell("echo ${HOME} {a,b} $(echo {{n}}) \"$X{{gpus}}\"", 1) == \
        "echo ${HOME} {a,b} $(echo {n}) \"$X{gpus}\""
    assert substitute_shell("awk '{print $1}' f", 1) == "awk '{print $1}' f"
    assert substitute_shell("echo {{n}} X={{n}} --j={n}", 3) == "echo {n} X={n} --j=3"
    with pytest.raises(UsageError, match="inside the word"):
        check_shell("echo run-{n}.txt")
    with pytest.raises(UsageError, match="inside the word"):
        check_shell('echo "$HOME/{n}"')
    with pytest.raises(UsageError, match="filled in only when --fit"):
        check_shell("vllm serve m --tensor-parallel-size {tp}")


def test_a_value_that_needs_quotes_is_quoted_for_the_shell():
    line = "python -c 'import sys; print(sys.argv[1:])' {max_memory} M={max_memory}"
    filled = substitute_shell(line, 1, {"max_memory": '{"0": "20GiB"}'})
    assert filled == "python -c 'import sys; print(sys.argv[1:])' '{\"0\": \"20GiB\"}' M='{\"0\": \"20GiB\"}'"


@pytest.mark.parametrize("text", ["echo {n}", "X={n}", "{n}", "a {{n}} b", "${n} {x} {{n}", "--overrides=a={n}"])
def test_protected_text_comes_back_through_a_launch(text: str):
    """each --slurm hands a filled shell line to `gpulaunch --auto N -- /bin/sh -c LINE`: the launch gives it back."""
    assert substitute(("/bin/sh", "-c", protect(text)), 2) == ("/bin/sh", "-c", text)
    check(("/bin/sh", "-c", protect(text)))
