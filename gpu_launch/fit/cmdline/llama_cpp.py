"""llama.cpp's command line (llama-server, llama-cli and the other ``llama-*`` tools).

Read in ggml-org/llama.cpp ``common/arg.cpp`` (``common_params_parse_ex`` and the ``add_opt``
table, 2026 source): every option is looked up whole, so ``--ctx-size=8192`` is an invalid
argument to it (no ``=`` form); a ``--`` option's ``_`` reads as ``-`` (``--ctx_size``); a repeated
option's last value wins (newer builds warn "specified multiple times ... only last value will be
used"); the ``LLAMA_ARG_*`` variable of an option is applied first and the command line overrides it
("... environment variable is set, but will be overwritten by command line argument"). Numbers go
through ``std::stoi``: an int32, else the tool exits with "error while handling argument".
``-ngl`` takes a number, ``auto`` (-1) or ``all`` (-2).
"""

from gpu_launch.fit.cmdline import Flag, Table

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
    Flag("fit", ("-fit", "--fit"), env="LLAMA_ARG_FIT"),
    Flag("rpc", ("--rpc",), env="LLAMA_ARG_RPC"),
    Flag("host", ("--host",), env="LLAMA_ARG_HOST"),
    Flag("port", ("--port",), "int", "LLAMA_ARG_PORT", 0, 65535),
), source="ggml-org/llama.cpp common/arg.cpp (common_params_parse_ex, add_opt)", equals=False, underscores=True)
