"""``gpulaunch --nodes N --gpus-per-node G --slurm -- COMMAND``: one batch script, one job, followed.

The script (``LOGDIR/nodes.sh``, never overwritten: ``nodes.1.sh``, ...; ``--dry-run`` prints it) asks for N
nodes with one task and G GPUs each, and holds one step: ``srun --kill-on-bad-exit=1 --ntasks-per-node=1``
running gpulaunch's node task on every node (:mod:`gpu_launch.cluster.nodes`), the command after ``--``
quoted word for word. ``--fit MODEL --slurm`` takes the nodes from the model's plan and writes the plan's
split into that command (:func:`_with_plan`): a node task sizes nothing. Nothing in it is expanded by the batch shell: each node reads its own rank and the
node list from Slurm. A node whose task fails (no G GPUs, the head unreachable, the engine exiting non-zero)
ends the step, so the job fails as a whole. Each node's output goes to ``LOGDIR/job-ID.node-R.log``.

Following (``--follow``/``--wait``) polls ``scontrol show job`` and says what changes: pending and why,
running and where, the head's address once the head has published it, and the end. The exit status is the
job's own (srun's: the highest of its tasks'); 9 when Slurm ended it (cancelled, time limit, node failure).
Ctrl-C asks whether to cancel (a terminal), cancels (``--cancel-on-interrupt``), or leaves it running.
"""

from __future__ import annotations

import glob
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_launch.cluster import submitting
from gpu_launch.cluster.following import ENDED_BY_SLURM
from gpu_launch.errors import GpuLaunchError, Interrupted, JobsFailed, UsageError, WaitTimeout
from gpu_launch.base.records import dataclass

__all__ = ["NodeJob", "script_text", "sbatch_argv", "submit", "state_of", "NAME"]

NAME = "gpulaunch-nodes"
#: sbatch options that would make the job something else than N nodes of one node task each
_NOT_WITH_NODES = {"--nodes": "give --nodes to gpulaunch: it also goes to srun and to every node task",
                   "-N": "give --nodes to gpulaunch: it also goes to srun and to every node task",
                   "--ntasks": "one task a node runs gpulaunch's node task", "-n": "one task a node runs the node task",
                   "--ntasks-per-node": "one task a node runs the node task"}
#: launch options passed on to every node task when given on the command line (the rest are submission's)
_PASSED_ON = {"snapshot": "--snapshot", "lock_dir": "--lock-dir", "bind": "--bind", "uuid": "--uuid",
              "quiet": "--quiet"}


@dataclass(frozen=True)
class NodeJob:
    """One submission: N nodes × G GPUs running ``argv``, its script and logs in ``log_dir``."""

    nnodes: int
    gpus_per_node: int
    argv: tuple[str, ...]
    log_dir: str  # absolute
    task_options: tuple[str, ...] = ()  # launch options every node task gets
    partition: str | None = None
    time: str | None = None
    extra: tuple[str, ...] = ()  # --sbatch-arg, given to sbatch last so that they win
    plan: str = ""  # --fit MODEL: the plan's split, written into the command


def _pattern(path: str) -> str:
    """``path`` for a Slurm filename pattern: its own ``%`` doubled."""
    return path.replace("%", "%%")


def task_argv(job: NodeJob, python: str = sys.executable) -> list[str]:
    """What srun runs on every node: gpulaunch's node task with the command after ``--``."""
    return [python, "-m", "gpu_launch", "--nodes", str(job.nnodes), "--gpus-per-node", str(job.gpus_per_node),
            "--log-dir", job.log_dir, *job.task_options, "--", *job.argv]


