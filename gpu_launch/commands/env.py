"""``gpulaunch env``: choose like a launch, print the variables for a shell (nothing is reserved)."""

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
    from gpu_launch.reservations import acquire
    from gpu_launch.run import environment
    from gpu_launch.views import shellenv

    if inv.positionals:
        raise UsageError(f"`env` runs no command, got {inv.positionals[0]!r}",
                         hint='use it as eval "$(gpulaunch env --auto 2)", or launch with gpulaunch --auto 2 -- CMD')
    # No command runs to hold a reservation, so none is taken; but --auto/--fit avoid reserved GPUs
    # and --gpus on one gets a warning naming its holder.
    _machine, vis, got, env = pick.choose(inv, acquire.Locking.of(inv.get("lock_dir"), os.environ, take=False,
                                                                    snapshot=pick.snapshot_source(inv)))
    assert vis is not None
    pick.tell(inv, vis, got.selection, env)
    sys.stdout.write(shellenv.render(got.selection.devices, env, environment.SET_VARIABLES, inv.get("shell"),
                                     bool(inv.get("json"))))
    return 0
