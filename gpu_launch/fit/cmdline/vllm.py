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
"""

from gpu_launch.fit.cmdline import Flag, Table

INT32 = 2**31 - 1
RANKS = 1 << 20  # no run has more ranks than this; a larger number is a typo

TABLE = Table("vllm", (
    Flag("model", ("--model",)),
    Flag("ctx", ("--max-model-len",), "tokens", low=1, high=INT32, words=(("-1", "auto"), ("auto", "auto")),
         valid="a number of tokens (8192, 32k, 32K), or -1/auto"),
    Flag("parallel", ("--max-num-seqs",), "int", low=1, high=INT32),
    Flag("kv_type", ("--kv-cache-dtype",)),
    Flag("batched_tokens", ("--max-num-batched-tokens",), "tokens", low=1, high=INT32),
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