def script_text(job: NodeJob, python: str = sys.executable) -> str:
    """The batch script: ``#SBATCH`` lines for the shape, one srun step, the command quoted word for word."""
    directives = [f"--job-name={NAME}", f"--nodes={job.nnodes}", "--ntasks-per-node=1",
                  f"--gres=gpu:{job.gpus_per_node}"]
    if job.partition:
        directives.append(f"--partition={job.partition}")
    if job.time:
        directives.append(f"--time={job.time}")
    srun = ["srun", "--kill-on-bad-exit=1", f"--nodes={job.nnodes}", "--ntasks-per-node=1",
            f"--output={os.path.join(_pattern(job.log_dir), 'job-%j.node-%n.log')}"]
    return ("#!/bin/sh\n"
            f"# gpulaunch --nodes {job.nnodes} --gpus-per-node {job.gpus_per_node} --slurm: one task a node, each\n"
            "# gpulaunch's node task, which reads its rank and the node list from Slurm itself (SLURM_NODEID,\n"
            "# scontrol): this shell expands nothing. Every node chooses and reserves its GPUs, the head picks a\n"
            "# free port and publishes it in the log directory, and the engine gets its own multi-node flags.\n"
            + (f"# The model's plan: {job.plan}, written into the command.\n" if job.plan else "")
            + "".join(f"#SBATCH {d}\n" for d in directives)
            + f"exec {shlex.join(srun)} \\\n    {shlex.join(task_argv(job, python)[:-len(job.argv) - 1])} \\\n"
            f"    -- {shlex.join(job.argv)}\n")


def sbatch_argv(job: NodeJob, script: str, sbatch: str = "sbatch") -> list[str]:
    return [sbatch, "--parsable", f"--output={os.path.join(_pattern(job.log_dir), 'slurm-%j.out')}",
            *job.extra, script]


def _check_extra(extra: Sequence[str]) -> None:
    submitting.check_extra(extra)
    for arg in extra:
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        if name in _NOT_WITH_NODES:
            raise UsageError(f"--sbatch-arg {arg!r}: {_NOT_WITH_NODES[name]}",
                             hint="leave it out: the script asks for --nodes N with one task a node")


def _nodes_from_plan(inv: Any) -> tuple[int, int, tuple[str, ...], str]:
    """``--fit MODEL --slurm`` without ``--nodes``: the node count and GPUs per node from the model's plan
    on nodes like this machine (or ``--snapshot``, ``--gpus-per-node``), as ``plan`` shows it; the command
    with the plan's split written in (:func:`_with_plan`); and the split in words, for the script."""
    from gpu_launch.errors import NotEnoughGpus
    from gpu_launch.fit.model_plan import node_split

    split = node_split(inv, inv.get("fit"), inv.argv)
    if not split.nodes:
        raise NotEnoughGpus(split.problem or "no number of nodes of this kind holds the model",
                            hint="`gpulaunch plan MODEL --gpus-per-node G` shows the split; a shorter context or a "
                                 "smaller quantisation may fit")
    argv = _with_plan(tuple(inv.argv), split.placeholders(), split.placement.engine if split.placement else "")
    said = (f"{split.nodes} node{'s' if split.nodes != 1 else ''} × {split.gpus_per_node} GPUs, tp {split.tp} × "
            f"pp {split.pp}")
    return split.nodes, split.gpus_per_node, argv, said


def _with_plan(argv: tuple[str, ...], values: Mapping[str, str], engine: str) -> tuple[str, ...]:
    """The command every node runs, with the plan's split written in. A node task sizes nothing, so the
    plan's placeholders (``{tp}``, ``{pp}``, ``{ctx}``, ``{gpu_mem_util}``...) are replaced here, and the
    engine's own tensor- and pipeline-parallel flags are added where the command says neither: the node
    task keeps what the command says (tp × pp = every GPU of the run), where it would otherwise fill in
    its default (tp = GPUs per node, pp = nodes), which is not the plan's when the plan kept tp at the
    model's KV heads and put several stages on each node."""
    from gpu_launch.fit import cmdline
    from gpu_launch.fit.cmdline import node_flags
    from gpu_launch.run import placeholders

    # whole, --tp={tp}, KEY={ctx}; {{tp}} stays: the node task's launch unescapes it once, so the engine gets {tp}
    out = list(placeholders.fill_only(argv, values))
    unfilled = placeholders.model_names_used(out)
    if unfilled:
        raise UsageError(f"{{{unfilled[0]}}} has no value for {engine or 'this engine'}",
                         hint="{gpu_layers} and {tensor_split} are llama.cpp's, {max_memory} Transformers'")
    found = node_flags.detect(out, os.environ)  # TGI and MLC-LLM are refused before anything is submitted
    if found is not None:
        said = cmdline.read(out, found, os.environ)
        table = cmdline.table_for(found)
        for meaning in ("tp", "pp"):
            flag = next((f for f in table.flags if f.meaning == meaning and not f.within), None)
            if flag is not None and said.get(meaning) is None:
                out += [flag.names[0], values[meaning]]
    return tuple(out)


