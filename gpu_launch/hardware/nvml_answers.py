"""What NVML's answers mean: its return codes, the messages for a failed start, and its values as
the model's (text, whole MiB, bounded integers). Shared by the modules that talk to pynvml."""

from __future__ import annotations

import sys

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["GpuFailed", "INIT_FAILURES", "EXAMPLES_HINT", "error_code", "as_text", "as_int", "to_mib", "bounded",
           "as_capability", "debug"]


def debug(message: str, *args: object) -> None:
    """Log at DEBUG without importing logging (~3 ms of every NVML read): if nothing imported
    logging, nothing configured a handler for it, and the record would go nowhere anyway."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("gpu_launch.hardware.nvml").debug(message, *args)


# nvmlReturn_t codes (nvml.h). They are ABI, identical in every binding; pynvml raises one
# NVMLError subclass per code, with the code in ``.value``.
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25

GPU_FATAL = frozenset({GPU_IS_LOST, RESET_REQUIRED})  # the GPU is gone, not just one field
MIB = 1024 * 1024
NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong (older pynvml passes it through)

EXAMPLES_HINT = "no NVIDIA driver here? try an example machine: gpulaunch --snapshot dgx-h100 ls"
INIT_FAILURES: dict[int, tuple[str, str]] = {
    LIBRARY_NOT_FOUND: ("libnvidia-ml.so.1 was not found", EXAMPLES_HINT),
    DRIVER_NOT_LOADED: ("the NVIDIA kernel driver is not loaded",
                         ("load it (sudo modprobe nvidia) or reboot; " + EXAMPLES_HINT)),
    LIB_RM_VERSION_MISMATCH: ("the NVML library and the NVIDIA kernel driver have different versions",
                               ("the driver was upgraded without reloading the kernel module: "
                                "reboot or reload nvidia modules")),
    NO_PERMISSION: ("no permission to use NVML",
                     "check access to /dev/nvidiactl and /dev/nvidia* (group, container device mounts)"),
}


class GpuFailed(Exception):
    """The GPU at hand cannot be read at all; its row becomes ``available=False``."""


def error_code(exc: BaseException) -> int:
    """The nvmlReturn_t code of an NVMLError (``.value``), or -1."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else -1


def as_text(value: Any) -> str | None:
    """NVML strings: str in current bindings, bytes in older ones; NULs and blanks stripped."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    return value.strip().strip("\x00").strip() or None


def as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def to_mib(value: Any) -> int | None:
    number = as_int(value)
    return None if number is None or number < 0 or number >= NOT_AVAILABLE else number // MIB


def bounded(value: Any, lo: int, hi: int) -> int | None:
    """``value`` if it is an int within the snapshot schema's range, else None."""
    number = as_int(value)
    return number if number is not None and lo <= number <= hi else None


def as_capability(value: Any) -> str | None:
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}.{value[1]}"
    return None
