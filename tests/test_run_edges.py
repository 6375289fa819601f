"""The slips in filling an `each` line a user would suffer (issue 37): each filled word quoted for the
shell and nothing else touched, a KEY= kept an assignment, escapes, what `each --slurm` hands its
task's launch, and the shell's own words around them. Unit-level, and each filled line is run by a
real /bin/sh to see the words the command gets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import clean_env
from gpu_launch.errors import UsageError
from gpu_launch.run import shellwords
from gpu_launch.run.placeholders import check_shell, protect, substitute, substitute_shell

ECHO = f"{sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"


def argv_of(line: str) -> list[str]:
    """The words a command gets when /bin/sh runs ``line``."""
    done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_filled_word_is_what_the_command_gets() -> None:
    line = substitute_shell(f"{ECHO} {{n}} --gpus={{gpus}} NPROC={{n}} '{{n}}' \"{{gpus}}\" {{{{n}}}} 'x {{{{n}}}}'", 3)
    assert argv_of(line) == ["3", "--gpus=0,1,2", "NPROC=3", "3", "0,1,2", "{n}", "x {n}"]


def test_an_assignment_stays_an_assignment() -> None:
    line = substitute_shell(f"NPROC={{n}} GPUS={{gpus}} sh -c 'echo $NPROC $GPUS'", 2)
    assert line == "NPROC=2 GPUS=0,1 sh -c 'echo $NPROC $GPUS'"
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30).stdout
    assert out == "2 0,1\n"


def test_a_value_the_shell_would_split_is_quoted() -> None:
    line = substitute_shell(f"{ECHO} --cfg={{max_memory}} {{max_memory}}", 2, {"max_memory": '{"0": "7GiB", "1": "7GiB"}'})
    assert argv_of(line) == ['--cfg={"0": "7GiB", "1": "7GiB"}', '{"0": "7GiB", "1": "7GiB"}']
    assert "'" in line


def test_everything_around_the_placeholders_is_kept_as_written() -> None:
    text = "python  train.py\t--n {n} ;  echo   done # {n} stays a comment"
    assert substitute_shell(text, 4) == "python  train.py\t--n 4 ;  echo   done # {n} stays a comment"
    assert substitute_shell("a >{n}", 2) == "a >2" and substitute_shell("a>{n};b", 2) == "a>2;b"


def test_a_placeholder_inside_a_word_is_refused_in_shell_text_too() -> None:
    for text in ("run-{n}.txt", "echo x{n}", "echo --a={n}{n}"):
        with pytest.raises(UsageError, match="inside the word"):
            check_shell(text)
    check_shell("echo {n} '{n}' \"{{n}}y\" $HOME")


def test_protect_gives_the_line_back_after_the_tasks_own_filling() -> None:
    """each --slurm fills a shell line for N GPUs, then hands it to `gpulaunch --auto N -- sh -c LINE`,
    which fills once more: a literal {n} left in the line must survive that second filling."""
    line = substitute_shell("echo {n} '{{n}}' ${n}", 2)
    assert line == "echo 2 {n} ${n}"  # (a quoted word filled is quoted only where the shell needs it)
    assert protect(line) == "echo 2 {{n}} ${n}"
    assert substitute(("sh", "-c", protect(line)), 2)[2] == line  # the task's launch gives the line back
    assert protect("{n} {gpus} {{n}} {nope} {n}}") == "{{n}} {{gpus}} {{{n}}} {nope} {n}}"


def test_the_shells_words_are_where_the_shell_splits() -> None:
    got = [(w.value, text[w.start:w.end]) for text in ["a 'b c' \"d $e\" f\\ g h;i>j # k"]
           for w in shellwords.words(text)]
    assert got == [("a", "a"), ("b c", "'b c'"), (None, '"d $e"'), ("f g", "f\\ g"), ("h", "h"), ("i", "i"),
                   ("j", "j")]
    plain = shellwords.words("python  train.py\t--lr 1e-3")
    assert [(w.start, w.end, w.value) for w in plain] == [(0, 6, "python"), (8, 16, "train.py"), (17, 21, "--lr"),
                                                          (22, 26, "1e-3")]
    for bad in ("echo 'open", 'echo "open', "echo end\\"):
        with pytest.raises(ValueError):
            shellwords.words(bad)


def test_an_assignment_whose_value_needs_quotes_stays_an_assignment() -> None:
    """`MEM={max_memory} cmd`: the JSON is quoted after `MEM=`, never with it (a quoted `'MEM=...'` is a
    command name to the shell, not an assignment)."""
    line = substitute_shell("MEM={max_memory} sh -c 'echo \"$MEM\"'", 2, {"max_memory": '{"0": "7GiB"}'})
    assert line.startswith("MEM='")
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (0, '{"0": "7GiB"}\n')


def test_an_expansion_is_one_word_of_no_fixed_text() -> None:
    text = "a $(b c) ${d} `e f` $g h"
    assert [(w.value, text[w.start:w.end]) for w in shellwords.words(text)] == [
        ("a", "a"), (None, "$(b c)"), (None, "${d}"), (None, "`e f`"), (None, "$g"), ("h", "h")]
    assert substitute_shell("echo $(date) {n}", 2) == "echo $(date) 2"


def test_a_launch_fills_only_the_values_it_has() -> None:
    """A node task's command: the plan's {tp} written in at submission, the node's own left for the node."""
    from gpu_launch.run.placeholders import fill_only

    argv = ("vllm", "{tp}", "--tp={tp}", "{{tp}}", "{n}", "{node_rank}", "x{tp}y")
    assert fill_only(argv, {"tp": "4"}) == ("vllm", "4", "--tp=4", "{{tp}}", "{n}", "{node_rank}", "x{tp}y")


