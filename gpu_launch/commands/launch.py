"""``gpulaunch [OPTIONS] [--] CMD ...``: check the command, choose, reserve, tell, bind, and exec."""

from __future__ import annotations

import json
import os
import sys

from gpu_launch.placing import pick
from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.choose.select import Selection
    from gpu_launch.hardware.model import Machine
    from gpu_launch.options.args import Invocation


__all__ = ["run"]


def run(inv: Invocation) -> int:
    """Check the command, choose and reserve, tell the mapping, then bind and exec (or only inform)."""
    from gpu_launch.run import placeholders
    from gpu_launch.run.execute import take_exec_notify
    from gpu_launch.reservations import acquire

    notify = take_exec_notify(os.environ)  # a detached job's supervisor listens (gpu_launch/jobs/)
    informing = bool(inv.get("dry_run") or inv.get("explain"))
    if not inv.argv and not informing:
        if inv.positionals:
            raise UsageError(f"unexpected argument {inv.positionals[0]!r}")
        raise UsageError("no command to run", hint="put it after the options, e.g. gpulaunch --auto 1 -- python train.py")
    if not informing:
        _check_command(inv)  # 126/127 before any GPU is chosen, shown, reserved or waited for
    nodes = None
    if inv.get("slurm") and (inv.get("nodes") is not None or isinstance(inv.get("fit"), str)):
        from gpu_launch.cluster import nodejob

        return nodejob.submit(inv)  # one Slurm job over several nodes (--fit MODEL: nodes from the plan)
    if inv.get("nodes") is not None:  # one node of a several-node run (docs/several-nodes.md)
        from gpu_launch.cluster import nodes as node_task

        nodes, inv = node_task.place(inv, os.environ)
    else:
        _refuse_node_options(inv)
    sized = isinstance(inv.get("fit"), str)  # --fit MODEL
    node_names = (*placeholders.NODE_NAMES, "pp", "tp") if nodes is not None else ()  # {tp}: the GPUs a node
    try:  # a placeholder that would reach the command unfilled: refused before anything is reserved or waited for
        placeholders.check(inv.argv, (*placeholders.NAMES, *(placeholders.MODEL_NAMES if sized else ()), *node_names))
    except placeholders.Unfilled as exc:
        if exc.name not in placeholders.MODEL_NAMES:
            raise
        raise UsageError(exc.message, hint="e.g. gpulaunch --fit model -- " + " ".join(inv.argv[:3]) + " ...; "
                                           f"write {{{{{exc.name}}}}} for a literal {{{exc.name}}}") from None
    quiet = bool(inv.get("quiet"))
    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=not (informing or inv.get("no_lock")),
                                 snapshot=pick.snapshot_source(inv))
    try:
        machine, vis, got, env = pick.choose(inv, locking, wait=None if informing else inv.get("wait"),
                                               fallback=inv.get("fallback"))
    except acquire.UNMET as exc:
        if nodes is not None:  # this node cannot take its part: it fails, and with it the run (never a smaller one)
            exc.message = f"node {nodes.rank} of {nodes.nnodes}: {exc.message}"
            exc.hint = (f"{exc.hint}; " if exc.hint else "") + "--gpus-per-node G that every node can give"
        raise
    selection = got.selection
    plan = selection.plan
    model_values = plan.placeholders() if plan is not None else None
    if model_values is not None:
        try:
            placeholders.check(inv.argv, (*placeholders.NAMES, *model_values, *node_names))
        except placeholders.Unfilled as exc:
            binding = plan.sizing.settings.binding
            raise UsageError(f"{{{exc.name}}} has no value for {binding or plan.sizing.engine.name}",
                             hint="its --tensor_split takes one word per GPU: leave it out, llama.cpp then splits "
                                  "the layers by each GPU's free memory" if binding and exc.name == "tensor_split" else
                                  "{gpu_layers} and {tensor_split} are llama.cpp's, {gpu_mem_util} vLLM's, "
                                  "{max_memory} Transformers', {pp} the tensor-parallel engines'; "
                                  "--engine names the engine") from None
    world = None
    if nodes is not None:  # reserved: now learn (or, on the head, pick and publish) the head's address and port
        world = node_task.join(nodes, len(selection.devices), os.environ, informing)
    node_values = node_task.values(world) if world is not None else None
    if node_values is not None and model_values is not None and "tp" in model_values:
        del node_values["tp"]  # the plan's split, not "the GPUs a node"
    argv = placeholders.substitute(inv.argv, len(selection.devices), model_values, node_values)
    node_command, own = None, argv  # own: the user's command, before any flag gpulaunch adds on a node
    if world is not None:
        cuda_ids = tuple(machine.cuda_index(d.gpu) if machine is not None else d.gpu.index for d in selection.devices)
        node_command, extra = node_task.command(argv, world, cuda_ids,
                                                str(nodes.run_dir), quiet or informing)
        argv = node_command.argv
        if node_command.index_cvd:  # Ray takes its GPU ids from CUDA_VISIBLE_DEVICES: numbers, not UUIDs
            from gpu_launch.run import environment

            env = environment.build(selection.devices, env, use_uuid=False, machine=machine)
        env.update(extra)
    if got.fallback_reason is not None and not quiet:
        print(f"gpulaunch: {got.fallback_reason}", file=sys.stderr)
        print("gpulaunch: --fallback cpu: running on the CPU with no GPU visible (CUDA_VISIBLE_DEVICES= empty)",
              file=sys.stderr)
    if inv.get("explain"):
        if inv.argv and not quiet:  # never a silent no-op: the command was not run, and says how it would be
            import shlex

            where = ", ".join(d.label for d in selection.devices) if machine is not None else "the CPU"
            print(f"gpulaunch: --explain ran nothing; without it, {shlex.join(inv.argv)} would run on {where}",
                  file=sys.stderr)
        if plan is not None:
            return _explain_plan(inv, plan, selection, machine)
        return _explain(inv, selection, machine)
    if plan is not None and not quiet:
        _tell_plan(plan)
    if not quiet:
        _warn_launcher_overrides(own)
    if world is not None and node_command is not None and not quiet:
        print(f"gpulaunch: {node_task.describe(world, node_command)}", file=sys.stderr)
    if vis is not None:
        pick.tell(inv, vis, selection, env, waited=got.waited)
    if inv.get("dry_run"):
        return _dry_run(inv, selection, env, argv, tuple(extra) if world is not None else ())
    from gpu_launch.run.execute import exec_command

    if node_command is not None:
        node_task.prepare(node_command, env)  # deepspeed's hostfile; `ray start --head` on the head

    if machine is not None:
        _bind(inv, machine, selection)
    if got.reservation is not None:
        # The command keeps our pid and inherits the locks: the reservation ends when it does.
        got.reservation.record(os.getpid(), argv)
        got.reservation.make_inheritable()
    exec_command(argv, env, notify)


