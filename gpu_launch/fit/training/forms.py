"""Which training launch a command is, read by its form's reader: the command word first (``trl``,
``axolotl``, ``llamafactory-cli``/``lmf``), then a launcher with a training script behind it
(``torchrun``, ``accelerate launch``, ``deepspeed``, ``python``: :mod:`.forms_launchers`); ``tune run``
(torchtune, :mod:`.forms_torchtune`). None: the
command is no training launch, and is sized as inference as before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from gpu_launch.fit.training.forms_common import Launch

__all__ = ["read_launch"]


def read_launch(argv: Sequence[str], environ: Mapping[str, str]) -> Launch | None:
    if not argv:
        return None
    word = os.path.basename(argv[0])
    if word == "trl":
        from gpu_launch.fit.training.forms_trl import read_trl

        return read_trl(argv, environ)
    if word == "axolotl":
        from gpu_launch.fit.training.forms_axolotl import read_axolotl

        return read_axolotl(argv)
    if word in ("llamafactory-cli", "lmf"):
        from gpu_launch.fit.training.forms_llamafactory import read_llamafactory

        return read_llamafactory(argv, environ)
    if word == "tune":
        from gpu_launch.fit.training.forms_torchtune import read_torchtune

        return read_torchtune(argv, environ)
    from gpu_launch.fit.training.forms_launchers import behind_launcher

    return behind_launcher(argv, environ)
