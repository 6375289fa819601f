"""The machine as plain data (model), and where it is read from: NVML, a snapshot file or a bundled example.

``gpu_launch.machine`` is also the Python API's ``machine()``: the package is callable, because a
package attribute of that name would otherwise hide (or be hidden by) the function — see
:func:`gpu_launch.api.machine`.
"""

from __future__ import annotations

import sys
from types import ModuleType

TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike

    from gpu_launch.machine.model import Machine


class _Callable(ModuleType):
    def __call__(self, snapshot: str | PathLike[str] | None = None) -> Machine:
        """The machine model, from NVML or ``snapshot``: :func:`gpu_launch.api.machine`."""
        from gpu_launch import api  # the public API's function; only this call reaches up to it

        return api.machine(snapshot)


sys.modules[__name__].__class__ = _Callable
