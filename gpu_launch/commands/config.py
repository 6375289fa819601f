"""``gpulaunch config``: the defaults in force and where each comes from."""

from __future__ import annotations

import os
import sys
import json

from gpu_launch.errors import UsageError
from gpu_launch.options.args import PER_LAUNCH

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation


__all__ = ["run", "BUILT_IN"]

#: What gpulaunch does when an option is set nowhere, for the VALUE column (instead of a bare "–");
#: the lock directory is the one in force, found at run time.
BUILT_IN = {
    "gpus_per_job": "1",
    "log_dir": "./gpulaunch-logs/TIMESTAMP",
    "bind": "auto (off on examples)",
    "shell": "sh (bash, zsh)",
    "wait": "off (fail at once)",
    "grace": "10s",
    "watch": "off (2s when given alone)",
    "snapshot": "none: NVML",
}


def run(inv: Invocation) -> int:
    from gpu_launch.options import config

    if inv.positionals:
        raise UsageError(f"`config` takes no arguments, got {inv.positionals[0]!r}", hint="see `gpulaunch help config`")
    for dest in sorted(inv.options.keys() & PER_LAUNCH):
        flag = "--" + dest.replace("_", "-")
        raise UsageError(f"{flag} has no default to show", hint="it chooses what one command does; `config` shows the others")
    settings = config.effective(inv, os.environ)
    lock_dir = _lock_dir(settings)
    if inv.get("json"):
        doc = config.as_json(settings, os.environ)
        doc["lock_dir"] = lock_dir
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(config.as_text(settings, os.environ, {**BUILT_IN, "lock_dir": lock_dir["path"]}))
        from gpu_launch.reservations import lockdir

        sys.stdout.write(f"lock dir in force: {lock_dir['path']}\n  {lockdir.describe_dir(lock_dir['path'])}\n"
                         f"  from {lock_dir['source']}\n")
    return 0


def _lock_dir(settings: list) -> dict:  # list[config.Setting] -> the lock_dir object of `config --json`
    """The lock directory a launch would use, whether it is hardened, and why it is that one."""
    from gpu_launch.reservations import lockdir

    from gpu_launch.hardware.snapshot import is_example

    setting = next(s for s in settings if s.dest == "lock_dir")
    snapshot = next((s.value for s in settings if s.dest == "snapshot"), None) or os.environ.get("GPULAUNCH_SNAPSHOT")
    example = is_example(snapshot)
    path = lockdir.lock_dir_path(setting.value, os.environ, example=example)
    if setting.value:
        source = f"{setting.source} {setting.where}".strip()
    elif example and path == lockdir.example_lock_dir(os.environ):
        source = f"default for the bundled example {snapshot} (yours alone: its GPUs are not real)"
    elif path == lockdir.DEFAULT_LOCK_DIR:
        hardened = lockdir.hardened_default(os.environ)
        # One there that `locks init` did not make (or an older version's, without its mark) is not used.
        source = f"default ({hardened} was not set up by `locks init`)" if os.path.lexists(hardened) \
            else f"default (no hardened directory at {hardened})"
    else:
        source = "default (the hardened directory exists)"
    return {"path": path, "hardened": lockdir.is_hardened(path), "source": source}