def _check_command(argv: tuple[str, ...], nnodes: int, gpus: int) -> None:
    """What the nodes would refuse, refused at submission (exit 2), before sbatch runs: a placeholder no
    node fills (``{tp}`` without ``--fit MODEL``, one inside a word), a flag that contradicts the run
    (``torchrun --nnodes 3`` on 2 nodes), TGI and MLC-LLM. The head's address and port are not known yet:
    flags that must name them are the nodes' to check."""
    from gpu_launch.cluster.nodes import NAMES
    from gpu_launch.fit.cmdline import node_flags
    from gpu_launch.run import placeholders

    try:
        placeholders.check(argv, (*placeholders.NAMES, *NAMES, "tp"))  # {tp}: a node's GPUs (--fit MODEL: the plan's)
    except placeholders.Unfilled as exc:
        if exc.name not in placeholders.MODEL_NAMES:
            raise
        raise UsageError(exc.message, hint="size it: gpulaunch --fit model --slurm -- ...; "
                                           f"write {{{{{exc.name}}}}} for a literal {{{exc.name}}}") from None
    from gpu_launch.cluster.nodes import values

    def filled(world: node_flags.World) -> tuple[str, ...]:
        """The command as this node's launch will fill it: {pp} 2, {nnodes} 2, {node_rank} R; the head's
        address and port are not known yet (left as written: the flags that name them are the nodes' to check)."""
        known = {k: v for k, v in values(world).items() if k not in ("head_addr", "head_port")}
        return placeholders.fill_only(argv, known)

    node_flags.check(argv, nnodes, gpus, os.environ, filled)


def _write_script(log_dir: str, text: str) -> str:
    """``LOGDIR/nodes.sh`` (nodes.1.sh, ... if taken): a script is never overwritten."""
    return submitting.write_new(log_dir, "nodes", ".sh", text, 0o755, "scripts")


def job_of(inv: Any) -> NodeJob:
    """The submission an invocation asks for, checked before anything is written or submitted."""
    from gpu_launch.sweeps.jobfile import default_log_dir

    nnodes = inv.get("nodes")
    gpus = inv.get("gpus_per_node")
    argv, plan = tuple(inv.argv), ""
    if nnodes is None:
        nnodes, gpus, argv, plan = _nodes_from_plan(inv)
    for dest in ("gpus", "auto", "node_rank", "head", "fallback"):
        if dest in inv.flags:
            name = "--" + dest.replace("_", "-")
            raise UsageError(f"{name} does not go with --nodes --slurm: every node chooses its own GPUs",
                             hint="--gpus-per-node G says how many")
    for dest in ("min_free", "max_util", "idle", "exclude"):
        if dest in inv.flags:
            raise UsageError(f"--{dest.replace('_', '-')} does not apply to --nodes --slurm: Slurm allocates the "
                             "GPUs", hint="ask Slurm through --sbatch-arg (e.g. --sbatch-arg=--constraint=a100)")
    if gpus is None:
        raise UsageError(f"--nodes {nnodes} --slurm needs --gpus-per-node G: how many GPUs to ask Slurm for on "
                         "each node", hint=f"e.g. gpulaunch --nodes {nnodes} --gpus-per-node 8 --slurm -- ...")
    extra = tuple(inv.get("sbatch_arg") or ())
    _check_extra(extra)
    _check_command(argv, int(nnodes), int(gpus))
    options: list[str] = []
    for dest, flag in _PASSED_ON.items():
        if dest in inv.flags:
            options += [flag] if inv.get(dest) is True else [flag, str(inv.get(dest))]
    log_dir = os.path.abspath(inv.get("log_dir") or default_log_dir())
    return NodeJob(int(nnodes), int(gpus), argv, log_dir, tuple(options), inv.get("partition"),
                   inv.get("time"), extra, plan)


