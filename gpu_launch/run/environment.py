"""The child's environment: the parent's, plus exactly the documented variables.

``CUDA_VISIBLE_DEVICES`` lists the chosen devices in CUDA order and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
makes CUDA number the devices as nvidia-smi and NVML do, so "GPU 4" in `gpulaunch ls` is the GPU
CUDA opens. MIG devices are always written as ``MIG-`` UUIDs, the only form CUDA accepts for them;
the caller asks for UUIDs throughout when the parent had narrowed the GPUs (see visibility.py).
Never modifies ``os.environ``: it returns a new dict.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.hardware.model import Device, Machine

__all__ = ["SET_VARIABLES", "LOCK_DIR_VARIABLE", "visible_devices", "build"]

#: Every variable gpulaunch sets or replaces in the child (docs/choosing-gpus.md, "The child's environment").
SET_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPULAUNCH_GPUS")
#: Set too when the child holds a reservation: where it lives, so that a gpulaunch run inside the job
#: finds the job's GPUs there without being told again (reservations/nesting.py).
LOCK_DIR_VARIABLE = "GPULAUNCH_LOCK_DIR"


def visible_devices(devices: tuple[Device, ...], use_uuid: bool = False, machine: Machine | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value for ``devices`` (cuda:i = devices[i]). An index is the GPU's
    place in ``machine``'s PCI bus order (:attr:`Machine.cuda_order`, CUDA's under PCI_BUS_ID); without
    ``machine``, its NVML index, which is the same wherever NVML numbers by bus id."""
    def number(device: Device) -> str:
        return str(machine.cuda_index(device.gpu) if machine is not None else device.gpu.index)

    return ",".join(d.uuid if (use_uuid or d.mig is not None) else number(d) for d in devices)


def build(devices: tuple[Device, ...], parent: Mapping[str, str], use_uuid: bool = False,
          lock_dir: str | None = None, machine: Machine | None = None) -> dict[str, str]:
    """The environment for a command that runs on ``devices`` (an empty tuple hides every GPU);
    ``lock_dir``: the lock directory that holds its reservation, handed down; ``machine``: where
    indices are counted (see :func:`visible_devices`)."""
    env = dict(parent)
    env["CUDA_VISIBLE_DEVICES"] = visible_devices(devices, use_uuid, machine)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["GPULAUNCH_GPUS"] = ",".join(str(d.gpu.index) for d in devices)
    if lock_dir is not None:
        env[LOCK_DIR_VARIABLE] = lock_dir
    return env
