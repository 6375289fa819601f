"""What a GGUF header says of the model: llama.cpp's per-architecture rules for its layers
(sliding-window patterns, recurrent and hybrid layouts) and the tensors grouped the way engines
place them. The header itself is read by :mod:`gpu_launch.modelfile.gguf`.
"""

from __future__ import annotations

import re

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.facts import Hyper, ModelFacts, Weights, layer_number
from gpu_launch.modelfile.gguf import FILE_TYPES, GgufHeader, GgufTensor, check_split, read_header, split_parts
from gpu_launch.modelfile.llama_archs import DSA_ARCHS, DSV4_ARCHS, refusal
from gpu_launch.base.records import dataclass
from gpu_launch.base.text import printable
from gpu_launch.base.units import shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["read_gguf", "SWA_RULES", "NO_KV"]


@dataclass(frozen=True)
class SwaRule:
    """How llama.cpp's loader for one architecture lays out its sliding layers (src/models/<arch>.cpp,
    ``load_arch_hparams``, llama.cpp 0c1e570 as vendored in llama-cpp-python 0.3.36).

    ``period``: ``load_swa_pattern(ml, period, dense_first)`` (src/llama-model.cpp): a
    ``sliding_window_pattern`` array in the file wins, else that key as a number replaces the period,
    else the period; layer il slides when il % n < n - 1 (il % n != 0 when dense-first; every layer
    when n is 0: ``llama_hparams::set_swa_pattern``). None: the loader requires the array.
    ``window``: the loader's own window, a default the file's ``sliding_window`` replaces, or, with
    ``forced``, one that replaces the file's. ``when_stated``: sliding only when the file states a
    window above 0 (``found_swa && n_swa > 0``); otherwise a stated 0 still turns it off (Llama 4).
    """

    period: int | None
    dense_first: bool = False
    window: int | None = None
    forced: bool = False
    when_stated: bool = False
    chunked: bool = False


#: Every architecture whose loader sets an interleaved sliding-window (or chunked) layout. An
#: architecture not named here gets no sliding layer in llama.cpp, whatever its file says (phi3
#: turns SWA off explicitly; llama, qwen2, mistral never read the key).
SWA_RULES: dict[str, SwaRule] = {
    "gemma2": SwaRule(2, window=4096),  # "default value of gemma 2"
    "gemma3": SwaRule(6, when_stated=True),
    "gemma3n": SwaRule(5),
    "gemma4": SwaRule(None),
    "cohere2": SwaRule(4),
    "cohere2moe": SwaRule(4, dense_first=True),
    "gpt-oss": SwaRule(2),
    "afmoe": SwaRule(4, when_stated=True),
    "exaone-moe": SwaRule(4, window=128),
    "olmo2": SwaRule(4, when_stated=True),
    "plamo3": SwaRule(8, when_stated=True),
    "smallthinker": SwaRule(4, dense_first=True, window=4096, forced=True, when_stated=True),
    "llama4": SwaRule(4, window=8192, forced=True, chunked=True),  # chunked attention, 3 chunked : 1 full
    "mellum": SwaRule(4, when_stated=True),
    "laguna": SwaRule(4, dense_first=True, when_stated=True),
    "muse-glimmer": SwaRule(4),
    "maple": SwaRule(None), "mimo2": SwaRule(None), "step35": SwaRule(None), "granite_swa": SwaRule(None),
    "spark2_5": SwaRule(None), "dots3note": SwaRule(None),
}
#: EXAONE-4 slides only in its 64-layer (32B) variant (src/models/exaone4.cpp).
_EXAONE4 = SwaRule(4, window=4096)
#: Architectures llama.cpp gives no KV cache at all: encoders, embedding and diffusion models
#: (``llama_model::create_memory`` returns nullptr for them, src/llama-model.cpp).
NO_KV = {"bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert",
         "wavtokenizer-dec", "modern-bert", "gemma-embedding", "dream", "llada", "llada-moe", "rnd1"}
