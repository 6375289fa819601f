"""Launchers that would undo gpulaunch's choice: ``accelerate launch --gpu_ids`` and ``deepspeed --include``.

gpulaunch hands the command a ``CUDA_VISIBLE_DEVICES``; a few launchers replace it when told which
GPUs to use, so the ids given to them then mean *physical* GPUs again, not gpulaunch's choice
(docs/frameworks.md):

- ``accelerate launch --gpu_ids 0,1`` (or ``--gpu-ids``; accelerate takes both spellings) *sets*
  ``CUDA_VISIBLE_DEVICES=0,1`` for its workers (``utils/launch.py``: any value but ``all``);
- ``deepspeed --include localhost:0,1`` (``-i``), ``--exclude`` (``-e``), ``--num_gpus N``
  (``--num_accelerators``) and ``--num_nodes N`` (N > 1) make the deepspeed runner print "ignoring it"
  and *delete* the inherited ``CUDA_VISIBLE_DEVICES`` (``launcher/runner.py`` ``main``).

Only the launcher's own options count, those before its script: ``train.py --gpu_ids 0`` is the
script's business. The launchers' parsers are not ours, so finding the script is best effort: a word
that is no option and no option's value, or any word ending in ``.py``. Plain functions, no
dataclass: this runs on the launch path (docs/performance.md).
"""

from __future__ import annotations

import os

__all__ = ["overrides"]

# Options of each launcher that take no value (the others take the next word unless written NAME=VALUE).
_ACCELERATE_FLAGS = frozenset({
    "-h", "--help", "-q", "--quiet", "--cpu", "--multi_gpu", "--tpu", "--ipex", "--enable_cpu_affinity",
    "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm",
    "--use_xpu", "--same_network", "-m", "--module", "--no_python", "--tpu_cluster", "--no_tpu_cluster",
    "--tpu_use_sudo", "--downcast_bf16", "--debug", "--mps",
})
_DEEPSPEED_FLAGS = frozenset({
    "-h", "--help", "--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check", "--force_multi",
    "--save_pid", "--elastic_training", "--bind_cores_to_rank",
})
_ACCELERATE_EFFECT = "sets CUDA_VISIBLE_DEVICES to those ids for its workers"
_DEEPSPEED_EFFECT = "makes deepspeed ignore and delete the CUDA_VISIBLE_DEVICES it inherits"


def overrides(argv: tuple[str, ...] | list[str]) -> list[str]:
    """One warning per launcher option in ``argv`` that overrides gpulaunch's ``CUDA_VISIBLE_DEVICES``."""
    launcher, rest = _launcher(argv)
    if launcher == "accelerate":
        return [_warn("accelerate launch", written, value, _ACCELERATE_EFFECT)
                for name, written, value in _options(rest, _ACCELERATE_FLAGS, normalise=True)
                if name == "--gpu_ids" and value.strip() != "all"]
    if launcher == "deepspeed":
        found = []
        for name, written, value in _options(rest, _DEEPSPEED_FLAGS, normalise=False):
            if name in ("-i", "--include", "-e", "--exclude", "--num_gpus", "--num_accelerators") or (
                    name == "--num_nodes" and _int(value, 1) > 1):
                found.append(_warn("deepspeed", written, value, _DEEPSPEED_EFFECT))
        return found
    return []


def _launcher(argv: tuple[str, ...] | list[str]) -> tuple[str | None, list[str]]:
    """Which launcher ``argv`` runs, and its arguments: ``accelerate launch``, ``deepspeed``, or their
    ``python -m`` forms."""
    if not argv:
        return None, []
    prog = os.path.basename(argv[0])
    rest = list(argv[1:])
    if prog.startswith("python") and len(rest) >= 2 and rest[0] == "-m":
        prog, rest = {"accelerate.commands.launch": "accelerate-launch", "deepspeed.launcher.runner": "deepspeed",
                      "accelerate.commands.accelerate_cli": "accelerate"}.get(rest[1], ""), rest[2:]
    if prog == "accelerate" and rest[:1] == ["launch"]:
        return "accelerate", rest[1:]
    if prog == "accelerate-launch":
        return "accelerate", rest
    if prog == "deepspeed":
        return "deepspeed", rest
    return None, []


def _options(words: list[str], flags: frozenset[str], normalise: bool) -> list[tuple[str, str, str]]:
    """(option, option as written, value) before the launcher's script; flags get the value ""."""
    found = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or not word.startswith("-") or word == "-" or word.endswith(".py"):
            break  # the script: what follows is its own
        name, eq, value = word.partition("=")
        written = name
        if normalise and name.startswith("--"):  # accelerate: --gpu-ids is --gpu_ids
            name = "--" + name[2:].replace("-", "_")
        if eq or name in flags:
            i += 1
        else:
            value = words[i + 1] if i + 1 < len(words) else ""
            i += 2
        found.append((name, written, value))
    return found


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def _warn(launcher: str, name: str, value: str, effect: str) -> str:
    shown = f"{name} {value}".rstrip()
    return (f"`{launcher} {shown}` {effect}, overriding gpulaunch's choice "
            f"(hint: drop {name}: gpulaunch's CUDA_VISIBLE_DEVICES already scopes {launcher.split()[0]} "
            "to the chosen GPUs)")
