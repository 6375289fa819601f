"""What each engine needs on every node of a several-node run: its own rank, head and port flags.

One table, keyed by the engine's name as :mod:`gpu_launch.fit.engines` keys it where the two overlap
(``vllm``, ``llama.cpp``, ``tgi``, ``mlc``), so that the sizing side's reading of a command and this
side's filling-in can be folded into one table per engine. :func:`detect` names the engine from the
command word; :func:`fill` writes the flags the engine's own multi-node mode takes, unless the user
wrote them: a flag the user wrote with the value gpulaunch would write is kept, one with another value
is refused (exit 2), since the nodes would disagree or the engine would ignore gpulaunch's choice.

The spellings are the engines' own (each cited where its table row is). Nothing here runs anything:
the node task (:mod:`gpu_launch.cluster.nodes`) publishes and waits, and runs ``first`` (``ray start``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.records import dataclass

__all__ = ["World", "NodeCommand", "NodeEngine", "ENGINES", "REFUSED", "detect", "fill", "endpoint"]


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
    local_ids: tuple[int, ...] = ()  # this node's GPUs as NVML numbers them (deepspeed --include)
    peers: tuple[str, ...] = ()  # llama.cpp, on the head: the other nodes' rpc-servers, HOST:PORT


@dataclass(frozen=True)
class NodeCommand:
    """What this node runs: ``first`` to completion (``ray start --head``), then ``argv`` by exec."""

    argv: tuple[str, ...]
    role: str  # "head", "worker", "worker (headless)", "rpc-server", "ray worker"
    first: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (path, text) to write before the exec: deepspeed's hostfile
    index_cvd: bool = False  # CUDA_VISIBLE_DEVICES as NVML indices, never UUIDs (Ray takes its GPU ids from it)


@dataclass(frozen=True)
class NodeEngine:
    name: str
    fill: Callable[[list[str], int, World, str], NodeCommand]  # (argv, where its options start, world, file dir)
    #: the other nodes serve a port of their own, which the head must learn (llama.cpp's rpc-servers)
    peers: bool = False


def endpoint(host: str, port: int) -> str:
    """``HOST:PORT``, an IPv6 address in brackets (``[fd00::1]:29400``), as torchrun and SGLang parse it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------- reading the user's flags

def _found(args: Sequence[str], start: int, end: int, names: Sequence[str]) -> tuple[str, str | None] | None:
    """The first of ``names`` in ``args[start:end]``: (as written, its value), the value None for a flag
    written alone and ``""`` for one with nothing after it."""
    for i in range(start, end):
        name, eq, value = args[i].partition("=")
        if name in names:
            if eq:
                return name, value
            return name, args[i + 1] if i + 1 < end and not args[i + 1].startswith("-") else None
    return None


def _options_end(args: Sequence[str], start: int, flags: frozenset[str]) -> int:
    """Where a launcher's own options end (its script or ``--``): what follows is the script's."""
    i = start
    while i < len(args):
        word = args[i]
        if word == "--" or not word.startswith("-") or word == "-" or word.endswith(".py"):
            return i
        i += 1 if "=" in word or word in flags else 2
    return len(args)


def _contradiction(command: str, written: str, value: str | None, wanted: str, why: str) -> UsageError:
    shown = f"{written} {value}" if value else written
    return UsageError(f"`{command} {shown}` contradicts this run: gpulaunch sets {wanted} ({why})",
                      hint=f"leave {written} out: gpulaunch fills it in on every node")


class _Flags:
    """The flags one engine's command gets, checked against what the user wrote in ``args[start:end]``."""

    def __init__(self, command: str, args: list[str], start: int, end: int) -> None:
        self.command, self.args, self.start, self.end = command, args, start, end
        self.added: list[str] = []

    def value(self, names: Sequence[str], wanted: str, why: str,
              same: Callable[[str], bool] | None = None) -> None:
        hit = _found(self.args, self.start, self.end, names)
        if hit is None:
            self.added += [names[0], wanted]
        elif not (hit[1] == wanted or (same is not None and hit[1] is not None and same(hit[1]))):
            raise _contradiction(self.command, hit[0], hit[1], f"{names[0]} {wanted}", why)

    def flag(self, names: Sequence[str], wanted: bool, why: str) -> None:
        hit = _found(self.args, self.start, self.end, names)
        if hit is None and wanted:
            self.added.append(names[0])
        elif hit is not None and not wanted:
            raise _contradiction(self.command, hit[0], None, f"{names[0]} on the other nodes only", why)

    def refuse(self, names: Sequence[str], why: str) -> None:
        hit = _found(self.args, self.start, self.end, names)
        if hit is not None:
            raise UsageError(f"`{self.command} {hit[0]}` does not go with --nodes: {why}",
                             hint=f"leave {hit[0]} out: gpulaunch fills in what every node needs")

    def given(self, names: Sequence[str]) -> str | None:
        hit = _found(self.args, self.start, self.end, names)
        return None if hit is None else hit[1]

    def argv(self, append: bool) -> tuple[str, ...]:
        if append:
            return (*self.args, *self.added)
        return (*self.args[:self.start], *self.added, *self.args[self.start:])


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() and len(text) <= 6 else None


