"""The chokepoint every NVML call of a read goes through, and the session around them.

:class:`NvmlCalls` loads pynvml (or takes a stand-in), opens and closes the one NVML session of a
read, times each query kind for ``-v``, and sorts NVML's failures into three sizes (STYLE.md §5 rule
4): a field NVML cannot give is ``None``; a GPU that is gone raises :class:`GpuFailed` (its row
becomes unavailable); NVML itself failing raises :class:`~gpu_launch.errors.NvmlUnavailable`.
:class:`~gpu_launch.hardware.nvml.NvmlBackend` builds the machine on top of it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

from gpu_launch.errors import NvmlUnavailable
from gpu_launch.hardware.nvml_answers import (DRIVER_NOT_LOADED, EXAMPLES_HINT, FUNCTION_NOT_FOUND, GPU_FATAL,
                                              INIT_FAILURES, INVALID_ARGUMENT, LIBRARY_NOT_FOUND, NOT_SUPPORTED,
                                              GpuFailed, debug, error_code)

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NvmlCalls"]


class NvmlCalls:
    """One NVML session's calls: ``nvml`` is the pynvml module (imported on first use when None) or an
    object with the same names (tests pass a fake); ``timings`` receives seconds per query kind."""

    def __init__(self, nvml: Any = None, timings: dict[str, float] | None = None) -> None:
        self._nvml: Any = nvml
        self.timings = timings
        #: NVML functions these bindings or this driver lack (FunctionNotFound), for ``-v``.
        self.missing_functions: set[str] = set()
        self._library_mismatch: tuple[type[BaseException], ...] = ()

    # -- session -----------------------------------------------------------------------------

    def _load(self) -> Any:
        if self._nvml is None:
            try:
                pynvml = _import_pynvml()
            except ImportError as exc:
                raise NvmlUnavailable(f"NVML unavailable: cannot import pynvml ({exc})",
                                      hint="pip install nvidia-ml-py; " + EXAMPLES_HINT) from exc
            self._nvml = pynvml
        mismatch = getattr(self._nvml, "NVMLLibraryMismatchError", None)
        self._library_mismatch = (mismatch,) if isinstance(mismatch, type) else ()
        return self._nvml

    @contextlib.contextmanager
    def _session(self, nvml: Any) -> Iterator[None]:
        with self._timed("init"):
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                cause, hint = INIT_FAILURES.get(error_code(exc), ("NVML failed to initialize", EXAMPLES_HINT))
                said = "" if error_code(exc) == LIBRARY_NOT_FOUND else f" (NVML: {exc})"  # it would say it again
                failed = NvmlUnavailable(f"NVML unavailable: {cause}{said}", hint=hint)
                failed.no_driver = error_code(exc) in (LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED)  # `ls` shows the demo
                raise failed from exc
        try:
            yield
        finally:
            with self._timed("shutdown"):
                try:
                    nvml.nvmlShutdown()
                except nvml.NVMLError as exc:  # the data is read; a failed shutdown changes nothing
                    debug("nvmlShutdown failed: %s", exc)

    @contextlib.contextmanager
    def _timed(self, kind: str) -> Iterator[None]:
        if self.timings is None:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[kind] = self.timings.get(kind, 0.0) + time.perf_counter() - start

    # -- the chokepoint ----------------------------------------------------------------------

    def _try(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """Call NVML function ``name``: ``(value, None)``, or ``(None, reason)`` when NVML cannot
        give it (NotSupported, FunctionNotFound, NoPermission, Unknown, ...).

        Raises:
            GpuFailed: GpuIsLost or ResetRequired: the whole GPU is gone, not just this field.
        """
        function = getattr(self._nvml, name, None)
        if function is None:
            self.missing_functions.add(name)
            return None, f"{name} is not in these NVML bindings"
        try:
            return function(*args), None
        except self._nvml.NVMLError as exc:
            if error_code(exc) in GPU_FATAL:
                raise GpuFailed(str(exc)) from exc
            if error_code(exc) == FUNCTION_NOT_FOUND:
                self.missing_functions.add(name)
            debug("%s: %s", name, exc)
            return None, str(exc)
        except self._library_mismatch as exc:  # pynvml: unversioned call newer than the driver
            self.missing_functions.add(name)
            return None, str(exc)

    def _query(self, name: str, *args: Any) -> Any:
        """The value of NVML function ``name``, or None when NVML cannot give it (see ``_try``)."""
        return self._try(name, *args)[0]

    def _try_quiet(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """``_try`` where a lost GPU is just one more unanswered call (system and pair queries)."""
        try:
            return self._try(name, *args)
        except GpuFailed as exc:
            return None, str(exc)

    def _pair_call(self, handles: list[Any], suspects: set[int]) -> Any:
        """``_try_quiet`` for the topology queries that also notes which GPUs a lost-GPU error involved."""
        positions = {id(h): i for i, h in enumerate(handles) if h is not None}

        def call(name: str, *args: Any) -> tuple[Any, str | None]:
            try:
                return self._try(name, *args)
            except GpuFailed as exc:
                suspects.update(positions[id(a)] for a in args if id(a) in positions)
                return None, str(exc)
        return call

    def _mig_call(self, name: str, *args: Any, absent: frozenset[int] = frozenset()) -> Any:
        """A MIG query: None when the GPU or driver has no MIG (NotSupported, FunctionNotFound, or
        a code in ``absent``). Any other failure leaves the GPU's MIG state unknown, and a GPU that
        might be in MIG mode must not be handed out whole, so it raises GpuFailed."""
        function = getattr(self._nvml, name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self._nvml.NVMLError as exc:
            if error_code(exc) in GPU_FATAL:
                raise GpuFailed(str(exc)) from exc
            if error_code(exc) in {NOT_SUPPORTED, FUNCTION_NOT_FOUND, *absent}:
                return None
            raise GpuFailed(f"its MIG state is unknown ({name}: {exc})") from exc
        except self._library_mismatch:
            return None

    def _identity_call(self, name: str, *args: Any) -> Any:
        """A call the GPU's identity depends on: any NVML error makes the GPU unavailable."""
        try:
            return getattr(self._nvml, name)(*args)
        except self._nvml.NVMLError as exc:
            if name == "nvmlDeviceGetHandleByIndex" and error_code(exc) == INVALID_ARGUMENT:
                raise GpuFailed(f"GPU disappeared after it was counted ({exc})") from exc
            raise GpuFailed(str(exc)) from exc


def _import_pynvml() -> Any:
    """``import pynvml``, without the third of its import that it never uses: ``ctypes.util``.

    pynvml imports ``find_library`` from ``ctypes.util`` at the top but opens the library by its
    name (libnvidia-ml.so.1, nvml.dll); ``ctypes.util`` itself imports subprocess, shutil and
    tempfile (~7 ms of pynvml's ~20). For the import, a stand-in module lends pynvml a
    ``find_library`` that imports the real one if it is ever called; the stand-in leaves
    ``sys.modules`` as soon as pynvml is imported, so any other ``import ctypes.util`` gets the real one.
    """
    if "pynvml" in sys.modules or "ctypes.util" in sys.modules:
        import pynvml  # already paid for (or the real ctypes.util is there anyway)

        return pynvml
    import types

    def find_library(name: str) -> str | None:
        from ctypes import util

        return util.find_library(name)

    stand_in = types.ModuleType("ctypes.util", "stands in for ctypes.util while pynvml is imported")
    stand_in.find_library = find_library  # type: ignore[attr-defined]
    sys.modules["ctypes.util"] = stand_in
    try:
        import pynvml
    finally:
        if sys.modules.get("ctypes.util") is stand_in:
            del sys.modules["ctypes.util"]
    return pynvml
