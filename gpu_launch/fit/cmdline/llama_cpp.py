"""llama.cpp's command line (llama-server, llama-cli and the other ``llama-*`` tools).

Read in ggml-org/llama.cpp ``common/arg.cpp`` (``common_params_parse_ex`` and the ``add_opt``
table, 2026 source): every option is looked up whole, so ``--ctx-size=8192`` is an invalid
argument to it (no ``=`` form); a ``--`` option's ``_`` reads as ``-`` (``--ctx_size``); a repeated
option's last value wins (newer builds warn "specified multiple times ... only last value will be
used"); the ``LLAMA_ARG_*`` variable of an option is applied first and the command line overrides it
("... environment variable is set, but will be overwritten by command line argument"). Numbers go
through ``std::stoi``: an int32, else the tool exits with "error while handling argument".
``-ngl`` takes a number, ``auto`` (-1) or ``all`` (-2).

On every node of a several-node run (:func:`on_nodes`): its RPC backend, only when asked.
"""

import os
from collections.abc import Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline.node_flags import NodeCommand, NodeRun, beside

INT32 = 2**31 - 1

TABLE = Table("llama.cpp", (
    Flag("model", ("-m", "--model"), env="LLAMA_ARG_MODEL"),
    Flag("hf_repo", ("-hf", "-hfr", "--hf-repo"), env="LLAMA_ARG_HF_REPO"),
    Flag("ctx", ("-c", "--ctx-size"), "int", "LLAMA_ARG_CTX_SIZE", 0, INT32,
         valid=f"0 (the model's own) to {INT32} tokens"),
    Flag("parallel", ("-np", "--parallel"), "int", "LLAMA_ARG_N_PARALLEL", 1, INT32, (("-1", "auto"),),
         valid=f"1 to {INT32} sequences, or -1 (auto)"),
    Flag("kv_type", ("-ctk", "--cache-type-k"), env="LLAMA_ARG_CACHE_TYPE_K"),
    Flag("v_type", ("-ctv", "--cache-type-v"), env="LLAMA_ARG_CACHE_TYPE_V"),
    Flag("batch", ("-b", "--batch-size"), "int", "LLAMA_ARG_BATCH", 1, INT32),
    Flag("ubatch", ("-ub", "--ubatch-size"), "int", "LLAMA_ARG_UBATCH", 1, INT32),
    Flag("gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), "int", "LLAMA_ARG_N_GPU_LAYERS", 0, INT32,
         (("auto", "auto"), ("all", "all"), ("-1", "auto"), ("-2", "all")),
         valid=f"a layer count (0 to {INT32}), auto or all"),
    Flag("tensor_split", ("-ts", "--tensor-split"), env="LLAMA_ARG_TENSOR_SPLIT"),
    Flag("split_mode", ("-sm", "--split-mode"), env="LLAMA_ARG_SPLIT_MODE"),
    Flag("main_gpu", ("-mg", "--main-gpu"), "int", "LLAMA_ARG_MAIN_GPU", 0, INT32),
    Flag("device", ("-dev", "--device"), env="LLAMA_ARG_DEVICE"),
    Flag("kv_unified", ("-kvu", "--kv-unified"), "switch", "LLAMA_ARG_KV_UNIFIED"),
    Flag("kv_unified", ("-no-kvu", "--no-kv-unified"), "switch", sets="0"),
    Flag("flash_attn", ("-fa", "--flash-attn"), env="LLAMA_ARG_FLASH_ATTN", bare="on"),
    Flag("swa_full", ("-swa-full", "--swa-full"), "switch", "LLAMA_ARG_SWA_FULL"),
    # offload (common/arg.cpp): -ot appends its PATTERN=BUFT list each time; --cpu-moe and --n-cpu-moe N
    # add the expert patterns; -nkvo keeps the KV cache on the host
    Flag("override_tensor", ("-ot", "--override-tensor"), env="LLAMA_ARG_OVERRIDE_TENSOR", append=","),
    Flag("cpu_moe", ("-cmoe", "--cpu-moe"), "switch"),
    Flag("n_cpu_moe", ("-ncmoe", "--n-cpu-moe"), "int", "LLAMA_ARG_N_CPU_MOE", 0, INT32),
    Flag("n_cpu_ffn", ("-ncffn", "--n-cpu-ffn"), "int", "LLAMA_ARG_N_CPU_FFN", 0, INT32),  # dense FFNs, likewise
    Flag("kv_offload", ("-nkvo", "--no-kv-offload"), "switch", sets="0"),
    Flag("kv_offload", ("-kvo", "--kv-offload"), "switch", sets="1"),
    Flag("fit", ("-fit", "--fit"), env="LLAMA_ARG_FIT"),
    Flag("rpc", ("--rpc",), env="LLAMA_ARG_RPC"),
    Flag("host", ("--host",), env="LLAMA_ARG_HOST"),
    Flag("port", ("--port",), "int", "LLAMA_ARG_PORT", 0, 65535),
), source="ggml-org/llama.cpp common/arg.cpp (common_params_parse_ex, add_opt)", equals=False, underscores=True)

NODES_PEERS = True  # on a several-node run the other nodes serve rpc-servers the head must learn


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    """A ``llama-*`` tool (llama-bench aside), spread only when asked (llama-cpp-python's server:
    llama_cpp_python.py)."""
    word = os.path.basename(argv[0])
    if not (word.startswith("llama-") and word != "llama-bench"):
        return False
    if "{rpc}" not in argv[1:]:
        raise UsageError(f"--nodes: `{word}` has no multi-node mode of its own, and its RPC backend is "
                         "unauthenticated: gpulaunch spreads it only when asked",
                         hint="write --rpc {rpc}: the other nodes then run rpc-server and the head lists them")
    return True


def on_nodes(run: NodeRun) -> NodeCommand:
    """llama.cpp's RPC backend, only when asked (``--rpc {rpc}``: the RPC server is unauthenticated,
    "never expose it to an open network"): every other node runs ``rpc-server -H ADDR -p PORT`` on its own
    address (tools/rpc/rpc-server.cpp: ``-H``/``--host``, ``-p``/``--port``; it serves every GPU it sees,
    here the chosen ones), and the head's ``--rpc`` lists them ("comma separated list of RPC servers")."""
    world = run.world
    if world.rank > 0:
        return NodeCommand((beside(run.argv[0], "rpc-server"), "-H", world.addr, "-p", str(world.port)),
                           "rpc-server")
    return NodeCommand(tuple(",".join(world.peers) if arg == "{rpc}" else arg for arg in run.argv), "head")