def test_a_script_that_cannot_be_opened_is_left_to_the_exec(tmp_path: Path) -> None:
    from gpu_launch.run import execute

    assert execute._check_interpreter(str(tmp_path / "gone"), "gone") is None  # the exec says what is wrong


def test_a_nul_byte_names_where_it_is(tmp_path: Path) -> None:
    from gpu_launch.run import execute

    with pytest.raises(UsageError, match="the command's the program name contains a NUL byte"):
        execute.resolve_command(["py\0thon"], {})
    with pytest.raises(UsageError, match="the command's argument 1 contains a NUL byte"):
        execute.resolve_command(["python", "a\0b"], {})


def test_a_script_whose_interpreter_is_missing_says_so_before_anything_is_reserved(tmp_path: Path) -> None:
    from gpu_launch.errors import CommandNotFound
    from gpu_launch.run import execute

    script = tmp_path / "run.sh"
    script.write_text("#!/nonexistent/sh\necho hi\n")
    script.chmod(0o755)
    with pytest.raises(CommandNotFound, match="its interpreter /nonexistent/sh"):
        execute._check_interpreter(str(script), "run.sh")
    script.write_text("#!/bin/sh\necho hi\n")
    assert execute._check_interpreter(str(script), "run.sh") is None


def test_telling_a_supervisor_that_is_gone_does_not_stop_the_command() -> None:
    """As a launch runs it: cli.main has given SIGPIPE its default action back, and the supervisor's end of
    the status pipe is closed. The write must not kill the launch before its exec (it did: exit by SIGPIPE)."""
    code = ("import os, signal\n"
            "from gpu_launch.run import execute\n"
            "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
            "r, w = os.pipe(); os.close(r)\n"
            "execute._tell(w, b'exec\\n'); execute._tell(None, b'x')\n"
            "assert signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL\n"
            "print('still here')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert (proc.returncode, proc.stdout) == (0, "still here\n"), (proc.returncode, proc.stderr)


def test_a_script_whose_start_cannot_be_read_is_left_to_the_exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from gpu_launch.run import execute

    script = tmp_path / "run.sh"
    script.write_text("#!/nonexistent/sh\n")
    script.chmod(0o755)

    def failing_read(fd: int, n: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(execute.os, "read", failing_read)
    assert execute._check_interpreter(str(script), "run.sh") is None


def test_the_cpus_a_launch_binds_within_are_its_own_not_another_processs() -> None:
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: every process's set is the same")
    code = ("import os; os.sched_setaffinity(0, {%d}); from gpu_launch.run import affinity; "
            "print(sorted(affinity.current_cpus()))" % cpus[-1])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"[{cpus[-1]}]"]  # `taskset -c N gpulaunch ...`: N, whatever pid 1 may use


def test_a_program_the_kernel_cannot_execute_is_named_in_the_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-program"
    bad.write_bytes(b"\x7fELF\x00garbage")
    bad.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "workstation-4x", "-q", "--", str(bad),
                           "--lr", "3e-4"], capture_output=True, text=True, timeout=60, env=clean_env(
                              {"GPULAUNCH_LOCK_DIR": str(tmp_path / "locks")}))
    assert done.returncode == 126
    assert done.stderr == f"gpulaunch: error: {bad}: cannot execute (Exec format error)\n"


def test_a_backslash_inside_double_quotes_quotes_only_what_the_shell_says() -> None:
    got = [w.value for w in shellwords.words(r'echo "a\$b \"c\" d\e" "x\\"')]
    assert got == ["echo", 'a$b "c" d\\e', "x\\"]
    for bad in ('echo "end\\', 'echo "end\\"'):  # the backslash is the line's last character, or quotes the closing one
        with pytest.raises(ValueError, match="No closing quotation"):
            shellwords.words(bad)
