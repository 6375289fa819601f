"""Exit codes and the one exception family that reaches the user.

Every failure gpulaunch reports is a :class:`GpuLaunchError` carrying a one-line message, an
optional hint (the fix) and an exit code. Only ``cli.main`` catches them and prints them; library
code never calls ``sys.exit``. Once the command has been exec'd, the exit code is the command's own.
The Python API (:mod:`gpu_launch.api`) raises the same exceptions as they are; they are exported
from ``gpu_launch`` itself, with the short names ``Reserved`` and ``NoDriver`` for
:class:`ReservationConflict` and :class:`NvmlUnavailable`.
"""

from __future__ import annotations

import enum

__all__ = [
    "ExitCode",
    "MEANINGS",
    "GpuLaunchError",
    "UsageError",
    "SnapshotError",
    "ModelFileError",
    "NvmlUnavailable",
    "SlurmUnavailable",
    "RendezvousFailed",
    "NotEnoughGpus",
    "WaitTimeout",
    "ReservationConflict",
    "LockDirError",
    "JobsFailed",
    "JobError",
    "CheckFailed",
    "CommandNotFound",
    "NotExecutable",
    "Interrupted",
    "ConfigError",
    "CudaAlreadyInitialized",
    "Reserved",
    "NoDriver",
    "OutputFailed",
]


class ExitCode(enum.IntEnum):
    """gpulaunch's own exit codes (documented in docs/exit-codes.md)."""

    OK = 0
    USAGE = 2  # bad option, bad --gpus spec, bad size/duration, missing command
    NO_DRIVER = 3  # NVML missing or failing: no driver, version mismatch, no permission; each --slurm: no Slurm
    NOT_ENOUGH_GPUS = 4  # the request cannot be met by the GPUs that exist / are eligible
    WAIT_TIMEOUT = 5  # --wait ran out before the request could be met
    RESERVED = 6  # a GPU asked for by --gpus is reserved by another gpulaunch job
    BAD_FILE = 7  # snapshot, config or model file missing, unreadable or invalid; lock dir or lock file unsafe
    CHECK_FAILED = 8  # `gpulaunch check` found that CUDA sees something else than chosen
    JOBS_FAILED = 9  # `gpulaunch each`: at least one job exited non-zero or could not start
    OUTPUT_FAILED = 10  # stdout cannot be written: closed (>&-), or the disk is full
    RENDEZVOUS_FAILED = 11  # --nodes: the head could not be reached, or its address or port not learned in time
    NOT_EXECUTABLE = 126  # the command exists but cannot be executed
    COMMAND_NOT_FOUND = 127  # the command is not on PATH
    INTERRUPTED = 130  # Ctrl-C before the command started


#: What each exit code means, for --help, the man page and the docs (one source: tests/test_help.py
#: checks that every code has a line here).
MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success (for a launch: the command's own exit status, once it runs)",
    ExitCode.USAGE: "bad usage: unknown option, bad --gpus spec, size or duration, no command",
    ExitCode.NO_DRIVER: "no NVIDIA driver or NVML failing (each --slurm: no Slurm)",
    ExitCode.NOT_ENOUGH_GPUS: "the request cannot be met by the GPUs that exist or are eligible",
    ExitCode.WAIT_TIMEOUT: "--wait ran out before the GPUs were free",
    ExitCode.RESERVED: "a GPU named by --gpus is reserved by another gpulaunch job",
    ExitCode.BAD_FILE: "a snapshot, config, model, lock or job file is missing, invalid or unsafe",
    ExitCode.CHECK_FAILED: "check: CUDA sees other devices than the ones chosen",
    ExitCode.JOBS_FAILED: "each: at least one job failed or could not start",
    ExitCode.OUTPUT_FAILED: "stdout could not be written (closed, disk full)",
    ExitCode.RENDEZVOUS_FAILED: "--nodes: the head could not be reached, or its port not learned in time",
    ExitCode.NOT_EXECUTABLE: "the command exists but cannot be executed",
    ExitCode.COMMAND_NOT_FOUND: "the command is not on PATH",
    ExitCode.INTERRUPTED: "interrupted by Ctrl-C before the command started",
}


