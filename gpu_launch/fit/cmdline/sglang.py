"""SGLang's command line (``sglang serve --model-path M``, ``python -m sglang.launch_server``).

Read in sgl-project/sglang ``python/sglang/srt/server_args.py`` (``ServerArgs``: ``--model-path``
with the alias ``--model``; ``--tp-size``/``--tensor-parallel-size``, ``--pp-size``/
``--pipeline-parallel-size``, ``--dp-size``/``--data-parallel-size``, ``--nnodes``, ``--node-rank``,
``--dist-init-addr``/``--nccl-init-addr``, ``--context-length`` (human_readable_int),
``--mem-fraction-static``: the fraction of each GPU's memory for the weights and the KV pool). Its
docs write ``--tp 2`` and ``--dp 2``: argparse's unique prefixes of ``--tp-size``/``--dp-size``
(docs/advanced_features/server_arguments.md); ``--pp`` is ambiguous there (``--pp-size``,
``--pp-max-micro-batch-size``, ``--pp-async-batch-depth``) and SGLang refuses it. argparse: the last
of a repeated option wins; ``--opt=value`` is read.
"""

from gpu_launch.fit.cmdline import Flag, Table

INT32 = 2**31 - 1
RANKS = 1 << 20

TABLE = Table("sglang", (
    Flag("model", ("--model-path", "--model")),
    Flag("ctx", ("--context-length",), "tokens", low=1, high=INT32),
    Flag("parallel", ("--max-running-requests",), "int", low=1, high=INT32),
    Flag("kv_type", ("--kv-cache-dtype",)),
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
), source="sgl-project/sglang python/sglang/srt/server_args.py", abbreviations=True,
    others=("--pp-max-micro-batch-size", "--pp-async-batch-depth", "--model-impl", "--model-loader-extra-config",
            "--model-config-parser"))
