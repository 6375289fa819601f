"""llama-cpp-python's server (``python -m llama_cpp.server --model M --n_ctx 8192 --n_gpu_layers -1``).

It runs llama.cpp (sized as llama.cpp), but spells its options its own way. Read in
abetlen/llama-cpp-python: ``llama_cpp/server/__main__.py`` (a plain ``argparse.ArgumentParser``, so
argparse's unique prefixes count, ``--opt=value`` is read and the last of a repeat wins) filled by
``llama_cpp/server/cli.py`` ``add_args_from_model``: one ``--<field>`` option per field of
``llama_cpp/server/settings.py`` ``Settings``, spelt exactly as the field (``--n_ctx``, never
``--n-ctx``); booleans take a value (``--flash_attn true``: ``_parse_bool_arg``). The fields are
pydantic-settings ``BaseSettings``, so a field the command leaves out is read from the environment
variable of its name (``MODEL``, ``N_CTX``...; the docstring's ``export MODEL=...``), else its default:
``n_ctx=2048`` (0: the model's trained context, ``Llama.__init__``), ``n_gpu_layers=0`` (every layer on
the CPU; -1: all on the GPU, ``Llama.__init__`` maps it to 0x7FFFFFFF), ``flash_attn=False``.
``type_k``/``type_v`` are ggml type numbers (``llama_cpp/llama_cpp.py``'s ``GGML_TYPE_*``, ggml.h).
With ``--config_file`` the models come from that file instead (not read here).

On every node of a several-node run: llama.cpp's RPC backend, only when asked (``--rpc_servers {rpc}``).
"""

from collections.abc import Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline import llama_cpp
from gpu_launch.fit.cmdline.llama_cpp import INT32

#: ggml type numbers the KV cache takes (ggml.h ``enum ggml_type``; bf16 is 30 there)
_KV_TYPES = (("0", "f32"), ("1", "f16"), ("2", "q4_0"), ("3", "q4_1"), ("6", "q5_0"), ("7", "q5_1"),
             ("8", "q8_0"), ("20", "iq4_nl"), ("30", "bf16"))
#: ``_parse_bool_arg``: these words, any case, surrounding blanks ignored
_BOOL = tuple((form, meaning) for words, meaning in (("1 on t true y yes", "on"), ("0 off f false n no", "off"))
              for word in words.split() for form in dict.fromkeys((word, word.upper(), word.capitalize())))

TABLE = Table("llama-cpp-python", (
    Flag("model", ("--model",), env="MODEL"),
    Flag("ctx", ("--n_ctx",), "int", "N_CTX", 0, INT32, valid=f"0 (the model's own) to {INT32} tokens"),
    Flag("batch", ("--n_batch",), "int", "N_BATCH", 1, INT32),
    Flag("ubatch", ("--n_ubatch",), "int", "N_UBATCH", 1, INT32),
    Flag("gpu_layers", ("--n_gpu_layers",), "int", "N_GPU_LAYERS", 0, INT32, (("-1", "all"),),
         valid=f"a layer count (0 to {INT32}), or -1 (all)"),
    Flag("tensor_split", ("--tensor_split",), env="TENSOR_SPLIT"),
    Flag("kv_type", ("--type_k",), "int", "TYPE_K", 0, 42, _KV_TYPES, valid="a ggml type number (8: q8_0, 1: f16)"),
    Flag("v_type", ("--type_v",), "int", "TYPE_V", 0, 42, _KV_TYPES, valid="a ggml type number (8: q8_0, 1: f16)"),
    Flag("flash_attn", ("--flash_attn",), env="FLASH_ATTN", words=_BOOL),
    Flag("rpc", ("--rpc_servers",), env="RPC_SERVERS"),
    Flag("host", ("--host",)),
    Flag("port", ("--port",), "int", low=0, high=65535),
), source="abetlen/llama-cpp-python llama_cpp/server/__main__.py, cli.py (add_args_from_model), settings.py",
    abbreviations=True, defaults=(("ctx", "2048"), ("gpu_layers", "0"), ("batch", "512")),
    others=tuple(f"--{name}" for name in (
        "model_alias", "split_mode", "main_gpu", "vocab_only", "use_mmap", "use_mlock", "kv_overrides", "seed",
        "n_threads", "n_threads_batch", "rope_scaling_type", "rope_freq_base", "rope_freq_scale", "yarn_ext_factor",
        "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_orig_ctx", "mul_mat_q", "logits_all",
        "embedding", "offload_kqv", "last_n_tokens_size", "lora_base", "lora_path", "numa", "chat_format",
        "chat_template_kwargs", "clip_model_path", "cache", "cache_type", "cache_size", "hf_tokenizer_config_path",
        "hf_pretrained_model_name_or_path", "hf_model_repo_id", "draft_model", "draft_model_num_pred_tokens",
        "verbose", "ssl_keyfile", "ssl_certfile", "api_key", "interrupt_requests", "disable_ping_events",
        "root_path", "config_file", "help")))

NODES_PEERS = True  # on a several-node run the other nodes serve rpc-servers the head must learn


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    """The server (``python -m llama_cpp.server``), spread only when asked: llama.cpp's RPC backend is
    unauthenticated."""
    if said.module != "llama_cpp.server":
        return False
    if "{rpc}" not in argv[1:]:
        raise UsageError("--nodes: llama-cpp-python's server has no multi-node mode of its own, and llama.cpp's "
                         "RPC backend is unauthenticated: gpulaunch spreads it only when asked",
                         hint="write --rpc_servers {rpc}: the other nodes then run rpc-server and the head lists them")
    return True


on_nodes = llama_cpp.on_nodes  # llama.cpp's RPC backend: rpc-server on the other nodes, the head lists them
