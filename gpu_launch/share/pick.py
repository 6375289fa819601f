"""One way to pick GPUs: read the machine, choose within the parent's view, reserve, build the env, tell.

A launch, ``env``, ``check``, ``each`` and the Python API
(:mod:`gpu_launch.api`) all call these functions with an :class:`~gpu_launch.options.args.Invocation`
(the API builds one from its keyword arguments with the same converters), so a request means the
same thing wherever it comes from.
"""

from __future__ import annotations

import os
import sys
import time

from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import IO

    from gpu_launch.choose.select import Constraints, Selection
    from gpu_launch.choose.visibility import Visibility
    from gpu_launch.hardware.model import Machine
    from gpu_launch.options.args import Invocation
    from gpu_launch.share.acquire import Acquired, Locking, Request


__all__ = ["snapshot_source", "require_rereadable", "read_machine", "choose_within_parent", "request_of", "choose", "tell"]


def snapshot_source(inv: Invocation) -> str | None:
    """``--snapshot``, else ``GPULAUNCH_SNAPSHOT``, else None (NVML)."""
    if inv.get("snapshot") == "":
        raise UsageError("--snapshot: empty file name", hint="give a snapshot file or an example name like dgx-h100")
    return inv.get("snapshot") or os.environ.get("GPULAUNCH_SNAPSHOT") or None


def require_rereadable(inv: Invocation, why: str) -> None:
    """``--wait`` and ``each`` read the snapshot again and again: a pipe (``--snapshot /dev/stdin``,
    ``<(...)``) can be read only once, so say so up front instead of failing on the second read."""
    import stat

    source = snapshot_source(inv)
    if source is None or not source.startswith(("/dev/stdin", "/dev/fd/", "/proc/self/fd/")):
        return
    try:
        mode = os.stat(source).st_mode
    except (OSError, ValueError):
        return  # the read itself reports it
    if not stat.S_ISREG(mode):
        raise UsageError(f"--snapshot {source} is a pipe, which can be read only once, but {why} re-reads it",
                         hint="save it to a file first: --snapshot machine.json")


def read_machine(inv: Invocation, **needs: bool) -> Machine:
    """The machine, from the snapshot or NVML, querying only ``needs``; ``-v`` prints how long it took."""
    from gpu_launch.hardware.read import Needs, read_machine

    timings: dict[str, float] = {}
    start = time.perf_counter()
    machine = read_machine(snapshot_source(inv), Needs(**needs), timings)
    if inv.get("verbose") and not inv.get("quiet"):
        total = (time.perf_counter() - start) * 1000
        detail = "  ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items())
        print(f"gpulaunch: read {machine.source} in {total:.1f} ms" + (f" ({detail})" if detail else ""), file=sys.stderr)
    return machine


def choose_within_parent(request: Request, machine: Machine, constraints: Constraints,
                         environ: Mapping[str, str] | None = None) -> Selection:
    """The selection for ``request`` among the devices the parent's visibility allows (an acquire chooser).

    ``environ``: the parent's environment (default ``os.environ``; the Python API passes it as it was
    before its own ``use()`` changed it)."""
    from gpu_launch.choose import select
    from gpu_launch.choose import visibility
    from gpu_launch.choose import spec as gpu_spec
    from gpu_launch.errors import NotEnoughGpus

    vis = visibility.resolve(machine, os.environ if environ is None else environ)
    vis.require_some()
    scope = vis.restrict(machine)  # --auto/--fit only ever choose among what the parent allows
    if vis.slurm and vis.allowed is not None:  # a Slurm step's GPUs are the job's, whatever their load
        from dataclasses import replace

        constraints = replace(constraints, allotted=constraints.allotted | {d.gpu.uuid for d in vis.allowed})
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


