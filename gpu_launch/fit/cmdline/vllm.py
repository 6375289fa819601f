"""vLLM's command line (``vllm serve M``, ``python -m vllm.entrypoints.openai.api_server --model M``).

Read in vllm-project/vllm: ``vllm/utils/argparse_utils.py`` (``FlexibleArgumentParser``: a ``--``
option's ``_`` reads as ``-`` up to its first ``.``; ``vllm serve ... --model M`` is moved to the
model's place; ``--max-model-len`` and ``--max-num-batched-tokens`` take ``human_readable_int``:
``32k`` = 32000, ``32K`` = 32768); ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``: the
parallel group's ``-tp -pp -dp -dpl -dpn -dpr -dpa -dpp -dpb -dcp -pcp``, ``--nnodes/-n``,
``--node-rank/-r``, ``--master-addr``, ``--master-port``); ``vllm/config/parallel.py`` (world size
= tp × pp × pcp, each at least 1; ``CacheConfig.gpu_memory_utilization`` in (0, 1]). It is
argparse: the last of a repeated option wins, ``--opt=value`` is read, and a unique prefix of a
long option is that option. ``--max-model-len -1``/``auto`` means "as long as fits".

On every node of a several-node run (:func:`on_nodes`): its multiprocessing multi-node mode, or Ray
when asked.
"""

from collections.abc import Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline.node_flags import NodeCommand, NodeRun, beside, endpoint

INT32 = 2**31 - 1
RANKS = 1 << 20  # no run has more ranks than this; a larger number is a typo

TABLE = Table("vllm", (
    Flag("model", ("--model",)),
    Flag("ctx", ("--max-model-len",), "tokens", low=1, high=INT32, words=(("-1", "auto"), ("auto", "auto")),
         valid="a number of tokens (8192, 32k, 32K), or -1/auto"),
    Flag("parallel", ("--max-num-seqs",), "int", low=1, high=INT32),
    Flag("kv_type", ("--kv-cache-dtype",)),
    Flag("dtype", ("--dtype",)),
    # CacheConfig.cpu_offload_gb (vllm/config/cache.py): GiB of each GPU's weights kept in host memory
    Flag("cpu_offload_gb", ("--cpu-offload-gb",), "float", low=0, high=1 << 20),  # ModelConfig.dtype (vllm/config/model.py): auto, half, bfloat16, float...
    Flag("batched_tokens", ("--max-num-batched-tokens",), "tokens", low=1, high=INT32),
    Flag("block_size", ("--block-size",), "int", low=1, high=INT32),  # CacheConfig.block_size: gt=0
    # argparse's BooleanOptionalAction (CacheConfig.enable_prefix_caching): the --no- form turns it off
    Flag("prefix_caching", ("--enable-prefix-caching",), "switch"),
    Flag("prefix_caching", ("--no-enable-prefix-caching",), "switch", sets="0"),
    Flag("gpu_mem_util", ("--gpu-memory-utilization",), "float", low=1e-9, high=1.0,
         valid="a fraction of each GPU's memory above 0 and at most 1 (default 0.9)"),
    Flag("tp", ("--tensor-parallel-size", "-tp"), "int", low=1, high=RANKS),
    Flag("pp", ("--pipeline-parallel-size", "-pp"), "int", low=1, high=RANKS),
    Flag("dp", ("--data-parallel-size", "-dp"), "int", low=1, high=RANKS),
    Flag("dp_local", ("--data-parallel-size-local", "-dpl"), "int", low=0, high=1 << 20),
    Flag("dp_rank", ("--data-parallel-rank", "-dpn"), "int", low=0, high=1 << 20),
    Flag("dp_start_rank", ("--data-parallel-start-rank", "-dpr"), "int", low=0, high=1 << 20),
    Flag("dp_address", ("--data-parallel-address", "-dpa")),
    Flag("dp_rpc_port", ("--data-parallel-rpc-port", "-dpp"), "int", low=1, high=65535),
    Flag("dp_backend", ("--data-parallel-backend", "-dpb")),
    Flag("pcp", ("--prefill-context-parallel-size", "-pcp"), "int", low=1, high=RANKS),
    Flag("dcp", ("--decode-context-parallel-size", "-dcp"), "int", low=1, high=RANKS),
    Flag("nnodes", ("--nnodes", "-n"), "int", low=1, high=RANKS),
    Flag("node_rank", ("--node-rank", "-r"), "int", low=0, high=1 << 20),
    Flag("master_addr", ("--master-addr",)),
    Flag("master_port", ("--master-port",), "int", low=1, high=65535),
    Flag("headless", ("--headless",), "switch"),
    Flag("executor", ("--distributed-executor-backend",)),
    Flag("host", ("--host",)),
    Flag("port", ("--port",), "int", low=1, high=65535),
    Flag("config", ("--config",)),
), source="vllm-project/vllm vllm/utils/argparse_utils.py, vllm/engine/arg_utils.py",
    underscores=True, abbreviations=True, model_verbs=("serve",),
    others=("--max-num-partial-prefills", "--max-long-partial-prefills", "--max-logprobs", "--max-loras",
            "--max-lora-rank", "--max-cpu-loras", "--max-parallel-loading-workers", "--max-cudagraph-capture-size",
            "--data-parallel-hybrid-lb", "--data-parallel-external-lb", "--model-impl", "--model-loader-extra-config"))


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    """``vllm serve`` (or ``python -m vllm.entrypoints.cli.main serve``) has the multi-node mode; the
    other subcommands and entry points get the placeholders only."""
    return said.verb == "serve"


