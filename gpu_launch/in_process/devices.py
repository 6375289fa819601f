"""The devices the Python API hands back: one record per device, in CUDA order."""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpu_launch.hardware.model import Device as ModelDevice

__all__ = ["Device", "in_cuda_order"]


@dataclass(frozen=True)
class Device:
    """A device you were given, in CUDA order: ``devices[i]`` is ``cuda:i`` once the variables apply.

    ``index`` is the physical number (``gpulaunch ls``, ``nvidia-smi``); ``uuid`` names the GPU,
    or the MIG device, in every view; memory is in MiB as read when it was chosen (None: unknown).
    """

    cuda: str  # "cuda:0": what torch.device() and friends take
    index: int
    uuid: str
    name: str
    pci_bus_id: str | None
    memory_total_mib: int | None
    memory_free_mib: int | None
    mig_profile: str | None = None  # "1g.10gb" for a MIG device, None for a whole GPU

    def __str__(self) -> str:
        what = f"GPU {self.index}" + (f" MIG {self.mig_profile or self.uuid}" if self.mig_profile or
                                      self.uuid.startswith("MIG-") else "")
        return f"{self.cuda} → {what}  {self.name}"


def in_cuda_order(devices: Sequence[ModelDevice]) -> tuple[Device, ...]:
    return tuple(Device(f"cuda:{i}", d.gpu.index, d.uuid, d.gpu.name, d.gpu.pci_bus_id, d.memory_total_mib,
                        d.memory_free_mib, d.mig.profile if d.mig is not None else None)
                 for i, d in enumerate(devices))
