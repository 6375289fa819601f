"""What each engine needs on every node of a several-node run, written through the table that reads it.

An engine's module in this package holds its flag table and, beside it, ``on_nodes(run)``: the
command this node runs, given the command as the table reads it (:func:`gpu_launch.fit.cmdline.read`,
the reader sizing uses: every spelling, unique prefix, repeat and environment variable the engine
accepts is seen alike) and where this node stands (:class:`World`). It returns None for a form of the
engine that has no multi-node mode (``vllm bench``); ``NODES_REFUSED`` says why an engine has none
at all (TGI, MLC-LLM: refused, exit 2).

The flags written are the engine's own, spelt as its table's first name for them. A meaning the
user set (in any spelling, or through the engine's variable) to the value gpulaunch would write is
kept; set to another value it is refused (exit 2), since the nodes would disagree or the engine
would ignore gpulaunch's choice. Nothing here runs anything: the node task (``cluster/nodes.py``)
publishes and waits for the head, runs ``first`` (``ray start``) and execs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.cmdline import TABLES, Flag, Said, Setting, Table, engine_of, read, table_for, table_module
from gpu_launch.base.records import dataclass

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["World", "NodeCommand", "NodeRun", "detect", "fill", "check", "peers", "endpoint", "beside"]

#: the meanings whose value is the head's address or port, or the run's id: known only on the nodes
_FROM_THE_HEAD = ("master_addr", "master_port", "dist_init_addr", "rdzv_endpoint", "rdzv_id")


@dataclass(frozen=True)
class World:
    """Where this node stands in the run: the facts every engine's flags are made of."""

    nnodes: int
    rank: int
    gpus: int  # GPUs on each node
    head_addr: str
    head_port: int
    job: str  # one id for the whole run (Slurm's job.step): torchrun's --rdzv-id
    names: tuple[str, ...]  # the nodes' names, rank order (Slurm's; node0.. when run by hand)
    addr: str = ""  # this node's own address (rpc-server -H, ray --node-ip-address)
    port: int = 0  # a free port of this node's own (rpc-server -p)
    local_ids: tuple[int, ...] = ()  # this node's GPUs as CUDA numbers them by bus id (deepspeed --include)
    peers: tuple[str, ...] = ()  # llama.cpp, on the head: the other nodes' rpc-servers, HOST:PORT
    pending: bool = False  # at submission (:func:`check`): the head, its port and the run's id are not known yet


@dataclass(frozen=True)
class NodeCommand:
    """What this node runs: ``first`` to completion (``ray start --head``), then ``argv`` by exec."""

    argv: tuple[str, ...]
    role: str  # "head", "worker", "worker (headless)", "rpc-server", "ray worker"
    first: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (path, text) to write before the exec: deepspeed's hostfile
    index_cvd: bool = False  # CUDA_VISIBLE_DEVICES as indices, never UUIDs (Ray takes its GPU ids from it)


