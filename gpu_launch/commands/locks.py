"""``gpulaunch locks init [DIR]``: set up the hardened lock directory (root), see reservations/hardening.py."""

from __future__ import annotations

import os
import sys

from gpu_launch.placing import pick
from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation


__all__ = ["run"]


def run(inv: Invocation) -> int:
    from gpu_launch.reservations import hardening, lockdir

    words = inv.positionals
    if not words or words[0] != "init":
        raise UsageError(f"locks: unknown action {words[0]!r}" if words else "locks: what to do?",
                         hint="the one action is `gpulaunch locks init [DIR]` (as root)")
    if len(words) > 2:
        raise UsageError(f"locks init takes one directory, got {len(words) - 1} arguments")
    path = words[1] if len(words) == 2 else lockdir.hardened_default(os.environ)
    if not path:
        raise UsageError("locks init: empty directory name")
    if os.geteuid() != 0:  # before reading the machine: the answer does not depend on it
        hardening.init_dir(path, ())
    machine = pick.read_machine(inv, processes=False)
    uuids = [u for g in machine.gpus for u in (g.uuid, *(m.uuid for m in g.mig_devices))]
    report = hardening.init_dir(path, uuids)
    if not inv.get("quiet"):
        mig = sum(len(g.mig_devices) for g in machine.gpus)
        parts = [f"{len(report.created)} created", f"{len(report.kept)} kept"]
        if report.replaced:
            parts.append(f"{len(report.replaced)} replaced (were not regular files)")
        print(f"gpulaunch: {report.path}: lock files for {len(machine.gpus)} GPUs and {mig} MIG devices, "
              f"{lockdir.MAX_DEPTH - 1} nesting levels deep ({', '.join(parts)}) and queue/; "
              "root-owned, mode 0755", file=sys.stdout)
        default = lockdir.hardened_default(os.environ)
        if report.path != os.path.realpath(default):
            print(f"gpulaunch: not the default {default}: point users at it with GPULAUNCH_LOCK_DIR={report.path} "
                  "or lock-dir in the config file", file=sys.stdout)
    return 0
