"""Hand-built ModelFacts for the sizing tests (the readers are tested on real files elsewhere)."""

from __future__ import annotations

from gpu_launch.modelfile.facts import Hyper, ModelFacts, Weights

GiB = 1 << 30
MiB = 1 << 20


def llama_like(layers: int = 32, layer_bytes: int = 200 * MiB, embedding: int = 500 * MiB, output: int = 500 * MiB,
               heads: int = 32, kv_heads: int = 8, head_dim: int = 128, vocab: int = 128256,
               arch: str = "llama", fmt: str = "gguf", tied: bool = False) -> ModelFacts:
    hyper = Hyper(n_layers=layers, n_heads=heads, kv_heads=(kv_heads,) * layers, key_length=head_dim,
                  value_length=head_dim, hidden_size=heads * head_dim, context_length=131072, vocab_size=vocab)
    weights = Weights(layers=(layer_bytes,) * layers, token_embedding=embedding, output=0 if tied else output,
                      tied_embeddings=tied, by_type={"Q4_K": layer_bytes * layers + embedding + output})
    return ModelFacts(source="/models/m.gguf", files=("/models/m.gguf",), format=fmt, architecture=arch,
                      hyper=hyper, weights=weights, header_bytes=4096, name="test-model", dtype="Q4_K_M")


def llama_70b(fmt: str = "safetensors") -> ModelFacts:
    """A Llama-3.1-70B layout in bf16: 80 layers of 1.6 GiB, 64 heads, 8 KV heads."""
    return llama_like(layers=80, layer_bytes=int(1.6 * GiB), embedding=2 * GiB, output=2 * GiB, heads=64,
                      kv_heads=8, fmt=fmt)
