"""Where the snapshot comes from: a file (or bundled example), or NVML on this machine."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_launch.model import Machine

__all__ = ["Needs", "read_machine"]


@dataclass(frozen=True)
class Needs:
    """What the command at hand needs from NVML; the rest is not queried (keeps launches fast).

    A launch with ``--gpus`` needs no process list; ``ls`` without ``--topo`` needs no links; only
    what shows processes (``ls``) needs their user and command, which costs psutil's import.
    """

    processes: bool = True
    topology: bool = False
    mig: bool = True
    process_details: bool = True  # user and command of each pid (psutil); a launch only counts them


def read_machine(snapshot: str | None, needs: Needs = Needs(), timings: dict[str, float] | None = None) -> Machine:
    """Read the machine once: from ``snapshot`` (path or example name) if given, else from NVML.

    ``timings``, when given, receives seconds spent per NVML query kind (shown by ``-v``).
    """
    if snapshot is not None:
        from gpu_launch import snapshot as snapshot_file

        return snapshot_file.resolve(snapshot)
    from gpu_launch.backends.nvml import NvmlBackend

    return NvmlBackend(needs=needs, timings=timings).read_machine()
