"""The command line's entry point: parse, look the verb up, call its module, turn errors into one line.

Each verb is a module in :mod:`gpu_launch.commands`; data flows one way through the stages below it:
argv → machine (NVML or snapshot) → choice → reservation → environment → exec.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from gpu_launch.options.args import RUN, SUBCOMMANDS, parse
from gpu_launch.errors import ExitCode, GpuLaunchError, UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


__all__ = ["main", "run"]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point. Exits with gpulaunch's code, or becomes the command."""
    import gpu_launch
    from gpu_launch.base import interrupt, streams

    try:
        try:
            # A closed pipe (`gpulaunch ls | head`) should end us quietly, as it does other Unix tools.
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            streams.install()  # closed or full stdout/stderr: one error line, never a lost launch
            # Ctrl-C from here on is a KeyboardInterrupt (gpu_launch/__init__.py handled it until now).
            interrupt.install()
            code = run(sys.argv[1:] if argv is None else list(argv))
            sys.stdout.flush()  # a full disk shows up here for short output: report it like any error
        except GpuLaunchError as exc:
            code = _fail(exc)
        if interrupt.settle():  # a Ctrl-C still waiting for its retry (gpu_launch.base.interrupt): it ends us now
            raise KeyboardInterrupt
        if gpu_launch.PROGRAM and interrupt.ours():
            # The way out (sys.exit, the interpreter's flush and finalisers) is outside every `try`:
            # a Ctrl-C there is the one line and 130 again, not a traceback.
            signal.signal(signal.SIGINT, gpu_launch._early_interrupt)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not print a traceback
        interrupt.settle()  # nor a retry of this one (gpu_launch.base.interrupt)
        sys.stderr.write("gpulaunch: interrupted\n")
        code = int(ExitCode.INTERRUPTED)
        if gpu_launch.PROGRAM:
            # Straight out with 130: an interrupted import can leave CPython flagging the KeyboardInterrupt
            # as unhandled, and it then ends the process by SIGINT at exit, whatever sys.exit said.
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, GpuLaunchError):
                    pass
            os._exit(code)
    sys.exit(code)


def _fail(exc: GpuLaunchError) -> int:
    """Print the one error line; returns the exit code."""
    from gpu_launch.base import streams
    from gpu_launch.errors import OutputFailed

    if isinstance(exc, OutputFailed):
        streams.settle()  # the interpreter's flush at exit must not fail a second time
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    sys.stderr.write(f"gpulaunch: error: {exc.message}{hint}\n")
    sys.stderr.flush()
    return int(exc.exit_code)


#: verb -> module in gpu_launch.commands with ``run(inv) -> int``; imported only when that verb runs.
COMMANDS = {"ls": "ls", "topo": "ls", "env": "env", "check": "check", "each": "each", "config": "config",
            "completions": "completions", "locks": "locks", "plan": "plan", "submit": "submit", "jobs": "jobs",
            "log": "log", "wait": "wait", "cancel": "cancel", RUN: "launch"}
#: verbs that read no defaults from GPULAUNCH_* variables or the config file before they run
RAW = ("config", "completions")


def run(argv: list[str]) -> int:
    """Run one invocation; returns the exit code unless the command was exec'd."""
    if argv[:1] == ["__complete"]:  # hidden helper for the completion scripts: never fails, never slow
        from gpu_launch.commands.completion.helper import helper

        return helper(argv[1:], os.environ)
    if argv[:1] == ["__slurm-task"]:  # hidden: the batch script of each `each --slurm` array task
        from gpu_launch.cluster import task_main

        return task_main(argv[1:], os.environ)
    if not argv:  # a bare `gpulaunch`: what a new user types first deserves a usage, not an error
        from gpu_launch.options.helptext import short_usage

        sys.stderr.write(short_usage())
        return int(ExitCode.USAGE)
    inv = parse(argv)
    if inv.get("help") or inv.command == "help":
        from gpu_launch.options.helptext import usage

        topic = inv.positionals[0] if inv.command == "help" and inv.positionals else inv.command
        if topic not in (RUN, *SUBCOMMANDS):
            raise UsageError(f"help: {topic!r} is not a subcommand", hint="subcommands: " + ", ".join(SUBCOMMANDS))
        sys.stdout.write(usage(topic if topic != "help" else RUN))
        return 0
    if inv.get("version"):
        from gpu_launch import __version__

        print(f"gpulaunch {__version__}")
        return 0
    if inv.command not in RAW:
        from gpu_launch.options import config

        inv = config.apply(inv, os.environ)  # options not on the command line: GPULAUNCH_*, then the file
    verb = "submit" if inv.command == RUN and inv.get("detach") else inv.command  # --detach: submit's other spelling
    module = __import__(f"gpu_launch.commands.{COMMANDS[verb]}", fromlist=["run"])
    try:
        return module.run(inv)
    except GpuLaunchError as exc:
        if getattr(exc, "no_driver", False) and verb not in VIEWS:
            from gpu_launch.placing.pick import no_driver_refusal

            # What starts work has no GPUs to run on: one line naming --snapshot dgx-h100.
            raise no_driver_refusal(exc) from None
        raise


#: the read-only views, which show the bundled example machine where there is no driver (placing/pick.py)
VIEWS = ("ls", "topo", "plan")
