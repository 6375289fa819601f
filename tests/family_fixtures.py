"""Header-only GGUFs of one published model per family whose KV cache llama.cpp sizes its own way.

Each is the metadata llama.cpp's converter (convert_hf_to_gguf.py) writes for that model's
config.json, with no tensors: gpulaunch sizes the cache from the metadata alone, and llama.cpp,
given only the metadata (``llama_model_init_from_user``), creates the tensors its loader asks for
itself, so benchmarks/llama_cpp_sizing.py can put its byte counts beside gpulaunch's. The numbers are
the published configs' (Hugging Face model cards; Transformers' FalconH1 table), or, where a field is
not published, the converter's default; ``tokenizer.ggml.model = "none"`` with ``vocab_size`` gives
llama.cpp a vocabulary of that size without strings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from model_fixtures import Gguf, write_gguf

__all__ = ["FAMILIES", "write_family"]


def _model(arch: str, vocab: int, ctx: int, **keys: Any) -> Gguf:
    kv: dict[str, Any] = {"tokenizer.ggml.model": "none", f"{arch}.vocab_size": vocab, f"{arch}.context_length": ctx}
    for key, value in keys.items():
        kv[f"{arch}.{key.replace('__', '.')}"] = value
    return Gguf(arch, kv, [])


def llama31_8b() -> Gguf:
    return _model("llama", 128256, 131072, block_count=32, embedding_length=4096, feed_forward_length=14336,
                  attention__head_count=32, attention__head_count_kv=8, rope__dimension_count=128,
                  attention__layer_norm_rms_epsilon=1e-5)


def gemma3_4b() -> Gguf:
    # google/gemma-3-4b-it text_config: 34 layers, 8 heads, 4 KV heads of 256, window 1024 (every 6th global)
    return _model("gemma3", 262208, 131072, block_count=34, embedding_length=2560, feed_forward_length=10240,
                  attention__head_count=8, attention__head_count_kv=4, attention__key_length=256,
                  attention__value_length=256, attention__sliding_window=1024, attention__layer_norm_rms_epsilon=1e-6)


def gpt_oss_20b() -> Gguf:
    return _model("gpt-oss", 201088, 131072, block_count=24, embedding_length=2880, feed_forward_length=2880,
                  expert_feed_forward_length=2880, attention__head_count=64, attention__head_count_kv=8,
                  attention__key_length=64, attention__value_length=64, attention__sliding_window=128,
                  expert_count=32, expert_used_count=4, attention__layer_norm_rms_epsilon=1e-5)


def deepseek_v2_lite() -> Gguf:
    # deepseek-ai/DeepSeek-V2-Lite: 27 layers, 16 heads, kv_lora_rank 512, rope 64, nope 128, v 128
    return _model("deepseek2", 102400, 163840, block_count=27, embedding_length=2048, feed_forward_length=10944,
                  attention__head_count=16, attention__head_count_kv=1, attention__key_length=576,
                  attention__value_length=512, attention__key_length_mla=192, attention__value_length_mla=128,
                  attention__kv_lora_rank=512, rope__dimension_count=64, expert_count=64, expert_used_count=6,
                  expert_shared_count=2, expert_feed_forward_length=1408, leading_dense_block_count=1,
                  expert_weights_scale=1.0, attention__layer_norm_rms_epsilon=1e-6)


def falcon_h1_0_5b() -> Gguf:
    # tiiuae/Falcon-H1-0.5B: 36 layers of attention (8 heads, 2 KV of 64) beside Mamba-2 (24 heads of
    # 64: d_ssm 1536, d_state 128, 1 group, conv 4)
    return _model("falcon-h1", 32784, 16384, block_count=36, embedding_length=1024, feed_forward_length=2048,
                  attention__head_count=8, attention__head_count_kv=2, attention__key_length=64,
                  attention__value_length=64, ssm__conv_kernel=4, ssm__inner_size=1536, ssm__state_size=128,
                  ssm__time_step_rank=24, ssm__group_count=1, attention__layer_norm_rms_epsilon=1e-5)


def falcon_h1_7b() -> Gguf:
    return _model("falcon-h1", 130049, 262144, block_count=44, embedding_length=3072, feed_forward_length=12288,
                  attention__head_count=12, attention__head_count_kv=2, attention__key_length=128,
                  attention__value_length=128, ssm__conv_kernel=4, ssm__inner_size=3072, ssm__state_size=256,
                  ssm__time_step_rank=24, ssm__group_count=1, attention__layer_norm_rms_epsilon=1e-5)


def rwkv6_1b6() -> Gguf:
    # RWKV/v6-Finch-1B6-HF: 24 layers of 2048, head size 64
    return _model("rwkv6", 65536, 1048576, block_count=24, embedding_length=2048, feed_forward_length=7168,
                  attention__head_count=0, wkv__head_size=64, time_mix_extra_dim=32, time_decay_extra_dim=64,
                  rescale_every_n_layers=6, attention__layer_norm_epsilon=1e-5)


def rwkv7_1b5() -> Gguf:
    # RWKV7-Goose-World3-1.5B: 24 layers of 2048, head size 64
    return _model("rwkv7", 65536, 1048576, block_count=24, embedding_length=2048, feed_forward_length=8192,
                  attention__head_count=0, wkv__head_size=64, attention__decay_lora_rank=96,
                  attention__iclr_lora_rank=64, attention__value_residual_mix_lora_rank=64,
                  attention__gate_lora_rank=256, attention__layer_norm_epsilon=1e-5)


def lfm2_1b2() -> Gguf:
    # LiquidAI/LFM2-1.2B: 16 layers, attention at 2, 5, 8, 10, 12, 14 (8 KV heads), short convolutions
    # (conv_L_cache 3) elsewhere
    kv = [8 if il in (2, 5, 8, 10, 12, 14) else 0 for il in range(16)]
    return _model("lfm2", 65536, 128000, block_count=16, embedding_length=2048, feed_forward_length=8192,
                  attention__head_count=32, attention__head_count_kv=kv, shortconv__l_cache=3,
                  attention__layer_norm_rms_epsilon=1e-5)


def kimi_linear() -> Gguf:
    # moonshotai/Kimi-Linear-48B-A3B: 27 layers, MLA at 4, 8, ..., 24, 27 (1-based), KDA (32 heads of
    # 128, conv 4) elsewhere
    kv = [1 if il + 1 in (4, 8, 12, 16, 20, 24, 27) else 0 for il in range(27)]
    return _model("kimi-linear", 163840, 1048576, block_count=27, embedding_length=2304, feed_forward_length=9216,
                  attention__head_count=32, attention__head_count_kv=kv, attention__key_length=576,
                  attention__value_length=512, attention__key_length_mla=192, attention__value_length_mla=128,
                  attention__kv_lora_rank=512, rope__dimension_count=64, ssm__conv_kernel=4, kda__head_dim=128,
                  expert_count=256, expert_used_count=8, expert_feed_forward_length=1024, expert_shared_count=1,
                  leading_dense_block_count=1, expert_weights_scale=2.446, expert_gating_func=2,
                  attention__layer_norm_rms_epsilon=1e-5)


def nemotron_nas() -> Gguf:
    # the per-layer layout of nvidia/Llama-3_3-Nemotron-Super-49B-v1 (deci): 80 layers of 8192, 64 heads;
    # most layers 8 KV heads, some fewer, some with no attention at all (block_configs: no_op)
    kv = [0 if il in range(42, 80, 3) else 4 if il % 7 == 6 else 8 for il in range(80)]
    return _model("deci", 128256, 131072, block_count=80, embedding_length=8192,
                  feed_forward_length=[28672] * 80, attention__head_count=[64] * 80, attention__head_count_kv=kv,
                  rope__dimension_count=128, attention__layer_norm_rms_epsilon=1e-5)


def gemma4_e2b() -> Gguf:
    # google/gemma-4-E2B: 35 layers (4 sliding of 256 : 1 full of 512, one KV head), the last 20 reuse KV
    swa = [il % 5 < 4 for il in range(35)]
    return _model("gemma4", 262144, 131072, block_count=35, embedding_length=1536, feed_forward_length=6144,
                  attention__head_count=8, attention__head_count_kv=1, attention__key_length=512,
                  attention__value_length=512, attention__key_length_swa=256, attention__value_length_swa=256,
                  attention__sliding_window=512, attention__sliding_window_pattern=swa,
                  attention__shared_kv_layers=20, embedding_length_per_layer_input=256,
                  attention__layer_norm_rms_epsilon=1e-6, final_logit_softcapping=30.0)


def smallthinker_21b() -> Gguf:
    # PowerInfer/SmallThinker-21BA3B-Instruct: 52 layers, 28 heads, 4 KV of 128, sliding layers
    return _model("smallthinker", 151936, 16384, block_count=52, embedding_length=2560, feed_forward_length=768,
                  expert_feed_forward_length=768, attention__head_count=28, attention__head_count_kv=4,
                  attention__key_length=128, attention__value_length=128, attention__sliding_window=4096,
                  expert_count=64, expert_used_count=6, expert_gating_func=2, attention__layer_norm_rms_epsilon=1e-6)


def afmoe_trinity_mini() -> Gguf:
    # arcee-ai/Trinity-Mini: 32 layers, 32 heads, 4 KV of 128, window 2048 (every 4th layer global)
    return _model("afmoe", 200192, 131072, block_count=32, embedding_length=2048, feed_forward_length=6144,
                  expert_feed_forward_length=1024, attention__head_count=32, attention__head_count_kv=4,
                  attention__key_length=128, attention__value_length=128, attention__sliding_window=2048,
                  expert_count=128, expert_used_count=8, expert_shared_count=1, leading_dense_block_count=2,
                  attention__layer_norm_rms_epsilon=1e-5)


def llama4_scout() -> Gguf:
    # meta-llama/Llama-4-Scout-17B-16E: 48 layers, 40 heads, 8 KV of 128, chunked attention 8192
    return _model("llama4", 202048, 10485760, block_count=48, embedding_length=5120, feed_forward_length=16384,
                  expert_feed_forward_length=8192, attention__head_count=40, attention__head_count_kv=8,
                  rope__dimension_count=128, expert_count=16, expert_used_count=1, interleave_moe_layer_step=1,
                  attention__layer_norm_rms_epsilon=1e-5)


def gemma3n_e4b() -> Gguf:
    # google/gemma-3n-E4B: 35 layers, 8 heads, 2 KV of 256, window 512 (4 sliding : 1 full)
    swa = [il % 5 < 4 for il in range(35)]
    return _model("gemma3n", 262144, 32768, block_count=35, embedding_length=2048, feed_forward_length=[16384] * 35,
                  attention__head_count=8, attention__head_count_kv=2, attention__key_length=256,
                  attention__value_length=256, attention__sliding_window=512, attention__sliding_window_pattern=swa,
                  embedding_length_per_layer_input=256, altup__active_idx=0, altup__num_inputs=4,
                  activation_sparsity_scale=[1.6448] * 10 + [0.0] * 25, attention__layer_norm_rms_epsilon=1e-6)


def embeddinggemma() -> Gguf:
    return _model("gemma-embedding", 262144, 2048, block_count=24, embedding_length=768, feed_forward_length=1152,
                  attention__head_count=3, attention__head_count_kv=1, attention__key_length=256,
                  attention__value_length=256, attention__sliding_window=512, attention__layer_norm_rms_epsilon=1e-6,
                  pooling_type=1)


def bert_base() -> Gguf:
    model = _model("bert", 30522, 512, block_count=12, embedding_length=768, feed_forward_length=3072,
                  attention__head_count=12, attention__layer_norm_epsilon=1e-12, attention__causal=False,
                  pooling_type=2)
    model.kv["tokenizer.ggml.token_type_count"] = 2
    return model


def olmo3_7b() -> Gguf:
    # allenai/Olmo-3-7B: 32 layers, 32 heads (MHA) of 128, window 4096, every 4th layer full
    return _model("olmo2", 100278, 65536, block_count=32, embedding_length=4096, feed_forward_length=11008,
                  attention__head_count=32, attention__head_count_kv=32, attention__sliding_window=4096,
                  attention__layer_norm_rms_epsilon=1e-6)


def exaone4_32b() -> Gguf:
    return _model("exaone4", 102400, 131072, block_count=64, embedding_length=5120, feed_forward_length=27392,
                  attention__head_count=40, attention__head_count_kv=8, attention__key_length=128,
                  attention__value_length=128, attention__sliding_window=4096, attention__layer_norm_rms_epsilon=1e-5)


def command_r7b() -> Gguf:
    return _model("cohere2", 256000, 131072, block_count=32, embedding_length=4096, feed_forward_length=14336,
                  attention__head_count=32, attention__head_count_kv=8, attention__sliding_window=4096,
                  attention__layer_norm_epsilon=1e-5, logit_scale=0.25)


def jamba_mini() -> Gguf:
    kv = [8 if il % 8 == 4 else 0 for il in range(32)]
    return _model("jamba", 65536, 262144, block_count=32, embedding_length=4096, feed_forward_length=14336,
                  attention__head_count=32, attention__head_count_kv=kv, ssm__conv_kernel=4, ssm__inner_size=8192,
                  ssm__state_size=16, ssm__time_step_rank=256, expert_count=16, expert_used_count=2,
                  attention__layer_norm_rms_epsilon=1e-6)


def qwen3_next() -> Gguf:
    return _model("qwen3next", 151936, 262144, block_count=48, embedding_length=2048, feed_forward_length=5120,
                  expert_feed_forward_length=512, expert_shared_feed_forward_length=512,
                  attention__head_count=16, attention__head_count_kv=2, attention__key_length=256,
                  attention__value_length=256, rope__dimension_count=64, ssm__conv_kernel=4, ssm__inner_size=4096,
                  ssm__state_size=128, ssm__time_step_rank=32, ssm__group_count=16, expert_count=512,
                  expert_used_count=10, full_attention_interval=4, attention__layer_norm_rms_epsilon=1e-6)


def mamba_2_8b() -> Gguf:
    return _model("mamba", 50280, 1048576, block_count=64, embedding_length=2560, feed_forward_length=0,
                  attention__head_count=0, ssm__conv_kernel=4, ssm__inner_size=5120, ssm__state_size=16,
                  ssm__time_step_rank=160, attention__layer_norm_rms_epsilon=1e-5)


def phi2() -> Gguf:
    # microsoft/phi-2: 32 layers, 32 heads of 80
    return _model("phi2", 51200, 2048, block_count=32, embedding_length=2560, feed_forward_length=10240,
                  attention__head_count=32, attention__head_count_kv=32, rope__dimension_count=32,
                  attention__layer_norm_epsilon=1e-5)


def cohere2moe() -> Gguf:
    # a Cohere2-MoE layout (49 layers, 16 heads, 4 KV of 128, window 4096): dense-first period 4
    return _model("cohere2moe", 256000, 131072, block_count=49, embedding_length=2048, feed_forward_length=4096,
                  expert_feed_forward_length=512, attention__head_count=16, attention__head_count_kv=4,
                  attention__key_length=128, attention__value_length=128, attention__sliding_window=4096,
                  logit_scale=1.0, leading_dense_block_count=1, expert_count=64, expert_used_count=8,
                  attention__layer_norm_epsilon=1e-5, attention__layer_norm_rms_epsilon=1e-5)


def exaone_moe() -> Gguf:
    # an EXAONE-MoE layout (32 layers, 32 heads, 8 KV of 64, window 128, every 4th layer global)
    return _model("exaone-moe", 102400, 131072, block_count=32, embedding_length=2048, feed_forward_length=8192,
                  expert_feed_forward_length=512, attention__head_count=32, attention__head_count_kv=8,
                  attention__key_length=64, attention__value_length=64, attention__sliding_window=128,
                  expert_count=64, expert_used_count=8, expert_gating_func=2, attention__layer_norm_rms_epsilon=1e-5)


def plamo3_2b() -> Gguf:
    # a PLaMo-3 2B layout (24 layers, 16 heads, 4 KV of 128, window 2048, every 8th layer global)
    return _model("plamo3", 100000, 65536, block_count=24, embedding_length=2048, feed_forward_length=8192,
                  attention__head_count=16, attention__head_count_kv=4, attention__key_length=128,
                  attention__value_length=128, attention__sliding_window=2048, attention__layer_norm_rms_epsilon=1e-6)


def minimax_01() -> Gguf:
    # a MiniMax-Text-01 layout cut to 16 layers: lightning attention (recurrent) except every 8th layer
    return _model("minimax-01", 200064, 1048576, block_count=16, embedding_length=6144, feed_forward_length=9216,
                  expert_feed_forward_length=9216, attention__head_count=64, attention__head_count_kv=8,
                  attention__key_length=128, attention__value_length=128, expert_count=32, expert_used_count=2,
                  residual_scale=1.0, attention__layer_norm_rms_epsilon=1e-5, full_attention_interval=8)


def deepseek_v4_flash() -> Gguf:
    # a DeepSeek-V4-Flash layout (deepseek-ai/DeepSeek-V4-Flash's config as NeMo's DeepseekV4Config states
    # it: 43 layers of 4096, 64 heads, one KV head of 512, window 128, indexer 64 heads of 128, top-k 512;
    # the keys convert_hf_to_gguf.py's DeepseekV4Model writes) with compress_ratios laid out as llama.cpp's
    # own test model lays them (tests/test-llama-archs.cpp: 0, 0, then 4 and 128 in turn). No hash-routed
    # layers (V4-Flash has 3; the cache does not depend on them): given only metadata, llama.cpp creates their
    # ffn_gate_tid2eid table as F32 and its graph asserts an I32 one (ggml_get_rows)
    ratios = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(41)]
    return _model("deepseek4", 129280, 1048576, block_count=43, embedding_length=4096, feed_forward_length=2048,
                  embedding_length_out=16384, attention__head_count=64, attention__head_count_kv=1,
                  attention__key_length=512, attention__value_length=512, rope__dimension_count=64,
                  attention__q_lora_rank=1024, attention__sliding_window=128, expert_count=256,
                  expert_used_count=6, expert_feed_forward_length=2048, expert_shared_count=1,
                  expert_weights_scale=1.5, expert_weights_norm=True, expert_gating_func=4,
                  swiglu_clamp_exp=[10.0] * 43, swiglu_clamp_shexp=[10.0] * 43,
                  attention__indexer__head_count=64, attention__indexer__key_length=128,
                  attention__indexer__top_k=512, attention__output_group_count=8,
                  attention__output_lora_rank=1024, attention__compress_ratios=ratios,
                  attention__compress_rope_freq_base=160000.0, hyper_connection__count=4,
                  hyper_connection__sinkhorn_iterations=20, hyper_connection__epsilon=1e-6, hash_layer_count=0,
                  attention__layer_norm_rms_epsilon=1e-6)


FAMILIES: dict[str, Callable[[], Gguf]] = {
    "llama-3.1-8b": llama31_8b, "gemma-3-4b": gemma3_4b, "gpt-oss-20b": gpt_oss_20b,
    "deepseek-v2-lite": deepseek_v2_lite, "falcon-h1-0.5b": falcon_h1_0_5b, "falcon-h1-7b": falcon_h1_7b,
    "rwkv6-1.6b": rwkv6_1b6, "rwkv7-1.5b": rwkv7_1b5, "lfm2-1.2b": lfm2_1b2, "kimi-linear": kimi_linear,
    "nemotron-nas": nemotron_nas, "gemma-4-e2b": gemma4_e2b, "gemma-3n-e4b": gemma3n_e4b,
    "smallthinker-21b": smallthinker_21b, "afmoe-trinity-mini": afmoe_trinity_mini, "llama-4-scout": llama4_scout,
    "embeddinggemma": embeddinggemma, "bert-base": bert_base, "olmo-3-7b": olmo3_7b, "exaone-4-32b": exaone4_32b,
    "command-r7b": command_r7b, "jamba-mini": jamba_mini, "qwen3-next": qwen3_next, "mamba-2.8b": mamba_2_8b,
    "phi-2": phi2, "cohere2moe": cohere2moe, "exaone-moe": exaone_moe, "plamo3-2b": plamo3_2b,
    "minimax-01": minimax_01, "deepseek-v4-flash": deepseek_v4_flash,
}


def write_family(folder: Path, name: str) -> Path:
    """The header-only GGUF of family ``name`` in ``folder``."""
    path = folder / f"{name}.gguf"
    write_gguf(path, FAMILIES[name]())
    return path
