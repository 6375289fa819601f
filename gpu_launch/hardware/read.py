"""Where the snapshot comes from: a file (or bundled example), or NVML on this machine."""

from __future__ import annotations

from gpu_launch.hardware.model import Machine, Needs

__all__ = ["Needs", "read_machine"]


def read_machine(snapshot: str | None, needs: Needs = Needs(), timings: dict[str, float] | None = None) -> Machine:
    """Read the machine once: from ``snapshot`` (path or example name) if given, else from NVML.

    ``timings``, when given, receives seconds spent per NVML query kind (shown by ``-v``).
    """
    if snapshot is not None:
        from gpu_launch.hardware import snapshot as snapshot_file

        return snapshot_file.resolve(snapshot)
    from gpu_launch.hardware.nvml import NvmlBackend

    return NvmlBackend(needs=needs, timings=timings).read_machine()