def on_nodes(run: NodeRun) -> NodeCommand:
    """vLLM's multiprocessing multi-node mode (no Ray): every node runs ``vllm serve`` with the same
    ``--nnodes --master-addr --master-port`` and its own ``--node-rank``; tp × pp (× -pcp) spans every
    GPU and the nodes other than the head run ``--headless`` (no API server). vllm/config/parallel.py
    (master_addr/master_port/node_rank/nnodes "for multi-node distributed inference when
    distributed_executor_backend is mp"), vllm/entrypoints/cli/serve.py (``--headless``). Data
    parallelism over nodes is vLLM's own (``--data-parallel-address``, ``--data-parallel-start-rank``...),
    not this mode: refused."""
    world = run.world
    backend = run.text("executor")
    for meaning in ("dp_local", "dp_rank", "dp_start_rank", "dp_address", "dp_rpc_port"):
        run.refuse(meaning, "data-parallel replicas over nodes are vLLM's own multi-node mode; gpulaunch's is "
                            "tensor × pipeline parallelism")
    if (run.number("dp") or 1) > 1:
        run.refuse("dp", "gpulaunch spreads tensor × pipeline parallelism over the nodes, not data-parallel "
                         "replicas (vLLM's --data-parallel-address mode)")
    tp, pp = run.split(world.gpus, world.nnodes, factor="pcp")
    if backend == "ray":
        return _ray(run, tp, pp)
    if backend not in (None, "mp"):
        raise UsageError(f"`vllm serve --distributed-executor-backend {backend}` does not go with --nodes",
                         hint="leave it out (multiprocessing across nodes), or ask for ray")
    run.value("nnodes", str(world.nnodes), "the nodes of this run")
    run.value("node_rank", str(world.rank), "this node's rank")
    run.value("master_addr", world.head_addr, "the head's address")
    run.value("master_port", str(world.head_port), "a free port picked for this run on the head")
    run.value("tp", str(tp), "GPUs per node")
    run.value("pp", str(pp), "one pipeline stage a node")
    run.switch("headless", world.rank > 0, "only the head serves the API")
    return run.done(append=True, role="head" if world.rank == 0 else "worker (headless)")


def _ray(run: NodeRun, tp: int, pp: int) -> NodeCommand:
    """``--distributed-executor-backend ray``, only when asked: a Ray cluster of this run's own, its head
    on a port picked for the run (never 6379), every node's GPUs given to Ray as ``--num-gpus`` with
    gpulaunch's CUDA_VISIBLE_DEVICES (as indices) in place, so that the ids Ray hands to vLLM's workers
    are the chosen GPUs (vllm #14807: vLLM took Ray's ids as GPUs 0..n-1). ``ray start`` flags:
    ``--head --port``, ``--address``, ``--num-gpus``, ``--node-ip-address``, ``--block`` (Ray's CLI)."""
    world = run.world
    ray = beside(run.argv[0], "ray")
    if world.rank > 0:
        return NodeCommand((ray, "start", "--address", endpoint(world.head_addr, world.head_port),
                            "--num-gpus", str(world.gpus), "--node-ip-address", world.addr, "--block"),
                           "ray worker", index_cvd=True)
    run.value("tp", str(tp), "GPUs per node")
    run.value("pp", str(pp), "one pipeline stage a node")
    first = (ray, "start", "--head", "--port", str(world.head_port), "--num-gpus", str(world.gpus),
             "--node-ip-address", world.head_addr)
    return run.done(append=True, role="head (ray)", first=first, index_cvd=True)
