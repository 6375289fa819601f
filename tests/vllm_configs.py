"""Published config.json numbers of the models whose vLLM sizing tests/test_fit_kv_vllm.py and
benchmarks/vllm_sizing.py check (Hugging Face model cards; layer positions where a card does not
state them follow the family's pattern). Plain data: no test dependency."""

MISTRAL_7B_V01 = {"model_type": "mistral", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                  "hidden_size": 4096, "sliding_window": 4096, "max_position_embeddings": 32768}
GPT_OSS_20B = {"model_type": "gpt_oss", "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
               "head_dim": 64, "hidden_size": 2880, "sliding_window": 128,
               "layer_types": ["sliding_attention", "full_attention"] * 12}
JAMBA_MINI = {"model_type": "jamba", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "hidden_size": 4096, "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16,
              "mamba_d_conv": 4, "mamba_expand": 2}
GRANITE_4_H_SMALL = {"model_type": "granitemoehybrid", "num_hidden_layers": 40, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "hidden_size": 4096, "mamba_n_heads": 128, "mamba_d_head": 64,
                     "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2,
                     "layer_types": ["attention" if il % 10 == 5 else "mamba" for il in range(40)]}
QWEN3_NEXT = {"model_type": "qwen3_next", "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
              "head_dim": 256, "hidden_size": 2048, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128}
FALCON_H1_7B = {"model_type": "falcon_h1", "num_hidden_layers": 44, "num_attention_heads": 12, "num_key_value_heads": 2,
                "head_dim": 128, "hidden_size": 3072, "mamba_d_ssm": 3072, "mamba_n_heads": 24, "mamba_d_head": 128,
                "mamba_d_state": 256, "mamba_n_groups": 1, "mamba_d_conv": 4}
LLAMA4_SCOUT = {"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_size": 5120, "attention_chunk_size": 8192}}
MAMBA_2_8B = {"model_type": "mamba", "num_hidden_layers": 64, "hidden_size": 2560, "intermediate_size": 5120,
              "state_size": 16, "conv_kernel": 4}
BERT = {"model_type": "bert", "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768}
GEMMA_3_27B = {"model_type": "gemma3_text", "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
               "head_dim": 128, "hidden_size": 5376, "sliding_window": 1024, "sliding_window_pattern": 6}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
               "hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
               "q_lora_rank": 1536, "vocab_size": 129280, "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3}
#: google/gemma-2-9b's config.json (torch_dtype float32; the sliding window on every other layer)
GEMMA_2_9B = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "num_hidden_layers": 42,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "hidden_size": 3584,
              "intermediate_size": 14336, "sliding_window": 4096, "max_position_embeddings": 8192,
              "vocab_size": 256000, "torch_dtype": "float32"}
#: state-spaces/mamba-2.8b-hf's config.json (torch_dtype float32)
MAMBA_2_8B_HF = {**MAMBA_2_8B, "torch_dtype": "float32", "architectures": ["MambaForCausalLM"]}
