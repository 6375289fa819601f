"""gpulaunch: put a command on the right NVIDIA GPUs.

From Python (a script or a notebook), before CUDA starts::

    import gpu_launch
    gpus = gpu_launch.use(2, min_free="20GiB")   # choose, reserve for this process, set CUDA_VISIBLE_DEVICES

See :mod:`gpu_launch.api`. Importing the package imports nothing else: the API and the errors are
loaded on first use (``gpulaunch`` itself starts with this module, and every millisecond counts).
"""

# The program's first statements. A Ctrl-C from here on, while gpulaunch is still importing, is one line
# and exit 130; before this point no gpulaunch code has run (the interpreter's start-up, runpy or the
# console-script wrapper looking for this package: docs/exit-codes.md). So nothing may come before it,
# and it uses builtin modules only: importing signal.py would itself be an unguarded millisecond.


def _early_interrupt(signum: int, frame: object) -> None:
    """Ctrl-C while the program is still importing: one line and exit 130, never a traceback.

    ``cli.main`` replaces this with Python's own handler as soon as it runs, turns a KeyboardInterrupt
    into the same line and code from then on, and puts this back for the way out.
    """
    import os
    import _signal

    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # a second Ctrl-C must not print the line twice
    try:
        os.write(2, b"gpulaunch: interrupted\n")
    except OSError:
        pass
    os._exit(130)


def _as_program() -> bool:
    """Whether this process is gpulaunch itself (the console script or ``python -m gpu_launch``), not a
    program that imports the package: only then may the package take over SIGINT at import."""
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":  # `python -m gpu_launch` while the package is being imported
        orig = getattr(sys, "orig_argv", [])
        return "gpu_launch" in orig[orig.index("-m") + 1:orig.index("-m") + 2] if "-m" in orig else False
    return argv0.rsplit("/", 1)[-1] == "gpulaunch"


#: True in the gpulaunch process itself (not in a program or test that imports the package).
PROGRAM = _as_program()

if PROGRAM:
    import _signal

    if _signal.getsignal(_signal.SIGINT) != _signal.SIG_IGN:  # started ignoring it (`cmd &` in a script): keep to that
        _signal.signal(_signal.SIGINT, _early_interrupt)
    del _signal


__version__ = "0.1.0"

#: name -> the module that defines it, imported on first access (PEP 562)
_LAZY = {
    **dict.fromkeys(("use", "select", "reserve", "release", "held", "machine", "cuda_started", "Device",
                     "Reservation", "plan"), "gpu_launch.api"),
    **dict.fromkeys(("GpuLaunchError", "UsageError", "SnapshotError", "ConfigError", "LockDirError",
                     "NotEnoughGpus", "WaitTimeout", "ReservationConflict", "Reserved", "NvmlUnavailable",
                     "NoDriver", "CudaAlreadyInitialized", "Interrupted", "ModelFileError", "ExitCode"), "gpu_launch.errors"),
}

__all__ = ["__version__", *_LAZY]

TYPE_CHECKING = False
if TYPE_CHECKING:  # for type checkers and IDEs: the same names, statically ("X as X": re-exported)
    from gpu_launch.api import machine as machine
    from gpu_launch.api import Device as Device, Reservation as Reservation, cuda_started as cuda_started
    from gpu_launch.api import held as held, release as release, reserve as reserve, select as select, use as use
    from gpu_launch.api import plan as plan
    from gpu_launch.errors import ConfigError as ConfigError, CudaAlreadyInitialized as CudaAlreadyInitialized
    from gpu_launch.errors import ExitCode as ExitCode, GpuLaunchError as GpuLaunchError, Interrupted as Interrupted
    from gpu_launch.errors import LockDirError as LockDirError, NoDriver as NoDriver, NotEnoughGpus as NotEnoughGpus
    from gpu_launch.errors import NvmlUnavailable as NvmlUnavailable, Reserved as Reserved
    from gpu_launch.errors import ModelFileError as ModelFileError
    from gpu_launch.errors import ReservationConflict as ReservationConflict, SnapshotError as SnapshotError
    from gpu_launch.errors import UsageError as UsageError, WaitTimeout as WaitTimeout


def __getattr__(name: str) -> object:
    # Plain import statements, not importlib: `python -X importtime` and the layout test see them.
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