def _refuse_node_options(inv: Invocation) -> None:
    """The options of a several-node run, given without ``--nodes``; its placeholders likewise."""
    from gpu_launch.run import placeholders

    for dest in ("gpus_per_node" if not isinstance(inv.get("fit"), str) else "", "node_rank", "head", "slurm", "partition", "sbatch_arg", "follow",
                 "cancel_on_interrupt"):
        if dest in inv.flags:
            name = "--" + dest.replace("_", "-")
            hint = ("for a sweep, gpulaunch each FILE --slurm" if dest == "slurm" else
                    "add --nodes N (and --slurm to submit it)")
            raise UsageError(f"{name} is for a run over several nodes: it needs --nodes N", hint=hint)
    used = placeholders.node_names_used(inv.argv)
    if used:
        raise UsageError(f"{{{used[0]}}} is filled in only with --nodes",
                         hint=f"run it with --nodes N; write {{{{{used[0]}}}}} for a literal {{{used[0]}}}")


def _columns(unknown: int) -> int:
    """The terminal's width (or ``COLUMNS``), ``unknown`` when output goes to a file or pipe."""
    import shutil

    return max(40, shutil.get_terminal_size((unknown, 24)).columns)


def _explain(inv: Invocation, selection: Selection, machine: Machine | None) -> int:
    """``--explain``: why these GPUs, as text or JSON on stdout; nothing runs."""
    if machine is None:  # fell back to the CPU: nothing was chosen to explain
        return 0
    from gpu_launch.choose import explain

    if inv.get("json"):
        json.dump(explain.as_json(selection, machine), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(explain.as_text(selection, machine, _columns(explain.WIDTH)))
        from gpu_launch.reservations import lockdir

        from gpu_launch.hardware.snapshot import is_example
        from gpu_launch.placing.pick import snapshot_source

        # (an example machine reserves in the user's own dir: the shared one is no concern of it)
        note = lockdir.shared_note(lockdir.lock_dir_path(inv.get("lock_dir"), os.environ,
                                                         example=is_example(snapshot_source(inv))))
        if note:
            sys.stdout.write(f"{note}\n")
    return 0


def _explain_plan(inv: Invocation, plan: object, selection: Selection, machine: Machine | None) -> int:
    """``--fit MODEL --explain``: the plan (as ``gpulaunch plan`` shows it), then why these GPUs."""
    from gpu_launch.views import plan_view

    if inv.get("json"):
        json.dump(plan_view.as_json(plan), sys.stdout, indent=2)  # type: ignore[arg-type]
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(plan_view.as_text(plan))  # type: ignore[arg-type]
    if machine is not None and selection.ranking is not None:
        from gpu_launch.choose import explain

        sys.stdout.write(explain.as_text(selection, machine, _columns(explain.WIDTH)))
    return 0


def _tell_plan(plan: object) -> None:
    """One line on stderr: what the model needs where, and the numbers handed to the command."""
    from gpu_launch.fit.plan import Plan

    assert isinstance(plan, Plan)
    p, s = plan.placement, plan.sizing
    gib = 1 << 30
    if s.engine.layout == "training" and p.per_gpu and p.per_gpu[0].training is not None:
        peak = p.per_gpu[0].training
        print(f"gpulaunch: {s.model.name or s.model.source}: training on {len(p.per_gpu)} GPU(s); "
              f"{(peak.peak_bytes + peak.allowance_bytes) / gib:.1f} GiB a GPU at the step's peak ("
              f"{peak.moment}, "
              f"{peak.dominant} the largest) [rule + allowance]; "
              + " ".join(f"{{{k}}}={v}" for k, v in plan.shown_placeholders().items()), file=sys.stderr)
        return
    where = f"{p.gpu_layers} of {s.model.hyper.n_layers + 1} layers on the GPUs" if p.gpu_layers is not None \
        else f"tp {p.tp}" + (f" × pp {p.pp}" if p.pp > 1 else "") if p.tp is not None else f"{len(p.per_gpu)} GPU(s)"
    print(f"gpulaunch: {s.model.name or s.model.source}: {where}; weights {s.model.weights.total / gib:.1f} GiB "
          f"[exact], KV {s.kv.total / gib:.1f} GiB at {s.settings.ctx} tokens [rule], "
          f"{(s.settings.reserve if s.settings.reserve is not None else s.engine.allowance) / gib:.1f} GiB a GPU "
          f"[allowance]; " + " ".join(f"{{{k}}}={v}" for k, v in plan.shown_placeholders().items()), file=sys.stderr)


def _dry_run(inv: Invocation, selection: Selection, env: dict[str, str], argv: tuple[str, ...],
             more: tuple[str, ...] = ()) -> int:
    """``--dry-run``: the variables and the command that would be exec'd, on stdout (``more``: the
    variables a node of a ``--nodes`` run gets besides)."""
    from gpu_launch.run import environment
    from gpu_launch.views import render

    if inv.get("json"):
        doc = render.dry_run_json(selection.devices, env, environment.SET_VARIABLES + more, argv)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render.dry_run_text(env, environment.SET_VARIABLES + more, argv))
    return 0


