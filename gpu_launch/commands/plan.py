"""``gpulaunch plan MODEL`` / ``gpulaunch plan -- COMMAND...``: how a model would be laid out on the
GPUs a launch would get, and the numbers the placeholders would receive. Nothing runs, nothing is reserved.

``--gpus`` plans on exactly those GPUs (in that order); otherwise the GPUs are chosen as
``gpulaunch --fit MODEL`` would choose them (constraints, ``--exclude``, others' reservations). With no
NVIDIA driver it plans on the bundled example machine, with ``ls``'s note (``--json``: ``example``).
"""

from __future__ import annotations

import json
import sys

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation

__all__ = ["run"]


def _what(inv: Invocation) -> tuple[str, tuple[str, ...]]:
    """(model reference, command): ``plan MODEL`` or ``plan -- COMMAND...`` (the model read from it)."""
    words = inv.positionals
    if not words:
        raise UsageError("plan: name a model or a command",
                         hint="gpulaunch plan ./model.gguf, or gpulaunch plan -- llama-server -m ./model.gguf -c 8192")
    if len(words) == 1:
        return words[0], ()
    return "model", tuple(words)


def run(inv: Invocation) -> int:
    ref, argv = _what(inv)
    from gpu_launch.fit import model_plan
    from gpu_launch.views import plan_view

    from gpu_launch.errors import NvmlUnavailable
    from gpu_launch.placing import pick

    example = None
    try:
        plan, why = model_plan.make_plan(inv, ref, argv)
    except NvmlUnavailable as exc:  # no driver: planned on the example machine, as `ls` shows it
        inv = pick.example_instead(inv, exc)
        plan, why = model_plan.make_plan(inv, ref, argv)
        example = pick.EXAMPLE
        if not inv.get("quiet"):
            print(f"gpulaunch: {pick.EXAMPLE_NOTE}", file=sys.stderr)
    if inv.get("json"):
        doc = plan_view.as_json(plan)
        if example is not None:
            doc["example"] = example
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(plan_view.as_text(plan, why))
    return 0