#: Architectures whose every layer is recurrent (``llm_arch_is_recurrent``, src/llama-arch.cpp).
RECURRENT = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
#: Hybrids whose recurrent layers are those with no KV heads (their loaders: is_recr = n_head_kv(il) == 0).
KV0_HYBRIDS = {"jamba", "granitehybrid", "plamo2", "lfm2", "lfm2moe", "kimi-linear", "kimi-k3", "bailingmoe3"}
#: Hybrids that name their recurrent layers (``attention.recurrent_layers``) or else put one attention
#: layer every ``full_attention_interval`` (the loaders of LLM_ARCH_QWEN3NEXT / QWEN35 / MINIMAX_01).
INTERVAL_HYBRIDS = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4, "minimax-01": 8}
#: Nemotron-H: attention layers have KV heads and no FFN, recurrent ones neither, MLP layers an FFN
#: only; the hybrid memory's filters hold the first in the KV cache, the second in the state.
KV_AND_FFN_HYBRIDS = {"nemotron_h", "nemotron_h_moe"}
#: Falcon-H1 runs attention and a Mamba-2 block side by side in every layer: create_memory builds a
#: hybrid memory whose attention and recurrent filters are both true for every layer.
PARALLEL_HYBRIDS = {"falcon-h1"}
#: The recurrent block each family's state holds (fit/kv_llama.py and fit/kv_vllm.py size it).
STATE_KINDS = {"mamba": "mamba", "jamba": "mamba", "mamba2": "mamba2", "granitehybrid": "mamba2",
               "plamo2": "mamba2", "nemotron_h": "mamba2", "nemotron_h_moe": "mamba2", "falcon-h1": "mamba2",
               "rwkv6": "rwkv", "rwkv6qwen2": "rwkv", "rwkv7": "rwkv", "arwkv7": "rwkv", "lfm2": "shortconv",
               "lfm2moe": "shortconv", "kimi-linear": "kda", "kimi-k3": "kda", "bailingmoe3": "kda",
               "qwen3next": "gdn", "qwen35": "gdn", "qwen35moe": "gdn", "minimax-01": "lightning"}
#: Recurrent-state keys read as stored (``{arch}.`` + name), with the least and most each may be:
#: the state sizes in src/llama-hparams.cpp (``n_embd_r``, ``n_embd_s``) multiply them, so a hostile
#: value is refused in one line (exit 7) before it reaches any size. The Mamba numbers may be 0 (absent).
STATE_KEYS = {"ssm.conv_kernel": (0, 1024), "ssm.inner_size": (0, 1 << 20), "ssm.state_size": (0, 1 << 16),
              "ssm.group_count": (0, 1 << 16), "ssm.time_step_rank": (0, 1 << 20), "wkv.head_size": (1, 1 << 16),
              "token_shift_count": (1, 64), "shortconv.l_cache": (1, 1 << 16), "kda.head_dim": (1, 1 << 16)}
#: Head sizes and counts past which a header is not a model: 64 Ki values a head.
MAX_HEAD = 1 << 16


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


def _int(kv: dict[str, Any], key: str, label: str, most: int | None = None, least: int = 0) -> int | None:
    """``key`` as a whole number in [least, most], None when absent; one line (exit 7) otherwise."""
    value = kv.get(key)
    if value is None:
        return None
    number = _count(value, key, label)
    if number < least or (most is not None and number > most):
        bound = f"at most {most}" if most is not None and number > most else f"at least {least}"
        raise ModelFileError(f"{label}: {key} is {number}, not a count here ({bound})",
                             hint="the file is damaged or was written wrongly: convert it again")
    return number


def _swa_rule(arch: str, n: int) -> SwaRule | None:
    return _EXAONE4 if arch == "exaone4" and n == 64 else SWA_RULES.get(arch)


def _sliding(arch: str, kv: dict[str, Any], n_all: int, n: int, label: str
             ) -> tuple[tuple[bool, ...], int | None, bool]:
    """(sliding per layer, window, chunked) as llama.cpp's loader for ``arch`` sets them."""
    p = arch + "."
    stated = _int(kv, p + "attention.sliding_window", label, most=1 << 30)
    if arch in ("lfm2", "lfm2moe"):  # every attention layer slides when a window is stated (src/models/lfm2.cpp)
        return ((), None, False) if not stated else ((True,) * n_all, stated, False)
    if arch in DSV4_ARCHS:  # every block slides, NextN too, whatever the file's pattern (src/models/deepseek4.cpp)
        if not stated:
            raise ModelFileError(f"{label}: no {p}attention.sliding_window above 0: llama.cpp's DeepSeek-V4 "
                                 "loader requires one", hint="convert the model again with convert_hf_to_gguf.py")
        return (True,) * n_all, stated, False
    rule = _swa_rule(arch, n)
    if rule is None or stated == 0 or (rule.when_stated and not stated):
        return (), None, False
    window = rule.window if rule.forced or stated is None else stated
    pattern = kv.get(p + "attention.sliding_window_pattern")
    if isinstance(pattern, tuple):
        if len(pattern) != n_all:
            raise ModelFileError(f"{label}: {p}attention.sliding_window_pattern has {len(pattern)} "
                                 f"entries for {n_all} layers")
        layers = tuple(bool(v) for v in pattern)
    else:
        period = _int(kv, p + "attention.sliding_window_pattern", label, most=1 << 16)
        period = rule.period if period is None else period
        if period is None or not window:
            return (), None, False
        if rule.dense_first:
            layers = tuple(period == 0 or i % period != 0 for i in range(n_all))
        else:
            layers = tuple(period == 0 or i % period < period - 1 for i in range(n_all))
    # layers past the trunk (NextN) never slide (set_swa_pattern)
    return tuple(v and i < n for i, v in enumerate(layers)), window, rule.chunked