def submit(inv: Any) -> int:
    """``--nodes N --slurm``: write the script, sbatch it, and follow it when asked (see the module docstring)."""
    job = job_of(inv)
    environ = os.environ
    if inv.get("dry_run"):  # the script and the sbatch line; nothing is written or submitted
        script = os.path.join(job.log_dir, "nodes.sh")
        sys.stdout.write(f"# {shlex.join(sbatch_argv(job, script))}\n# {script}:\n{script_text(job)}")
        from gpu_launch.cluster.nodeview import node_commands

        sys.stdout.write("".join(f"# {line}\n" for line in node_commands(job)))
        return 0
    sbatch = submitting.require("sbatch", environ)
    following = bool(inv.get("follow")) or "wait" in inv.flags
    if following:
        submitting.require("scontrol", environ)
    existed = os.path.isdir(job.log_dir)
    try:
        os.makedirs(job.log_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"log dir {job.log_dir}: cannot create it ({exc.strerror})", hint="pick another --log-dir") \
            from None
    script = _write_script(job.log_dir, script_text(job))
    try:
        job_id = submitting.run_sbatch(sbatch_argv(job, script, sbatch), None, environ, NAME, "the job",
                                       "--nodes, --gpus-per-node")
    except GpuLaunchError:  # nothing was submitted: leave no trace of it
        os.unlink(script)
        if not existed:
            try:
                os.rmdir(job.log_dir)
            except OSError:
                pass
        raise
    quiet = bool(inv.get("quiet"))
    if quiet:
        print(job_id, flush=True)
    else:
        print(f"gpulaunch: submitted Slurm job {job_id}: {job.nnodes} node{'s' if job.nnodes != 1 else ''} × "
              f"{job.gpus_per_node} GPU{'s' if job.gpus_per_node != 1 else ''}: {shlex.join(job.argv)}; "
              f"script {script}, logs in {job.log_dir}", file=sys.stderr, flush=True)
    if not following:
        if not quiet:
            print(f"gpulaunch: follow it with `squeue -j {job_id}` and `tail -f {job.log_dir}/job-{job_id}.node-*.log`;"
                  f" cancel it with `scancel {job_id}`", file=sys.stderr)
        return 0
    from gpu_launch.reservations.waiting import poll_interval

    limit = inv.get("wait") if "wait" in inv.flags else None
    return _follow(job, job_id, environ, poll_interval(environ), limit, bool(inv.get("cancel_on_interrupt")),
                   sys.stdin.isatty(), quiet)


def state_of(job_id: str, environ: Mapping[str, str]) -> dict[str, str] | None:
    """The job's fields from ``scontrol show job -o``; {} once Slurm no longer knows it, None when it did
    not answer (ask again later)."""
    try:
        proc = subprocess.run([submitting.require("scontrol", environ), "show", "job", "-o", job_id],
                              capture_output=True, text=True, timeout=60, env=dict(environ))
    except (subprocess.TimeoutExpired, OSError):
        return None
    if proc.returncode != 0:
        return {} if "invalid job id" in proc.stderr.lower() else None
    line = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def _head(log_dir: str, job_id: str) -> dict[str, Any]:
    """The head's record, once published: only a small regular file of this user's, its port a port
    (:func:`gpu_launch.cluster.rundir.read_own`); nothing else is shown."""
    from gpu_launch.cluster import rundir

    for path in sorted(glob.glob(os.path.join(glob.escape(log_dir), ".nodes", f"{job_id}.*", "head.json"))):
        try:
            data = rundir.read_own(path)
        except (rundir.Missing, GpuLaunchError):
            continue
        port = data.get("port")
        if isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535:
            return data
    return {}