def endpoint(host: str, port: int) -> str:
    """``HOST:PORT``, an IPv6 address in brackets (``[fd00::1]:29400``), as torchrun and SGLang parse it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def beside(program: str, name: str) -> str:
    """``name`` from the same directory as ``program`` when that was a path (one environment), else bare."""
    folder = os.path.dirname(program)
    return os.path.join(folder, name) if folder else name


def _hint(setting: Setting) -> str:
    if setting.index < 0:
        return f"unset {setting.written.partition('=')[0]}"
    return f"leave {setting.written.partition('=')[0].split()[0]} out"


class NodeRun:
    """One engine command being filled in for one node: the flags gpulaunch adds, checked against
    what the command (or the environment) already says."""

    def __init__(self, argv: Sequence[str], said: Said, table: Table, world: World, files: str) -> None:
        self.argv, self.said, self.table, self.world, self.files = list(argv), said, table, world, files
        self.command = " ".join([os.path.basename(argv[0]), *argv[1:said.start]])  # `vllm serve`, `torchrun`
        self.added: list[str] = []

    def name(self, meaning: str) -> str:
        """How gpulaunch writes ``meaning``: the first of the table's names for it."""
        return self._flag(meaning).names[0]

    def _flag(self, meaning: str) -> Flag:
        return next(f for f in self.table.flags if f.meaning == meaning and not f.within)

    def number(self, meaning: str) -> int | None:
        value = self.said.number(meaning)
        return int(value) if value is not None else None

    def text(self, meaning: str) -> str | None:
        return self.said.text(meaning)

    def _same(self, setting: Setting, wanted: str, same: Sequence[str]) -> bool:
        if setting.text == wanted or setting.text in same:
            return True
        flag = setting.flag
        if flag is not None and flag.kind in ("int", "tokens") and wanted.isdigit():
            return self.said.number(setting.meaning) == int(wanted)
        return False

    def value(self, meaning: str, wanted: str, why: str, same: Sequence[str] = ()) -> None:
        """``meaning`` set to ``wanted`` on this node: added, kept where the command says the same
        (or one of ``same``), refused where it says otherwise."""
        if self.world.pending and meaning in _FROM_THE_HEAD:
            return  # checked on the nodes, once the head is known
        setting = self.said.get(meaning)
        if setting is None:
            self.added += [self.name(meaning), wanted]
        elif not self._same(setting, wanted, same):
            raise self._contradiction(setting, f"{self.name(meaning)} {wanted}", why)

    def switch(self, meaning: str, on: bool, why: str) -> None:
        """A flag with no value, on (added unless set) or off (refused if set) on this node."""
        setting = self.said.get(meaning)
        is_on = setting is not None and setting.flag is not None and setting.text == setting.flag.sets
        if on and not is_on:
            self.added.append(self.name(meaning))
        elif is_on and not on:
            assert setting is not None
            raise self._contradiction(setting, f"{self.name(meaning)} on the other nodes only", why)

    def refuse(self, meaning: str, why: str) -> None:
        """A meaning that does not go with --nodes at all (it would undo what gpulaunch fills in)."""
        setting = self.said.get(meaning)
        if setting is None or (setting.flag is not None and setting.flag.kind == "switch"
                               and setting.text != setting.flag.sets):
            return
        shown = setting.written if setting.index < 0 else setting.written.partition("=")[0].split()[0]
        where = "" if setting.index >= 0 else " (in the environment)"
        raise UsageError(f"`{self._in_command(shown)}`{where} does not go with --nodes: {why}",
                         hint=f"{_hint(setting)}: gpulaunch fills in what every node needs")

    def _in_command(self, shown: str) -> str:
        return shown if shown[:1] != "-" else f"{self.command} {shown}"

    def _contradiction(self, setting: Setting, wanted: str, why: str) -> UsageError:
        where = "" if setting.index >= 0 else " (in the environment)"
        return UsageError(f"`{self._in_command(setting.written)}`{where} contradicts this run: gpulaunch sets "
                          f"{wanted} ({why})", hint=f"{_hint(setting)}: gpulaunch fills it in on every node")

    def split(self, tp: int, pp: int, factor: str = "") -> tuple[int, int]:
        """The tensor × pipeline split: ``tp × pp`` (× the command's ``factor``, another multiplier of its
        ranks: vLLM's -pcp) must be every GPU of the run. What the command says of the two is kept and
        the other derived; gpulaunch's ``tp``/``pp`` where it says neither (tp kept within a node); a
        split that does not multiply out is refused."""
        total = self.world.gpus * self.world.nnodes
        times = (self.number(factor) or 1) if factor else 1
        ranks = total // times if total % times == 0 else 0
        if ranks and tp * pp != ranks:
            tp = next(t for t in range(min(tp, ranks), 0, -1) if ranks % t == 0)
            pp = ranks // tp
        user_tp, user_pp = self.number("tp"), self.number("pp")
        if user_tp is None and user_pp is None and ranks:
            return tp, pp
        if user_tp is not None and user_pp is None and ranks and ranks % user_tp == 0:
            return user_tp, ranks // user_tp
        if user_pp is not None and user_tp is None and ranks and ranks % user_pp == 0:
            return ranks // user_pp, user_pp
        if user_tp is not None and user_pp is not None and user_tp * user_pp == ranks:
            return user_tp, user_pp
        written = [f"{self.name(m)} {v}" for m, v in (("tp", user_tp), ("pp", user_pp)) if v is not None]
        other = self.said.get(factor) if times > 1 else None
        if other is not None:
            written.append(other.written)
        product = "tensor × pipeline parallel" + (f" × {self.name(factor)}" if other is not None else "")
        hint = (f"leave the tensor and pipeline sizes out: gpulaunch sets {self.name('tp')} {tp} {self.name('pp')} "
                f"{pp}" if ranks else f"{self.name(factor)} must divide the run's {total} GPUs")
        raise UsageError(f"`{self.command} {' '.join(written)}` does not use the run's {total} GPUs: {product} "
                         f"must be {total}", hint=hint)

    def done(self, append: bool, role: str = "", first: tuple[str, ...] = (),
             files: tuple[tuple[str, str], ...] = (), index_cvd: bool = False) -> NodeCommand:
        """This node's command: the added flags after the command's own (``append``), or where the
        engine's own options begin (a launcher's, before its script). ``role``: head or worker."""
        start = self.said.start
        argv = (*self.argv, *self.added) if append else (*self.argv[:start], *self.added, *self.argv[start:])
        return NodeCommand(argv, role or ("head" if self.world.rank == 0 else "worker"), first, files, index_cvd)


