"""The moments of a step's backward that can hold its peak, each with what is alive then, as autograd frees
and allocates it (torch/csrc/autograd: a node's saved tensors die when it has run; the gradient it gets dies
once it has made its outputs). Arithmetic only: no torch. The largest moment is the backward's peak.

* the loss (``"backward"``, the start of backward): every saved activation and the loss's fp32 tensors; a
  chunked loss holds one chunk's at a time, and where the head trains its gradient is accumulated chunk by
  chunk;
* the final norm's backward (still ``"backward"``): every activation but the loss's (TRL's fused head's saved
  ones among them) and what the norm's last products saved, the head's gradient and the norm's fp32 temporaries;
* the last layer's MLP backward (still ``"backward"``): under checkpointing one layer recomputed, with the
  gradients flowing through it, the product down_proj saved released once its node has run, its gradient made;
* the end of backward (``"end of backward"``): the gradients nearly all there, one layer's activations; on one
  rank also the first layer's MLP backward (every gradient but the embedding's and that layer's); on
  an FSDP rank, where a layer's unsharded gradient is as large as its weights, two moments of the first
  layer's backward instead: its MLP's (the layer's activations, down_proj's gradient) and its input norm's
  (the whole gradient, the norm's fp32 tensors; the rest of the layer's activations gone).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.fit.training import memory_fused
from gpu_launch.fit.training.memory_activations import FOUR_NORMS, Saved
from gpu_launch.fit.training.memory_params import element_bytes
from gpu_launch.fit.training.setup import TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["backward_peak", "NORM_BACKWARD_FP32"]

#: An RMSNorm's backward, in fp32 tensors of the hidden size a token at its fullest (LlamaRMSNorm.forward:
#: ``x.float()``, ``x.pow(2).mean(-1)``, ``x * rsqrt``; torch's derivatives.yaml: pow_backward makes
#: ``grad * 2 * x.pow(1)``, three tensors, while mean_backward's ``grad.expand(...) / h`` and mul's gradient
#: to x (``grad * rsqrt``) are alive): five. Gemma's norm (modeling_gemma2.py Gemma2RMSNorm) is the same
#: chain. Seen tensor by tensor in PyTorch's count (the final norm's backward, bf16 Llama LoRA).
NORM_BACKWARD_FP32 = 5
#: Where every term is whole on the rank (no ZeRO, no FSDP): the moments measured through one process's steps.
_ONE_RANK = ("none", "ddp")


def _moment(weights: int, grads: int, states: int, acts: int, loss: int, other: int) -> dict[str, int]:
    return {"weights": weights, "gradients": grads, "optimizer": states, "activations": acts, "loss": loss,
            "other": other}


def backward_peak(model: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup, act: Saved, *,
                  weights: int, states: int, grads: int, head: int, loss: int, e: int,
                  late_weights: int | None = None, late_grads: int | None = None, late_extra: int = 0,
                  late_unit_grads: tuple[int, int] | None = None, fsdp1: int | None = None,
                  standing_grads: int = 0, reduced_early: int = 0) -> tuple[str, dict[str, int]]:
    """(the moment, its terms) of the backward's peak. ``head`` is the LM head's gradient (0 when it is
    frozen), ``grads`` all gradients, ``loss`` the loss's tensors (loss_bytes), ``e`` the activations'
    element size. A sharded rank (memory_sharding.py) holds other weights and gradients at the end of
    backward (``late_weights``, ``late_grads``), more alive there (``late_extra``: a checkpointed layer's
    inputs) and the layer's unsharded gradient (``late_unit_grads``: in its MLP's backward, in its first
    norm's); ``fsdp1``: FSDP1's, whose units' gradients are there twice at their ends (:func:`_fsdp1_ends`), the
    weights at the last layer's end (SHARD_GRAD_OP: every unit gathered);
    ``standing_grads``: gradient bytes there all step, beside the early moments' (ZeRO-3's partition buffer;
    ``late_grads`` holds them at the end); ``reduced_early``: gradient bytes there from the final norm's backward on
    (ZeRO-2's last rank, once it has reduced the head's: memory_sharding.zero12)."""
    tokens = setup.micro_batch * setup.seq_len
    h = model.hyper.hidden_size or 0
    acts = act.total(setup, model.hyper.n_layers)
    inter = int(config.get("intermediate_size") or 4 * h) if not model.hyper.expert_count else 0
    moments = []
    # --- the loss
    if setup.loss == "plain":
        moments.append(_moment(weights, 0, states, acts, loss, 0))
    elif setup.loss == "fused":
        # TRL's fused head at the return of its backward: every activation, the head's gradient made (when it
        # trains) and what the Function allocated (memory_fused.backward_bytes, in ``loss``)
        moments.append(_moment(weights, head, states, acts, loss, 0))
    else:
        # the gradient of the hidden states, summed chunk by chunk into one tensor of all tokens (the chunks
        # are slices of it: SliceBackward0 writes each chunk's into a zero tensor, the sums are out of place)
        hidden_grad = e * h * tokens
        chunk = min(tokens, setup.loss_chunk_tokens or tokens)
        recast = 0
        if setup.precision.startswith("amp") and setup.method != "full":
            # under autocast on fp32 weights a frozen head's 16-bit cast is made afresh in each chunk's recompute
            # (aten/src/ATen/autocast_mode.cpp cached_cast caches trained leaves only), with the chunk's input
            # cast, both kept by its mm to the end of the chunk's backward; the hidden states are the final
            # norm's fp32 output, so the gradient summed into them is fp32
            hidden_grad = 4 * h * tokens
            recast = 2 * (model.hyper.vocab_size or 0) * h + 2 * chunk * h
        moments.append(_moment(weights, head, states, acts, loss, hidden_grad + recast))
        if head and tokens > chunk:
            # the head is used once a chunk, so autograd sums its gradients before accumulating them
            # (torch/csrc/autograd/input_buffer.cpp accumulate: in place only into a dense gradient it alone
            # holds). Its own linear's gradient comes through a transpose: the sum so far, this chunk's and the
            # new sum, out of place. Under autocast it comes through the weight's cast, in 16 bits and then
            # cast to fp32, summed in place. With the chunk's gradient of its hidden states
            extra = 2 * head if not setup.precision.startswith("amp") else head + head // 2
            moments.append(_moment(weights, head, states, acts, 0, extra + hidden_grad + e * chunk * h))
    # --- the final norm's backward at its fullest: the loss's tensors are gone (TRL's fused head's saved ones too:
    # its hidden states' copy, targets, log_z, entropy and label mask), and so are what the norm's last two
    # products saved and no other node holds: the normalised input the trained weight's product keeps (in fp32
    # under autocast and Gemma's ``1 + weight``) and the rsqrt (LlamaRMSNorm.forward: ``weight * x.to(dtype)``,
    # ``x * torch.rsqrt(...)``; the fp32 input stays, pow's). Seen tensor by tensor in PyTorch's count of
    # GRPOTrainer's and SFTTrainer's steps (bf16, fp32); the head's gradient is there
    early = len(moments)
    done = memory_fused.saved_bytes(setup, h) if setup.loss == "fused" else 0
    gemma = str(config.get("model_type") or model.architecture).startswith("gemma")
    done += tokens * (4 + (h * (4 if gemma or setup.precision.startswith("amp") else e)
                           if setup.method == "full" else 0))
    moments.append(_moment(weights, head, states, acts - done, 0, NORM_BACKWARD_FP32 * 4 * h * tokens))
    # --- the last layer's backward (the final norm's saved tensors are gone): in its MLP the gradient arriving
    # at the layer (e·h a token: the residual branch passes the same tensor on), the gradient of down_proj's
    # input and the product's two (SiLU(gate)·up: MulBackward0 makes both while its input's gradient lives:
    # 3·e·I a token); in its attention the two branches' gradients and eager attention's s² ones
    kept = acts - (act.outside - act.rope) * tokens
    if setup.gradient_checkpointing:
        # the layer recomputed (torch/utils/checkpoint.py, non-reentrant), its first norm's fp32 input the
        # checkpointed input itself where the residual stream is fp32 (_shared_input)
        kept += act.one_layer(setup) - _shared_input(setup, act, e)
    # by MulBackward0 down_proj's node has run and released what it saved, the product (its input, saved for
    # its weight's gradient when it trains): autograd frees a node's saved variables once it has run
    # (torch/csrc/autograd/node.h Node::release_variables, called when the graph is not retained; a LoRA
    # down_proj's adapter has run too, its copies of the product released: Saved.down_saved); a
    # recomputed one is dropped as it is unpacked (torch/utils/checkpoint.py _checkpoint_hook.unpack_hook:
    # ``holder.handles[gid] = None``, its Rule 4). Seen tensor by tensor in MemTracker's count of a checkpointed
    # bf16 Llama at 4,200 tokens: gate's, SiLU's and up's outputs alive there, the product gone
    product = act.down_saved * tokens
    # with down_proj's gradient and the final norm's made (AccumulateGrad as their nodes ran, as in _first_mlp; a
    # full fine-tune on one rank: seen in PyTorch's count of SFTTrainer's fp32 step, 0.988 without them)
    made = element_bytes(setup.precision) * h * (inter + 1) if setup.method == "full" \
        and setup.sharding in _ONE_RANK and not model.hyper.expert_count else 0
    moments.append(_moment(weights, head + made, states, kept - product, 0,
                           e * h * tokens + 3 * e * inter * tokens))
    if act.adapter_grad:
        # or, MulBackward0 run (its saved tensors and down_proj's input's gradient gone), a gate/up adapter's
        # backward: the product's two gradients and the adapter's fp32 output gradients (Saved.adapter_grad)
        moments.append(_moment(weights, head, states, kept - product - 2 * e * inter * tokens, 0,
                               e * h * tokens + 2 * e * inter * tokens + act.adapter_grad * tokens))
    moments.append(_moment(weights, head, states, kept, 0,
                           2 * e * h * tokens + act.squared_backward * tokens * setup.seq_len))
    for m in moments[early:]:
        m["gradients"] += reduced_early
    if act.lora_forward:
        # the last layer's forward at its widest adapter (the copies it makes, memory_activations._lora_forward),
        # every earlier layer's activations kept; under checkpointing the same in its recompute, with the
        # gradient arriving (PyTorch's count of the backward phase holds the forward)
        forward = acts - (act.outside - act.rope) * tokens + act.lora_forward * tokens
        moments.append(_moment(weights, 0, states, forward, 0, 0))
        if setup.gradient_checkpointing:
            moments.append(_moment(weights, head, states, kept, 0, (act.lora_forward + e * h) * tokens))
            if setup.method != "full" and model.hyper.n_layers > 1:
                # or the first layer's recompute, the last in backward: every later layer's adapters have their
                # gradients (AccumulateGrad as each layer's backward ends), their checkpointed inputs are gone
                # (measured: TRL's SFTTrainer, all-linear, a 2-layer model peaks there)
                layers = model.hyper.n_layers
                later = grads * (layers - 1) // layers
                earliest = kept - act.checkpointed_layer * tokens * (layers - 1)
                moments.append(_moment(weights, later, states, earliest, 0, (act.lora_forward + e * h) * tokens))
    four_norms = str(config.get("model_type") or model.architecture) in FOUR_NORMS
    if four_norms:
        # Gemma-2/3's layer ends in a norm (post_feedforward_layernorm): its fp32 backward is the layer's first,
        # with the gradient arriving (modeling_gemma2.py Gemma2DecoderLayer.forward)
        moments.append(_moment(weights, head, states, kept, 0,
                               e * h * tokens + NORM_BACKWARD_FP32 * 4 * h * tokens))
    best = max(moments, key=lambda m: sum(m.values()))
    best["gradients"] += standing_grads
    # --- the end of backward: the gradients nearly all there (the input embedding's, untied, comes last), one
    # layer's activations (recomputed under checkpointing) and the gradients flowing through its MLP
    late_grads_given = late_grads
    if late_grads is None:
        late_grads = grads - (head if not model.weights.tied_embeddings else 0)
    at_late = weights if late_weights is None else late_weights
    if late_unit_grads is None:
        late = _moment(at_late, late_grads, states, act.one_layer(setup), 0,
                       2 * e * h * tokens + e * inter * tokens + late_extra)
    else:
        routed = int(config.get("num_experts_per_tok") or 2) * tokens if model.hyper.expert_count else 0
        late = _fsdp_late(setup, act, h, inter, e, at_late, late_grads, states, late_extra, late_unit_grads,
                          2 * e * h * routed)
        if fsdp1 is not None:
            late = max(late, *_fsdp1_ends(setup, act, h, e, at_late, late_grads, states, late_extra,
                                          late_unit_grads[1], kept - act.one_layer(setup), fsdp1),
                       key=lambda m: sum(m.values()))
    if four_norms:
        # or the first layer's closing norm, its fp32 backward the layer's first (that layer's gradients to come)
        layer_share = max(model.weights.layers, default=0) / max(1, model.weights.total)
        # with what every layer reads (RoPE's tables, the ids, an sdpa layer's sliding-window mask)
        # (an FSDP rank's gradients' shards at that moment are without the layer's already: memory_sharding.py)
        first = _moment(at_late, late_grads - (0 if late_unit_grads else int(grads * layer_share)), states,
                        act.one_layer(setup) + act.rope * tokens, 0,
                        e * h * tokens + NORM_BACKWARD_FP32 * 4 * h * tokens)
        late = max(late, first, key=lambda m: sum(m.values()))
    if late_unit_grads is None and late_grads_given is None and setup.sharding in _ONE_RANK:
        late = max(late, _first_mlp(model, setup, act, h, inter, e, at_late, late_grads, grads, states),
                   key=lambda m: sum(m.values()))
    if sum(late.values()) > sum(best.values()):
        return "end of backward", late
    return "backward", best


def _shared_input(setup: TrainingSetup, act: Saved, e: int) -> int:
    """What a recomputed layer's first norm saves that the checkpoint already holds: where the residual stream
    is fp32 (fp32 weights, autocast) the norm's upcast (LlamaRMSNorm.forward: ``hidden_states.to(float32)``)
    is the layer's input itself, kept by the checkpoint (torch/utils/checkpoint.py saves the inputs; its
    recompute detaches them, sharing their storage), not a copy; so for a full fine-tune and a LoRA model
    alike, in the last layer's backward and in the first layer's MLP at the end of backward. Seen in
    MemTracker's count of TRL's DPOTrainer step (fp32 Llama, checkpointing: the embedding's output the first
    norm's saved input, no other) and of the plain step's first layer (LoRA under autocast, q,v to all-linear:
    one fp32 tensor of 4·h a token for both)."""
    if not setup.gradient_checkpointing or setup.sharding not in _ONE_RANK \
            or (e != 4 and not setup.precision.startswith("amp")):
        return 0
    return act.checkpointed_layer * setup.micro_batch * setup.seq_len


def _first_mlp(model: ModelFacts, setup: TrainingSetup, act: Saved, h: int, inter: int, e: int, weights: int,
               late_grads: int, grads: int, states: int) -> dict[str, int]:
    """The first decoder layer's MLP backward, at MulBackward0 (on one rank; a LoRA model's too): every gradient
    but the embedding's and that layer's, down_proj's among them already (its node has run:
    torch/csrc/autograd/functions/accumulate_grad.h AccumulateGrad stores ``.grad`` as the node runs); the
    layer's activations (recomputed under checkpointing) but the product down_proj saved, released when its
    node ran (torch/csrc/autograd/node.h Node::release_variables; a recomputed one as it is unpacked:
    torch/utils/checkpoint.py _checkpoint_hook.unpack_hook, Rule 4); what every layer reads (RoPE's tables,
    the ids), the checkpointed layer's inputs (its hidden states and masks), kept to the end of its backward
    (torch/utils/checkpoint.py: the checkpoint's inputs); the gradient arriving and three of e·I a token. Seen
    tensor by tensor in MemTracker's count of TRL's DPOTrainer step (bf16 Llama, checkpointing, 2 × 128
    tokens), where it is the peak; for a LoRA model (the plain step's first layer after down_proj's nodes, under
    autocast, checkpointing: 1.006 to 1.009 of PyTorch's count for q,v, o_proj, MLP, down_proj and all-linear;
    the generic end of backward, the checkpoint's input uncounted, 0.93 for q,v and o_proj)."""
    tokens = setup.micro_batch * setup.seq_len
    first = grads * max(model.weights.layers, default=0) // max(1, model.weights.total)
    down = element_bytes(setup.precision) * h * inter
    if setup.method != "full":
        # a LoRA model's gradients are its adapters', as many in every layer (fp32: peft's autocast_adapter_dtype);
        # down_proj's own made where it has one
        first, down = grads // max(1, model.hyper.n_layers), 4 * act.down_adapter
    acts = act.one_layer(setup, first=not setup.gradient_checkpointing) - act.down_saved * tokens + act.rope * tokens
    if setup.gradient_checkpointing:
        # with its other inputs the checkpoint keeps: the 4-D masks every layer is given (an sdpa step's boolean
        # padding mask, masking_utils.py sdpa_mask; eager attention's float one), there to the first layer's end
        # (measured: TRL's GRPOTrainer, checkpointed, its prompts padded: 0.982 of PyTorch's count without them)
        acts += act.checkpointed_layer * tokens - _shared_input(setup, act, e) \
            + act.masks * setup.micro_batch * setup.seq_len ** 2
    mlp = _moment(weights, max(0, late_grads - first) + down, states, acts, 0, e * h * tokens + 3 * e * inter * tokens)
    if not act.adapter_grad:
        return mlp
    # or a gate/up adapter's backward after MulBackward0 (as in the last layer's, backward_peak)
    adapter = _moment(weights, max(0, late_grads - first) + down, states, acts - 2 * e * inter * tokens, 0,
                      e * h * tokens + 2 * e * inter * tokens + act.adapter_grad * tokens)
    return max(mlp, adapter, key=lambda m: sum(m.values()))


def _fsdp_late(setup: TrainingSetup, act: Saved, h: int, inter: int, e: int, weights: int, grads: int,
               states: int, inputs: int, unit_grads: tuple[int, int], routed: int) -> dict[str, int]:
    """The first decoder layer's backward on an FSDP rank (memory_sharding.py): the larger of two moments. The
    layer's unsharded gradient is freed only by its post-backward, after the layer's first op has run
    (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py ``post_backward``: the gradients are copied
    into the reduce-scatter input, then ``unsharded_grads.clear()`` in _fsdp_collectives.py
    ``foreach_reduce``), while autograd frees each op's saved tensors as it runs (checked against
    FSDPMemTracker, op by op, on llama_wide at 8 ranks and Qwen3 at 8):

    * its MLP's backward: every activation of the layer (recomputed under checkpointing), down_proj's
      gradient only, the gradient arriving (e·h a token) and two of e·I (down_proj's input's gradient, then
      the product's first, MulBackward0); a routed MoE block's: the experts' gradients, and where the
      routing's gather is undone (derivatives.yaml ``index.Tensor``: ``index_backward`` into
      ``grad.new_zeros``, out of place) a zero tensor and its scatter of e·h a routed token each
      (``routed``);
    * its input norm's backward (a full fine-tune: the norm's weight trains, so autograd runs it): the whole
      gradient, the norm's saved fp32 input and rsqrt, its fp32 backward and the gradient arriving.

    ``inputs``: a checkpointed layer's inputs, kept by the checkpoint to its end."""
    tokens = setup.micro_batch * setup.seq_len
    at_mlp, whole = unit_grads
    mlp = _moment(weights + at_mlp, grads, states, act.one_layer(setup), 0,
                  e * h * tokens + 2 * e * inter * tokens + inputs + routed)
    if setup.method != "full":
        return mlp
    norm = _moment(weights + whole, grads, states, (4 * h + 4) * tokens + inputs, 0,
                   NORM_BACKWARD_FP32 * 4 * h * tokens + e * h * tokens)
    return max(mlp, norm, key=lambda m: sum(m.values()))


def _fsdp1_ends(setup: TrainingSetup, act: Saved, h: int, e: int, weights: int, grads: int, states: int,
                inputs: int, whole: int, others: int, last_weights: int) -> tuple[dict[str, int], dict[str, int]]:
    """FSDP1's two layer ends (memory_sharding._fsdp1): a unit's gradient is there twice when autograd
    concatenates its views' gradients into the flat one, the input norm's backward done, the gradient of the
    layer's input arriving (e·h a token). The last layer's (the first in backward): every other layer's
    activations alive (``others``; a checkpointed layer's input), no unit's gradient sharded yet unless
    gradients accumulate over micro-batches; the first layer's: every other gradient sharded (``grads``),
    the checkpointed inputs (``inputs``) only; ``last_weights``: the weights at the last layer's end (``weights``
    at the first's). Checked against the profiler's count (measure_fsdp1) at 2 and
    8 ranks, tensor by tensor at the last layer's ``cat``."""
    tokens = setup.micro_batch * setup.seq_len
    flowing = e * h * tokens
    last = _moment(last_weights + 2 * whole, grads if setup.grad_accum > 1 else 0, states, others, 0, flowing)
    first = _moment(weights + 2 * whole, grads, states, inputs, 0, flowing)
    return last, first