def _follow(job: NodeJob, job_id: str, environ: Mapping[str, str], interval: float, limit: float | None,
            cancel_on_interrupt: bool, can_ask: bool, quiet: bool) -> int:
    """Say what changes until the job ends; its exit status (see the module docstring)."""
    received: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: received.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM)}
    said: set[str] = set()
    deadline = time.monotonic() + limit if limit not in (None, float("inf")) else None
    cancelled = False
    gone = 0
    state = "UNKNOWN"  # Slurm's last word on it: a --wait that runs out says "pending" of a job that never started

    def say(key: str, text: str) -> None:
        if key not in said:
            said.add(key)
            if not quiet:
                print(f"gpulaunch: job {job_id} {text}", file=sys.stderr, flush=True)

    try:
        while True:
            fields = state_of(job_id, environ)
            if fields == {}:
                gone += 1
                if gone >= 3:
                    raise JobsFailed(f"Slurm job {job_id}: Slurm no longer knows it", hint=f"logs in {job.log_dir}")
            elif fields:
                gone = 0
                state = fields.get("JobState", "UNKNOWN")
                if state == "PENDING":
                    reason = fields.get("Reason", "None")
                    say(f"pending {reason}", "pending" + (f" ({reason})" if reason not in ("None", "") else ""))
                elif state in ("RUNNING", "CONFIGURING", "COMPLETING"):
                    say("running", f"running on {fields.get('NodeList', '?')}")
                    head = _head(job.log_dir, job_id)
                    if head:
                        from gpu_launch.fit.cmdline.node_flags import endpoint

                        say("head", f"head {head.get('node')} at {endpoint(str(head.get('addr')), int(head.get('port', 0)))}")
                if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"):
                    return _ended(job, job_id, fields, cancelled, quiet)
            if received and not cancelled:
                if cancel_on_interrupt or (can_ask and received[-1] == signal.SIGINT and _ask(job_id)):
                    complaint = submitting.cancel(job_id, environ)
                    if complaint is not None:
                        raise Interrupted(f"scancel {job_id} failed: {complaint}; the job goes on")
                    cancelled = True
                    print(f"gpulaunch: cancelled Slurm job {job_id} (scancel {job_id}); waiting for it to end",
                          file=sys.stderr, flush=True)
                    deadline = time.monotonic() + 90
                    received.clear()
                else:
                    raise Interrupted(f"stopped following; Slurm job {job_id} goes on (squeue -j {job_id})",
                                      hint=f"logs in {job.log_dir}; scancel {job_id} stops it")
            elif received:
                raise Interrupted(f"interrupted: cancelled Slurm job {job_id}")
            if deadline is not None and time.monotonic() >= deadline:
                if cancelled:
                    raise Interrupted(f"interrupted: cancelled Slurm job {job_id}")
                from gpu_launch.base.units import fmt_duration

                still = "pending" if state == "PENDING" else "running"
                raise WaitTimeout(f"Slurm job {job_id} is still {still} after {fmt_duration(limit or 0)} (it goes on: "
                                  f"squeue -j {job_id})", hint=f"logs in {job.log_dir}; scancel {job_id} stops it")
            until = time.monotonic() + interval
            while time.monotonic() < until and not received:
                time.sleep(min(0.1, interval))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _ask(job_id: str) -> bool:
    sys.stderr.write(f"cancel Slurm job {job_id}? [y/N] ")
    sys.stderr.flush()
    try:
        return sys.stdin.readline().strip().lower() in ("y", "yes")
    except (OSError, KeyboardInterrupt):
        return False


def _ended(job: NodeJob, job_id: str, fields: Mapping[str, str], cancelled: bool, quiet: bool) -> int:
    state = fields.get("JobState", "UNKNOWN")
    code, _, sig = fields.get("ExitCode", "").partition(":")
    logs = f"logs in {job.log_dir} (job-{job_id}.node-*.log, slurm-{job_id}.out)"
    if cancelled:
        raise Interrupted(f"interrupted: cancelled Slurm job {job_id}", hint=logs)
    if state in ENDED_BY_SLURM or not code.isdigit():
        raise JobsFailed(f"Slurm job {job_id} ended: {ENDED_BY_SLURM.get(state, state.lower())}", hint=logs)
    status = int(code) if int(code) else (128 + int(sig) if sig.isdigit() and sig != "0" else 0)
    first = _first_failure(os.path.join(job.log_dir, f"slurm-{job_id}.out")) if status else None
    if first is not None:  # the node that failed first, not the others srun then ended (143: SIGTERM)
        status = first[1]
    if not quiet:
        where = f" (node {first[0]} first)" if first is not None else ""
        print(f"gpulaunch: job {job_id} {'completed' if status == 0 else 'failed'}: exit {status}{where}; {logs}",
              file=sys.stderr, flush=True)
        from gpu_launch.cluster.nodeview import last_error

        reason = last_error(job.log_dir, job_id) if status else None
        if reason is not None:  # the reason, not only the exit code ("NVML unavailable" was only in that log)
            from gpu_launch.base.text import printable

            print(f"gpulaunch: job {job_id} node {reason[0]}: {printable(reason[1])}", file=sys.stderr, flush=True)
    return status


def _first_failure(path: str) -> tuple[str, int] | None:
    """srun's first ``srun: error: NODE: task T: Exited with exit code N`` in the job's output, if any."""
    import re

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return None
    m = re.search(r"error: (\S+): tasks? [\d,-]+: Exited with exit code (\d+)", text)
    return (m.group(1), int(m.group(2))) if m else None
