"""Exec the command: it replaces gpulaunch, keeps the pid, gets the signals, returns its own code.

No shell anywhere: ``argv`` goes to ``os.execvpe`` exactly as the user typed it.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from gpu_launch.errors import CommandNotFound, NotExecutable

__all__ = ["resolve_command", "exec_command"]


def resolve_command(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The path ``argv[0]`` will run as; CommandNotFound (127) / NotExecutable (126) otherwise."""
    name = argv[0]
    if not name:
        raise CommandNotFound("the command is an empty string", hint="put the program to run after the options")
    shown = _shown(name)
    if os.sep in name:
        if not os.path.exists(name):
            raise CommandNotFound(f"{shown}: no such file")
        if os.path.isdir(name):
            raise NotExecutable(f"{shown}: is a directory, not a program")
        if not os.access(name, os.X_OK):
            raise NotExecutable(f"{shown}: permission denied (not executable)", hint=f"chmod +x {shlex.quote(name)}")
        return name
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise CommandNotFound(f"{shown}: command not found", hint="check the spelling, or activate the environment that has it")
    return found


def _shown(name: str) -> str:
    """``name`` for a one-line message: quoted with escapes when it holds newlines or other controls."""
    return name if name.isprintable() else repr(name)


def exec_command(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``argv``; raises only if the exec itself fails."""
    path = resolve_command(argv, env)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(path, list(argv), dict(env))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise CommandNotFound(f"{_shown(argv[0])}: {exc.strerror}") from None
        raise NotExecutable(f"{_shown(argv[0])}: cannot execute ({exc.strerror})") from None
