"""The node task: one node of a ``--nodes N`` run, as a launch conducts it (:mod:`gpu_launch.commands.launch`).

gpulaunch stays the per-node placer. On every node the launch chooses and reserves G GPUs exactly as a
single launch does; this module adds what a node needs besides, in three steps the launch calls in turn:

1. :func:`place`, before choosing: where this node stands. Inside a Slurm step (``srun``; the step
   ``gpulaunch --nodes N --slurm`` submits is one) the rank is ``SLURM_NODEID`` and the node list the
   step's, expanded by ``scontrol show hostnames`` (nothing is expanded by a batch shell: every node reads
   its own); by hand, ``--node-rank R --head HOST[:PORT]``. The invocation the launch then chooses with
   asks for G GPUs (``--gpus-per-node``, else every GPU the node's allotment holds); a node that cannot
   have them fails (exit 4), and ``srun --kill-on-bad-exit`` ends the others: never a silent smaller run.
2. :func:`join`, once the GPUs are reserved: the head picks its port and publishes it; the others wait
   for it and check they can reach it (:mod:`gpu_launch.cluster.rendezvous`).
3. :func:`command`: the engine's own flags, written by the engine's table (:mod:`gpu_launch.fit.cmdline`, which
   reads the command for sizing too: :mod:`~gpu_launch.fit.cmdline.node_flags`), and the variables
   ``GPULAUNCH_NNODES``, ``_NODE_RANK``, ``_HEAD_ADDR``, ``_HEAD_PORT`` for any command.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping

from gpu_launch.cluster import rendezvous
from gpu_launch.errors import ExitCode, UsageError
from gpu_launch.fit.cmdline import node_flags
from gpu_launch.base.records import dataclass, replace

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpu_launch.options.args import Invocation

__all__ = ["Place", "place", "join", "head_record", "command", "values", "describe", "prepare", "NAMES", "DEFAULT_LOG_DIR"]

NAMES = ("nnodes", "node_rank", "head_addr", "head_port", "pp")  # the placeholders a --nodes launch fills in
DEFAULT_LOG_DIR = "gpulaunch-logs"  # where a run publishes its head (every node's working directory: one name)
#: Inside a Slurm step the node's GPUs are the step's: defaults meant for choosing on a shared machine (a
#: config file's exclude = "0", GPULAUNCH_MIN_FREE=...) would only make one node fail; flags still count.
_SHARED_MACHINE_DEFAULTS = ("min_free", "max_util", "idle", "exclude", "mig")


@dataclass(frozen=True)
class Place:
    """This node's place in the run, as far as it is known before its GPUs are chosen."""

    nnodes: int
    rank: int
    names: tuple[str, ...]  # every node, in rank order (Slurm's names; node0.. by hand)
    job: str  # one id for the run: Slurm's JOB.STEP, or the head's endpoint by hand
    run_dir: str | None  # where the head's address is published (None by hand: --head says it)
    head_addr: str | None = None  # known by hand, and on the head inside Slurm
    head_port: int | None = None  # known by hand when --head has one
    slurm: bool = False
    engine: str | None = None  # the engine whose multi-node flags the command gets (fit.cmdline), None: placeholders


