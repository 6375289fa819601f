"""What autograd saves in the forward of a decoder (per token and layer, as the family's modeling code saves
it), and what the loss holds at the start of backward. Arithmetic only: no torch.

Llama-like blocks (modeling_llama.py LlamaDecoderLayer, and the families built on it: Qwen2/3, Mistral,
Gemma-2/3, Phi-3, the MoEs), with T tokens, h hidden, e the activations' element size:

* each RMSNorm (LlamaRMSNorm.forward) upcasts its input to fp32 and keeps it (pow and mul save it), keeps
  the normalised value back in the input dtype (the weight's mul saves it), and its output is saved by the
  linears it feeds: 4h + 2e·h a norm when e = 2; in fp32 the upcast is the input itself;
* attention (sdpa / flash, no s² term): q and k after RoPE and v (saved by the kernel), its output and an
  fp32 logsumexp a head, the output made contiguous for o_proj (saved by it);
* the gated MLP: gate's output (saved by the activation), the activation's and up's outputs (saved by the
  product), the product (saved by down_proj): 4·e·I.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.fit.training.memory_params import Linear, lora_targets
from gpu_launch.fit.training.setup import TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["layer_activation_bytes", "activation_bytes", "loss_bytes", "checkpoint_bytes"]


def _norm(h: int, e: int) -> int:
    """One RMSNorm's saved tensors (upcast input, normalised value, output) for one token."""
    if e == 4:
        return 4 * h + 4 * h + 4 * h
    return 4 * h + e * h + e * h


def layer_activation_bytes(facts: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup,
                           block: tuple[Linear, ...], e: int) -> int:
    """Bytes one decoder layer saves a token."""
    hy = facts.hyper
    h = hy.hidden_size or hy.n_heads * hy.key_length
    d = hy.key_length
    heads, kv = hy.n_heads, (hy.kv_heads[0] if hy.kv_heads else hy.n_heads)
    inter = next((x.fan_out for x in block if x.name in ("gate_proj", "w1", "shared_expert.gate_proj")), 4 * h)
    if any(x.name == "gate_up_proj" for x in block):
        inter = next(x.fan_out for x in block if x.name == "gate_up_proj") // 2
    attn = e * (heads * d + 2 * kv * d) + e * heads * d + 4 * heads + e * heads * d
    mlp = 4 * e * inter
    total = 2 * _norm(h, e) + attn + mlp
    if setup.method != "full":
        total += _lora_bytes(setup, block, e)
    return total


def _lora_bytes(setup: TrainingSetup, block: tuple[Linear, ...], e: int) -> int:
    """A LoRA adapter (peft/tuners/lora/layer.py Linear.forward): ``lora_B(lora_A(dropout(x)))`` on x cast to
    the adapter's fp32 (peft keeps adapters in fp32: autocast_adapter_dtype), so lora_A saves an fp32 copy of
    its input (4·fan_in, none when x is fp32 already and dropout is 0), lora_B saves A's output (4r)."""
    r = setup.lora_r or 8
    total = 0
    for x in lora_targets(setup, block):
        total += (4 * x.fan_in if e != 4 else 0) + 4 * r
    return total


def checkpoint_bytes(facts: ModelFacts, e: int) -> int:
    """Gradient checkpointing keeps each layer's input (torch/utils/checkpoint.py): e·h a token a layer."""
    hy = facts.hyper
    return e * (hy.hidden_size or 0) * hy.n_layers


def activation_bytes(facts: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup,
                     block: tuple[Linear, ...], e: int) -> tuple[int, int]:
    """(all layers' saved activations, one layer's) for the whole micro-batch, plus the final norm."""
    tokens = setup.micro_batch * setup.seq_len
    h = facts.hyper.hidden_size or 0
    layer = layer_activation_bytes(facts, config, setup, block, e) * tokens
    final = _norm(h, e) * tokens
    if setup.gradient_checkpointing:
        return checkpoint_bytes(facts, e) * tokens + final, layer
    return layer * facts.hyper.n_layers + final, layer


def loss_bytes(facts: ModelFacts, setup: TrainingSetup, e: int) -> int:
    """The loss at its peak, in backward. transformers' ForCausalLMLoss (loss/loss_utils.py) upcasts the logits
    to fp32 and cross_entropy keeps log_softmax's fp32 output; its backward allocates the gradient of that
    output and of the logits, both fp32: 12 bytes a token and vocabulary entry. A chunked/fused loss never
    holds the logits whole: one chunk's worth."""
    tokens = setup.micro_batch * setup.seq_len
    vocab = facts.hyper.vocab_size or 0
    if setup.loss != "plain":
        return 12 * min(tokens, 1024) * vocab
    return 12 * tokens * vocab