def _split(flags: _Flags, total: int, tp_names: Sequence[str], pp_names: Sequence[str], tp: int, pp: int,
           engine: str) -> tuple[int, int]:
    """The tensor × pipeline split: ``tp × pp`` must be every GPU of the run (``total``). What the user
    wrote of the two is kept and the other derived; a split that does not multiply out is refused."""
    user_tp, user_pp = _number(flags.given(tp_names)), _number(flags.given(pp_names))
    if user_tp is None and user_pp is None:
        return tp, pp
    if user_tp is not None and user_pp is None and user_tp and total % user_tp == 0:
        return user_tp, total // user_tp
    if user_pp is not None and user_tp is None and user_pp and total % user_pp == 0:
        return total // user_pp, user_pp
    if user_tp is not None and user_pp is not None and user_tp * user_pp == total:
        return user_tp, user_pp
    written = " ".join(f"{n} {v}" for n, v in ((tp_names[0], user_tp), (pp_names[0], user_pp)) if v is not None)
    raise UsageError(f"`{engine} {written}` does not use the run's {total} GPUs: tensor × pipeline parallel "
                     f"must be {total}", hint=f"leave them out: gpulaunch sets {tp_names[0]} {tp} "
                                              f"{pp_names[0]} {pp} (GPUs per node × nodes)")


# --------------------------------------------------------------------------- the engines

def _vllm(argv: list[str], start: int, world: World, files: str) -> NodeCommand:
    """vLLM's multiprocessing multi-node mode (no Ray): every node runs ``vllm serve`` with the same
    ``--nnodes --master-addr --master-port`` and its own ``--node-rank``; tp × pp spans every GPU and the
    nodes other than the head run ``--headless`` (no API server). Spellings: vllm/engine/arg_utils.py
    (``--nnodes``/``-n``, ``--node-rank``/``-r``, ``--master-addr``, ``--master-port``,
    ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``), vllm/config/parallel.py
    (master_addr/master_port/node_rank/nnodes "for multi-node distributed inference when
    distributed_executor_backend is mp"), vllm/entrypoints/cli/serve.py (``--headless``)."""
    flags = _Flags("vllm serve", argv, start, len(argv))
    backend = flags.given(("--distributed-executor-backend",))
    if backend == "ray":
        return _vllm_ray(flags, world)
    if backend not in (None, "mp"):
        raise UsageError(f"`vllm serve --distributed-executor-backend {backend}` does not go with --nodes",
                         hint="leave it out (multiprocessing across nodes), or ask for ray")
    tp, pp = _split(flags, world.gpus * world.nnodes, ("--tensor-parallel-size", "-tp"),
                    ("--pipeline-parallel-size", "-pp"), world.gpus, world.nnodes, "vllm serve")
    flags.value(("--nnodes", "-n"), str(world.nnodes), "the nodes of this run")
    flags.value(("--node-rank", "-r"), str(world.rank), "this node's rank")
    flags.value(("--master-addr",), world.head_addr, "the head's address")
    flags.value(("--master-port",), str(world.head_port), "a free port picked for this run on the head")
    flags.value(("--tensor-parallel-size", "-tp"), str(tp), "GPUs per node")
    flags.value(("--pipeline-parallel-size", "-pp"), str(pp), "one pipeline stage a node")
    flags.flag(("--headless",), world.rank > 0, "only the head serves the API")
    return NodeCommand(flags.argv(append=True), "head" if world.rank == 0 else "worker (headless)")