def _number(environ: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        text = environ.get(name, "")
        if text.isascii() and text.isdigit() and len(text) <= 9:
            return int(text)
    return None


def place(inv: Invocation, environ: Mapping[str, str]) -> tuple[Place, Invocation]:
    """Where this node stands, and the invocation its GPUs are chosen with (see the module docstring)."""
    nnodes = int(inv.get("nodes"))
    engine = node_flags.detect(inv.argv, environ)  # TGI and MLC-LLM are refused before anything is chosen
    for dest, hint in (("auto", "--gpus-per-node G"), ("fit", "--gpus-per-node G (--fit MODEL: with --slurm)"),
                       ("wait", "leave it out: the nodes start together")):
        if dest in inv.flags and not (dest == "fit" and isinstance(inv.get("fit"), str) and inv.get("slurm")):
            raise UsageError(f"--{dest} does not go with --nodes", hint=hint)
    rank, head = inv.get("node_rank"), inv.get("head")
    in_step = "SLURM_STEP_ID" in environ and _number(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") is not None
    if rank is None and head is None and not in_step:
        raise _nowhere(nnodes, environ)
    log_dir = os.path.abspath(inv.get("log_dir") or DEFAULT_LOG_DIR)
    if in_step and rank is None:
        _require_allotment(nnodes, environ)  # (before anything is asked of Slurm: it is the step's first fact)
        here = _from_slurm(nnodes, environ, head, log_dir)
    else:
        if rank is None or head is None:
            missing = "--node-rank R" if rank is None else "--head HOST:PORT"
            raise UsageError(f"--nodes {nnodes} by hand needs {missing} too",
                             hint=f"on each machine: gpulaunch --nodes {nnodes} --node-rank R --head HOST:PORT -- ...")
        here = _by_hand(nnodes, rank, head, log_dir)
    options = dict(inv.options)
    if here.slurm:
        for dest in _SHARED_MACHINE_DEFAULTS:
            if dest not in inv.flags:
                options.pop(dest, None)
    if "gpus" not in options:
        options["auto"] = inv.get("gpus_per_node") or _allotment(inv, options)
    options.pop("fit", None)
    return replace(here, engine=engine), replace(inv, options=options)


#: where slurmd says which GPUs a job or step was given (gres/gpu; CUDA_VISIBLE_DEVICES set by the cgroup plugin)
_SLURM_GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")


def _require_allotment(nnodes: int, environ: Mapping[str, str]) -> None:
    """A Slurm step that was given no GPUs (``salloc -N2`` without ``--gres``) is refused: the node's GPUs are
    not its to take, all of them least of all (they may be another job's)."""
    if any(environ.get(name) for name in _SLURM_GPU_VARIABLES):
        return
    from gpu_launch.errors import NotEnoughGpus

    raise NotEnoughGpus(f"this Slurm step was given no GPUs (none of {', '.join(_SLURM_GPU_VARIABLES)} is set): "
                        "gpulaunch takes only the GPUs Slurm allots",
                        hint=f"ask Slurm for them: salloc -N {nnodes} --gres=gpu:G (or srun --gres=gpu:G ...), or "
                             f"submit it: gpulaunch --nodes {nnodes} --gpus-per-node G --slurm -- ...")


def _nowhere(nnodes: int, environ: Mapping[str, str]) -> UsageError:
    """``--nodes N`` with no Slurm step and no --node-rank/--head: say which of the two ways applies."""
    job = environ.get("SLURM_JOB_ID")
    if job:  # a batch script or an salloc shell: this runs once, on one node
        return UsageError(f"--nodes {nnodes} here would run once, on one node: this is Slurm job {job}'s batch "
                          "script or shell, not a step on every node",
                          hint=f"start it on every node: srun --ntasks-per-node=1 gpulaunch --nodes {nnodes} -- ...")
    return UsageError(f"--nodes {nnodes} needs Slurm, or --node-rank and --head",
                      hint=f"submit it: gpulaunch --nodes {nnodes} --slurm -- ...; or on each machine: "
                           f"gpulaunch --nodes {nnodes} --node-rank R --head HOST:PORT -- ...")


def _from_slurm(nnodes: int, environ: Mapping[str, str], head: tuple[str, int | None] | None,
                log_dir: str) -> Place:
    step_nodes = _number(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") or 0
    tasks = _number(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "")
    if tasks is not None and tasks != step_nodes:
        raise UsageError(f"this Slurm step runs {tasks} tasks on {step_nodes} nodes: --nodes needs one a node",
                         hint=f"srun --ntasks-per-node=1 gpulaunch --nodes {step_nodes} -- ...")
    if step_nodes != nnodes:
        raise UsageError(f"--nodes {nnodes}, but this Slurm step runs on {step_nodes} node"
                         f"{'s' if step_nodes != 1 else ''} ({nodelist})",
                         hint=f"give --nodes {step_nodes}, or start the step on {nnodes}: srun -N {nnodes} ...")
    rank = _number(environ, "SLURM_NODEID")
    if rank is None or not 0 <= rank < nnodes:
        raise UsageError(f"this Slurm step gives no node rank (SLURM_NODEID={environ.get('SLURM_NODEID', '')!r})",
                         hint="run it with srun")
    names = rendezvous.hostnames(nodelist, environ)
    if len(names) != nnodes:
        raise UsageError(f"Slurm's node list {nodelist} has {len(names)} nodes, not {nnodes}")
    job = f"{environ.get('SLURM_JOB_ID', '0')}.{environ.get('SLURM_STEP_ID', '0')}"
    if environ.get("SLURM_RESTART_COUNT", "0") not in ("", "0"):  # a requeued job: never an earlier run's head
        job += f".r{environ['SLURM_RESTART_COUNT']}"
    head_addr, head_port = head if head is not None else (None, None)
    if head_addr is None and rank == 0:
        head_addr = rendezvous.head_address(names, rendezvous.node_addresses(nodelist, environ))
    return Place(nnodes, rank, names, job, os.path.join(log_dir, ".nodes", job), head_addr, head_port, True)


def _by_hand(nnodes: int, rank: int, head: tuple[str, int | None], log_dir: str) -> Place:
    if not 0 <= rank < nnodes:  # -1 too: vllm would get --node-rank -1, and no --headless
        raise UsageError(f"--node-rank {rank}: the ranks of {nnodes} nodes are 0 to {nnodes - 1}")
    host, port = head
    if port is None and rank > 0:
        raise UsageError(f"--head {host}: the other nodes need the head's port too",
                         hint="give the HOST:PORT the head (--node-rank 0) printed")
    job = f"gpulaunch-{host}-{port}" if port else ""
    names = tuple(f"node{i}" for i in range(nnodes))
    return Place(nnodes, rank, names, job, os.path.join(log_dir, ".nodes", job or f"{host}-head"), host, port)


def _allotment(inv: Invocation, options: dict[str, object]) -> int:
    """Without --gpus-per-node: every GPU this node's parent allows (a Slurm step's, a container's, all)."""
    from gpu_launch.choose import visibility
    from gpu_launch.placing import pick

    machine = pick.read_machine(inv, processes=False, topology=False, display=False)
    vis = visibility.resolve(machine, os.environ)
    count = len(vis.allowed) if vis.allowed is not None else len(machine.gpus)
    if count < 1:
        from gpu_launch.errors import NotEnoughGpus

        raise NotEnoughGpus("--nodes: this node has no GPU to give", hint="--gpus-per-node G on nodes that have G")
    return count


def join(here: Place, gpus: int, environ: Mapping[str, str], informing: bool = False) -> node_flags.World:
    """Once this node's GPUs are reserved: learn (or, on the head, pick and publish) the head's address and
    port; for llama.cpp also this node's own port, or on the head every other node's."""
    deadline = time.monotonic() + rendezvous.timeout(environ)
    engine = here.engine
    peers_needed = node_flags.peers(engine)
    addr = port = None
    head_addr, head_port = here.head_addr, here.head_port
    if here.rank == 0:
        head_addr = head_addr or rendezvous.resolve(socket.gethostname())
        if head_port and not informing:
            rendezvous.check_port(head_port)  # given by hand: say now if another job already has it
        head_port = head_port or (0 if informing else rendezvous.free_port(head_addr))
        if here.run_dir is not None and not informing and here.slurm:
            rendezvous.run_dir(here.run_dir, environ)
            rendezvous.publish(os.path.join(here.run_dir, "head.json"),
                               {"addr": head_addr, "port": head_port, "host": socket.gethostname(),
                                "node": here.names[0], "job": here.job}, environ)
        elif not here.job:
            print(f"gpulaunch: head at {node_flags.endpoint(head_addr, head_port)}: start the other nodes with "
                  f"--head {node_flags.endpoint(head_addr, head_port)}", file=sys.stderr)
    elif head_addr is None:
        if informing:
            head_addr, head_port = "HEAD", 0
        else:
            assert here.run_dir is not None
            rendezvous.run_dir(here.run_dir, environ)  # whoever comes first makes it: never another user's
            path = os.path.join(here.run_dir, "head.json")
            record = rendezvous.wait_for(path, deadline, "the head's address")
            head_addr, head_port, head_host = head_record(record, path, here)
            _check_loopback(head_addr, head_host, here.names[0])
    if here.rank > 0 and not here.slurm:
        _warn_loopback_head(head_addr)
    if here.rank > 0 and not informing:
        rendezvous.probe(head_addr, int(head_port or 0), deadline)
    job = here.job or f"gpulaunch-{head_addr}-{head_port}"
    peers: tuple[str, ...] = ()
    if peers_needed and not here.slurm:
        raise UsageError("llama.cpp over several nodes needs Slurm: the head must learn each rpc-server's "
                         "address", hint="run rpc-server on the other machines yourself and give llama-server "
                                         "--rpc HOST:PORT,...")
    if here.rank > 0 and (peers_needed or engine in ("vllm", "torchrun")):
        # this node's own address toward the head: llama.cpp's rpc-server -H, ray --node-ip-address (when
        # asked for Ray), torchrun --local-addr
        addr = "ADDR" if informing else rendezvous.route_to(rendezvous.resolve(head_addr))
    if peers_needed:
        if here.rank > 0:
            port = rendezvous.free_port(str(addr)) if not informing else 0
            if not informing:
                rendezvous.publish(os.path.join(str(here.run_dir), f"rank-{here.rank}.json"),
                                   {"addr": addr, "port": port, "node": here.names[here.rank], "job": here.job},
                                   environ)
        elif not informing:
            peers = tuple(_peer(str(here.run_dir), r, deadline, here) for r in range(1, here.nnodes))
    return node_flags.World(here.nnodes, here.rank, gpus, head_addr, int(head_port or 0), job, here.names,
                         addr or head_addr, port or 0, (), peers)


def _warn_loopback_head(head_addr: str) -> None:
    """``--head 127.0.0.1`` given by hand to a node other than the head: the reachability check counts a
    refusal as an answer (the head's engine may not listen yet), and on loopback this machine answers for
    itself, so say that only a head on this very machine is there."""
    from gpu_launch.errors import RendezvousFailed

    try:
        loopback = rendezvous.is_loopback(rendezvous.resolve(head_addr))
    except RendezvousFailed:
        return  # the check says so, with its exit code
    if loopback:
        print(f"gpulaunch: warning: --head {head_addr} is this machine's own loopback address: only a head "
              "started on this same machine is there (hint: give the --head HOST:PORT the head printed)",
              file=sys.stderr)


def head_record(record: Mapping[str, object], path: str, here: Place, rank: int = 0) -> tuple[str, int, str]:
    """The address, port and host a node's record (``head.json``, ``rank-R.json``) gives, every field
    checked: a numeric address, a port 1-65535, the node's own name, this very run's job id; one
    line naming the file otherwise (exit 11)."""
    from gpu_launch.errors import RendezvousFailed

    def bad(why: str) -> RendezvousFailed:
        return RendezvousFailed(f"{path}: {why}", hint="remove it and start the run again; was it written by "
                                                       "this run's node task?")

    addr, port, host = record.get("addr"), record.get("port"), record.get("host", "")
    if not isinstance(addr, str) or not _numeric_address(addr):
        raise bad(f"its address {str(addr)[:60]!r} is not an IP address")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise bad(f"its port {str(port)[:20]!r} is not between 1 and 65535")
    if record.get("node") != here.names[rank]:
        raise bad(f"it names the node {str(record.get('node'))[:60]!r}, not {here.names[rank]!r}")
    if record.get("job") != here.job:
        raise bad(f"it is for job {str(record.get('job'))[:60]!r}, not this step's {here.job}")
    if not isinstance(host, str) or len(host) > 255 or not host.isprintable():
        raise bad("its host name is not one")
    return addr, port, host


def _numeric_address(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
            return True
        except (OSError, ValueError):
            continue
    return False


def _peer(run_dir: str, rank: int, deadline: float, here: Place) -> str:
    path = os.path.join(run_dir, f"rank-{rank}.json")
    record = rendezvous.wait_for(path, deadline, f"node {rank}'s rpc-server")
    addr, port, _ = head_record(record, path, here, rank)
    rendezvous.probe(addr, port, deadline, listening=True)  # llama-server connects once: the server must be up
    return node_flags.endpoint(addr, port)


def _check_loopback(addr: str, head_host: str, head_node: str) -> None:
    """A loopback head address is right only on the head's own host (a one-host test cluster)."""
    if rendezvous.is_loopback(addr) and head_host != socket.gethostname():
        from gpu_launch.errors import RendezvousFailed

        raise RendezvousFailed(f"the head {head_node} published a loopback address ({addr}), which "
                               f"{socket.gethostname()} cannot reach", hint=rendezvous.IFNAME_HINT)


def values(world: node_flags.World) -> dict[str, str]:
    """The node placeholders' values: ``{nnodes} {node_rank} {head_addr} {head_port} {pp}``, and ``{tp}``, the
    GPUs a node (one pipeline stage a node, tensor-parallel within it; a --fit MODEL plan's own tp wins)."""
    return {"nnodes": str(world.nnodes), "node_rank": str(world.rank), "head_addr": world.head_addr,
            "head_port": str(world.head_port), "pp": str(world.nnodes), "tp": str(world.gpus)}


def command(argv: tuple[str, ...], world: node_flags.World, devices_ids: tuple[int, ...], files_dir: str,
            quiet: bool) -> tuple[node_flags.NodeCommand, dict[str, str]]:
    """This node's command (the engine's flags filled in) and the variables it gets besides."""
    filled = node_flags.fill(argv, replace(world, local_ids=devices_ids), files_dir, os.environ)
    if filled is None:
        if not quiet and not any(arg.strip("{}") in NAMES for arg in argv[1:]):
            print(f"gpulaunch: warning: `{os.path.basename(argv[0])}` is no engine gpulaunch knows: it gets no "
                  "rank or head of its own (hint: write {node_rank} {nnodes} {head_addr} {head_port} where it "
                  "takes them, or read GPULAUNCH_NODE_RANK and friends)", file=sys.stderr)
        filled = node_flags.NodeCommand(tuple(argv), "head" if world.rank == 0 else "worker")
    extra = {"GPULAUNCH_NNODES": str(world.nnodes), "GPULAUNCH_NODE_RANK": str(world.rank),
             "GPULAUNCH_HEAD_ADDR": world.head_addr, "GPULAUNCH_HEAD_PORT": str(world.head_port)}
    return filled, extra


def describe(world: node_flags.World, node: node_flags.NodeCommand) -> str:
    """``node 1 of 2 (n2), head n1 at 10.0.0.1:41235: worker (headless): vllm serve ... --headless``: this
    node's place and the command it runs with its flags filled in, on stderr (the node's log)."""
    import shlex

    from gpu_launch.base.text import printable

    name = world.names[world.rank] if world.rank < len(world.names) else str(world.rank)
    head = world.names[0] if world.names else "head"
    at = node_flags.endpoint(world.head_addr, world.head_port) if world.head_port else world.head_addr
    return (f"node {world.rank} of {world.nnodes} ({name}), head {head} at {at}: {node.role}: "
            + printable(shlex.join(node.argv)))


def prepare(node: node_flags.NodeCommand, env: Mapping[str, str]) -> None:
    """What runs before the exec: the files the engine reads (deepspeed's hostfile), then ``first``
    (``ray start --head``), which must succeed."""
    import subprocess

    from gpu_launch.errors import GpuLaunchError

    for path, text in node.files:
        rendezvous.write_file(path, text, env)
    if node.first:
        sys.stderr.flush()
        try:
            code = subprocess.run(list(node.first), env=dict(env), stdin=subprocess.DEVNULL).returncode
        except OSError as exc:
            raise GpuLaunchError(f"{node.first[0]}: cannot run it ({exc.strerror})",
                                 hint="is it installed where the engine is?", exit_code=ExitCode.COMMAND_NOT_FOUND) \
                from None
        if code != 0:
            raise GpuLaunchError(f"`{' '.join(node.first[:3])} ...` failed (exit {code}): nothing was started",
                                 hint="its own message is above")
