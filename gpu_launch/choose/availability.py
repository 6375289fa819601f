"""How available one GPU is to a new job, from its load alone (docs/choosing-gpus.md, "How --auto ranks").

Its own module because both eligibility (:mod:`gpu_launch.choose.select`) and the ranking of sets
(:mod:`gpu_launch.choose.ranking`) judge GPUs by it, and neither should import the other for it.
"""

from __future__ import annotations

import enum

from gpu_launch.hardware.model import Gpu

__all__ = ["Availability", "availability", "IDLE_MAX_USED", "BUSY_MIN_UTIL", "BUSY_MIN_USED", "FULL_MIN_USED"]

# Availability thresholds (docs/choosing-gpus.md, "How --auto ranks"). Memory "used" is what the NVML adapter
# made coherent (hardware/nvml.py): NVML's v1 "used" counts the driver's reserved memory, v2's does
# not, so an untouched card may show a few hundred MiB used or almost none: both are idle here.
IDLE_MAX_USED = 0.05  # idle: no compute process and at most 5 % of memory used
BUSY_MIN_UTIL = 50  # busy: utilisation at or above 50 % ...
BUSY_MIN_USED = 0.50  # ... or at least half the memory in use
FULL_MIN_USED = 0.90  # full: at least 90 % of the memory in use (or none free): a job barely fits


class Availability(enum.IntEnum):
    """Lower is better: a job never lands on someone's GPU while an idle one is left, nor on a
    nearly full one while a merely busy one is left."""

    IDLE = 0
    PARTLY_USED = 1
    BUSY = 2
    FULL = 3

    @property
    def text(self) -> str:
        return self.name.lower().replace("_", " ")


def availability(gpu: Gpu) -> Availability:
    """The GPU's class. Processes NVML could not list may be anyone's: such a GPU is at best
    partly used, never idle."""
    total = gpu.memory_total_mib or 0
    used_share = (gpu.memory_used_mib or 0) / total if total else 0.0
    if gpu.memory_free_mib == 0 or used_share >= FULL_MIN_USED:
        return Availability.FULL
    if (gpu.utilization_gpu or 0) >= BUSY_MIN_UTIL or used_share >= BUSY_MIN_USED:
        return Availability.BUSY
    if gpu.processes or not gpu.processes_known or used_share > IDLE_MAX_USED:
        return Availability.PARTLY_USED
    return Availability.IDLE
