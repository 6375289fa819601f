"""Text Generation Inference's launcher (``text-generation-launcher``).

Read in huggingface/text-generation-inference ``launcher/src/main.rs`` (``struct Args``, clap
derive with ``#[clap(long, env)]``): ``--model-id`` (``MODEL_ID``), ``--num-shard`` (``NUM_SHARD``),
``--sharded`` (``SHARDED``), ``--max-total-tokens`` (``MAX_TOTAL_TOKENS``), ``--cuda-memory-fraction``
(``CUDA_MEMORY_FRACTION``), ``--kv-cache-dtype``, ``--master-addr``, ``--master-port``. clap reads
``--opt=value``; the command line wins over the variable; and since clap 4 a single-value option
given twice is refused ("the argument ... cannot be used multiple times", clap 4.0 changelog,
#4261), so gpulaunch refuses it too. Without ``--num-shard`` TGI shards over every GPU it sees.
"""

from gpu_launch.fit.cmdline import Flag, Table

INT32 = 2**31 - 1

TABLE = Table("tgi", (
    Flag("model", ("--model-id",), env="MODEL_ID"),
    Flag("ctx", ("--max-total-tokens",), "int", "MAX_TOTAL_TOKENS", 1, INT32),
    Flag("tp", ("--num-shard",), "int", "NUM_SHARD", 1, 1 << 20),
    Flag("sharded", ("--sharded",), env="SHARDED"),
    Flag("gpu_mem_util", ("--cuda-memory-fraction",), "float", "CUDA_MEMORY_FRACTION", 1e-9, 1.0,
         valid="a fraction of each GPU's memory above 0 and at most 1"),
    Flag("kv_type", ("--kv-cache-dtype",), env="KV_CACHE_DTYPE"),
    Flag("master_addr", ("--master-addr",), env="MASTER_ADDR"),
    Flag("master_port", ("--master-port",), "int", "MASTER_PORT", 1, 65535),
    Flag("port", ("--port", "-p"), "int", "PORT", 1, 65535),
), source="huggingface/text-generation-inference launcher/src/main.rs (struct Args)", repeats="refused")

#: on a several-node run: refused, with the reason
NODES_REFUSED = ("text-generation-inference shards a model over one machine's GPUs (--num-shard) and documents no "
                 "multi-node mode")
