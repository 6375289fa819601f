"""``gpulaunch [OPTIONS] [--] CMD ...``: check the command, choose, reserve, tell, bind, and exec."""

from __future__ import annotations

import json
import os
import sys

from gpu_launch.share import pick
from gpu_launch.errors import UsageError

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.choose.select import Selection
    from gpu_launch.hardware.model import Machine
    from gpu_launch.options.args import Invocation


__all__ = ["run"]


def run(inv: Invocation) -> int:
    """Check the command, choose and reserve, tell the mapping, then bind and exec (or only inform)."""
    from gpu_launch.run import placeholders
    from gpu_launch.share import acquire

    informing = bool(inv.get("dry_run") or inv.get("explain"))
    if not inv.argv and not informing:
        if inv.positionals:
            raise UsageError(f"unexpected argument {inv.positionals[0]!r}")
        raise UsageError("no command to run", hint="put it after the options, e.g. gpulaunch --auto 1 -- python train.py")
    if not informing:
        _check_command(inv)  # 126/127 before any GPU is chosen, shown, reserved or waited for
    quiet = bool(inv.get("quiet"))
    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=not (informing or inv.get("no_lock")),
                                 snapshot=pick.snapshot_source(inv))
    machine, vis, got, env = pick.choose(inv, locking, wait=None if informing else inv.get("wait"),
                                           fallback=inv.get("fallback"))
    selection = got.selection
    argv = placeholders.substitute(inv.argv, len(selection.devices))
    if got.fallback_reason is not None and not quiet:
        print(f"gpulaunch: {got.fallback_reason}", file=sys.stderr)
        print("gpulaunch: --fallback cpu: running on the CPU with no GPU visible (CUDA_VISIBLE_DEVICES= empty)",
              file=sys.stderr)
    if inv.get("explain"):
        return _explain(inv, selection, machine)
    if not quiet:
        _warn_near_misses(inv.argv)
        _warn_launcher_overrides(argv)
    if vis is not None:
        pick.tell(inv, vis, selection, env)
    if inv.get("dry_run"):
        return _dry_run(inv, selection, env, argv)
    from gpu_launch.run.execute import exec_command

    if machine is not None:
        _bind(inv, machine, selection)
    if got.reservation is not None:
        # The command keeps our pid and inherits the locks: the reservation ends when it does.
        got.reservation.record(os.getpid(), argv)
        got.reservation.make_inheritable()
    exec_command(argv, env)


def _explain(inv: Invocation, selection: Selection, machine: Machine | None) -> int:
    """``--explain``: why these GPUs, as text or JSON on stdout; nothing runs."""
    if machine is None:  # fell back to the CPU: nothing was chosen to explain
        return 0
    from gpu_launch.choose import explain

    if inv.get("json"):
        json.dump(explain.as_json(selection, machine), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(explain.as_text(selection, machine))
    return 0


def _dry_run(inv: Invocation, selection: Selection, env: dict[str, str], argv: tuple[str, ...]) -> int:
    """``--dry-run``: the variables and the command that would be exec'd, on stdout."""
    from gpu_launch.run import environment
    from gpu_launch.views import render

    if inv.get("json"):
        doc = render.dry_run_json(selection.devices, env, environment.SET_VARIABLES, argv)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render.dry_run_text(env, environment.SET_VARIABLES, argv))
    return 0


def _warn_near_misses(argv: tuple[str, ...]) -> None:
    """``--tp={n}`` is passed on unchanged: say so, and how to write it."""
    from gpu_launch.run import placeholders

    for arg in placeholders.near_misses(argv):
        print(f"gpulaunch: warning: {arg!r} is passed on unchanged: only a whole argument {{n}} or {{gpus}} "
              f"is replaced (write {arg.partition('=')[0]} {arg.partition('=')[2]})", file=sys.stderr)


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
