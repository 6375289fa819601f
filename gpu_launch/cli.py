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

from gpu_launch.args import PER_LAUNCH, RUN, SUBCOMMANDS, Invocation, parse, usage
from gpu_launch.errors import ExitCode, GpuLaunchError, UsageError

# Annotations only: importing typing costs ~3 ms of every launch (README, "Performance").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from gpu_launch.acquire import Acquired, Locking, Request
    from gpu_launch.model import Machine
    from gpu_launch.select import Constraints, Selection
    from gpu_launch.visibility import Visibility

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
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not print a traceback
        print("gpulaunch: interrupted", file=sys.stderr)
        code = int(ExitCode.INTERRUPTED)
    sys.exit(code)


def run(argv: list[str]) -> int:
    """Run one invocation; returns the exit code unless the command was exec'd."""
    if argv[:1] == ["__complete"]:  # hidden helper for the completion scripts: never fails, never slow
        from gpu_launch.completions import helper

        return helper(argv[1:], os.environ)
    inv = parse(argv)
    if inv.get("help") or inv.command == "help":
        topic = inv.positionals[0] if inv.command == "help" and inv.positionals else inv.command
        if topic not in (RUN, *SUBCOMMANDS):
            raise UsageError(f"help: {topic!r} is not a subcommand", hint="subcommands: " + ", ".join(SUBCOMMANDS))
        sys.stdout.write(usage(topic if topic != "help" else RUN))
        return 0
    if inv.get("version"):
        from gpu_launch import __version__

        print(f"gpulaunch {__version__}")
        return 0
    if inv.command == "completions":
        from gpu_launch.completions import command as completions_command

        return completions_command(inv.positionals, sys.stdout)
    if inv.command == "config":
        return _config(inv)
    inv = _with_defaults(inv)
    if inv.command in ("ls", "topo"):
        return _ls(inv)
    if inv.command == "env":
        return _env(inv)
    if inv.command == "check":
        return _check(inv)
    if inv.command == "each":
        from gpu_launch import each

        return each.run(inv, _read, _choose_within_parent)
    return _launch(inv)


def _with_defaults(inv: Invocation) -> Invocation:
    """Options not on the command line, from GPULAUNCH_* variables, then the config file."""
    from gpu_launch import config

    return config.apply(inv, os.environ)


def _config(inv: Invocation) -> int:
    from gpu_launch import config

    if inv.positionals:
        raise UsageError(f"`config` takes no arguments, got {inv.positionals[0]!r}", hint="see `gpulaunch help config`")
    for dest in sorted(inv.options.keys() & PER_LAUNCH):
        flag = "--" + dest.replace("_", "-")
        raise UsageError(f"{flag} has no default to show", hint="it chooses what one command does; `config` shows the others")
    settings = config.effective(inv, os.environ)
    if inv.get("json"):
        sys.stdout.write(json.dumps(config.as_json(settings, os.environ), indent=2) + "\n")
    else:
        sys.stdout.write(config.as_text(settings, os.environ))
    return 0


def _snapshot(inv: Invocation) -> str | None:
    if inv.get("snapshot") == "":
        raise UsageError("--snapshot: empty file name", hint="give a snapshot file or an example name like dgx-h100")
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
        if not inv.get("quiet"):
            for warning in machine.warnings:  # the JSON has no place for them; stdout stays pure JSON
                print(f"gpulaunch: warning: {warning}", file=sys.stderr)
        return 0
    rich_ok = render.use_color(out)
    if inv.command == "ls":
        reserved = _reserved(inv, machine)
        if rich_ok:
            render.ls_rich(machine, out, reserved)
        else:
            out.write(render.ls_plain(machine, reserved))
    if inv.command == "ls":
        _ls_parent_note(machine, out)
    if topo:
        if inv.command == "ls":
            out.write("\n")
        if rich_ok:
            render.topo_rich(machine, out)
        else:
            out.write(render.topo_plain(machine))
    return 0


def _ls_parent_note(machine: Machine, out) -> None:  # out: IO[str]
    """Under an inherited CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES, say which GPUs a launch may use."""
    from gpu_launch import visibility

    header = visibility.resolve(machine, os.environ).header()
    if header:
        out.write(f"{header}\n")


def _reserved(inv: Invocation, machine: Machine) -> dict[str, str]:
    """Who holds which GPU, for `ls`; a lock dir that cannot be read is a warning, not an error."""
    from gpu_launch import reservations

    try:
        held = reservations.holders(reservations.lock_dir_path(inv.get("lock_dir"), os.environ),
                                    [u for g in machine.gpus for u in (g.uuid, *(m.uuid for m in g.mig_devices))])
    except GpuLaunchError as exc:
        print(f"gpulaunch: warning: reservations not shown: {exc.message}", file=sys.stderr)
        return {}
    return {uuid: holder.describe() for uuid, holder in held.items()}