def _recurrent(arch: str, kv: dict[str, Any], kv_heads: tuple[int, ...], n_all: int, n: int,
               label: str) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """(recurrent per layer, held by the attention cache per layer; empty = every non-recurrent one)."""
    p = arch + "."
    if arch in RECURRENT:
        return (True,) * n, ()
    if arch in PARALLEL_HYBRIDS:
        return (True,) * n, (True,) * n
    if arch in KV0_HYBRIDS:
        return tuple(k == 0 for k in kv_heads), ()
    if arch in KV_AND_FFN_HYBRIDS:
        ffn = _per_layer(kv.get(p + "feed_forward_length"), n_all, p + "feed_forward_length", label) or (1,) * n
        return (tuple(k == 0 and f == 0 for k, f in zip(kv_heads, ffn[:n])),
                tuple(k > 0 and f == 0 for k, f in zip(kv_heads, ffn[:n])))
    if arch in INTERVAL_HYBRIDS:
        named = kv.get(p + "attention.recurrent_layers")
        if isinstance(named, tuple):
            if len(named) != n_all:
                raise ModelFileError(f"{label}: {p}attention.recurrent_layers has {len(named)} entries for {n_all} layers")
            return tuple(bool(v) for v in named[:n]), ()
        interval = _int(kv, p + "full_attention_interval", label, most=1 << 16, least=1) or INTERVAL_HYBRIDS[arch]
        return tuple((i + 1) % interval != 0 for i in range(n)), ()
    return (), ()


#: GLM-5.2's indexer layers when its file lists none (GLM_5_2_DEFAULT_INDEXER_TYPES, src/models/glm-dsa.cpp):
#: the first two, then every fourth.
def _glm52_indexers(n: int) -> tuple[bool, ...]:
    return tuple(il < 2 or (il - 2) % 4 == 0 for il in range(n))


def _indexer(arch: str, kv: dict[str, Any], n: int, label: str) -> tuple[int | None, tuple[bool, ...]]:
    """(indexer K values a token, layers with an indexer cache) as the DSA loaders set them:
    ``attention.indexer.key_length``; deepseek32 every trunk layer (create_memory's filter_lid); glm-dsa
    ``attention.indexer.types``, else every layer before GLM-5.2 (trained context < 1048576) and
    GLM-5.2's default pattern after (src/models/glm-dsa.cpp); hy_v4 only with ``indexer.top_k`` > 0
    (src/models/hy-v4.cpp) and dots3note from the types array (src/models/dots3note.cpp)."""
    p = arch + "."
    if arch not in DSA_ARCHS:
        return None, ()
    size = _int(kv, p + "attention.indexer.key_length", label, most=MAX_HEAD)
    if not size or (arch == "hy_v4" and not _int(kv, p + "attention.indexer.top_k", label)):
        return None, ()
    types = kv.get(p + "attention.indexer.types")
    if isinstance(types, tuple):
        layers = tuple(bool(v) for v in types[:n]) + (False,) * max(0, n - len(types))
    elif arch == "deepseek32" or (arch == "glm-dsa" and (_int(kv, p + "context_length", label) or 0) < 1048576):
        layers = (True,) * n
    elif arch == "glm-dsa":
        layers = _glm52_indexers(n)
    else:
        layers = (False,) * n
    return (size, layers) if any(layers) else (None, ())


