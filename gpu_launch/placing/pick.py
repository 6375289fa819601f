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

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import IO, Any

    from gpu_launch.choose.select import Constraints, Selection
    from gpu_launch.choose.visibility import Visibility
    from gpu_launch.hardware.model import Gpu, Machine
    from gpu_launch.options.args import Invocation
    from gpu_launch.reservations.acquire import Acquired, Locking, Request


__all__ = ["EXAMPLE", "EXAMPLE_NOTE", "example_instead", "no_driver_refusal", "snapshot_source", "require_rereadable", "read_machine", "choose_within_parent", "request_of",
           "free_accounts", "named_indices", "choose", "tell"]


def snapshot_source(inv: Invocation) -> str | None:
    """``--snapshot``, else ``GPULAUNCH_SNAPSHOT``, else None (NVML)."""
    if inv.get("snapshot") == "":
        raise UsageError("--snapshot: empty file name", hint="give a snapshot file or an example name like dgx-h100")
    return inv.get("snapshot") or os.environ.get("GPULAUNCH_SNAPSHOT") or None


#: The bundled machine the read-only views (ls, topo, plan, and their --json) show where there is no NVIDIA driver.
EXAMPLE = "dgx-h100"
EXAMPLE_NOTE = f"note: no NVIDIA driver here, so this is the example machine {EXAMPLE}"


def example_instead(inv: Invocation, exc: Exception) -> Invocation:
    """``inv`` on the bundled example machine, for a read-only view that NVML failed with ``exc`` because there
    is no driver at all and no snapshot was asked for; ``exc`` again otherwise (a driver that fails, a version
    mismatch, no permission: the machine's real problem). As ``--snapshot dgx-h100`` would, the example then
    reserves in the user's own lock dir, so nothing about the machine's shared one is read or warned of."""
    from gpu_launch.base.records import replace
    from gpu_launch.errors import NvmlUnavailable

    if not isinstance(exc, NvmlUnavailable) or not exc.no_driver or snapshot_source(inv) is not None:
        raise exc
    return replace(inv, options={**inv.options, "snapshot": EXAMPLE})


def no_driver_refusal(exc: Exception) -> Exception:
    """What a command that starts work (a launch, env, check, each, submit) says where there is no driver:
    one line (two terminal rows at most: most new users' first line) naming ``--snapshot dgx-h100``; ``exc``
    itself for any other failure. It never runs on the example machine unasked."""
    from gpu_launch.errors import NvmlUnavailable

    if not isinstance(exc, NvmlUnavailable) or not exc.no_driver:
        return exc
    detail = exc.message.removeprefix("NVML unavailable: ")
    ours = f"add --snapshot {EXAMPLE} to run it on the example machine"
    # NVML's own advice stays (load the kernel module); its "try ... ls" gives way to the option to add here.
    fixes = [part for part in (exc.hint or "").split("; ") if part and "--snapshot" not in part]
    return NvmlUnavailable(f"no NVIDIA driver here ({detail})", hint="; or ".join([*fixes, ours]))


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


def read_machine(inv: Invocation, **needs: Any) -> Machine:
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
        from gpu_launch.base.records import replace

        constraints = replace(constraints, allotted=constraints.allotted | {d.gpu.uuid for d in vis.allowed})
    try:
        if request.gpus is not None:
            devices = gpu_spec.resolve(request.gpus, machine)
            vis.check_allowed(devices)
            return select.check_explicit(devices, machine, constraints)
        if request.model is not None:
            from gpu_launch.choose import by_model

            return by_model.choose_by_model(scope, request.model, constraints, request.runner_ups)
        if request.mig:
            from gpu_launch.choose import mig

            return mig.choose_mig(scope, request.auto or 1, constraints, request.fit)
        if request.fit is not None:
            return select.choose_fit(scope, request.fit, constraints, request.runner_ups)
        if request.elastic:
            return select.choose_elastic(scope, request.min_count or 1, request.max_count, constraints,
                                         request.runner_ups)
        return select.choose_auto(scope, request.auto or 1, constraints, request.runner_ups)
    except NotEnoughGpus as exc:
        if vis.restricted:
            exc.message += f" (the parent's {vis.source} allows {visibility.describe_devices(vis.allowed or ())})"
            exc.hint = f"{exc.hint}; {vis.lift_hint()}" if exc.hint else vis.lift_hint()
        raise


