"""What a GGUF header says of the model: llama.cpp's per-architecture rules for its layers
(sliding-window patterns, recurrent and hybrid layouts) and the tensors grouped the way engines
place them. The header itself is read by :mod:`gpu_launch.modelfile.gguf`.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.facts import Hyper, ModelFacts, Weights
from gpu_launch.modelfile.gguf import FILE_TYPES, GgufHeader, GgufTensor, check_split, read_header, split_parts
from gpu_launch.modelfile.grouping import layer_number
from gpu_launch.text import printable
from gpu_launch.units import shown

__all__ = ["read_gguf", "SWA_PERIOD"]

#: llama.cpp's interleaved sliding-window patterns, for the architectures whose GGUF need not carry
#: one: set_swa_pattern(n) marks layer i sliding when i % n < n - 1 (every n-th layer global;
#: src/llama-hparams.cpp, llama_hparams::set_swa_pattern). Periods from llama.cpp's hparams loaders:
#: src/llama-model.cpp, llama_model::load_hparams (LLM_ARCH_GEMMA3: 6, LLM_ARCH_GEMMA3N: 5,
#: LLM_ARCH_COHERE2: 4), src/models/gemma2.cpp llama_model_gemma2::load_arch_hparams (2),
#: src/models/openai-moe.cpp llama_model_openai_moe::load_arch_hparams (gpt-oss: 2) and
#: src/models/gemma-embedding.cpp (6). The newer loaders let a GGUF key
#: ``attention.sliding_window_pattern`` override the period (or, as an array, give one bool per
#: layer: ml.get_key_or_arr), which _sliding() honours for every architecture.
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "gpt-oss": 2, "gemma-embedding": 6}
#: Gemma 2's window when its GGUF does not state one (llama.cpp src/models/gemma2.cpp).
SWA_DEFAULT = {"gemma2": 4096}
#: Architectures whose every layer is recurrent (a per-sequence state, no per-token KV).
RECURRENT = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
#: Hybrids whose layers are all recurrent except every ``full_attention_interval``-th (default 4),
#: the trailing NextN/MTP layers excepted (llama.cpp, load_hparams for LLM_ARCH_QWEN3NEXT / QWEN35).
INTERVAL_HYBRIDS = {"qwen3next", "qwen35", "qwen35moe"}
#: Hybrids with three kinds of layer: attention (kv > 0), MLP only (kv = 0, ffn > 0) and SSM (both 0):
#: llama.cpp marks a layer recurrent iff n_head_kv(i) == 0 && n_ff(i) == 0 (its Nemotron-H loader).
KV_AND_FFN_HYBRIDS = {"nemotron_h", "nemotron_h_moe"}
#: Hybrids whose every layer runs attention and an SSM side by side (llama.cpp src/models/falcon-h1.cpp).
PARALLEL_HYBRIDS = {"falcon-h1"}


#: The largest count a header may state: llama.cpp reads its counts and sizes as u32 (llama_hparams).
MAX_COUNT = 2**32 - 1


def _count(value: Any, key: str, label: str) -> int:
    """``value`` as a count: a whole number (an integral float too, as some converters write) from 0 to
    MAX_COUNT. NaN, infinities, fractions, negatives (an i32 -32) and text are one error line here,
    where they are read, never a traceback or a negative KV cache further on."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ModelFileError(f"{label}: {key} is {shown(value)}, not a count (0 to {MAX_COUNT})",
                             hint="the file is damaged or was written wrongly: convert it again")
    return value


def _per_layer(value: Any, n: int, key: str, label: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        if len(value) != n:
            raise ModelFileError(f"{label}: {key} has {len(value)} entries for {n} layers")
        return tuple(_count(v, key, label) for v in value)
    return (_count(value, key, label),) * n


def _int(kv: dict[str, Any], key: str, label: str) -> int | None:
    value = kv.get(key)
    return None if value is None else _count(value, key, label)


def _sliding(arch: str, kv: dict[str, Any], n: int, label: str) -> tuple[tuple[bool, ...], int | None]:
    window = _int(kv, f"{arch}.attention.sliding_window", label) or SWA_DEFAULT.get(arch)
    pattern = kv.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, tuple):
        if len(pattern) != n:
            raise ModelFileError(f"{label}: {arch}.attention.sliding_window_pattern has {len(pattern)} "
                                 f"entries for {n} layers")
        return tuple(bool(p) for p in pattern), window
    period = _count(pattern, f"{arch}.attention.sliding_window_pattern", label) \
        if isinstance(pattern, (int, float)) and not isinstance(pattern, bool) else SWA_PERIOD.get(arch)
    if not window or period is None:
        return (), window
    return tuple(period == 0 or i % period < period - 1 for i in range(n)), window


