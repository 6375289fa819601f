"""``gpulaunch config``: the defaults in force and where each comes from."""

from __future__ import annotations

import os
import sys
import json

from gpu_launch.errors import UsageError
from gpu_launch.options.args import PER_LAUNCH

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation


__all__ = ["run"]


def run(inv: Invocation) -> int:
    from gpu_launch.options import config

    if inv.positionals:
        raise UsageError(f"`config` takes no arguments, got {inv.positionals[0]!r}", hint="see `gpulaunch help config`")
    for dest in sorted(inv.options.keys() & PER_LAUNCH):
        flag = "--" + dest.replace("_", "-")
        raise UsageError(f"{flag} has no default to show", hint="it chooses what one command does; `config` shows the others")
    settings = config.effective(inv, os.environ)
    if inv.get("json"):
        sys.stdout.write(json.dumps(config.as_json(settings, os.environ), indent=2) + "\n")
    else:
        sys.stdout.write(config.as_text(settings, os.environ))
    return 0
