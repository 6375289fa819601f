"""What a ``--nodes N --slurm`` run shows of its nodes: each node's command in a dry run (its engine's flags
filled in, the head's address and port named, since only the job's start decides them), and, once it
failed, the reason the failing node's launch gave (its last error line), not only the exit code."""

from __future__ import annotations

import glob
import os
import shlex

from gpu_launch.errors import GpuLaunchError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

__all__ = ["node_commands", "last_error"]

_SHOWN_PORT = 47999  # stands for the port in --dry-run's node commands (shown as PORT)


def node_commands(job: Any, shown: int = 4) -> list[str]:
    """``--dry-run``: what each node of ``job`` (a :class:`gpu_launch.cluster.nodejob.NodeJob`) will run, its engine's flags filled in, the head's address and port as
    HEAD and PORT (the first node's address; a free port the head picks when the job starts, so a dry run
    cannot know it). The first ``shown`` nodes and the last."""
    from gpu_launch.cluster.nodes import values
    from gpu_launch.fit.cmdline import node_flags
    from gpu_launch.run import placeholders

    names = tuple(f"node{i}" for i in range(job.nnodes))
    lines = []
    for rank in sorted({*range(min(job.nnodes, shown)), job.nnodes - 1}):
        world = node_flags.World(job.nnodes, rank, job.gpus_per_node, "HEAD", _SHOWN_PORT, "JOB", names,
                                 addr=f"NODE{rank}", port=_SHOWN_PORT + 1, local_ids=tuple(range(job.gpus_per_node)),
                                 peers=tuple(f"NODE{i}:{_SHOWN_PORT + 1}" for i in range(1, job.nnodes)) if rank == 0
                                 else ())
        try:
            argv = placeholders.substitute(job.argv, job.gpus_per_node, None, values(world))
            command = node_flags.fill(argv, world, job.log_dir, os.environ) or node_flags.NodeCommand(argv, "")
        except GpuLaunchError:
            return []  # (what the nodes would refuse was refused at submission; the rest is theirs to say)
        text = " ".join(shlex.quote(a) for a in command.argv).replace(str(_SHOWN_PORT + 1), "NODEPORT")
        role = f" ({command.role})" if command.role else ""
        lines.append(f"node {rank}{role}: {text.replace(str(_SHOWN_PORT), 'PORT')}")
    said = "HEAD: the first node's address; PORT: a free port the head picks when the job starts"
    return [*lines, said + ("; NODEPORT: one each other node picks" if "NODEPORT" in " ".join(lines) else "")]


def last_error(log_dir: str, job_id: str) -> tuple[str, str] | None:
    """The last ``gpulaunch: error:`` line of a node's log (``job-ID.node-N.log``, srun's %n), the lowest such
    node first: why that node failed, as its launch said it."""
    import re

    found: list[tuple[int, str]] = []
    for path in glob.glob(os.path.join(glob.escape(log_dir), f"job-{glob.escape(job_id)}.node-*.log")):
        m = re.search(r"\.node-(\d+)\.log$", path)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1 << 20)
        except OSError:
            continue
        errors = [line for line in text.splitlines() if line.startswith("gpulaunch: error: ")]
        if m and errors:
            found.append((int(m.group(1)), errors[-1][len("gpulaunch: error: "):]))
    if not found:
        return None
    node, line = min(found)
    return str(node), line