def _vllm_ray(flags: _Flags, world: World) -> NodeCommand:
    """``--distributed-executor-backend ray``, only when asked: a Ray cluster of this run's own, its head
    on a port picked for the run (never 6379), every node's GPUs given to Ray as ``--num-gpus`` with
    gpulaunch's CUDA_VISIBLE_DEVICES (as indices) in place, so that the ids Ray hands to vLLM's workers
    are the chosen GPUs (vllm #14807: vLLM took Ray's ids as GPUs 0..n-1). ``ray start`` flags:
    ``--head --port``, ``--address``, ``--num-gpus``, ``--node-ip-address``, ``--block`` (Ray's CLI)."""
    tp, pp = _split(flags, world.gpus * world.nnodes, ("--tensor-parallel-size", "-tp"),
                    ("--pipeline-parallel-size", "-pp"), world.gpus, world.nnodes, "vllm serve")
    ray = _beside(flags.args[0], "ray")
    if world.rank > 0:
        return NodeCommand((ray, "start", "--address", endpoint(world.head_addr, world.head_port),
                            "--num-gpus", str(world.gpus), "--node-ip-address", world.addr, "--block"),
                           "ray worker", index_cvd=True)
    flags.value(("--tensor-parallel-size", "-tp"), str(tp), "GPUs per node")
    flags.value(("--pipeline-parallel-size", "-pp"), str(pp), "one pipeline stage a node")
    first = (ray, "start", "--head", "--port", str(world.head_port), "--num-gpus", str(world.gpus),
             "--node-ip-address", world.head_addr)
    return NodeCommand(flags.argv(append=True), "head (ray)", first=first, index_cvd=True)


def _sglang(argv: list[str], start: int, world: World, files: str) -> NodeCommand:
    """SGLang's multi-node serving: the same ``--tp-size`` (every GPU of the run: its docs run 405B as
    ``--tp 16`` over two nodes of 8), ``--nnodes`` and ``--dist-init-addr HOST:PORT`` everywhere, each node
    its ``--node-rank``. Spellings: python/sglang/srt/server_args.py (``tp_size`` → ``--tp-size``, alias
    ``--tensor-parallel-size``; ``pp_size`` → ``--pp-size``; ``dist_init_addr`` → ``--dist-init-addr``, alias
    ``--nccl-init-addr``; ``--nnodes``, ``--node-rank``); ``--tp`` is argparse's prefix of ``--tp-size``."""
    flags = _Flags("python -m sglang.launch_server", argv, start, len(argv))
    tp_names, pp_names = ("--tp-size", "--tp", "--tensor-parallel-size"), ("--pp-size", "--pipeline-parallel-size")
    tp, pp = _split(flags, world.gpus * world.nnodes, tp_names, pp_names, world.gpus * world.nnodes, 1,
                    "python -m sglang.launch_server")
    flags.value(tp_names, str(tp), "every GPU of the run")
    if pp != 1:
        flags.value(pp_names, str(pp), "the pipeline stages")
    flags.value(("--nnodes",), str(world.nnodes), "the nodes of this run")
    flags.value(("--node-rank",), str(world.rank), "this node's rank")
    flags.value(("--dist-init-addr", "--nccl-init-addr"), endpoint(world.head_addr, world.head_port),
                "the head's address and a free port picked for this run")
    return NodeCommand(flags.argv(append=True), "head" if world.rank == 0 else "worker")


#: torchrun's options that take no value (torch/distributed/run.py ``get_args_parser``)
_TORCHRUN_FLAGS = frozenset({"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path",
                             "--run_path", "--virtual-local-rank", "--virtual_local_rank", "-h", "--help"})


def _torchrun(argv: list[str], start: int, world: World, files: str) -> NodeCommand:
    """torchrun's c10d rendezvous: ``--nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint
    HOST:PORT --rdzv-id JOB`` on every node; ``--rdzv-conf is_host=`` says which node hosts the store, so
    two nodes on one host do not both try (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py
    ``_create_tcp_store``). Spellings, dashes or underscores: torch/distributed/run.py."""
    end = _options_end(argv, start, _TORCHRUN_FLAGS)
    flags = _Flags("torchrun", argv, start, end)
    flags.refuse(("--standalone",), "it starts a single-node rendezvous of its own")
    for names in (("--node-rank", "--node_rank"), ("--master-addr", "--master_addr"),
                  ("--master-port", "--master_port")):
        flags.refuse(names, "those are for --rdzv-backend static; gpulaunch uses c10d with the head's address")
    flags.value(("--nnodes",), str(world.nnodes), "the nodes of this run", same=lambda v: v == f"{world.nnodes}:"
                f"{world.nnodes}")
    flags.value(("--nproc-per-node", "--nproc_per_node"), str(world.gpus), "GPUs per node",
                same=lambda v: v in ("gpu", "auto"))
    flags.value(("--rdzv-backend", "--rdzv_backend"), "c10d", "the rendezvous every node joins")
    flags.value(("--rdzv-endpoint", "--rdzv_endpoint"), endpoint(world.head_addr, world.head_port),
                "the head's address and a free port picked for this run")
    flags.value(("--rdzv-id", "--rdzv_id"), world.job, "one id for the run")
    conf = flags.given(("--rdzv-conf", "--rdzv_conf"))
    if conf is None:
        flags.added += ["--rdzv-conf", f"is_host={1 if world.rank == 0 else 0}"]
    return NodeCommand(flags.argv(append=False), "head" if world.rank == 0 else "worker")


