"""A model as plain data: what its files' headers say, never its weights.

This is the contract between the readers (``modelfile/``: GGUF, safetensors + config.json, MLC-LLM,
the Hugging Face cache) and the sizing rules (``fit/``: KV cache per family, layout per engine). The
readers fill it from headers only; the rules never look at a file. Byte counts of weights are exact
(tensor type sizes, safetensors data offsets); the hyperparameters are the ones the engines size
their caches with (the real ``head_dim``, per-layer KV head counts, sliding layers, MLA ranks).
"""

from __future__ import annotations

from gpu_launch.errors import ModelFileError
from gpu_launch.base.records import dataclass, field
from gpu_launch.base.text import printable

__all__ = ["Hyper", "Weights", "ModelFacts", "checked", "layer_number"]


@dataclass(frozen=True)
class Hyper:
    """What sizes the KV cache and constrains the split, per layer where models differ by layer.

    ``kv_heads[i] == 0`` marks a layer with no per-token KV cache (a recurrent/SSM layer in Mamba,
    Jamba, Qwen3-Next, LFM2...); ``recurrent[i]`` marks a layer that holds a per-sequence state instead.
    ``sliding[i]`` marks a sliding-window layer (Gemma 2/3, gpt-oss, Cohere2); empty means none.
    ``key_length``/``value_length`` are per head, as the file states them (GGUF
    ``attention.key_length``, config.json ``head_dim``), else hidden / heads.
    ``ssm`` holds the recurrent block's numbers under GGUF's names without the architecture prefix
    (``conv_kernel``, ``inner_size``, ``state_size``, ``group_count``, ``time_step_rank``) or, for
    other recurrent kinds, the file's own names; the rules in ``fit/`` say which they read.
    """

    n_layers: int
    n_heads: int
    kv_heads: tuple[int, ...]
    key_length: int
    value_length: int
    hidden_size: int | None = None
    context_length: int | None = None  # the trained maximum (GGUF context_length, max_position_embeddings)
    vocab_size: int | None = None
    sliding_window: int | None = None
    sliding: tuple[bool, ...] = ()
    kv_lora_rank: int | None = None  # MLA (DeepSeek V2/V3): the compressed KV row is kv_lora_rank + rope_head_dim
    rope_head_dim: int | None = None
    recurrent: tuple[bool, ...] = ()
    ssm: dict[str, int] = field(default_factory=dict)
    expert_count: int | None = None
    nextn_layers: int = 0
    # Added for the engines' finer rules (fit/kv_llama.py, fit/kv_vllm.py); every one defaults to "as before".
    key_length_swa: int | None = None  # the sliding layers' head sizes where they differ (Gemma-4: key_length_swa)
    value_length_swa: int | None = None
    kv_layers: int | None = None  # layers from this index on reuse an earlier layer's KV (Gemma-3n, Gemma-4)
    chunked: bool = False  # the ``sliding`` layers are chunked attention (Llama 4: window = chunk size)
    no_kv: bool = False  # an encoder / embedding model: no KV cache at all
    attention: tuple[bool, ...] = ()  # layer held by the attention cache (empty: every non-recurrent layer)
    state_kind: str = ""  # the recurrent block: mamba, mamba2, gdn, rwkv, shortconv, kda, lightning
    state_dtype_bytes: int | None = None  # vLLM: the recurrent state's element size where the model fixes it
    dtype_bytes: int = 2  # the activations' element size (vLLM's "auto" KV and state types: bf16/f16)
    indexer_key_length: int | None = None  # DSA (DeepSeek-V3.2, GLM-5): the indexer's K values a token
    indexer: tuple[bool, ...] = ()  # layer with a DSA indexer cache (empty: none)
    compress_ratios: tuple[int, ...] = ()  # DeepSeek-V4 (llama_kv_cache_dsv4): each block's ratio, 0/4/128, NextN too

    def key_len(self, il: int) -> int:
        """Layer ``il``'s key head size (the sliding layers' own where the file states one)."""
        return self.key_length_swa if self.key_length_swa is not None and self.is_sliding(il) else self.key_length

    def value_len(self, il: int) -> int:
        return self.value_length_swa if self.value_length_swa is not None and self.is_sliding(il) else self.value_length

    def is_sliding(self, il: int) -> bool:
        return il < len(self.sliding) and self.sliding[il] and bool(self.sliding_window)

    def is_recurrent(self, il: int) -> bool:
        if self.recurrent:
            return il < len(self.recurrent) and self.recurrent[il]
        return il < len(self.kv_heads) and self.kv_heads[il] == 0 and bool(self.ssm)

    def has_attention(self, il: int) -> bool:
        """Whether the attention KV cache holds layer ``il`` (a recurrent layer only where both run)."""
        if self.no_kv or (self.kv_layers is not None and il >= self.kv_layers):
            return False
        if self.attention:
            return il < len(self.attention) and self.attention[il]
        return not self.is_recurrent(il)


