"""The architectures llama.cpp loads, spelled as llama.cpp spells them, and how gpulaunch sizes each.

``LLAMA_CPP_ARCHS`` is the name column of ``LLM_ARCH_NAMES`` in src/llama-arch.cpp of llama.cpp
0c1e570 (the copy vendored in llama-cpp-python 0.3.36, the llama.cpp benchmarks/llama_cpp_sizing.py
builds), without its ``(unknown)`` entry: data read from that source once, kept here so that a test
(tests/test_engine_archs.py) can check every table of gpulaunch's llama.cpp rules uses the engine's
own spellings (``granite_swa``, ``spark2_5``: a rule under another spelling never applies) and that
every name is sized by a stated rule or refused with a reason. Where the vendored source is at hand
the test also compares this list with it.

How each is sized follows ``llama_model::create_memory`` (src/llama-model.cpp of the same commit).
"""

from __future__ import annotations

__all__ = ["LLAMA_CPP_COMMIT", "LLAMA_CPP_ARCHS", "PLAIN_ATTENTION", "DSA_ARCHS", "DSV4_ARCHS", "UPPER_BOUND", "REFUSED", "refusal"]

LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

LLAMA_CPP_ARCHS: tuple[str, ...] = (
    "clip", "llama", "llama4", "deci", "falcon", "grok", "gpt2", "gptj", "gptneox", "mpt", "baichuan",
    "starcoder", "refact", "bert", "modern-bert", "nomic-bert", "nomic-bert-moe", "neo-bert", "jina-bert-v2",
    "jina-bert-v3", "eurobert", "bloom", "stablelm", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3",
    "qwen3moe", "qwen3next", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen4exp", "phi2", "phi3",
    "phimoe", "plamo", "plamo2", "plamo3", "codeshell", "orion", "internlm2", "minicpm", "minicpm3", "gemma",
    "gemma2", "gemma3", "gemma3n", "gemma4", "gemma4-assistant", "gemma-embedding", "starcoder2", "mamba",
    "mamba2", "maple", "jamba", "falcon-h1", "xverse", "command-r", "cohere2", "cohere2moe", "dbrx", "olmo",
    "olmo2", "olmoe", "muse-glimmer", "openelm", "arctic", "deepseek", "deepseek2", "deepseek2-ocr",
    "deepseek32", "deepseek4", "chatglm", "glm4", "glm4moe", "glm-dsa", "bitnet", "t5", "t5encoder", "jais",
    "jais2", "nemotron", "nemotron_h", "nemotron_h_moe", "exaone", "exaone4", "exaone-moe", "rwkv6",
    "rwkv6qwen2", "rwkv7", "arwkv7", "granite", "granitemoe", "granitehybrid", "graniteswitch", "granite_swa",
    "chameleon", "wavtokenizer-dec", "plm", "bailingmoe", "bailingmoe2", "bailingmoe3", "dots1", "dots3note",
    "arcee", "afmoe", "laguna", "ernie4_5", "ernie4_5-moe", "hunyuan-moe", "hunyuan-dense", "hunyuan_vl",
    "hy_v3", "hy_v4", "smollm3", "gpt-oss", "lfm2", "lfm2moe", "dream", "smallthinker", "llada", "llada-moe",
    "seed_oss", "grovemoe", "apertus", "minimax-01", "hrm_text", "minimax-m2", "minimax-m3", "cogvlm", "rnd1",
    "pangu-embedded", "mistral3", "eagle3", "dflash", "mistral4", "paddleocr", "mimo2", "step35", "spark2_5",
    "llama-embed", "maincoder", "kimi-linear", "kimi-k3", "glm5-next", "talkie", "mellum", "nanbeige",
    "qwen3tts", "pockettts",
)

