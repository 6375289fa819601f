"""Exec the command: it replaces gpulaunch, keeps the pid, gets the signals, returns its own code.

No shell anywhere: ``argv`` goes to ``os.execvpe`` exactly as the user typed it.
"""

from __future__ import annotations

import errno
import os
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
    if os.sep in name:
        if not os.path.exists(name):
            raise CommandNotFound(f"{name}: no such file")
        if os.path.isdir(name):
            raise NotExecutable(f"{name}: is a directory, not a program")
        if not os.access(name, os.X_OK):
            raise NotExecutable(f"{name}: permission denied (not executable)", hint=f"chmod +x {name}")
        return name
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise CommandNotFound(f"{name}: command not found", hint="check the spelling, or activate the environment that has it")
    return found


def exec_command(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``argv``; raises only if the exec itself fails."""
    path = resolve_command(argv, env)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(path, list(argv), dict(env))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise CommandNotFound(f"{argv[0]}: {exc.strerror}") from None
        raise NotExecutable(f"{argv[0]}: cannot execute ({exc.strerror})") from None
