"""Launchers that would undo gpulaunch's choice: ``accelerate launch --gpu_ids`` and ``deepspeed --include``.

gpulaunch hands the command a ``CUDA_VISIBLE_DEVICES``; a few launchers replace it when told which
GPUs to use, so the ids given to them then mean *physical* GPUs again, not gpulaunch's choice
(docs/frameworks.md):

- ``accelerate launch --gpu_ids 0,1`` (or ``--gpu-ids``; accelerate takes both spellings) *sets*
  ``CUDA_VISIBLE_DEVICES=0,1`` for its workers (``utils/launch.py``: any value but ``all``);
- ``deepspeed --include localhost:0,1`` (``-i``), ``--exclude`` (``-e``), ``--num_gpus N > 0``
  (``--num_accelerators``) and ``--num_nodes N > 1`` make the deepspeed runner print "ignoring it"
  and *delete* the inherited ``CUDA_VISIBLE_DEVICES`` (``launcher/runner.py`` ``main``); with a
  ``--hostfile`` (``-H``) it never reads it, and its per-node launcher sets it to the hostfile's slots.

The launchers' own options are read through their tables (:mod:`gpu_launch.fit.cmdline`: every
spelling, prefix and ``python -m`` form they accept, the last of a repeat; only the options before
the script count, ``train.py --gpu_ids 0`` is the script's business), the reader sizing and the
node task use. That reader is imported only for a command that may be such a launcher: a plain
launch pays nothing for it (docs/performance.md).
"""

from __future__ import annotations

import os

__all__ = ["overrides"]

_ACCELERATE_EFFECT = "sets CUDA_VISIBLE_DEVICES to those ids for its workers"
_DEEPSPEED_EFFECT = "makes deepspeed ignore and delete the CUDA_VISIBLE_DEVICES it inherits"
_HOSTFILE_EFFECT = "makes deepspeed's launcher set CUDA_VISIBLE_DEVICES to the hostfile's slots"
#: words that may start a launcher: the command word or a ``python -m`` module (a cheap test, before any import)
_LAUNCHERS = ("accelerate", "deepspeed", "ds")


def overrides(argv: tuple[str, ...] | list[str]) -> list[str]:
    """One warning per launcher option in ``argv`` that overrides gpulaunch's ``CUDA_VISIBLE_DEVICES``."""
    if not argv or not any(os.path.basename(word).startswith(_LAUNCHERS) for word in argv[:8]):
        return []
    from gpu_launch.errors import UsageError
    from gpu_launch.fit import cmdline

    engine = cmdline.engine_of(argv)
    if engine not in ("accelerate", "deepspeed"):
        return []
    try:
        said = cmdline.read(argv, engine)
    except UsageError:  # a value or prefix the launcher refuses: it says so itself, on its own terms
        return []
    if not cmdline.table_module(engine).nodes_form(argv, said):  # `accelerate config`, deepspeed's per-node launcher
        return []
    if engine == "accelerate":
        ids = said.get("gpu_ids")
        return [_warn("accelerate launch", ids.written, ids.text, _ACCELERATE_EFFECT)] \
            if ids is not None and ids.text.strip() != "all" else []
    found = []
    for meaning, used in (("include", None), ("exclude", None), ("num_gpus", 0), ("nnodes", 1), ("hostfile", None)):
        setting = said.get(meaning)
        if setting is None or (used is not None and (said.number(meaning) or 0) <= used):
            continue
        found.append(_warn("deepspeed", setting.written, setting.text,
                           _HOSTFILE_EFFECT if meaning == "hostfile" else _DEEPSPEED_EFFECT))
    return found


def _warn(launcher: str, written: str, value: str, effect: str) -> str:
    name = written.partition("=")[0].split()[0]  # the option as the user spelt it: `--gpu-ids=0,1` is --gpu-ids
    shown = f"{name} {value}".rstrip()
    return (f"`{launcher} {shown}` {effect}, overriding gpulaunch's choice "
            f"(hint: drop {name}: gpulaunch's CUDA_VISIBLE_DEVICES already scopes {launcher.split()[0]} "
            "to the chosen GPUs)")
