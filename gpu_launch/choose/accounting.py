"""``--account-as-free [USER]``: choose as if some users' processes were gone. Pure.

nvisel's option of the same name (nvitop ``select.py``: ``device.memory_free += as_free_memory``,
``memory_used -= …``) counts the GPU memory of the given users' processes as free before its filters
run. gpulaunch does the same, and goes one step further where nvisel has nothing to go on: a GPU
whose every process is theirs has its utilisation counted as theirs too (0 here), so that it can be
idle, not "busy" with work that is one's own. A GPU shared with anyone else keeps its utilisation
(NVML does not say whose kernels run), and a process whose memory NVML does not tell frees nothing.
"""

from __future__ import annotations

from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.base.records import replace

__all__ = ["as_free"]


def as_free(machine: Machine, users: frozenset[str]) -> Machine:
    """``machine`` as if the processes of ``users`` were gone: their memory free, and a GPU only they
    use not loaded. GPUs whose processes NVML could not list, or that none of theirs are on, stay."""
    if not users:
        return machine
    return replace(machine, gpus=tuple(_without(gpu, users) for gpu in machine.gpus))


def _without(gpu: Gpu, users: frozenset[str]) -> Gpu:
    theirs = [p for p in gpu.processes if p.user in users]
    if not theirs or not gpu.processes_known:
        return gpu
    freed = sum(p.used_memory_mib or 0 for p in theirs)
    rest = tuple(p for p in gpu.processes if p.user not in users)
    free = None if gpu.memory_free_mib is None else gpu.memory_free_mib + freed
    if free is not None and gpu.memory_total_mib is not None:
        free = min(free, gpu.memory_total_mib - (gpu.memory_reserved_mib or 0))
    used = None if gpu.memory_used_mib is None else max(gpu.memory_used_mib - freed, 0)
    return replace(gpu, processes=rest, memory_free_mib=free, memory_used_mib=used,
                   utilization_gpu=gpu.utilization_gpu if rest else 0)
