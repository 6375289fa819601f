"""gpulaunch: put a command on the right NVIDIA GPUs.

From Python (a script or a notebook), before CUDA starts::

    import gpu_launch
    gpus = gpu_launch.use(2, min_free="20GiB")   # choose, reserve for this process, set CUDA_VISIBLE_DEVICES

See :mod:`gpu_launch.api`. Importing the package imports nothing else: the API and the errors are
loaded on first use (``gpulaunch`` itself starts with this module, and every millisecond counts).
"""

__version__ = "0.1.0"

#: name -> the module that defines it, imported on first access (PEP 562)
_LAZY = {
    **dict.fromkeys(("use", "select", "reserve", "release", "held", "cuda_started", "Device",
                     "Reservation"), "gpu_launch.api"),
    **dict.fromkeys(("GpuLaunchError", "UsageError", "SnapshotError", "ConfigError", "LockDirError",
                     "NotEnoughGpus", "WaitTimeout", "ReservationConflict", "Reserved", "NvmlUnavailable",
                     "NoDriver", "CudaAlreadyInitialized", "Interrupted", "ExitCode"), "gpu_launch.errors"),
}

__all__ = ["__version__", "machine", *_LAZY]

TYPE_CHECKING = False
if TYPE_CHECKING:  # for type checkers and IDEs: the same names, statically ("X as X": re-exported)
    from gpu_launch.api import machine as machine
    from gpu_launch.api import Device as Device, Reservation as Reservation, cuda_started as cuda_started
    from gpu_launch.api import held as held, release as release, reserve as reserve, select as select, use as use
    from gpu_launch.errors import ConfigError as ConfigError, CudaAlreadyInitialized as CudaAlreadyInitialized
    from gpu_launch.errors import ExitCode as ExitCode, GpuLaunchError as GpuLaunchError, Interrupted as Interrupted
    from gpu_launch.errors import LockDirError as LockDirError, NoDriver as NoDriver, NotEnoughGpus as NotEnoughGpus
    from gpu_launch.errors import NvmlUnavailable as NvmlUnavailable, Reserved as Reserved
    from gpu_launch.errors import ReservationConflict as ReservationConflict, SnapshotError as SnapshotError
    from gpu_launch.errors import UsageError as UsageError, WaitTimeout as WaitTimeout


def __getattr__(name: str) -> object:
    # Plain import statements, not importlib: `python -X importtime` and the layout test see them.
    if name == "machine":
        # The subpackage, which is callable: gpu_launch.machine() is the API's machine() (machine/__init__.py).
        import gpu_launch.machine

        return globals()["machine"]
    module = _LAZY.get(name)
    if module == "gpu_launch.api":
        from gpu_launch import api as module_object
    elif module == "gpu_launch.errors":
        from gpu_launch import errors as module_object  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module 'gpu_launch' has no attribute {name!r}")
    value = getattr(module_object, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
