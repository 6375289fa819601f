"""``gpulaunch env``: the chosen environment as shell code (or JSON) for the current shell.

    eval "$(gpulaunch env --auto 2)"            # bash, zsh, sh
    gpulaunch env --auto 2 --shell fish | source
    gpulaunch env --auto 2 --json

Only the variables gpulaunch sets are printed (``environment.SET_VARIABLES``), quoted so that any
value survives ``eval``. No command runs, so nothing can hold a reservation for these GPUs: they are
chosen now but not kept for you (a reservation lasts as long as a running command; use a launch,
``gpulaunch ... -- CMD``, when that matters).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_launch.errors import UsageError
from gpu_launch.hardware.model import Device
from gpu_launch.views.render import devices_json

__all__ = ["SHELLS", "parse_shell", "posix", "fish", "as_json", "render"]

SHELLS = ("bash", "zsh", "sh", "fish")


def parse_shell(text: str, option: str = "--shell") -> str:
    shell = text.strip().lower()
    if shell not in SHELLS:
        raise UsageError(f"{option}: {text!r} is not one of {', '.join(SHELLS)}", hint=f"e.g. {option} fish")
    return shell


def posix(env: Mapping[str, str], names: Sequence[str]) -> str:
    """``export NAME='value'`` lines for bash, zsh and sh."""
    return "".join(f"export {name}={shlex.quote(env[name])}\n" for name in names if name in env)


def _fish_quote(value: str) -> str:
    # inside fish single quotes only \\ and \' are escapes
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(env: Mapping[str, str], names: Sequence[str]) -> str:
    """``set -gx NAME 'value'`` lines for fish."""
    return "".join(f"set -gx {name} {_fish_quote(env[name])}\n" for name in names if name in env)


def as_json(devices: Sequence[Device], env: Mapping[str, str], names: Sequence[str]) -> dict[str, Any]:
    return {
        "schema": 1,
        "devices": devices_json(devices),
        "env": {name: env[name] for name in names if name in env},
    }


def render(devices: Sequence[Device], env: Mapping[str, str], names: Sequence[str], shell: str | None,
           as_json_doc: bool) -> str:
    if as_json_doc:
        return json.dumps(as_json(devices, env, names), indent=2) + "\n"
    return fish(env, names) if shell == "fish" else posix(env, names)