def request_of(inv: Invocation, choose_only: bool = False, waiting: bool = False) -> Request:
    """The request an invocation makes. ``choose_only`` (``env``, the API's ``select``): nothing will run
    on the GPUs, so a ``--gpus`` GPU reserved by someone else is a warning, not an error. ``waiting``:
    ``--gpus`` then waits until its GPUs meet the constraints, instead of running with a warning."""
    from gpu_launch.reservations import acquire

    auto = inv.get("auto")
    fit = inv.get("fit")
    explicit = inv.get("gpus")
    model = None
    if isinstance(fit, str):  # --fit MODEL: sized by the model's own files (imported only then)
        from gpu_launch.fit import sizing

        if inv.get("mig"):
            raise UsageError("--mig with --fit MODEL is not supported", hint="give a size: --fit 20GiB --mig")
        model, fit = sizing.sizing_of(fit, inv.argv, inv.options), None
    elif sizing_flags := [d for d in ("ctx", "parallel", "kv_type", "engine", "reserve") if d in inv.flags]:
        # Given on the command line only: a --reserve default from the config file applies when there is a model.
        given = sizing_flags[0]
        raise UsageError(f"--{given.replace('_', '-')} sizes a model: it needs --fit MODEL",
                         hint="e.g. gpulaunch --fit model --ctx 8192 -- llama-server -m ./q4.gguf")
    least, most = inv.get("min_count"), inv.get("max_count")
    if auto is not None and (least is not None or most is not None):  # (--nodes sets --auto itself)
        raise UsageError("--min-count/--max-count do not go with --auto or --nodes",
                         hint="--auto N is --min-count N --max-count N; --nodes takes --gpus-per-node")
    if explicit is None and fit is None and auto is None and model is None and least is None and most is None:
        auto = 1  # a bare `gpulaunch CMD` gets the best single GPU

    if inv.get("share") and explicit is None:
        raise UsageError("--share is for --gpus", hint="--auto and --fit always skip GPUs reserved by others")
    runner_ups = 3 if inv.get("explain") else 0  # next-best sets cost search time; only --explain shows them
    return acquire.Request(auto=auto, fit=fit, gpus=explicit, min_free=inv.get("min_free"),
                           max_util=inv.get("max_util"), idle=bool(inv.get("idle")), exclude=inv.get("exclude"),
                           share=bool(inv.get("share")) or choose_only, runner_ups=runner_ups,
                           mig=bool(inv.get("mig")), strict=explicit is not None and waiting, model=model,
                           exclude_source=_exclude_source(inv), min_count=least, max_count=most,
                           min_total=inv.get("min_total_memory"), free_accounts=free_accounts(inv))


def free_accounts(inv: Invocation) -> frozenset[str]:
    """The users ``--account-as-free`` names; given alone, the user running gpulaunch."""
    accounts = inv.get("account_as_free")
    if accounts == "":
        from gpu_launch.reservations.holders import current_user

        return frozenset((current_user(),))
    return frozenset(accounts.split(",")) if accounts else frozenset()


def _exclude_source(inv: Invocation) -> str:
    """Where the exclusions came from when not from the command line: the variable or the file's line."""
    if inv.get("exclude") is None or "exclude" in inv.flags:
        return "--exclude"
    from gpu_launch.options import config

    setting = config.layered(os.environ).get("exclude")
    if setting is None:
        return "--exclude"
    if setting.source == "env":
        return f"{setting.where}={setting.text}"
    return f"exclude = {setting.text!r} in {setting.where}"


def named_indices(request: Request, environ: Mapping[str, str]) -> frozenset[int] | None:
    """The NVML indices ``--gpus`` names, when they are all a choice needs the state of; else None.

    Only plain indices qualify: a UUID (prefix) is matched against every GPU and MIG device. And
    only when no parent narrowed the view: its CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES is
    resolved against every GPU, MIG devices included.
    """
    if request.gpus is None or "CUDA_VISIBLE_DEVICES" in environ or "NVIDIA_VISIBLE_DEVICES" in environ:
        return None
    named: set[int] = set()
    for item in request.gpus:
        if item.kind != "index" or item.last - item.first >= 1024:  # a range past any machine: resolve says so
            return None
        named.update(range(item.first, item.last + 1))
    return frozenset(named)


