"""``gpulaunch submit [OPTIONS] -- COMMAND`` (also ``gpulaunch --detach OPTIONS -- COMMAND``): a launch as a
detached job. It returns at once with the job's id; the launch waits for its GPUs in the ``--wait``
queue (for ever, unless ``--wait TIMEOUT`` says otherwise), reserves them and execs the command,
with its output in the job's log (:mod:`gpu_launch.jobs`)."""

from __future__ import annotations

import json
import os
import sys

from gpu_launch.errors import NotEnoughGpus, OutputFailed, UsageError
from gpu_launch.placing import pick

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation

__all__ = ["run", "OWN"]

#: submit's own options, not passed on to the launch it detaches
OWN = ("json", "detach", "grace")  # --grace: the supervisor's, at the job's --time limit (not the launch's)


def run(inv: Invocation) -> int:
    if inv.get("dry_run") or inv.get("explain"):
        raise UsageError("submit runs the command later, detached; --dry-run and --explain run nothing",
                         hint="to see what it would do now, run the launch itself: gpulaunch --dry-run OPTIONS -- COMMAND")
    if not inv.argv:
        raise UsageError("no command to submit", hint="e.g. gpulaunch submit --auto 1 -- python train.py")
    from gpu_launch.commands.launch import check_command

    check_command(inv)  # 126/127 now, not in a log later
    pick.require_rereadable(inv, "a submitted job")
    if not inv.get("fallback"):  # with --fallback cpu, what no wait can meet runs on the CPU
        _check_hopeless(inv)
    words = _launch_words(inv)
    from gpu_launch.hardware.snapshot import is_example
    from gpu_launch.jobs import start
    from gpu_launch.reservations import lockdir

    lock_dir = lockdir.lock_dir_path(inv.get("lock_dir"), os.environ, example=is_example(pick.snapshot_source(inv)))
    job, log = start.submit(words, inv.argv, lock_dir, os.environ, getattr(inv.get("time"), "seconds", None),
                            inv.get("grace"))
    try:
        if inv.get("json"):
            from gpu_launch.jobs.status import Status
            from gpu_launch.jobs.store import job_dir_path
            from gpu_launch.views import jobs_table

            doc = jobs_table.as_json([Status(job, "waiting")], job_dir_path(os.environ), [log])
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            sys.stdout.flush()
            return 0
        print(job.id, flush=True)  # the id first, as a terminal shows it, also when stdout is a pipe
    except OutputFailed:  # submitted all the same: exit 0 (a script would submit again), the id on stderr
        _forget_stdout()
        if not inv.get("quiet"):
            print(f"gpulaunch: job {job.id} submitted (stdout cannot be written: its id is only said here)",
                  file=sys.stderr)
        return 0
    if not inv.get("quiet"):
        from gpu_launch.views.jobs_table import command_text

        print(f"gpulaunch: job {job.id} submitted: it waits for its GPUs, then runs {command_text(inv.argv)} "
              f"(gpulaunch jobs; gpulaunch log {job.id} -f)", file=sys.stderr)
    return 0


def _forget_stdout() -> None:
    """Drop what stdout could not take, so that the exit's flush does not fail on it again."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (the process ends next)


def _launch_words(inv: Invocation) -> list[str]:
    """The options as the user wrote them, less submit's own; ``--wait`` (for ever) unless a wait was set."""
    from gpu_launch.options.args import OPTIONS

    own = {name for opt in OPTIONS if opt.dest in OWN for name in opt.names}
    words = [w for group in inv.words if group[0].partition("=")[0] not in own for w in group]
    return words if inv.get("wait") is not None else ["--wait", *words]


def _check_hopeless(inv: Invocation) -> None:
    """A request no wait can meet (``--auto 9`` on 8 GPUs, ``--gpus 12``) fails now, as the launch would."""
    from gpu_launch.reservations import acquire

    request = pick.request_of(inv, waiting=True)
    machine = pick.read_machine(inv, processes=False, display=False)
    why = acquire.hopeless(request, machine)
    if why is not None:
        raise NotEnoughGpus(f"{request.what(machine)}, and waiting cannot help: {why}",
                            hint="relax the constraints, or ask for fewer GPUs")