@dataclass(frozen=True)
class Weights:
    """Exact bytes of the weights, grouped the way engines place them.

    ``layers[i]``: every tensor of block i (GGUF ``blk.i.*``, Transformers ``model.layers.i.*``).
    ``token_embedding``: the input embedding (llama.cpp keeps it on the host).
    ``output``: the output norm and the output (lm_head) weight; when the embedding is tied the output
    weight is absent from the file and ``tied_embeddings`` is True (llama.cpp then duplicates the
    embedding onto the device holding the output unit: the rules in ``fit/`` add it there).
    ``other``: everything else (vision towers, rope tables...), counted, placed with the output.
    ``nextn``: the multi-token-prediction blocks past the trunk, which llama.cpp (TENSOR_SKIP) and vLLM
    (its loaders skip the speculative layers) leave on disk: reported, never placed.
    ``by_type``: bytes per tensor type as the file names it ("Q4_K", "F16", "BF16", "F8_E4M3"...).
    """

    layers: tuple[int, ...]
    token_embedding: int
    output: int
    other: int = 0
    tied_embeddings: bool = False
    by_type: dict[str, int] = field(default_factory=dict)
    nextn: int = 0  # the MTP/NextN blocks: in the file, loaded by neither engine unless MTP decoding asks; not in total
    tensors: tuple[tuple[str, int], ...] = ()  # GGUF: every tensor's name and bytes (what -ot's patterns match)

    @property
    def total(self) -> int:
        return sum(self.layers) + self.token_embedding + self.output + self.other


@dataclass(frozen=True)
class ModelFacts:
    """One model as its headers describe it.

    ``source`` is what the user named (a path or a Hugging Face id); ``files`` the files read.
    ``format`` is "gguf", "safetensors" or "mlc". ``architecture`` is GGUF's ``general.architecture``
    spelling ("llama", "gemma3", "deepseek2", "qwen3next", "mamba", "gpt-oss"...), config.json's
    ``model_type`` mapped onto it where the two differ. ``header_bytes`` is how many bytes were read
    from disk in all (a test holds it to the headers' size).
    """

    source: str
    files: tuple[str, ...]
    format: str
    architecture: str
    hyper: Hyper
    weights: Weights
    header_bytes: int
    name: str | None = None
    dtype: str | None = None  # the weights' main type ("Q4_K_M" file type, "bfloat16"...)


def layer_number(digits: str, n_layers: int) -> int:
    """The layer a tensor name's number stands for; ``n_layers`` (past the model's layers) for one of
    more than 9 digits, which no model has: a crafted name's 5000 digits are never converted (Python
    refuses to). Here, not in grouping.py, so that a GGUF's reader does not compile grouping's patterns."""
    return int(digits) if len(digits) <= 9 else n_layers


def checked(facts: ModelFacts) -> ModelFacts:
    """``facts`` when its numbers can size a KV cache; else one ModelFileError line.

    Each reader checks every number where it reads it (not a count, negative, NaN, too large); this
    checks what only the numbers together say, whatever the format: a model has layers, and a layer
    with a KV cache has a head size (0 would make a 0 MiB cache, silently: a head size stated as 0,
    or more heads than the embedding is wide).
    """
    h = facts.hyper
    label = f"model {printable(facts.source)}"
    if h.n_layers < 1:
        raise ModelFileError(f"{label}: it has no layers (a layer count of 0)", hint="is this a language model?")
    if any(h.kv_heads) and not h.kv_lora_rank and (h.key_length < 1 or h.value_length < 1):
        raise ModelFileError(f"{label}: its attention layers have a head size of 0 (key length {h.key_length}, "
                             f"value length {h.value_length}, {max(h.kv_heads)} KV heads, embedding "
                             f"{h.hidden_size}, {h.n_heads} heads)",
                             hint="the file states a head size of 0 or more heads than its embedding is wide: "
                                  "it is damaged or was converted wrongly")
    return facts