def _module(engine: str | None) -> Any:
    if engine is None or engine not in TABLES:
        return None
    return table_module(engine)


def _form(argv: Sequence[str], environ: Mapping[str, str] | None) -> tuple[str, Any, Said] | None:
    """(engine, its module, the command as its table reads it) when the command's form has multi-node flags."""
    engine = engine_of(argv)
    module = _module(engine)
    if engine is None or module is None:
        return None
    refused = getattr(module, "NODES_REFUSED", None)
    if refused:
        raise UsageError(f"--nodes: {refused}", hint="run it on one node, without --nodes")
    check = getattr(module, "nodes_form", None)
    if check is None:
        return None
    said = read(argv, engine, environ)
    return (engine, module, said) if check(argv, said) else None


def detect(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The engine whose multi-node flags ``argv`` gets, or None (a command, or a form of an engine,
    with none: it gets the placeholders only). An engine with no multi-node mode, or one spread only
    when asked (llama.cpp), is refused here (exit 2), before anything is chosen."""
    found = _form(argv, environ)
    return found[0] if found is not None else None


def fill(argv: Sequence[str], world: World, files: str, environ: Mapping[str, str] | None = None
         ) -> NodeCommand | None:
    """This node's command for ``argv`` (``files``: where to write what the engine reads, deepspeed's
    hostfile), or None when gpulaunch knows no multi-node flags for it."""
    found = _form(argv, environ)
    if found is None:
        return None
    engine, module, said = found
    result: NodeCommand = module.on_nodes(NodeRun(argv, said, table_for(engine), world, files))
    return result


def check(argv: Sequence[str], nnodes: int, gpus: int, environ: Mapping[str, str] | None = None,
          filled: Callable[[World], Sequence[str]] | None = None) -> None:
    """At submission, before anything runs: refuse (UsageError, exit 2) what the command's own flags
    contradict in the run (``torchrun --nnodes 3`` on 2 nodes, a tp × pp that does not use every GPU, a
    rank written in), as the head and the nodes after it would find it. The head's address and port and
    the run's id are not known yet: flags that must equal them are left to the nodes. ``filled``: the
    command as that node's launch fills its placeholders (``--pipeline-parallel-size {pp}`` is checked as
    ``... 2``, never as the template)."""
    names = tuple(f"node{i}" for i in range(nnodes))
    for rank in sorted({0, min(1, nnodes - 1)}):
        world = World(nnodes, rank, gpus, "", 0, "", names, local_ids=tuple(range(gpus)), pending=True)
        fill(filled(world) if filled is not None else argv, world, "", environ)


def peers(engine: str | None) -> bool:
    """Whether the other nodes serve a port of their own that the head must learn (llama.cpp's rpc-servers)."""
    module = _module(engine)
    return bool(getattr(module, "NODES_PEERS", False))
