"""A Transformers ``config.json`` (or an MLC-LLM ``model_config``) turned into :class:`Hyper`.

The numbers engines size their KV cache with, which config.json states in many spellings:
``head_dim`` set apart from hidden / heads (Qwen3, Gemma), ``num_key_value_heads`` absent (MHA),
MLA ranks (DeepSeek V2/V3: one compressed row per token), interleaved sliding windows
(``layer_types``, ``sliding_window_pattern``), recurrent layers of hybrids (Jamba's
``attn_layer_period``/``offset``, ``layers_block_type``, Nemotron-H's ``hybrid_override_pattern``,
Qwen3-Next's ``layer_types``/``full_attention_interval``), and vision-language models that nest
the language model under ``text_config``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.facts import Hyper
from gpu_launch.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["text_config", "hyper_from_config", "architecture", "ARCHITECTURES"]

#: config.json ``model_type`` -> GGUF ``general.architecture``, where llama.cpp names it otherwise.
ARCHITECTURES = {
    "mistral": "llama", "mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe",
    "qwen3_next": "qwen3next", "gemma3_text": "gemma3", "gemma3n_text": "gemma3n", "gpt_oss": "gpt-oss",
    "deepseek_v2": "deepseek2", "deepseek_v3": "deepseek2", "cohere": "command-r", "falcon_h1": "falcon-h1",
    "granitemoehybrid": "granitehybrid", "gpt_neox": "gptneox", "glm4_moe": "glm4moe", "phimoe": "phimoe",
    "qwen2_vl": "qwen2vl", "qwen2_5_vl": "qwen2vl", "qwen2_vl_text": "qwen2vl", "qwen2_5_vl_text": "qwen2vl",
    "qwen3_vl": "qwen3vl", "qwen3_vl_text": "qwen3vl", "qwen3_vl_moe": "qwen3vlmoe", "qwen3_vl_moe_text": "qwen3vlmoe",
    "llama4_text": "llama4", "llava": "llama", "mllama": "mllama",
}
#: The most a recurrent block's dimension (state, inner width, heads, kernel) may be: 16 Mi.
MAX_STATE_DIM = 1 << 24
#: Whole-model recurrent families (no attention layer at all).
_RECURRENT_TYPES = {"mamba", "mamba2", "rwkv", "rwkv6", "rwkv7"}
#: Families whose config's ``sliding_window`` applies to every layer when nothing says otherwise.
_ALL_SLIDING = {"mistral", "mixtral", "starcoder2"}
#: Interleaved families whose config may carry no pattern: every n-th layer global (Transformers'
#: defaults: Gemma 2 alternates, Gemma 3 and Cohere 2 state ``sliding_window_pattern``).
_DEFAULT_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}

#: Transformers' class defaults for the numbers a config.json may leave out: a saved config omits a
#: nested ``text_config``'s values that equal its class's defaults (Gemma 3 4B's text_config states
#: neither heads nor head_dim), and Transformers fills them back in when it loads. From the
#: ``__init__`` defaults of Gemma3TextConfig, Gemma2Config, LlamaConfig, MistralConfig, Qwen2Config.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "hidden_size": 2304, "vocab_size": 262208, "max_position_embeddings": 131072,
                    "sliding_window": 4096},
    "gemma2": {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
               "hidden_size": 2304, "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096},
    "llama": {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "vocab_size": 32000,
              "max_position_embeddings": 2048},
    "mistral": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
                "vocab_size": 32000, "max_position_embeddings": 131072, "sliding_window": 4096},
    "qwen2": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_size": 4096,
              "vocab_size": 151936, "max_position_embeddings": 32768, "use_sliding_window": False},
}
#: Multimodal wrappers whose text_config, when it names no model_type, is that family's default.
_WRAPPED = {"llava": "llama", "llava_next": "llama", "gemma3": "gemma3_text"}

_ATTENTION = {"full_attention", "attention", "sliding_attention", "chunked_attention", "global", "local", "*"}
_SLIDING = {"sliding_attention", "local", "chunked_attention"}
_RECURRENT = {"mamba", "linear_attention", "conv", "ssm", "recurrent", "M", "mamba2", "gated_deltanet",
              "short_conv", "rwkv"}


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's own settings: ``text_config`` (VLMs) or ``llm_config``, else the whole;
    the values Transformers would fill in from its class defaults filled in too."""
    merged: Mapping[str, Any] = config
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            outer = str(config.get("model_type") or "")
            inner = nested.get("model_type") or _WRAPPED.get(outer, outer)
            merged = {**{k: v for k, v in config.items() if k not in ("text_config", "llm_config", "language_config")},
                      **nested, "model_type": inner}
            break
    defaults = _DEFAULTS.get(str(merged.get("model_type") or ""))
    return {**defaults, **merged} if defaults else merged