def _warn_launcher_overrides(argv: tuple[str, ...]) -> None:
    """``accelerate launch --gpu_ids``/``deepspeed --include`` would replace our CUDA_VISIBLE_DEVICES: say so."""
    from gpu_launch.run import frameworks

    for warning in frameworks.overrides(argv):
        print(f"gpulaunch: warning: {warning}", file=sys.stderr)


def _bind(inv: Invocation, machine: Machine, selection: Selection) -> None:
    """``--bind``: pin this process (and so the command it becomes) to the GPUs' local CPUs."""
    # A bundled example describes another machine: its CPU lists mean nothing here, so `auto`
    # binds only for NVML or a snapshot file (which may well be this machine's own `ls --json`).
    example = machine.source != "nvml" and not os.path.exists(machine.source)
    mode = inv.get("bind") or ("off" if example else "auto")
    if mode == "off":
        return
    from gpu_launch.run import affinity

    binding = affinity.plan(selection.devices, mode, affinity.current_cpus())
    failed = affinity.apply(binding)
    if not inv.get("quiet") and (failed or binding.message):
        kind = "warning: " if failed or binding.warning else ""
        print(f"gpulaunch: {kind}{failed or binding.message}", file=sys.stderr)


def check_command(inv: Invocation) -> None:
    """The launch's first check, 126/127 now (``submit`` asks it too, before it detaches the launch)."""
    _check_command(inv)


def _check_command(inv: Invocation) -> None:
    """Fail now (126/127) if the command cannot run; `gpulaunch lss` also hears which subcommand was meant."""
    from gpu_launch.errors import CommandNotFound
    from gpu_launch.run.execute import resolve_command

    try:
        resolve_command(inv.argv, os.environ)
    except CommandNotFound as exc:
        # Only a missing command is compared with the subcommands, so a launch that will run does
        # not pay for difflib (~1 ms).
        from gpu_launch.options.args import suggest_subcommand

        near = suggest_subcommand(inv.argv[0])
        if near is not None:
            raise CommandNotFound(exc.message, hint=f"did you mean the subcommand `gpulaunch {near}`?") from None
        raise
