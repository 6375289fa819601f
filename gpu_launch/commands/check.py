"""``gpulaunch check``: choose like a launch, then ask CUDA itself which devices it sees, in which order."""

from __future__ import annotations

import os
import sys

from gpu_launch.placing import pick
from gpu_launch.errors import UsageError
from gpu_launch.base.text import printable

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation


__all__ = ["run"]


def run(inv: Invocation) -> int:
    from gpu_launch.run import cuda_probe
    from gpu_launch.errors import CheckFailed

    if inv.positionals:
        raise UsageError(f"`check` takes no arguments, got {inv.positionals[0]!r}")
    _machine, vis, got, env = pick.choose(inv)  # reservations do not matter: nothing runs on the GPUs
    assert vis is not None
    selection = got.selection
    out = sys.stdout
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    if inherited is None:
        out.write("inherited CUDA_VISIBLE_DEVICES: not set (every GPU NVML shows may be chosen)\n")
    else:
        count = f"{len(vis.problems)} problem{'s' if len(vis.problems) != 1 else ''}" if vis.problems else "no problems"
        out.write(f"inherited CUDA_VISIBLE_DEVICES={printable(inherited)}: {count}\n")
        out.writelines(f"  - {p}\n" for p in vis.problems)
    out.writelines(f"note: {w}\n" for w in vis.warnings)
    out.write(f"checking CUDA with CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} "
              f"CUDA_DEVICE_ORDER={env['CUDA_DEVICE_ORDER']}\n")
    out.flush()
    seen = cuda_probe.probe(env)
    lines, problems = cuda_probe.compare(selection.devices, seen)
    out.write("\n".join(lines) + "\n")
    if problems:
        raise CheckFailed(f"CUDA does not see what gpulaunch chose: {problems[0]}",
                          hint="CUDA_VISIBLE_DEVICES may be overridden by a container or MPS; try --uuid")
    out.write(f"ok: cuda:0..{len(lines) - 1} are exactly the chosen devices, in order\n")
    return 0