def request_of(inv: Invocation, choose_only: bool = False, waiting: bool = False) -> Request:
    """The request an invocation makes. ``choose_only`` (``env``, the API's ``select``): nothing will run
    on the GPUs, so a ``--gpus`` GPU reserved by someone else is a warning, not an error. ``waiting``:
    ``--gpus`` then waits until its GPUs meet the constraints, instead of running with a warning."""
    from gpu_launch.share import acquire

    auto = inv.get("auto")
    fit = inv.get("fit")
    explicit = inv.get("gpus")
    if explicit is None and fit is None and auto is None:
        auto = 1  # a bare `gpulaunch CMD` gets the best single GPU
    if inv.get("share") and explicit is None:
        raise UsageError("--share is for --gpus", hint="--auto and --fit always skip GPUs reserved by others")
    runner_ups = 3 if inv.get("explain") else 0  # next-best sets cost search time; only --explain shows them
    return acquire.Request(auto=auto, fit=fit, gpus=explicit, min_free=inv.get("min_free"),
                           max_util=inv.get("max_util"), idle=bool(inv.get("idle")), exclude=inv.get("exclude"),
                           share=bool(inv.get("share")) or choose_only, runner_ups=runner_ups,
                           mig=bool(inv.get("mig")), strict=explicit is not None and waiting,
                           polite=waiting and explicit is None)


def choose(inv: Invocation, locking: Locking | None = None, wait: float | None = None,
           fallback: str | None = None, choose_only: bool | None = None, environ: Mapping[str, str] | None = None,
           ) -> tuple[Machine | None, Visibility | None, Acquired, dict[str, str]]:
    """Read the machine, narrow it to what the parent allows, choose, reserve (``locking``), build the env.

    Returns the machine, the parent's visibility, what was acquired and the child's whole
    environment (``environ``, default ``os.environ``, plus the variables gpulaunch sets). The machine
    and visibility are None only when ``fallback`` ran the request onto the CPU. ``choose_only``
    defaults to ``inv.command == "env"``.
    """
    parent = os.environ if environ is None else environ
    from gpu_launch.share import acquire
    from gpu_launch.run import environment
    from gpu_launch.choose import visibility

    request = request_of(inv, inv.command == "env" if choose_only is None else choose_only, wait is not None)
    explicit = request.gpus is not None

    if wait is not None:
        require_rereadable(inv, "--wait")

    def read() -> Machine:
        # Processes on every path that decides (whether a GPU is idle, and `--gpus`' warnings); their
        # users only for what is said ("GPU 0 is busy by alice"), from /proc without psutil.
        return read_machine(inv, processes=True, process_details=False, process_users=not inv.get("quiet"),
                            topology=not explicit and (request.fit is not None or (request.auto or 1) > 1
                                                       or bool(inv.get("explain"))))

    def chooser(request: Request, machine: Machine, constraints: Constraints) -> Selection:
        return choose_within_parent(request, machine, constraints, parent)

    got = acquire.acquire(request, read, locking, wait=wait, fallback=fallback, quiet=bool(inv.get("quiet")),
                          environ=parent, chooser=chooser)
    machine = got.machine
    vis = visibility.resolve(machine, parent) if machine is not None else None
    # The parent narrowed the view: write UUIDs, which name the same GPU in every view (visibility.py).
    env = environment.build(got.selection.devices, parent,
                            use_uuid=bool(inv.get("uuid")) or bool(vis is not None and vis.restricted))
    return machine, vis, got, env


def tell(inv: Invocation, vis: Visibility, selection: Selection, env: dict[str, str],
         stream: IO[str] | None = None) -> None:
    """The warnings, the parent's set and the cuda:i → GPU table, on stderr (unless -q)."""
    if inv.get("quiet"):
        return
    from gpu_launch.views import render

    out = stream if stream is not None else sys.stderr
    for problem in vis.problems:
        print(f"gpulaunch: warning: the parent's CUDA_VISIBLE_DEVICES: {problem}", file=out)
    for warning in (*vis.warnings, *selection.warnings):
        print(f"gpulaunch: warning: {warning}", file=out)
    header = vis.header()
    if header:
        print(f"gpulaunch: {header}", file=out)
    print(f"gpulaunch: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=out)
    labels = vis.labels(selection.devices) if vis.parent_cvd else None
    print("\n".join(render.mapping_lines(selection.devices, labels)), file=out, flush=True)
