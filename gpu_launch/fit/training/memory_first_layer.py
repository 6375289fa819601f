"""Where a gradient flows in a LoRA model's first decoder layer without gradient checkpointing. Arithmetic only:
no torch.

The layer's input, the frozen embedding's output, needs no gradient, and autograd makes a node, with what it saves,
only where an input requires grad (torch/csrc/autograd/generated, from tools/autograd/derivatives.yaml), so nothing
of the layer above its first adapter saves anything (memory_activations.py), nor keeps a weight's 16-bit cast
under autocast (memory_activations._weight_casts). Under checkpointing the Trainer's enable_input_require_grads
gives the embedding's output a gradient: every layer then saves what the others do.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.fit.training.memory_params import Linear

__all__ = ["first_grads", "input_grad"]


def first_grads(targets: tuple[Linear, ...]) -> dict[str, bool]:
    """Which tensors of a LoRA model's first layer need a gradient, without checkpointing: the layer's input
    (the frozen embedding's output) needs none, so a tensor needs one only below an adapter (autograd's
    requires_grad: any input's), in the order the layer runs (modeling_llama.py LlamaDecoderLayer.forward):
    q and k (their own adapters'), the attention's output (any adapter in q/k/v), the residual after it and
    the MLP's norm (one in the attention, o_proj's too), gate's and up's outputs (one in gate/up or above),
    down_proj's input (either). Seen tensor by tensor in the first layer's saved tensors (Llama, MLP-, gate +
    down-, down_proj- and o_proj-only)."""
    names = {x.name.rsplit(".", 1)[-1] for x in targets}
    q, k = bool(names & {"q_proj", "qkv_proj"}), bool(names & {"k_proj", "qkv_proj"})
    attention = q or k or bool(names & {"v_proj"})
    residual = attention or "o_proj" in names
    gate = residual or bool(names & {"gate_proj", "gate_up_proj", "w1"})
    up = residual or bool(names & {"up_proj", "gate_up_proj", "w3"})
    return {"q": q, "k": k, "attention": attention, "residual": residual, "gate": gate, "up": up,
            "down": gate or up}


def input_grad(name: str, grads: Mapping[str, bool]) -> bool:
    """Whether the input of the first layer's linear ``name`` needs a gradient (:func:`first_grads`)."""
    short = name.rsplit(".", 1)[-1]
    if short in ("q_proj", "k_proj", "v_proj", "qkv_proj"):
        return False
    if short == "o_proj":
        return grads["attention"]
    return grads["down"] if short in ("down_proj", "w2") else grads["residual"]