def _choose_within_parent(request: Request, machine: Machine, constraints: Constraints) -> Selection:
    """The selection for ``request`` among the devices the parent's visibility allows (an acquire chooser)."""
    from gpu_launch import select, visibility
    from gpu_launch import spec as gpu_spec
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
            from gpu_launch import mig

            return mig.choose_mig(scope, request.auto or 1, constraints, request.fit)
        if request.fit is not None:
            return select.choose_fit(scope, request.fit, constraints, request.runner_ups)
        return select.choose_auto(scope, request.auto or 1, constraints, request.runner_ups)
    except NotEnoughGpus as exc:
        if vis.restricted:
            exc.message += f" (the parent's {vis.source} allows {visibility.describe_devices(vis.allowed or ())})"
        raise


def _choose(inv: Invocation, locking: Locking | None = None, wait: float | None = None,
            fallback: str | None = None) -> tuple[Machine | None, Visibility | None, Acquired, dict[str, str]]:
    """Read the machine, narrow it to what the parent allows, choose, reserve (``locking``), build the env.

    The machine and visibility are None only when ``fallback`` ran the request onto the CPU.
    """
    from gpu_launch import acquire, environment, visibility

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
                              mig=bool(inv.get("mig")))

    def read() -> Machine:
        return _read(inv, processes=explicit is None, process_details=False,
                     topology=explicit is None and (fit is not None or (auto or 1) > 1 or bool(inv.get("explain"))))

    got = acquire.acquire(request, read, locking, wait=wait, fallback=fallback, quiet=bool(inv.get("quiet")),
                          chooser=_choose_within_parent)
    machine = got.machine
    vis = visibility.resolve(machine, os.environ) if machine is not None else None
    # The parent narrowed the view: write UUIDs, which name the same GPU in every view (visibility.py).
    env = environment.build(got.selection.devices, os.environ,
                            use_uuid=bool(inv.get("uuid")) or bool(vis is not None and vis.restricted))
    return machine, vis, got, env


def _tell(inv: Invocation, vis: Visibility, selection: Selection, env: dict[str, str]) -> None:
    """The warnings, the parent's set and the cuda:i → GPU table, on stderr (unless -q)."""
    if inv.get("quiet"):
        return
    from gpu_launch import render

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


def _env(inv: Invocation) -> int:
    from gpu_launch import acquire, environment, shellenv

    if inv.positionals:
        raise UsageError(f"`env` runs no command, got {inv.positionals[0]!r}",
                         hint='use it as eval "$(gpulaunch env --auto 2)", or launch with gpulaunch --auto 2 -- CMD')
    # No command runs to hold a reservation, so none is taken; but --auto/--fit avoid reserved GPUs
    # and --gpus on one gets a warning naming its holder.
    _machine, vis, got, env = _choose(inv, acquire.Locking.of(inv.get("lock_dir"), os.environ, take=False))
    assert vis is not None
    _tell(inv, vis, got.selection, env)
    sys.stdout.write(shellenv.render(got.selection.devices, env, environment.SET_VARIABLES, inv.get("shell"),
                                     bool(inv.get("json"))))
    return 0


def _check(inv: Invocation) -> int:
    from gpu_launch import check
    from gpu_launch.errors import CheckFailed

    if inv.positionals:
        raise UsageError(f"`check` takes no arguments, got {inv.positionals[0]!r}")
    _machine, vis, got, env = _choose(inv)  # reservations do not matter: nothing runs on the GPUs
    assert vis is not None
    selection = got.selection
    out = sys.stdout
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    if inherited is None:
        out.write("inherited CUDA_VISIBLE_DEVICES: not set (every GPU NVML shows may be chosen)\n")
    else:
        count = f"{len(vis.problems)} problem{'s' if len(vis.problems) != 1 else ''}" if vis.problems else "no problems"
        out.write(f"inherited CUDA_VISIBLE_DEVICES={inherited}: {count}\n")
        out.writelines(f"  - {p}\n" for p in vis.problems)
    out.writelines(f"note: {w}\n" for w in vis.warnings)
    out.write(f"checking CUDA with CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} "
              f"CUDA_DEVICE_ORDER={env['CUDA_DEVICE_ORDER']}\n")
    out.flush()
    seen = check.probe(env)
    lines, problems = check.compare(selection.devices, seen)
    out.write("\n".join(lines) + "\n")
    if problems:
        raise CheckFailed(f"CUDA does not see what gpulaunch chose: {problems[0]}",
                          hint="CUDA_VISIBLE_DEVICES may be overridden by a container or MPS; try --uuid")
    out.write(f"ok: cuda:0..{len(lines) - 1} are exactly the chosen devices, in order\n")
    return 0


