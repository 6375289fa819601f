"""SGLang's command line (``sglang serve --model-path M``, ``python -m sglang.launch_server``).

Read in sgl-project/sglang ``python/sglang/srt/server_args.py`` (``ServerArgs``: ``--model-path``
with the alias ``--model``; ``--tp-size``/``--tensor-parallel-size``, ``--pp-size``/
``--pipeline-parallel-size``, ``--dp-size``/``--data-parallel-size``, ``--nnodes``, ``--node-rank``,
``--dist-init-addr``/``--nccl-init-addr``, ``--context-length`` (human_readable_int),
``--mem-fraction-static``: the fraction of each GPU's memory for the weights and the KV pool). Its
docs write ``--tp 2`` and ``--dp 2``: argparse's unique prefixes of ``--tp-size``/``--dp-size``
(docs/advanced_features/server_arguments.md); ``--pp`` is ambiguous there (``--pp-size``,
``--pp-max-micro-batch-size``, ``--pp-async-batch-depth``) and SGLang refuses it. argparse: the last
of a repeated option wins; ``--opt=value`` is read. ``sglang serve M`` names its model by position
(python/sglang/cli/serve.py, ``_normalize_positional_model_path``).

On every node of a several-node run (:func:`on_nodes`): its ``--nnodes --node-rank --dist-init-addr``.
"""

from collections.abc import Sequence

from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline.node_flags import NodeCommand, NodeRun, endpoint

INT32 = 2**31 - 1
RANKS = 1 << 20

TABLE = Table("sglang", (
    Flag("model", ("--model-path", "--model")),
    Flag("ctx", ("--context-length",), "tokens", low=1, high=INT32),
    Flag("parallel", ("--max-running-requests",), "int", low=1, high=INT32),
    Flag("kv_type", ("--kv-cache-dtype",)),
    Flag("dtype", ("--dtype",)),  # ServerArgs.dtype: auto, half, float16, bfloat16, float, float32
    Flag("gpu_mem_util", ("--mem-fraction-static",), "float", low=1e-9, high=1.0,
         valid="a fraction of each GPU's memory above 0 and at most 1"),
    Flag("tp", ("--tp-size", "--tensor-parallel-size", "--tp"), "int", low=1, high=RANKS),
    Flag("pp", ("--pp-size", "--pipeline-parallel-size"), "int", low=1, high=RANKS),
    Flag("dp", ("--dp-size", "--data-parallel-size", "--dp"), "int", low=1, high=RANKS),
    Flag("nnodes", ("--nnodes",), "int", low=1, high=RANKS),
    Flag("node_rank", ("--node-rank",), "int", low=0, high=1 << 20),
    Flag("dist_init_addr", ("--dist-init-addr", "--nccl-init-addr")),
    Flag("host", ("--host",)),
    Flag("port", ("--port",), "int", low=1, high=65535),
    Flag("config", ("--config",)),
), source="sgl-project/sglang python/sglang/srt/server_args.py", abbreviations=True, model_verbs=("serve",),
    others=("--pp-max-micro-batch-size", "--pp-async-batch-depth", "--model-impl", "--model-loader-extra-config",
            "--model-config-parser"))

#: the entry points that start SGLang's server (``sglang serve`` is its CLI's: python/sglang/cli/serve.py)
_SERVERS = ("sglang.launch_server", "sglang.srt.entrypoints.http_server")


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    return said.module in _SERVERS or (not said.module and said.verb == "serve")


def on_nodes(run: NodeRun) -> NodeCommand:
    """SGLang's multi-node serving: the same ``--tp-size`` (every GPU of the run: its docs run 405B as
    ``--tp 16`` over two nodes of 8), ``--nnodes`` and ``--dist-init-addr HOST:PORT`` everywhere, each node
    its ``--node-rank`` (python/sglang/srt/server_args.py)."""
    world = run.world
    tp, pp = run.split(world.gpus * world.nnodes, 1)
    run.value("tp", str(tp), "every GPU of the run")
    if pp != 1:
        run.value("pp", str(pp), "the pipeline stages")
    run.value("nnodes", str(world.nnodes), "the nodes of this run")
    run.value("node_rank", str(world.rank), "this node's rank")
    run.value("dist_init_addr", endpoint(world.head_addr, world.head_port),
              "the head's address and a free port picked for this run")
    return run.done(append=True)
