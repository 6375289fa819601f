"""What the commands share: reading the machine once, choosing within the parent's view, telling the mapping.

The work is done in :mod:`gpu_launch.share.pick`, one layer down, so that the Python API
(:mod:`gpu_launch.api`) runs exactly the same code as the command line.
"""

from __future__ import annotations

from gpu_launch.share.pick import (choose, choose_within_parent, read_machine, require_rereadable, snapshot_source,
                                   tell)

__all__ = ["snapshot_source", "require_rereadable", "read_machine", "choose_within_parent", "choose", "tell"]
