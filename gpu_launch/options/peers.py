"""Other tools' option names, and what gpulaunch calls the same thing: the first hint for an unknown option.

Users come from nvisel, gpustat, nvitop, GPUtil and task-spooler and type their options here: nvisel's
``--min-free-memory`` is gpulaunch's ``--min-free``, not the ``--min-total-memory`` that spelling distance
offers; gpustat's ``ls --no-processes`` wants the opposite of ``--processes``. :func:`hint` is asked before
difflib (options/args.py ``_unknown``); docs/choosing-gpus.md shows :data:`PEERS` as a table
(tests/test_peer_options.py holds the two together).

The spellings are the peers' own, read from their sources:

* nvisel: nvitop/select.py (``parser.add_argument_group('constraints')``), XuehaiPan/nvitop 3e797b2
* nvitop: nvitop/cli.py, the same commit
* gpustat: gpustat/cli.py (``get_parser``), wookayin/gpustat 7a3b964
* GPUtil: GPUtil/GPUtil.py, ``getAvailable(order, limit, maxLoad, maxMemory, memoryFree, ..., excludeID,
  excludeUUID)``, anderskm/gputil 42ef071: a Python API, its keywords written as options
* task-spooler (tsp, the GPU fork): main.c (``longOptions`` and the ``getopt`` cases), justanhduc/task-spooler
  1522ab0

A short option of theirs that is gpulaunch's too (``-n``, ``-g``, ``-p``, ``-q``, ``-x``, ``-f``) never
reaches here; one that means different things to different peers lists each.
"""

from __future__ import annotations

from gpu_launch.base.records import dataclass

__all__ = ["Peer", "PEERS", "hint"]


@dataclass(frozen=True)
class Peer:
    tool: str
    spelling: str  # as the tool spells it
    ours: str  # what gpulaunch calls it, as shown in the hint (an option, or a command)
    note: str = ""  # how the two differ, when they do


PEERS: tuple[Peer, ...] = (
    Peer("nvisel", "--min-free-memory", "--min-free SIZE"),
    Peer("nvisel", "--count", "--auto N"),
    Peer("nvisel", "--max-gpu-utilization", "--max-util PERCENT"),
    Peer("nvisel", "--max-memory-utilization", "--min-free SIZE", "free memory, not a used fraction"),
    Peer("nvisel", "--inherit", "the default", "gpulaunch always chooses within the parent's CUDA_VISIBLE_DEVICES"),
    Peer("nvisel", "--format", "`gpulaunch env --auto N --json`"),
    Peer("nvisel", "-O", "`gpulaunch env --auto N --json`"),
    Peer("nvisel", "-G", "--max-util PERCENT"),
    Peer("nvisel", "-c", "--min-count N"),
    Peer("nvisel", "-C", "--max-count N"),
    Peer("nvisel", "-t", "--min-total-memory SIZE"),
    Peer("gpustat", "--id", "`gpulaunch ls --gpus SPEC`"),
    Peer("gpustat", "--no-processes", "plain `gpulaunch ls`", "the process list under the table is --processes, "
                                                            "off unless asked"),
    Peer("gpustat", "--show-all", "`gpulaunch ls --wide --processes`"),
    Peer("gpustat", "--show-cmd", "`gpulaunch ls --processes`"),
    Peer("gpustat", "-c", "`gpulaunch ls --processes`"),
    Peer("gpustat", "--show-full-cmd", "`gpulaunch ls --processes`"),
    Peer("gpustat", "--show-user", "`gpulaunch ls --processes`"),
    Peer("gpustat", "--show-pid", "`gpulaunch ls --processes`"),
    Peer("gpustat", "--interval", "`gpulaunch ls --watch`"),
    Peer("gpustat", "--no-color", "`NO_COLOR=1`"),
    Peer("nvitop", "--only", "`gpulaunch ls --gpus SPEC`"),
    Peer("nvitop", "-o", "`gpulaunch ls --gpus SPEC`"),
    Peer("nvitop", "--once", "plain `gpulaunch ls`"),
    Peer("nvitop", "--monitor", "`gpulaunch ls --watch`"),
    Peer("nvitop", "-m", "`gpulaunch ls --watch`"),
    Peer("nvitop", "--pid", "`gpulaunch ls --processes`"),
    Peer("nvitop", "--user", "`gpulaunch ls --processes`"),
    Peer("nvitop", "--gpu-util-thresh", "--max-util PERCENT"),
    Peer("GPUtil", "--limit", "--auto N"),
    Peer("GPUtil", "--max-load", "--max-util PERCENT", "a percent, not GPUtil's fraction"),
    Peer("GPUtil", "--max-memory", "--min-free SIZE", "free memory, not a used fraction"),
    Peer("GPUtil", "--memory-free", "--min-free SIZE"),
    Peer("GPUtil", "--exclude-id", "--exclude SPEC"),
    Peer("GPUtil", "--exclude-uuid", "--exclude SPEC"),
    Peer("task-spooler", "-G", "--auto N", "gpulaunch's --gpus names the GPUs"),
    Peer("task-spooler", "--gpu_indices", "--gpus SPEC"),
    Peer("task-spooler", "--set_gpu_free_perc", "--min-free SIZE"),
    Peer("task-spooler", "-S", "`gpulaunch each --max-running K`"),
    Peer("task-spooler", "-l", "`gpulaunch jobs`"),
    Peer("task-spooler", "-t", "`gpulaunch log ID -f`"),
    Peer("task-spooler", "-w", "`gpulaunch wait ID`"),
    Peer("task-spooler", "-k", "`gpulaunch cancel ID`"),
)


def hint(name: str) -> str | None:
    """``nvisel's --min-free-memory is --min-free SIZE here``, for every peer that spells an option ``name``."""
    said = []
    for peer in PEERS:
        if peer.spelling == name:
            note = f": {peer.note}" if peer.note else ""
            said.append(f"{peer.tool}'s {name} is {peer.ours} here{note}")
    return "; ".join(said) or None