#: accelerate launch's options that take no value (src/accelerate/commands/launch.py), both spellings
_ACCELERATE_FLAGS = frozenset({"-h", "--help", "-q", "--quiet", "--cpu", "--multi_gpu", "--multi-gpu", "--tpu", "--ipex",
                               "--use_deepspeed", "--use-deepspeed", "--use_fsdp", "--use-fsdp", "--same_network",
                               "--same-network", "-m", "--module", "--no_python", "--no-python", "--debug"})


def _both(name: str) -> tuple[str, str]:
    """accelerate takes ``--num_machines`` and ``--num-machines`` alike (its launch parser's description)."""
    return name, name.replace("_", "-")


def _accelerate(argv: list[str], start: int, world: World, files: str) -> NodeCommand:
    """``accelerate launch`` across machines: ``--num_machines --machine_rank --main_process_ip
    --main_process_port`` and ``--num_processes`` (the total over every machine). Spellings:
    src/accelerate/commands/launch.py (hyphens or underscores)."""
    end = _options_end(argv, start, _ACCELERATE_FLAGS)
    flags = _Flags("accelerate launch", argv, start, end)
    flags.value(_both("--num_machines"), str(world.nnodes), "the nodes of this run")
    flags.value(_both("--machine_rank"), str(world.rank), "this node's rank")
    flags.value(_both("--main_process_ip"), world.head_addr, "the head's address")
    flags.value(_both("--main_process_port"), str(world.head_port), "a free port picked for this run on the head")
    flags.value(_both("--num_processes"), str(world.gpus * world.nnodes), "one process a GPU, on every node")
    return NodeCommand(flags.argv(append=False), "head" if world.rank == 0 else "worker")


#: the deepspeed runner's options that take no value (deepspeed/launcher/runner.py ``parse_args``)
_DEEPSPEED_FLAGS = frozenset({"-h", "--help", "--module", "--no_python", "--no_local_rank", "--no_ssh",
                              "--no_ssh_check", "--force_multi", "--save_pid", "--elastic_training",
                              "--bind_cores_to_rank"})


def _deepspeed(argv: list[str], start: int, world: World, files: str) -> NodeCommand:
    """The deepspeed runner without ssh: ``--no_ssh --node_rank --master_addr --master_port`` and a
    hostfile of the run's nodes (``NAME slots=N``, runner.py ``_parse_hostfile``). With a hostfile the
    runner no longer reads CUDA_VISIBLE_DEVICES, and its per-node launcher sets it to the hostfile's slot
    numbers (launch.py ``set_visible_devices_envs``), which would be GPUs 0..G-1; ``--include`` names this
    node's chosen GPUs (NVML indices) as its slots instead, and each other node's as 0..G-1, which only
    count there. Spellings: deepspeed/launcher/runner.py."""
    end = _options_end(argv, start, _DEEPSPEED_FLAGS)
    flags = _Flags("deepspeed", argv, start, end)
    for names in (("-H", "--hostfile"), ("-i", "--include"), ("-e", "--exclude"), ("--num_nodes",),
                  ("--num_gpus", "--num_accelerators"), ("--launcher",)):
        flags.refuse(names, "gpulaunch writes the hostfile and --include from the nodes and GPUs it chose")
    local = world.local_ids or tuple(range(world.gpus))
    lines, include = [], []
    for rank, name in enumerate(world.names):
        ids = local if rank == world.rank else tuple(range(world.gpus))
        lines.append(f"{name} slots={max(ids) + 1}")
        include.append(f"{name}:{','.join(str(i) for i in ids)}")
    hostfile = os.path.join(files, f"hostfile.{world.rank}")
    flags.flag(("--no_ssh",), True, "every node starts its own part")
    flags.value(("--node_rank",), str(world.rank), "this node's rank")
    flags.value(("--master_addr",), world.head_addr, "the head's address")
    flags.value(("--master_port",), str(world.head_port), "a free port picked for this run on the head")
    flags.added += ["--hostfile", hostfile, "--include", "@".join(include)]
    return NodeCommand(flags.argv(append=False), "head" if world.rank == 0 else "worker",
                       files=((hostfile, "".join(line + "\n" for line in lines)),))