def architecture(config: Mapping[str, Any]) -> str:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        archs = config.get("architectures")
        model_type = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "unknown"
    return ARCHITECTURES.get(model_type, model_type)


def _first(config: Mapping[str, Any], label: str, *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 8.0: some converters write counts as floats
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 2**53:
            raise ModelFileError(f"{label}: {key} is {str(value)[:40]!r}, not a count")
        return value
    return None


def _kinds(config: Mapping[str, Any], n: int, model_type: str, label: str) -> list[str] | None:
    """Per layer: "full", "sliding", "recurrent", "both" (attention and SSM side by side) or "none"."""
    for key in ("layer_types", "layers_block_type"):
        types = config.get(key)
        if isinstance(types, list) and types:
            if len(types) < n or not all(isinstance(t, str) for t in types):
                raise ModelFileError(f"{label}: {key} has {len(types)} entries for {n} layers")
            return [_kind(t) for t in types[:n]]
    pattern = config.get("hybrid_override_pattern")  # Nemotron-H: M mamba, * attention, - MLP only
    if isinstance(pattern, str) and pattern:
        if len(pattern) < n:
            raise ModelFileError(f"{label}: hybrid_override_pattern has {len(pattern)} layers for {n}")
        return [{"M": "recurrent", "*": "full"}.get(c, "none") for c in pattern[:n]]
    period = _first(config, label, "attn_layer_period")
    if period:  # Jamba: attention where i % period == offset
        offset = _first(config, label, "attn_layer_offset") or 0
        return ["full" if i % period == offset else "recurrent" for i in range(n)]
    if model_type == "qwen3_next":
        interval = _first(config, label, "full_attention_interval") or 4
        return ["full" if (i + 1) % interval == 0 else "recurrent" for i in range(n)]
    if model_type in _RECURRENT_TYPES:
        return ["recurrent"] * n
    if model_type == "falcon_h1":
        return ["both"] * n
    if model_type in ("llama4", "llama4_text") and config.get("attention_chunk_size"):
        # Llama4TextConfig: no_rope_layers[i] = 1 where layer i uses RoPE and chunked attention, 0 for the
        # global NoPE layers (default: every 4th); vLLM llama4.py: use_chunked_local_attn = not nope
        rope = config.get("no_rope_layers")
        if not (isinstance(rope, list) and len(rope) >= n):
            rope = [int((i + 1) % 4 != 0) for i in range(n)]
        return ["sliding" if r else "full" for r in rope[:n]]
    return None


def _kind(name: str) -> str:
    if name in _SLIDING:
        return "sliding"
    if name in _ATTENTION:
        return "full"
    if name in _RECURRENT:
        return "recurrent"
    return "none"


def _sliding(config: Mapping[str, Any], n: int, model_type: str, label: str) -> tuple[bool, ...]:
    window = config.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return ()
    if config.get("use_sliding_window") is False:
        return ()
    pattern = _first(config, label, "sliding_window_pattern", "_sliding_window_pattern")
    if pattern is None:
        pattern = _DEFAULT_PERIOD.get(model_type)
    if pattern:  # every pattern-th layer is global (Transformers: (i + 1) % pattern == 0)
        return tuple((i + 1) % pattern != 0 for i in range(n))
    if model_type in _ALL_SLIDING:
        return (True,) * n
    return ()


def hyper_from_config(config: Mapping[str, Any], label: str) -> Hyper:
    """Hyper from a config.json object (its ``text_config`` already merged in by the caller)."""
    from gpu_launch.modelfile.vllm_archs import refusal

    classes = config.get("architectures")
    cls = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else ""
    why = refusal(cls)
    if why:
        raise ModelFileError(f"{label}: gpulaunch does not size {printable(cls)} models: {why}",
                             hint="give the size instead, e.g. --fit 60GiB")
    model_type = str(config.get("model_type") or "")
    n = _first(config, label, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if n is None or n > 100_000:
        raise ModelFileError(f"{label}: no num_hidden_layers", hint="is this a language model's config.json?")
    heads = _first(config, label, "num_attention_heads", "n_head", "num_heads", "n_heads") or 0
    kv = _first(config, label, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", "n_head_kv")
    if kv is None:
        kv = 1 if config.get("multi_query") is True else heads
    hidden = _first(config, label, "hidden_size", "d_model", "n_embd")
    per_head = hidden // heads if hidden and heads else 0
    head_dim = _first(config, label, "head_dim", "attention_head_dim") or per_head
    key_length = value_length = head_dim
    kv_lora = _first(config, label, "kv_lora_rank")
    rope_dim = None
    if kv_lora:  # MLA: K = nope + rope per head, V its own size; the cache holds kv_lora_rank + rope
        rope_dim = _first(config, label, "qk_rope_head_dim")
        nope = _first(config, label, "qk_nope_head_dim")
        if rope_dim is not None and nope is not None:
            key_length = nope + rope_dim
        value_length = _first(config, label, "v_head_dim") or value_length
    kinds = _kinds(config, n, model_type, label)
    if kinds is None:
        sliding = _sliding(config, n, model_type, label)
        kv_heads = (kv,) * n
        recurrent: tuple[bool, ...] = ()
    else:
        has_window = isinstance(config.get("sliding_window"), int) and (config.get("sliding_window") or 0) > 0
        sliding = tuple(k == "sliding" for k in kinds) if "sliding" in kinds and has_window else ()
        kv_heads = tuple(kv if k in ("full", "sliding", "both") else 0 for k in kinds)
        recurrent = tuple(k in ("recurrent", "both") for k in kinds) if any(
            k in ("recurrent", "both") for k in kinds) else ()
    # Falcon-H1: attention beside the SSM in every layer (vLLM: an attention and a Mamba spec each)
    attention = tuple(k != "recurrent" and k != "none" for k in kinds) if kinds and "both" in kinds else ()
    window = config.get("sliding_window") if sliding else None
    chunk = _first(config, label, "attention_chunk_size") if model_type in ("llama4", "llama4_text") else None
    if chunk and kinds is not None and "sliding" in kinds:
        sliding, window = tuple(k == "sliding" for k in kinds), chunk
    extras = _extras(config, model_type, n, label)
    if extras.get("kv_heads_full") is not None and sliding:  # Gemma 4: the full layers' own KV heads
        kv_heads = tuple(kv if s else extras["kv_heads_full"] for s in sliding)
    if extras.get("key_length"):  # Gemma 4: the full layers' head size is global_head_dim
        key_length = value_length = extras["key_length"]
    return Hyper(
        n_layers=n, n_heads=heads, kv_heads=kv_heads, key_length=key_length, value_length=value_length,
        hidden_size=hidden,
        context_length=_first(config, label, "max_position_embeddings", "n_positions", "max_seq_len",
                              "seq_length", "context_window_size", "max_sequence_length"),
        vocab_size=_first(config, label, "vocab_size", "padded_vocab_size"),
        sliding_window=window if isinstance(window, int) else None, sliding=sliding,
        kv_lora_rank=kv_lora, rope_head_dim=rope_dim, recurrent=recurrent, ssm=_ssm(config, hidden, label),
        expert_count=_first(config, label, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
        nextn_layers=_first(config, label, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0,
        key_length_swa=extras.get("key_length_swa"), value_length_swa=extras.get("key_length_swa"),
        kv_layers=extras.get("kv_layers"), chunked=bool(chunk and sliding), no_kv=extras.get("no_kv", False),
        state_kind=_STATE_KINDS.get(model_type, ""), state_dtype_bytes=extras.get("state_dtype_bytes"),
        dtype_bytes=extras.get("dtype_bytes", 2), attention=attention,
    )


#: vLLM's recurrent block per model_type (its Mamba mixers: mamba_mixer.py, mamba_mixer2.py; gated
#: delta-net; short convolutions; KDA), which sizes the state and its pages (fit/kv_vllm.py).
_STATE_KINDS = {"mamba": "mamba", "falcon_mamba": "mamba", "jamba": "mamba", "mamba2": "mamba2", "bamba": "mamba2",
                "granitemoehybrid": "mamba2", "nemotron_h": "mamba2", "falcon_h1": "mamba2", "zamba2": "mamba2",
                "plamo2": "mamba2", "qwen3_next": "gdn", "lfm2": "shortconv", "lfm2_moe": "shortconv",
                "kimi_linear": "kda", "rwkv": "rwkv", "rwkv6": "rwkv", "rwkv7": "rwkv"}
#: Encoder-only models: no KV cache in vLLM (encoder-only attention has no KV cache spec).
_ENCODERS = {"bert", "roberta", "xlm-roberta", "modernbert", "nomic_bert", "distilbert", "electra", "deberta",
             "deberta-v2", "mpnet", "jina_bert", "new", "gte"}


def _extras(config: Mapping[str, Any], model_type: str, n: int, label: str) -> dict[str, Any]:
    """The numbers a few families state apart: KV shared across layers (Gemma-3n/4), Gemma 4's head
    sizes, encoders, the state's dtype (NemotronH: float32) and the model's."""
    out: dict[str, Any] = {}
    shared = _first(config, label, "num_kv_shared_layers")
    if shared:
        if shared >= n:
            raise ModelFileError(f"{label}: num_kv_shared_layers is {shared} of {n} layers",
                                 hint="at least one layer must hold its own KV cache")
        out["kv_layers"] = n - shared
    if model_type.startswith("gemma4"):
        full = _first(config, label, "global_head_dim")
        if full is not None and not 0 < full <= MAX_STATE_DIM:
            raise ModelFileError(f"{label}: global_head_dim is {full}, not a head size")
        if full:
            out["key_length"], out["key_length_swa"] = full, _first(config, label, "head_dim")
        out["kv_heads_full"] = _first(config, label, "num_global_key_value_heads")
    if model_type in _ENCODERS or config.get("is_causal") is False or config.get("use_bidirectional_attention") is True:
        out["no_kv"] = True
    if model_type == "nemotron_h":  # NemotronHForCausalLMConfig: the SSM state in float32 unless the config says
        out["state_dtype_bytes"] = 2 if config.get("mamba_ssm_cache_dtype") in ("bfloat16", "float16") else 4
    dtype = config.get("torch_dtype") or config.get("dtype")
    if dtype in ("float32", "float"):
        out["dtype_bytes"] = 4
    return out


def _ssm(config: Mapping[str, Any], hidden: int | None, label: str) -> dict[str, int]:
    """The recurrent block's numbers under GGUF's names (see Hyper.ssm)."""
    names = {"conv_kernel": ("conv_kernel", "mamba_d_conv", "d_conv", "linear_conv_kernel_dim"),
             "state_size": ("state_size", "mamba_d_state", "d_state", "ssm_state_size"),
             "group_count": ("n_groups", "mamba_n_groups", "ngroups"),
             "time_step_rank": ("time_step_rank", "mamba_dt_rank", "dt_rank"),
             "head_count": ("mamba_n_heads", "num_heads_mamba", "mamba_num_heads", "linear_num_value_heads"),
             "head_dim": ("mamba_head_dim", "mamba_d_head", "linear_value_head_dim"),
             "key_head_count": ("linear_num_key_heads",), "key_head_dim": ("linear_key_head_dim",),
             "inner_size": ("mamba_d_ssm",), "shortconv.l_cache": ("conv_L_cache",)}
    out: dict[str, int] = {}
    for name, keys in names.items():
        for key in keys:
            value = config.get(key)
            if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
                # the state's size multiplies these: a negative, fractional, NaN or huge one is refused
                # ("auto" and other words are left alone, as before)
                if value != value or value < 0 or value > MAX_STATE_DIM or int(value) != value:
                    raise ModelFileError(f"{label}: {key} is {str(value)[:40]}, not a size",
                                         hint=f"a whole number from 0 to {MAX_STATE_DIM}")
                out[name] = int(value)
                break
    inner = config.get("intermediate_size") if config.get("model_type") in _RECURRENT_TYPES else None
    expand = config.get("mamba_expand", config.get("expand"))
    if "inner_size" in out:
        pass
    elif isinstance(inner, int) and not isinstance(inner, bool):
        out["inner_size"] = inner
    elif isinstance(expand, int) and not isinstance(expand, bool) and hidden:
        out["inner_size"] = expand * hidden
    # Gated delta-net layers (Qwen3-Next) state no Mamba numbers: llama.cpp's converter maps them
    # (convert_hf_to_gguf.py, Qwen3NextModel.set_gguf_parameters: state_size = linear_key_head_dim,
    # group_count = linear_num_key_heads, inner_size = linear_value_head_dim x linear_num_value_heads),
    # and with those the Mamba formula gives the engines' state (vLLM's gated delta-net conv state
    # key_dim x 2 + value_dim wide, recurrent state v_heads x k_dim x v_dim). Without them it was zero.
    if "inner_size" not in out and out.get("head_count") and out.get("head_dim"):
        out["inner_size"] = out["head_count"] * out["head_dim"]
    if "state_size" not in out and out.get("key_head_dim"):
        out["state_size"] = out["key_head_dim"]
    if "group_count" not in out and out.get("key_head_count"):
        out["group_count"] = out["key_head_count"]
    return out
