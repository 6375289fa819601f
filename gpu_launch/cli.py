"""The command line's entry point: parse, delegate, and turn errors into one line and an exit code.

Data flows one way: argv → snapshot (NVML or file) → selection → environment → exec.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from gpu_launch.args import RUN, Invocation, parse, usage
from gpu_launch.errors import ExitCode, GpuLaunchError, UsageError

__all__ = ["main", "run"]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point. Exits with gpulaunch's code, or becomes the command."""
    # A closed pipe (`gpulaunch ls | head`) should end us quietly, as it does other Unix tools.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        code = run(sys.argv[1:] if argv is None else list(argv))
    except GpuLaunchError as exc:
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        print(f"gpulaunch: error: {exc.message}{hint}", file=sys.stderr)
        code = int(exc.exit_code)
    except KeyboardInterrupt:
        print("gpulaunch: interrupted", file=sys.stderr)
        code = int(ExitCode.INTERRUPTED)
    sys.exit(code)


def run(argv: list[str]) -> int:
    """Run one invocation; returns the exit code unless the command was exec'd."""
    inv = parse(argv)
    if inv.get("help") or inv.command == "help":
        topic = inv.positionals[0] if inv.command == "help" and inv.positionals else inv.command
        sys.stdout.write(usage(topic if topic != "help" else RUN))
        return 0
    if inv.get("version"):
        from gpu_launch import __version__

        print(f"gpulaunch {__version__}")
        return 0
    if inv.command in ("ls", "topo"):
        return _ls(inv)
    return _launch(inv)


def _snapshot(inv: Invocation) -> str | None:
    return inv.get("snapshot") or os.environ.get("GPULAUNCH_SNAPSHOT") or None


def _read(inv: Invocation, **needs: bool):  # -> Machine
    from gpu_launch.backends import Needs, read_machine

    timings: dict[str, float] = {}
    start = time.perf_counter()
    machine = read_machine(_snapshot(inv), Needs(**needs), timings)
    if inv.get("verbose") and not inv.get("quiet"):
        total = (time.perf_counter() - start) * 1000
        detail = "  ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items())
        print(f"gpulaunch: read {machine.source} in {total:.1f} ms" + (f" ({detail})" if detail else ""), file=sys.stderr)
    return machine


def _ls(inv: Invocation) -> int:
    from gpu_launch import render

    if inv.positionals:
        raise UsageError(f"`{inv.command}` takes no arguments, got {inv.positionals[0]!r}",
                         hint="to run a program of that name, put it after --")
    topo = inv.command == "topo" or bool(inv.get("topo"))
    machine = _read(inv, processes=inv.command == "ls", topology=topo or bool(inv.get("json")))
    out = sys.stdout
    if inv.get("json"):
        from gpu_launch import snapshot

        out.write(snapshot.dump(machine))
        return 0
    rich_ok = render.use_color(out)
    if inv.command == "ls":
        if rich_ok:
            render.ls_rich(machine, out)
        else:
            out.write(render.ls_plain(machine))
    if topo:
        if inv.command == "ls":
            out.write("\n")
        if rich_ok:
            render.topo_rich(machine, out)
        else:
            out.write(render.topo_plain(machine))
    return 0


def _launch(inv: Invocation) -> int:
    from gpu_launch import environment, render, select
    from gpu_launch import spec as gpu_spec

    informing = bool(inv.get("dry_run") or inv.get("explain"))
    if not inv.argv and not informing:
        if inv.positionals:
            raise UsageError(f"unexpected argument {inv.positionals[0]!r}")
        raise UsageError("no command to run", hint="put it after the options, e.g. gpulaunch --auto 1 -- python train.py")
    auto = inv.get("auto")
    fit = inv.get("fit")
    explicit = inv.get("gpus")
    if explicit is None and fit is None and auto is None:
        auto = 1  # a bare `gpulaunch CMD` gets the best single GPU
    machine = _read(inv, processes=explicit is None,
                    topology=explicit is None and (fit is not None or (auto or 1) > 1 or bool(inv.get("explain"))))
    constraints = select.Constraints(
        min_free=inv.get("min_free"), max_util=inv.get("max_util"), idle=bool(inv.get("idle")),
        exclude=frozenset(d.uuid for d in gpu_spec.resolve(inv.get("exclude"), machine, "--exclude"))
        if inv.get("exclude") else frozenset(),
    )
    runner_ups = 3 if inv.get("explain") else 0  # next-best sets cost search time; only --explain shows them
    if explicit is not None:
        selection = select.check_explicit(gpu_spec.resolve(explicit, machine), machine, constraints)
    elif fit is not None:
        selection = select.choose_fit(machine, fit, constraints, runner_ups)
    else:
        selection = select.choose_auto(machine, auto, constraints, runner_ups)
    env = environment.build(selection.devices, os.environ, use_uuid=bool(inv.get("uuid")))
    from gpu_launch import placeholders

    argv = placeholders.substitute(inv.argv, len(selection.devices))
    quiet = bool(inv.get("quiet"))
    if inv.get("explain"):
        from gpu_launch import explain

        if inv.get("json"):
            json.dump(explain.as_json(selection, machine), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(explain.as_text(selection, machine))
        return 0
    if not quiet:
        for warning in selection.warnings:
            print(f"gpulaunch: warning: {warning}", file=sys.stderr)
        for arg in placeholders.near_misses(inv.argv):
            print(f"gpulaunch: warning: {arg!r} is passed on unchanged: only a whole argument {{n}} or {{gpus}} "
                  f"is replaced (write {arg.partition('=')[0]} {arg.partition('=')[2]})", file=sys.stderr)
        print(f"gpulaunch: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=sys.stderr)
        print("\n".join(render.mapping_lines(selection.devices)), file=sys.stderr)
    if inv.get("dry_run"):
        if inv.get("json"):
            doc = render.dry_run_json(selection.devices, env, environment.SET_VARIABLES, argv)
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            sys.stdout.write(render.dry_run_text(env, environment.SET_VARIABLES, argv))
        return 0
    from gpu_launch.launch import exec_command

    exec_command(argv, env)