def _hyper(h: GgufHeader, arch: str, label: str) -> Hyper:
    kv = h.kv
    p = f"{arch}."
    n_all = _int(kv, p + "block_count", label)
    if n_all is None:
        raise ModelFileError(f"{label}: no {p}block_count in the header", hint="is this a language model?")
    if n_all > 100_000:
        raise ModelFileError(f"{label}: {p}block_count is {n_all}")
    # block_count includes the multi-token-prediction blocks after the trunk (DeepSeek V3, GLM-4.5,
    # Qwen3-Next): they are not layers the model runs per token, so Hyper counts the trunk only.
    nextn = min(_int(kv, p + "nextn_predict_layers", label) or 0, n_all)
    n = n_all - nextn
    heads = _per_layer(kv.get(p + "attention.head_count"), n_all, p + "attention.head_count", label) or (0,) * n
    kv_heads = (_per_layer(kv.get(p + "attention.head_count_kv"), n_all, p + "attention.head_count_kv", label)
                or heads)
    heads, kv_heads = heads[:n], kv_heads[:n]
    hidden = _int(kv, p + "embedding_length", label)
    n_heads = max(heads, default=0)
    per_head = hidden // n_heads if hidden and n_heads else 0
    key_length = _int(kv, p + "attention.key_length", label)
    value_length = _int(kv, p + "attention.value_length", label)
    recurrent: tuple[bool, ...] = ()
    if arch in RECURRENT:
        recurrent, kv_heads = (True,) * n, (0,) * n
    elif arch in INTERVAL_HYBRIDS:
        interval = _int(kv, p + "full_attention_interval", label) or 4
        recurrent = tuple((i + 1) % interval != 0 for i in range(n))
        kv_heads = tuple(0 if r else k for r, k in zip(recurrent, kv_heads))
    elif arch in PARALLEL_HYBRIDS:
        recurrent = (True,) * n
    elif arch in KV_AND_FFN_HYBRIDS:
        ffn = _per_layer(kv.get(p + "feed_forward_length"), n_all, p + "feed_forward_length", label) or (1,) * n
        recurrent = tuple(k == 0 and f == 0 for k, f in zip(kv_heads, ffn[:n]))
    elif 0 in kv_heads and any(kv_heads):
        recurrent = tuple(k == 0 for k in kv_heads)
    sliding, window = _sliding(arch, kv, n_all, label)
    sliding = sliding[:n]
    # llama.cpp caches the MLA latent row (K only) only when the file carries the per-head sizes under
    # attention.key_length_mla / value_length_mla (src/llama-hparams.cpp, llama_hparams::is_mla; the
    # deepseek2 loader reads them as optional keys). Older DeepSeek conversions state kv_lora_rank but
    # not those: llama.cpp then runs them as plain multi-head attention and caches full K and V for
    # every KV head (src/models/deepseek2.cpp, the !is_mla branch), 10-70x the latent row.
    mla = kv.get(p + "attention.key_length_mla") is not None and kv.get(p + "attention.value_length_mla") is not None
    kv_lora = _int(kv, p + "attention.kv_lora_rank", label) if mla else None
    ssm = {k[len(p) + 4:]: _count(v, k, label) for k, v in kv.items()
           if k.startswith(p + "ssm.") and isinstance(v, int) and not isinstance(v, bool)}
    ssm.update({k[len(p):]: _count(v, k, label) for k, v in kv.items()
                if k.startswith((p + "wkv.", p + "shortconv.")) and isinstance(v, int) and not isinstance(v, bool)})
    # llama.cpp's n_vocab is the tokenizer's; a file without one still says it in the embedding's
    # outer dimension (token_embd is n_embd x n_vocab, innermost first), which sizes the logits buffer.
    embd = next((t.dims for t in h.tensors if t.name == "token_embd.weight" and len(t.dims) == 2), None)
    vocab = (_int(kv, p + "vocab_size", label) or h.array_lengths.get("tokenizer.ggml.tokens")
             or (embd[1] if embd else None))
    return Hyper(
        n_layers=n, n_heads=n_heads, kv_heads=kv_heads,
        key_length=key_length if key_length is not None else per_head,
        value_length=value_length if value_length is not None else per_head,
        hidden_size=hidden, context_length=_int(kv, p + "context_length", label), vocab_size=vocab,
        sliding_window=window, sliding=sliding,
        kv_lora_rank=kv_lora, rope_head_dim=_int(kv, p + "rope.dimension_count", label) if kv_lora else None,
        recurrent=recurrent, ssm=ssm, expert_count=_int(kv, p + "expert_count", label), nextn_layers=nextn,
    )


_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def _weights(tensors: list[GgufTensor], n_layers: int) -> Weights:
    layers = [0] * n_layers
    embedding = output = other = 0
    by_type: dict[str, int] = {}
    has_output = False
    for t in tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.nbytes
        m = _BLOCK_RE.match(t.name)
        index = layer_number(m[1], n_layers) if m else n_layers
        if index < n_layers:
            layers[index] += t.nbytes
        elif t.name.startswith("token_embd"):
            embedding += t.nbytes
        elif t.name.startswith(("output.", "output_norm.")):
            output += t.nbytes
            has_output = has_output or t.name.startswith("output.weight")
        else:
            other += t.nbytes
    return Weights(layers=tuple(layers), token_embedding=embedding, output=output, other=other,
                   tied_embeddings=not has_output and embedding > 0, by_type=by_type)


def read_gguf(source: str, path: str) -> ModelFacts:
    """The facts of the GGUF file (or split set) at ``path``; ``source`` is what the user named."""
    parts = split_parts(path)
    headers = [read_header(p) for p in parts]
    check_split(headers)
    first = headers[0]
    label = f"model file {printable(first.path)}"
    arch = first.kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(f"{label}: no general.architecture in the header", hint="is this a model GGUF?")
    hyper = _hyper(first, arch, label)
    weights = _weights([t for h in headers for t in h.tensors], hyper.n_layers)
    name = first.kv.get("general.name")
    file_type = first.kv.get("general.file_type")
    return ModelFacts(
        source=source, files=tuple(parts), format="gguf", architecture=printable(arch), hyper=hyper,
        weights=weights, header_bytes=sum(h.bytes_read for h in headers),
        name=printable(name) if isinstance(name, str) else None,
        dtype=FILE_TYPES.get(file_type) if isinstance(file_type, int) else None,
    )