def _compress_ratios(kv: dict[str, Any], p: str, n_all: int, label: str) -> tuple[int, ...]:
    """DeepSeek-V4's ``attention.compress_ratios``, one a block (src/models/deepseek4.cpp refuses a
    shorter array and any ratio but 0, 4 and 128: so does this)."""
    key = p + "attention.compress_ratios"
    value = kv.get(key)
    if not isinstance(value, tuple) or len(value) < n_all:
        raise ModelFileError(f"{label}: {key} is missing or shorter than block_count ({n_all}): llama.cpp refuses it",
                             hint="convert the model again with llama.cpp's convert_hf_to_gguf.py")
    ratios = tuple(_count(v, key, label) for v in value[:n_all])
    if any(r not in (0, 4, 128) for r in ratios):
        raise ModelFileError(f"{label}: {key} has a ratio other than 0, 4 and 128: llama.cpp refuses it",
                             hint="convert the model again with llama.cpp's convert_hf_to_gguf.py")
    return ratios


def _hyper(h: GgufHeader, arch: str, label: str) -> Hyper:
    kv = h.kv
    p = f"{arch}."
    n_all = _int(kv, p + "block_count", label, most=100_000)
    if n_all is None:
        raise ModelFileError(f"{label}: no {p}block_count in the header", hint="is this a language model?")
    # block_count includes the multi-token-prediction blocks after the trunk (DeepSeek V3, GLM-4.5,
    # Qwen3-Next): llama.cpp neither loads their weights (TENSOR_SKIP unless MTP decoding is asked
    # for) nor caches them (create_memory's filter il < n_layer()), so Hyper counts the trunk only.
    nextn = _int(kv, p + "nextn_predict_layers", label, most=n_all) or 0  # (20 digits: this field's error)
    n = n_all - nextn
    heads = _per_layer(kv.get(p + "attention.head_count"), n_all, p + "attention.head_count", label) or (0,) * n_all
    kv_heads = (_per_layer(kv.get(p + "attention.head_count_kv"), n_all, p + "attention.head_count_kv", label)
                or heads)
    hidden = _int(kv, p + "embedding_length", label, most=1 << 24)
    # llama_model_base::load_hparams: the head size defaults to n_embd / n_head(0), layer 0's count
    per_head = hidden // heads[0] if hidden and heads and heads[0] else 0
    key_length = _int(kv, p + "attention.key_length", label, most=MAX_HEAD)
    value_length = _int(kv, p + "attention.value_length", label, most=MAX_HEAD)
    key_length = per_head if key_length is None else key_length
    value_length = per_head if value_length is None else value_length
    recurrent, attention = _recurrent(arch, kv, kv_heads[:n], n_all, n, label)
    heads, kv_heads = heads[:n], kv_heads[:n]
    if arch in RECURRENT or arch in INTERVAL_HYBRIDS:
        kv_heads = tuple(0 if r else k for r, k in zip(recurrent, kv_heads)) if recurrent else (0,) * n
    sliding, window, chunked = _sliding(arch, kv, n_all, n, label)
    sliding = sliding[:n]
    # llama.cpp caches the MLA latent row (K only) only when the file carries the per-head sizes under
    # attention.key_length_mla / value_length_mla (src/llama-hparams.cpp, llama_hparams::is_mla; the
    # deepseek2 loader reads them as optional keys). Older DeepSeek conversions state kv_lora_rank but
    # not those: llama.cpp then runs them as plain multi-head attention and caches full K and V for
    # every KV head (src/models/deepseek2.cpp, the !is_mla branch), 10-70x the latent row.
    mla = kv.get(p + "attention.key_length_mla") is not None and kv.get(p + "attention.value_length_mla") is not None
    kv_lora = _int(kv, p + "attention.kv_lora_rank", label, most=MAX_HEAD) if mla else None
    state = {name: value for name, (least, most) in STATE_KEYS.items()
             if (value := _int(kv, p + name, label, most=most, least=least)) is not None}
    # Hyper.ssm keeps the Mamba numbers under their short names (conv_kernel, inner_size...) and the
    # other recurrent kinds' under the names the file stores them (wkv.head_size, shortconv.l_cache)
    ssm = {k[4:] if k.startswith("ssm.") else k: v for k, v in state.items()}
    # Gemma-3n reuses the KV of layer 18/19 from layer 20 on (hard-coded n_layer_kv_from_start = 20,
    # src/models/gemma3n.cpp); Gemma-4 from n_layer - shared_kv_layers (src/models/gemma4.cpp)
    kv_layers = None
    if arch == "gemma3n":
        kv_layers = min(20, n)
    elif arch == "gemma4":
        kv_layers = n_all - (_int(kv, p + "attention.shared_kv_layers", label, most=max(0, n_all - 2)) or 0)
    # llama.cpp's n_vocab is the tokenizer's; a file without one still says it in the embedding's
    # outer dimension (token_embd is n_embd x n_vocab, innermost first), which sizes the logits buffer.
    embd = next((t.dims for t in h.tensors if t.name == "token_embd.weight" and len(t.dims) == 2), None)
    vocab = (_int(kv, p + "vocab_size", label) or h.array_lengths.get("tokenizer.ggml.tokens")
             or (embd[1] if embd else None))
    indexer_size, indexer = _indexer(arch, kv, n, label)
    ratios = _compress_ratios(kv, p, n_all, label) if arch in DSV4_ARCHS else ()
    if ratios:  # the lightning indexer's cache rides on the CSA layers (fit/kv_dsv4.py), not DSA's
        indexer_size = _int(kv, p + "attention.indexer.key_length", label, most=MAX_HEAD) or 0
    return Hyper(
        indexer_key_length=indexer_size, indexer=indexer,
        n_layers=n, n_heads=max(heads, default=0), kv_heads=kv_heads, key_length=key_length,
        value_length=value_length, hidden_size=hidden, context_length=_int(kv, p + "context_length", label),
        vocab_size=vocab, sliding_window=window, sliding=sliding,
        kv_lora_rank=kv_lora, rope_head_dim=_int(kv, p + "rope.dimension_count", label, most=MAX_HEAD) if kv_lora else None,
        recurrent=recurrent, ssm=ssm, expert_count=_int(kv, p + "expert_count", label), nextn_layers=nextn,
        key_length_swa=_int(kv, p + "attention.key_length_swa", label, most=MAX_HEAD, least=1) if sliding else None,
        value_length_swa=_int(kv, p + "attention.value_length_swa", label, most=MAX_HEAD, least=1) if sliding else None,
        kv_layers=kv_layers, chunked=chunked and bool(sliding), no_kv=arch in NO_KV, attention=attention,
        state_kind=STATE_KINDS.get(arch, ""), compress_ratios=ratios,
    )