def _could_be_chosen(request: Request) -> Callable[[Gpu], bool]:
    """Whether ``--auto``/``--fit`` could choose a GPU as read now (reservations aside): the GPUs whose
    links are worth reading. Never narrower than the choice's own eligibility, which it mirrors."""
    from gpu_launch.choose import select

    plain = select.Constraints(request.min_free, request.max_util, request.idle, min_total=request.min_total)
    # (--account-as-free frees memory: a GPU full of those users' work may be chosen, so every GPU counts)
    return lambda gpu: select.could_ever_be_chosen(gpu) and (bool(request.free_accounts)
                                                             or select.constraint_failure(gpu, plain) is None)


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
    from gpu_launch.reservations import waiting
    from gpu_launch.run import environment
    from gpu_launch.choose import visibility

    request = request_of(inv, inv.command == "env" if choose_only is None else choose_only, wait is not None)
    explicit = request.gpus is not None

    if wait is not None:
        require_rereadable(inv, "--wait")

    def read() -> Machine:
        # Processes on every path that decides (whether a GPU is idle, and `--gpus`' warnings); their
        # users for what is said ("GPU 0 is busy by alice", which -q does not hide), from /proc without psutil.
        # Temperatures and versions are never a choice (display=False); `--gpus 2` reads GPU 2's state only.
        return read_machine(inv, processes=True, process_details=False, process_users=True,
                            topology=not explicit and (request.fit is not None or request.model is not None
                                                       or (request.auto or 1) > 1
                                                       or (request.elastic and request.max_count != 1)
                                                       or bool(inv.get("explain"))),
                            display=False, state_of=named_indices(request, parent),
                            links_among=None if inv.get("explain") else _could_be_chosen(request))

    def chooser(request: Request, machine: Machine, constraints: Constraints) -> Selection:
        return choose_within_parent(request, machine, constraints, parent)

    got = waiting.acquire(request, read, locking, wait=wait, fallback=fallback, quiet=bool(inv.get("quiet")),
                          environ=parent, chooser=chooser, command=inv.argv, backfill=not inv.get("no_backfill"),
                          limit=getattr(inv.get("time"), "seconds", None))
    machine = got.machine
    vis = visibility.resolve(machine, parent) if machine is not None else None
    # The parent narrowed the view, or NVML's numbers are not CUDA's: UUIDs name the GPU in every view (visibility.py).
    env = environment.build(got.selection.devices, parent,
                            use_uuid=bool(inv.get("uuid")) or bool(vis is not None and vis.child_uuids),
                            lock_dir=locking.for_child(parent) if locking is not None and got.reservation is not None else None)
    return machine, vis, got, env


def tell(inv: Invocation, vis: Visibility, selection: Selection, env: dict[str, str],
         stream: IO[str] | None = None, waited: float | None = None) -> None:
    """The warnings, the parent's set and the cuda:i → GPU table, on stderr; ``waited``: how long
    ``--wait`` waited for the GPUs (None: they were free at once). ``-q`` leaves only the warnings about
    GPUs someone else computes on: a job put there is never a silent surprise."""
    from gpu_launch.choose.select import others_work_warnings
    from gpu_launch.reservations.holders import current_user

    out = stream if stream is not None else sys.stderr
    loud = others_work_warnings(selection.devices, current_user())
    if inv.get("quiet"):
        for warning in loud:
            print(f"gpulaunch: warning: {warning}", file=out)
        return
    from gpu_launch.views import render

    lines = []
    if waited is not None:
        from gpu_launch.base.units import fmt_duration

        took = f"{waited:.1f}s" if waited < 10 else fmt_duration(waited)
        lines.append(f"gpulaunch: waited {took} for the GPUs")
    lines += [f"gpulaunch: warning: the parent's CUDA_VISIBLE_DEVICES: {problem}" for problem in vis.problems]
    lines += [f"gpulaunch: warning: {warning}"
              for warning in (*vis.warnings, *selection.warnings, *(w for w in loud if w not in selection.warnings))]
    header = vis.header()
    if header:
        lines.append(f"gpulaunch: {header}")
    lines.append(f"gpulaunch: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}")
    labels = vis.labels(selection.devices) if vis.parent_cvd else None
    lines += render.mapping_lines(selection.devices, labels)
    # One write, newlines included: print() writes its end apart, and a Ctrl-C between the two left the
    # table's last line without one, `gpulaunch: interrupted` glued to it (1 start-up Ctrl-C in ~300).
    out.write("".join(line + "\n" for line in lines))
    out.flush()
