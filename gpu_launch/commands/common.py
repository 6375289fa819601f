"""What the commands share: reading the machine once, choosing within the parent's view, telling the mapping."""

from __future__ import annotations

import os
import sys
import time

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.choose.select import Constraints, Selection
    from gpu_launch.choose.visibility import Visibility
    from gpu_launch.machine.model import Machine
    from gpu_launch.options.args import Invocation
    from gpu_launch.share.acquire import Acquired, Locking, Request


__all__ = ["snapshot_source", "read_machine", "choose_within_parent", "choose", "tell"]


def snapshot_source(inv: Invocation) -> str | None:
    if inv.get("snapshot") == "":
        raise UsageError("--snapshot: empty file name", hint="give a snapshot file or an example name like dgx-h100")
    return inv.get("snapshot") or os.environ.get("GPULAUNCH_SNAPSHOT") or None


def read_machine(inv: Invocation, **needs: bool) -> Machine:
    from gpu_launch.machine.read import Needs, read_machine

    timings: dict[str, float] = {}
    start = time.perf_counter()
    machine = read_machine(snapshot_source(inv), Needs(**needs), timings)
    if inv.get("verbose") and not inv.get("quiet"):
        total = (time.perf_counter() - start) * 1000
        detail = "  ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items())
        print(f"gpulaunch: read {machine.source} in {total:.1f} ms" + (f" ({detail})" if detail else ""), file=sys.stderr)
    return machine


def choose_within_parent(request: Request, machine: Machine, constraints: Constraints) -> Selection:
    """The selection for ``request`` among the devices the parent's visibility allows (an acquire chooser)."""
    from gpu_launch.choose import select
    from gpu_launch.choose import visibility
    from gpu_launch.choose import spec as gpu_spec
    from gpu_launch.errors import NotEnoughGpus

    vis = visibility.resolve(machine, os.environ)
    vis.require_some()
    scope = vis.restrict(machine)  # --auto/--fit only ever choose among what the parent allows
    try:
        if request.gpus is not None:
            devices = gpu_spec.resolve(request.gpus, machine)
            vis.check_allowed(devices)
            return select.check_explicit(devices, machine, constraints)
        if request.mig:
            from gpu_launch.choose import mig

            return mig.choose_mig(scope, request.auto or 1, constraints, request.fit)
        if request.fit is not None:
            return select.choose_fit(scope, request.fit, constraints, request.runner_ups)
        return select.choose_auto(scope, request.auto or 1, constraints, request.runner_ups)
    except NotEnoughGpus as exc:
        if vis.restricted:
            exc.message += f" (the parent's {vis.source} allows {visibility.describe_devices(vis.allowed or ())})"
        raise


def choose(inv: Invocation, locking: Locking | None = None, wait: float | None = None,
            fallback: str | None = None) -> tuple[Machine | None, Visibility | None, Acquired, dict[str, str]]:
    """Read the machine, narrow it to what the parent allows, choose, reserve (``locking``), build the env.

    The machine and visibility are None only when ``fallback`` ran the request onto the CPU.
    """
    from gpu_launch.share import acquire
    from gpu_launch.run import environment
    from gpu_launch.choose import visibility

    auto = inv.get("auto")
    fit = inv.get("fit")
    explicit = inv.get("gpus")
    if explicit is None and fit is None and auto is None:
        auto = 1  # a bare `gpulaunch CMD` gets the best single GPU
    if inv.get("share") and explicit is None:
        raise UsageError("--share is for --gpus", hint="--auto and --fit always skip GPUs reserved by others")
    runner_ups = 3 if inv.get("explain") else 0  # next-best sets cost search time; only --explain shows them
    request = acquire.Request(auto=auto, fit=fit, gpus=explicit, min_free=inv.get("min_free"),
                              max_util=inv.get("max_util"), idle=bool(inv.get("idle")), exclude=inv.get("exclude"),
                              share=bool(inv.get("share")) or inv.command == "env", runner_ups=runner_ups,
                              mig=bool(inv.get("mig")), strict=explicit is not None and wait is not None)

    def read() -> Machine:
        # Processes on every path that decides (whether a GPU is idle, and `--gpus`' warnings); their
        # users only for what is said ("GPU 0 is busy by alice"), from /proc without psutil.
        return read_machine(inv, processes=True, process_details=False, process_users=not inv.get("quiet"),
                            topology=explicit is None and (fit is not None or (auto or 1) > 1 or bool(inv.get("explain"))))

    got = acquire.acquire(request, read, locking, wait=wait, fallback=fallback, quiet=bool(inv.get("quiet")),
                          chooser=choose_within_parent)
    machine = got.machine
    vis = visibility.resolve(machine, os.environ) if machine is not None else None
    # The parent narrowed the view: write UUIDs, which name the same GPU in every view (visibility.py).
    env = environment.build(got.selection.devices, os.environ,
                            use_uuid=bool(inv.get("uuid")) or bool(vis is not None and vis.restricted))
    return machine, vis, got, env


def tell(inv: Invocation, vis: Visibility, selection: Selection, env: dict[str, str]) -> None:
    """The warnings, the parent's set and the cuda:i → GPU table, on stderr (unless -q)."""
    if inv.get("quiet"):
        return
    from gpu_launch.views import render

    for problem in vis.problems:
        print(f"gpulaunch: warning: the parent's CUDA_VISIBLE_DEVICES: {problem}", file=sys.stderr)
    for warning in (*vis.warnings, *selection.warnings):
        print(f"gpulaunch: warning: {warning}", file=sys.stderr)
    header = vis.header()
    if header:
        print(f"gpulaunch: {header}", file=sys.stderr)
    print(f"gpulaunch: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=sys.stderr)
    labels = vis.labels(selection.devices) if vis.parent_cvd else None
    print("\n".join(render.mapping_lines(selection.devices, labels)), file=sys.stderr)
