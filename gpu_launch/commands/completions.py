"""Shell completion: scripts for bash, zsh and fish generated from the option table, and their helper.

``gpulaunch completions SHELL`` prints a script; the copies in ``completions/`` are its output
(regenerate with ``python -m gpu_launch completions bash > completions/gpulaunch.bash``, likewise
``zsh > completions/_gpulaunch`` and ``fish > completions/gpulaunch.fish``; a test fails on drift).
Every script follows the parser's rules (:mod:`gpu_launch.options.args`): options and subcommands complete
until the command starts (after ``--``, or at the first word that is not an option or subcommand),
and from there the shell's own completion for that command takes over. ``--gpus``/``--exclude``
values come from the hidden ``gpulaunch __complete gpus [--taken=LIST] WORDS...``, which reads the
snapshot named on the line (or ``GPULAUNCH_SNAPSHOT``, or NVML) and prints the GPU indices and ``all``
(after ``3,``: the indices not yet in the list, without ``all``); it prints nothing at all on any
failure and gives up after :data:`HELPER_TIMEOUT_S`. ``--wait``'s value is optional, as in the parser:
the next word is its TIMEOUT only when it looks like a duration (:data:`DURATION_ERE`), otherwise it is
the command (``gpulaunch --wait cat si<TAB>`` completes ``cat``'s arguments). ``each`` completes files;
``log``, ``jobs`` and ``cancel`` complete job ids (``gpulaunch __complete jobs all|active``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from gpu_launch.commands.completion.helper import HELPER_TIMEOUT_S, gpu_words, helper
from gpu_launch.commands.completion.words import DURATION_ERE, SHELLS
from gpu_launch.errors import UsageError

__all__ = ["SHELLS", "HELPER_TIMEOUT_S", "DURATION_ERE", "script", "command", "helper", "gpu_words"]


def script(shell: str) -> str:
    """The completion script for ``shell`` (bash, zsh or fish)."""
    if shell not in SHELLS:
        raise UsageError(f"completions: unknown shell {shell!r}", hint="choose bash, zsh or fish")
    module = __import__(f"gpu_launch.commands.completion.{shell}", fromlist=["script"])
    return module.script()


def command(positionals: Sequence[str], out: IO[str]) -> int:
    """``gpulaunch completions SHELL``."""
    if len(positionals) != 1:
        raise UsageError("completions: name one shell", hint="gpulaunch completions bash (or zsh, fish)")
    out.write(script(positionals[0]))
    return 0


def run(inv) -> int:  # inv: Invocation
    """``gpulaunch completions SHELL``: print the completion script."""
    return command(inv.positionals, sys.stdout)