#: The architectures create_memory gives the plain ``llama_kv_cache`` (its default branch: not
#: recurrent, not hybrid, no sliding rule of their own): K and V per attention layer, as the file states them.
PLAIN_ATTENTION = frozenset((
    "llama", "deci", "falcon", "grok", "gpt2", "gptj", "gptneox", "mpt", "baichuan", "starcoder", "refact",
    "bloom", "stablelm", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe",
    "phi2", "phi3", "phimoe", "plamo", "codeshell", "orion", "internlm2", "minicpm", "minicpm3", "gemma",
    "starcoder2", "xverse", "command-r", "dbrx", "olmo", "olmoe", "openelm", "arctic", "deepseek", "deepseek2",
    "deepseek2-ocr", "chatglm", "glm4", "glm4moe", "bitnet", "t5encoder", "jais", "jais2", "nemotron", "exaone",
    "granite", "granitemoe", "graniteswitch", "chameleon", "plm", "bailingmoe", "bailingmoe2", "dots1", "arcee",
    "ernie4_5", "ernie4_5-moe", "hunyuan-moe", "hunyuan-dense", "hunyuan_vl", "hy_v3", "smollm3", "seed_oss",
    "grovemoe", "apertus", "hrm_text", "minimax-m2", "cogvlm", "pangu-embedded", "mistral3", "mistral4",
    "paddleocr", "llama-embed", "maincoder", "talkie", "nanbeige", "qwen3tts", "pockettts", "exaone4",
))

#: ``llama_kv_cache_dsa`` (src/llama-kv-cache-dsa.cpp) and its sliding form (llama-kv-cache-dsa-iswa.cpp):
#: beside the MLA latent, a second K-only cache of ``attention.indexer.key_length`` values a token on each
#: layer with an indexer (deepseek32: every trunk layer; glm-dsa, hy_v4, dots3note: ``attention.indexer.types``).
DSA_ARCHS = frozenset(("deepseek32", "glm-dsa", "hy_v4", "dots3note"))

#: ``llama_kv_cache_dsv4`` (src/llama-kv-cache-dsv4.cpp; DeepSeek-V4): K only, a raw cache over the
#: sliding window, compressed caches at 1/4 (CSA, with a lightning-indexer cache) and 1/128 (HCA) of the
#: context by ``attention.compress_ratios``, and small f32 compressor states (fit/kv_dsv4.py).
DSV4_ARCHS = frozenset(("deepseek4",))

#: Sized by a bound above llama.cpp's own cache, not by its rule (none today: DeepSeek-V4, which
#: gpulaunch sized by the full context on every layer, 1.3-18x llama.cpp's figure, has its rule now).
UPPER_BOUND: dict[str, str] = {}

#: Architectures llama.cpp loads whose memory gpulaunch does not model: a plan would be a guess, so the
#: model is refused with the reason (exit 7) rather than sized.
REFUSED: dict[str, str] = {
    "clip": "a vision/audio projector (mmproj) file, loaded beside a language model, not a model of its own",
    "minimax-m3": "llama.cpp keeps MiniMax-M3's sparse attention in its own cache (llama_kv_cache_msa) that "
                  "gpulaunch does not model yet",
    "glm5-next": "llama.cpp keeps GLM5-Next's recurrent KDA layers and its DSA indexer in a hybrid memory "
                 "(llama_memory_hybrid_idx) that gpulaunch does not model yet",
    "qwen4exp": "llama.cpp keeps Qwen4-exp's sparse-attention indexer in a hybrid memory (llama_memory_hybrid_idx) "
                "that gpulaunch does not model yet",
    "dflash": "a speculative-decoding draft model, run beside its target model (-md), not alone",
    "eagle3": "a speculative-decoding draft head (EAGLE-3), run beside its target model, not alone",
    "gemma4-assistant": "a Gemma-4 drafting head, run beside its target model, not alone",
    "t5": "an encoder-decoder: llama.cpp caches the decoder's layers (decoder_block_count), which gpulaunch "
          "does not model",
}


def refusal(arch: str) -> str | None:
    """Why gpulaunch refuses to size ``arch`` (None: it sizes it)."""
    return REFUSED.get(arch)
