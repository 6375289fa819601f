"""Is CUDA already running in this process? After it starts, ``CUDA_VISIBLE_DEVICES`` does nothing."""

from __future__ import annotations

import sys

from gpu_launch.errors import CudaAlreadyInitialized

__all__ = ["cuda_started", "refuse_if_cuda_started"]


def cuda_started() -> str | None:
    """Why CUDA counts as initialised in this process (None: it does not). Imports nothing new.

    CUDA reads ``CUDA_VISIBLE_DEVICES`` when it initialises, so after that changing the variable
    silently does nothing. Two signs: the driver library ``libcuda.so`` is mapped into this
    process (``/proc/self/maps``), or an already imported torch says ``torch.cuda.is_initialized()``.
    A torch that was merely imported is fine: it starts CUDA at its first use.
    """
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                if b"libcuda.so" in line:
                    path = line.split(maxsplit=5)[-1].strip().decode("utf-8", "replace")
                    return f"the CUDA driver is loaded ({path})"
    except OSError:
        pass  # no /proc (not Linux): only the torch check can tell
    torch = sys.modules.get("torch")
    is_initialized = getattr(getattr(torch, "cuda", None), "is_initialized", None)
    if callable(is_initialized):
        try:
            if is_initialized():
                return "torch.cuda.is_initialized() is True"
        except Exception:  # a half-imported or odd torch: no sign either way
            pass
    return None


def refuse_if_cuda_started(what: str) -> None:
    why = cuda_started()
    if why is not None:
        raise CudaAlreadyInitialized(
            f"{what}: CUDA is already initialised in this process: {why}; CUDA_VISIBLE_DEVICES set now "
            "would have no effect",
            hint="restart the kernel (or the Python process) and call gpu_launch.use() first, before anything "
                 "touches CUDA; or start the work in a new process with gpu_launch.reserve() and r.env")