class GpuLaunchError(Exception):
    """An error meant for the user: one line, an optional hint, and an exit code."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None, exit_code: ExitCode | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.message)
        if exit_code is not None:
            self.exit_code = exit_code

    # The message and hint are clipped to a readable length whenever they are set (gpu_launch.base.text.clip):
    # they may quote a crafted file's values, and an error is one line on a terminal, in the CLI and the API.
    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        from gpu_launch.base.text import clip

        self._message = clip(value)

    @property
    def hint(self) -> str | None:
        return self._hint

    @hint.setter
    def hint(self, value: str | None) -> None:
        from gpu_launch.base.text import clip

        self._hint = None if value is None else clip(value)


class UsageError(GpuLaunchError):
    exit_code = ExitCode.USAGE


class SnapshotError(GpuLaunchError):
    exit_code = ExitCode.BAD_FILE


class NvmlUnavailable(GpuLaunchError):
    exit_code = ExitCode.NO_DRIVER
    #: True when there is no driver at all (no NVML library, kernel module not loaded), as
    #: opposed to a driver that fails: a plain `ls` then shows the bundled example machine instead.
    no_driver: bool = False


class SlurmUnavailable(GpuLaunchError):
    """``each --slurm``: Slurm's commands (sbatch, scontrol) are not on PATH or cannot reach the cluster."""

    exit_code = ExitCode.NO_DRIVER


class RendezvousFailed(GpuLaunchError):
    """``--nodes``: this node could not learn the head's address and port in time, or cannot reach it."""

    exit_code = ExitCode.RENDEZVOUS_FAILED


class NotEnoughGpus(GpuLaunchError):
    exit_code = ExitCode.NOT_ENOUGH_GPUS
    #: The line already says that no wait can help here, and what would (N nodes, a shorter context):
    #: ``--wait`` gives up at once and shows it as it is.
    final: bool = False


class WaitTimeout(GpuLaunchError):
    exit_code = ExitCode.WAIT_TIMEOUT


class ReservationConflict(GpuLaunchError):
    exit_code = ExitCode.RESERVED


class LockDirError(GpuLaunchError):
    """The reservation lock directory or a lock file in it is missing, unsafe or unusable."""

    exit_code = ExitCode.BAD_FILE


class ModelFileError(GpuLaunchError):
    """A model file, folder or cached Hugging Face id that cannot be read as a model: missing,
    truncated, garbage or crafted headers, an unknown layout."""

    exit_code = ExitCode.BAD_FILE


class JobError(GpuLaunchError):
    """A detached job's directory, record or log is unsafe or cannot be read (``submit``, ``jobs``, ``log``, ``cancel``)."""

    exit_code = ExitCode.BAD_FILE


class JobsFailed(GpuLaunchError):
    exit_code = ExitCode.JOBS_FAILED


class CheckFailed(GpuLaunchError):
    exit_code = ExitCode.CHECK_FAILED


class CommandNotFound(GpuLaunchError):
    exit_code = ExitCode.COMMAND_NOT_FOUND


class NotExecutable(GpuLaunchError):
    exit_code = ExitCode.NOT_EXECUTABLE


class Interrupted(GpuLaunchError):
    exit_code = ExitCode.INTERRUPTED


class ConfigError(GpuLaunchError):
    """A bad config file or GPULAUNCH_* variable; the message names the file, line and key."""

    exit_code = ExitCode.BAD_FILE


class CudaAlreadyInitialized(GpuLaunchError):
    """The Python API was asked to set ``CUDA_VISIBLE_DEVICES`` in a process where CUDA already started.

    CUDA reads the variable once, when it initialises; changing it afterwards silently does nothing.
    Never raised by the command line, which sets the variables for a new process.
    """

    exit_code = ExitCode.USAGE


#: The names the Python API documents (``except gpu_launch.Reserved``); the same classes.
Reserved = ReservationConflict
NoDriver = NvmlUnavailable


class OutputFailed(GpuLaunchError):
    """stdout could not be written (closed, disk full): ``ls``, ``env``, ``--help`` and the like failed."""

    exit_code = ExitCode.OUTPUT_FAILED