def _llama_cpp(argv: list[str], start: int, world: World, files: str) -> NodeCommand:
    """llama.cpp's RPC backend, only when asked (``--rpc {rpc}``: the RPC server is unauthenticated,
    "never expose it to an open network"): every other node runs ``rpc-server -H ADDR -p PORT`` on its own
    address (tools/rpc/rpc-server.cpp: ``-H``/``--host``, ``-p``/``--port``; it serves every GPU it sees,
    here the chosen ones), and the head's ``--rpc`` lists them (common/arg.cpp: "comma separated list of
    RPC servers")."""
    if world.rank > 0:
        return NodeCommand((_beside(argv[0], "rpc-server"), "-H", world.addr, "-p", str(world.port)), "rpc-server")
    return NodeCommand(tuple(",".join(world.peers) if arg == "{rpc}" else arg for arg in argv), "head")


ENGINES: dict[str, NodeEngine] = {
    "vllm": NodeEngine("vllm", _vllm),
    "sglang": NodeEngine("sglang", _sglang),
    "torchrun": NodeEngine("torchrun", _torchrun),
    "accelerate": NodeEngine("accelerate", _accelerate),
    "deepspeed": NodeEngine("deepspeed", _deepspeed),
    "llama.cpp": NodeEngine("llama.cpp", _llama_cpp, peers=True),
}
#: engines that document no multi-node mode: refused with the reason
REFUSED = {
    "tgi": "text-generation-inference shards a model over one machine's GPUs (--num-shard) and documents no "
           "multi-node mode",
    "mlc": "MLC-LLM shards a model over one machine's GPUs (tensor_parallel_shards) and documents no multi-node "
           "mode",
}


def _beside(program: str, name: str) -> str:
    """``name`` from the same directory as ``program`` when that was a path (one environment), else bare."""
    folder = os.path.dirname(program)
    return os.path.join(folder, name) if folder else name


def _module_at(argv: Sequence[str]) -> tuple[str, int]:
    """``python -m MODULE ...`` → (MODULE, index after it); ("", 0) for anything else."""
    if len(argv) >= 3 and os.path.basename(argv[0]).startswith("python") and argv[1] == "-m":
        return argv[2], 3
    return "", 0


def detect(argv: Sequence[str]) -> tuple[str, int] | None:
    """The engine ``argv`` runs and where its own options start, or None (a command gpulaunch does not
    know: it gets the placeholders only). TGI and MLC-LLM are refused here (:data:`REFUSED`)."""
    if not argv:
        return None
    argv = list(argv)
    word = os.path.basename(argv[0])
    module, after = _module_at(argv)
    found: tuple[str, int] | None = None
    if word == "vllm" and argv[1:2] == ["serve"] or module == "vllm.entrypoints.cli.main" and argv[3:4] == ["serve"]:
        found = "vllm", (2 if word == "vllm" else 4)
    elif module in ("sglang.launch_server", "sglang.srt.entrypoints.http_server"):
        found = "sglang", after
    elif word == "torchrun" or module == "torch.distributed.run":
        found = "torchrun", after or 1
    elif word == "accelerate" and argv[1:2] == ["launch"] or word == "accelerate-launch" \
            or module == "accelerate.commands.launch":
        found = "accelerate", 2 if word == "accelerate" else (after or 1)
    elif word == "deepspeed" or module == "deepspeed.launcher.runner":
        found = "deepspeed", after or 1
    elif word.startswith("llama-") and word != "llama-bench" or module == "llama_cpp.server":
        if "{rpc}" not in argv[1:]:
            raise UsageError(f"--nodes: `{word}` has no multi-node mode of its own, and its RPC backend is "
                             "unauthenticated: gpulaunch spreads it only when asked",
                             hint="write --rpc {rpc}: the other nodes then run rpc-server and the head lists them")
        found = "llama.cpp", after or 1
    elif word == "text-generation-launcher":
        raise UsageError(f"--nodes: {REFUSED['tgi']}", hint="run it on one node, without --nodes")
    elif word in ("mlc_llm", "mlc-llm") or module.split(".")[0] == "mlc_llm":
        raise UsageError(f"--nodes: {REFUSED['mlc']}", hint="run it on one node, without --nodes")
    return found


def fill(argv: Sequence[str], world: World, files: str) -> NodeCommand | None:
    """This node's command for ``argv``, or None when gpulaunch does not know the engine."""
    found = detect(argv)
    if found is None:
        return None
    name, start = found
    return ENGINES[name].fill(list(argv), start, world, files)