_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def _weights(tensors: list[GgufTensor], n_layers: int, nextn: int = 0) -> Weights:
    """The tensors grouped; blocks past the trunk (``n_layers`` up to ``n_layers + nextn``) are the
    MTP/NextN blocks, which llama.cpp skips when it loads (TENSOR_SKIP, e.g. src/models/deepseek2.cpp:
    ``mtp_flags |= TENSOR_SKIP`` unless MTP decoding asks for them): counted apart, placed nowhere."""
    layers = [0] * n_layers
    embedding = output = other = skipped = 0
    by_type: dict[str, int] = {}
    has_output = False
    for t in tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.nbytes
        m = _BLOCK_RE.match(t.name)
        index = layer_number(m[1], n_layers + nextn) if m else None
        if index is not None and index < n_layers:
            layers[index] += t.nbytes
        elif index is not None and index < n_layers + nextn:
            skipped += t.nbytes
        elif t.name.startswith("token_embd"):
            embedding += t.nbytes
        elif t.name.startswith(("output.", "output_norm.")):
            output += t.nbytes
            has_output = has_output or t.name.startswith("output.weight")
        else:
            other += t.nbytes
    return Weights(layers=tuple(layers), token_embedding=embedding, output=output, other=other,
                   tied_embeddings=not has_output and embedding > 0, by_type=by_type, nextn=skipped,
                   tensors=tuple((t.name, t.nbytes) for t in tensors))


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
    why = refusal(arch)
    if why:
        raise ModelFileError(f"{label}: gpulaunch does not size llama.cpp's {arch!r} models: {why}",
                             hint="give the size instead, e.g. --fit 60GiB")
    hyper = _hyper(first, arch, label)
    weights = _weights([t for h in headers for t in h.tensors], hyper.n_layers, hyper.nextn_layers)
    name = first.kv.get("general.name")
    file_type = first.kv.get("general.file_type")
    return ModelFacts(
        source=source, files=tuple(parts), format="gguf", architecture=printable(arch), hyper=hyper,
        weights=weights, header_bytes=sum(h.bytes_read for h in headers),
        name=printable(name) if isinstance(name, str) else None,
        dtype=FILE_TYPES.get(file_type) if isinstance(file_type, int) else None,
    )