def _launch(inv: Invocation) -> int:
    from gpu_launch import acquire

    informing = bool(inv.get("dry_run") or inv.get("explain"))
    if not inv.argv and not informing:
        if inv.positionals:
            raise UsageError(f"unexpected argument {inv.positionals[0]!r}")
        raise UsageError("no command to run", hint="put it after the options, e.g. gpulaunch --auto 1 -- python train.py")
    if not informing:
        _check_command(inv)  # 126/127 before any GPU is chosen, shown, reserved or waited for
    quiet = bool(inv.get("quiet"))
    locking = acquire.Locking.of(inv.get("lock_dir"), os.environ, take=not (informing or inv.get("no_lock")))
    machine, vis, got, env = _choose(inv, locking, wait=None if informing else inv.get("wait"),
                                     fallback=inv.get("fallback"))
    selection = got.selection
    from gpu_launch import placeholders

    argv = placeholders.substitute(inv.argv, len(selection.devices))
    if got.fallback_reason is not None and not quiet:
        print(f"gpulaunch: {got.fallback_reason}", file=sys.stderr)
        print("gpulaunch: --fallback cpu: running on the CPU with no GPU visible (CUDA_VISIBLE_DEVICES= empty)",
              file=sys.stderr)
    if inv.get("explain"):
        if machine is None:  # fell back to the CPU: nothing was chosen to explain
            return 0
        from gpu_launch import explain

        if inv.get("json"):
            json.dump(explain.as_json(selection, machine), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(explain.as_text(selection, machine))
        return 0
    if not quiet:
        for arg in placeholders.near_misses(inv.argv):
            print(f"gpulaunch: warning: {arg!r} is passed on unchanged: only a whole argument {{n}} or {{gpus}} "
                  f"is replaced (write {arg.partition('=')[0]} {arg.partition('=')[2]})", file=sys.stderr)
    if vis is not None:
        _tell(inv, vis, selection, env)
    if inv.get("dry_run"):
        from gpu_launch import environment, render

        if inv.get("json"):
            doc = render.dry_run_json(selection.devices, env, environment.SET_VARIABLES, argv)
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            sys.stdout.write(render.dry_run_text(env, environment.SET_VARIABLES, argv))
        return 0
    from gpu_launch.launch import exec_command

    if machine is not None:
        _bind(inv, machine, selection)
    if got.reservation is not None:
        # The command keeps our pid and inherits the locks: the reservation ends when it does.
        got.reservation.record(os.getpid(), argv)
        got.reservation.make_inheritable()
    exec_command(argv, env)


def _bind(inv: Invocation, machine: Machine, selection: Selection) -> None:
    """``--bind``: pin this process (and so the command it becomes) to the GPUs' local CPUs."""
    from gpu_launch import affinity

    # A bundled example describes another machine: its CPU lists mean nothing here, so `auto`
    # binds only for NVML or a snapshot file (which may well be this machine's own `ls --json`).
    example = machine.source != "nvml" and not os.path.exists(machine.source)
    mode = inv.get("bind") or ("off" if example else "auto")
    binding = affinity.plan(selection.devices, mode, affinity.current_cpus())
    failed = affinity.apply(binding)
    if not inv.get("quiet") and (failed or binding.message):
        kind = "warning: " if failed or binding.warning else ""
        print(f"gpulaunch: {kind}{failed or binding.message}", file=sys.stderr)


def _check_command(inv: Invocation) -> None:
    """Fail now (126/127) if the command cannot run; `gpulaunch lss` also hears which subcommand was meant."""
    from gpu_launch.errors import CommandNotFound
    from gpu_launch.launch import resolve_command

    try:
        resolve_command(inv.argv, os.environ)
    except CommandNotFound as exc:
        # Only a missing command is compared with the subcommands, so a launch that will run does
        # not pay for difflib (~1 ms).
        from gpu_launch.args import suggest_subcommand

        near = suggest_subcommand(inv.argv[0])
        if near is not None:
            raise CommandNotFound(exc.message, hint=f"did you mean the subcommand `gpulaunch {near}`?") from None
        raise
