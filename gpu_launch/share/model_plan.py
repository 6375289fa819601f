"""A model's plan without a launch: ``gpulaunch plan`` and the Python API's ``plan()``.

On ``--gpus`` as given (in that order), else on the GPUs ``--fit MODEL`` would choose, seeing
others' reservations but taking none.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from gpu_launch.share import sizing

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.fit.plan import Plan
    from gpu_launch.options.args import Invocation

__all__ = ["make_plan"]


def make_plan(inv: Invocation, ref: str, argv: Sequence[str]) -> tuple[Plan, str]:
    """The plan for model ``ref`` run by ``argv``: on ``--gpus`` as given, else on the GPUs
    ``--fit MODEL`` would choose (nothing reserved); and why these GPUs, in one line."""
    return _on_gpus(inv, ref, tuple(argv)) if inv.get("gpus") is not None else _chosen(inv, ref, tuple(argv))


def _chosen(inv: Invocation, ref: str, argv: tuple[str, ...]) -> tuple[Plan, str]:
    from gpu_launch.share import acquire, pick

    chooser = replace(inv, options={**inv.options, "fit": ref}, argv=argv)
    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=False)
    _machine, _vis, got, _env = pick.choose(chooser, locking, choose_only=True)
    from gpu_launch.fit.plan import Plan

    plan = got.selection.plan
    assert isinstance(plan, Plan)  # a model request always comes back with its plan, or raises
    devices = ", ".join(d.label for d in got.selection.devices)
    n = len(got.selection.devices)
    cap = plan.sizing.settings.gpu_layers_cap
    what = "it" if cap is None else f"the {cap} units -ngl {cap} offloads"
    why = (f"why: {devices}: the fewest GPUs ({n}) that hold {what}, the best of such sets by availability, "
           "model, links and free memory" if plan.placement.whole or (cap is not None and plan.placement.fits) else
           f"why: {devices}: nothing holds it whole; these take the most of it, the rest stays on the CPU")
    return plan, why + "\n"


def _on_gpus(inv: Invocation, ref: str, argv: tuple[str, ...]) -> tuple[Plan, str]:
    from gpu_launch.choose import by_model
    from gpu_launch.choose import spec as gpu_spec
    from gpu_launch.fit import plan as fit_plan
    from gpu_launch.share import pick

    s = sizing.sizing_of(ref, argv, inv.options)
    machine = pick.read_machine(inv, processes=False, topology=False)
    devices = gpu_spec.resolve(inv.get("gpus"), machine)
    s = by_model.for_machine(s, machine)
    placement = fit_plan.place(s, by_model.rooms([d.gpu for d in devices]))
    return fit_plan.Plan(s, placement), f"why: --gpus {', '.join(d.label for d in devices)}, in that order\n"
