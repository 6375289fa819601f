"""One option table, three readers: the help, the man page and the completion scripts stay in step
(issue 19, item 5), and the man page ships with the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_launch.commands import completions
from gpu_launch.errors import MEANINGS
from gpu_launch.options import args, helptext, manpage

ROOT = Path(__file__).resolve().parent.parent


def _roff_plain(text: str) -> str:
    return text.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "").replace("\\e", "\\")


def test_the_committed_man_page_is_the_generated_one() -> None:
    assert (ROOT / "gpulaunch.1").read_text(encoding="utf-8") == manpage.render(), \
        "regenerate it: python -m gpu_launch.options.manpage > gpulaunch.1"


def test_the_man_page_regenerates_from_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "gpu_launch.options.manpage"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == manpage.render()


@pytest.mark.parametrize("opt", args.OPTIONS, ids=lambda o: o.names[0])
def test_every_option_is_in_the_help_the_man_page_and_every_completion(opt: args.Option) -> None:
    page = _roff_plain(manpage.render())
    helps = [helptext.usage(c, columns=100) for c in (args.RUN, *args.SUBCOMMANDS) if opt in args.options_for(c)]
    assert helps, f"{opt.names[0]} is in no command's help"
    for name in opt.names:
        assert all(name in text for text in helps), name
        assert name in page, name
        for shell in completions.SHELLS:
            assert name.lstrip("-") in completions.script(shell), (shell, name)
    assert opt.help.split()[0] in page


def test_the_man_page_lists_subcommands_and_exit_codes() -> None:
    page = _roff_plain(manpage.render())
    for sub in args.SUBCOMMANDS:
        assert f"\n{sub}\n" in page, sub
    exit_status = page.split(".SH EXIT STATUS", 1)[1]
    for code, meaning in MEANINGS.items():
        assert f"{int(code)}\n{meaning.split(' (')[0]}" in exit_status, code


def test_man_renders_it_without_warnings() -> None:
    import shutil

    if shutil.which("groff") is None:
        pytest.skip("groff is not installed")
    done = subprocess.run(["groff", "-man", "-Tutf8", "-ww", str(ROOT / "gpulaunch.1")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    import re

    assert "EXIT STATUS" in re.sub(".\x08", "", done.stdout)  # (bold is written as overstrikes)
