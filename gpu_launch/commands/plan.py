"""``gpulaunch plan MODEL`` / ``gpulaunch plan -- COMMAND...``: how a model would be laid out on the
GPUs a launch would get, and the numbers the placeholders would receive. Nothing runs, nothing is reserved.

``--gpus`` plans on exactly those GPUs (in that order); otherwise the GPUs are chosen as
``gpulaunch --fit MODEL`` would choose them (constraints, ``--exclude``, others' reservations).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.fit.plan import Plan
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
    for dest in ("auto", "fit", "mig"):
        if inv.get(dest):
            raise UsageError(f"plan: --{dest} makes no sense here", hint="plan sizes the GPUs by the model itself")
    ref, argv = _what(inv)
    plan, why = _on_gpus(inv, ref, argv) if inv.get("gpus") is not None else _chosen(inv, ref, argv)
    from gpu_launch.views import plan_view

    if inv.get("json"):
        sys.stdout.write(json.dumps(plan_view.as_json(plan), indent=2) + "\n")
    else:
        sys.stdout.write(plan_view.as_text(plan, why))
    return 0


def _chosen(inv: Invocation, ref: str, argv: tuple[str, ...]) -> tuple[Plan, str]:
    from gpu_launch.share import acquire, pick

    chooser = replace(inv, options={**inv.options, "fit": ref}, argv=argv)
    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=False)
    _machine, _vis, got, _env = pick.choose(chooser, locking, choose_only=True)
    plan = got.selection.plan
    assert plan is not None  # a model request always comes back with its plan, or raises
    devices = ", ".join(d.label for d in got.selection.devices)
    n = len(got.selection.devices)
    why = (f"why: {devices}: the fewest GPUs ({n}) that hold it, the best of such sets by availability, "
           "model, links and free memory" if plan.placement.whole else
           f"why: {devices}: nothing holds it whole; these take the most of it, the rest stays on the CPU")
    return plan, why + "\n"


def _on_gpus(inv: Invocation, ref: str, argv: tuple[str, ...]) -> tuple[Plan, str]:
    from gpu_launch.choose import by_model
    from gpu_launch.choose import spec as gpu_spec
    from gpu_launch.fit import plan as fit_plan
    from gpu_launch.share import pick, sizing

    s = sizing.sizing_of(ref, argv, inv.options)
    machine = pick.read_machine(inv, processes=False, topology=False)
    devices = gpu_spec.resolve(inv.get("gpus"), machine)
    placement = fit_plan.place(s, by_model.rooms([d.gpu for d in devices]))
    return fit_plan.Plan(s, placement), f"why: --gpus {', '.join(d.label for d in devices)}, in that order\n"
