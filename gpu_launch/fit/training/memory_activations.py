"""What autograd saves in the forward of a decoder, tensor by tensor as the family's modeling code saves it,
and what the loss holds at its peak in backward. Arithmetic only: no torch.

The rule autograd follows (torch/csrc/autograd/generated, from tools/autograd/derivatives.yaml): a node
saves an input only where the gradient it must compute needs it. So a frozen linear (a LoRA model's base)
saves no input; ``weight * x`` saves x only when the weight trains; ``a * cos`` saves only cos; a view
shares its base's storage (counted once). Per token and layer, for Llama-like blocks (modeling_llama.py
LlamaDecoderLayer and the families built on it), h hidden, d head size, e the compute element size:

* RMSNorm (LlamaRMSNorm.forward): the fp32 upcast of its input (saved by pow and mul; in fp32 it is the
  input itself), the fp32 rsqrt (4 bytes), the normalised value cast back (saved by the weight's mul, when
  the weight trains) and the output (saved by the linears it feeds, when one trains);
* attention through sdpa/flash: q and k after RoPE, v, the output (all saved by the kernel; o_proj's input
  is a view of the output), an fp32 logsumexp a head; eager attention (Gemma-2's soft-capping) adds the
  s² scores: tanh's output, softmax's fp32 output and its cast, and copies k, v repeated to every head;
  sdpa through a padding mask (GRPO's padded prompts and completions) saves k and v repeated to every head
  and its own (batch, 1, s, s) float copy of the mask a layer;
* the gated MLP: gate's output (saved by the activation), the activation's and up's (saved by the product),
  the product (saved by down_proj when it trains);
* autocast (fp32 weights, Trainer --bf16 on a v4 fp32 load): every linear casts its input and its weight to
  bf16 and autograd keeps both casts (torch/csrc/autograd/autocast_mode: cached weight casts), the norms and
  the residual stream stay fp32;
* LoRA (peft/tuners/lora/layer.py Linear.forward): lora_A saves its input cast to the adapter's fp32
  (4·fan_in, once per adapter) and lora_B saves A's fp32 output (4r); under autocast on fp32 weights each
  adapter's linears save autocast's 16-bit casts instead (2·fan_in, 2r), and every frozen linear whose input
  needs a gradient keeps a fresh 16-bit cast of its weight to its backward (autocast caches only the casts
  of leaves that require grad: :func:`_weight_casts`).

Checked tensor by tensor against the saved tensors of the real models (tests/test_training_memory*.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.fit.training import memory_fused
from gpu_launch.fit.training.memory_first_layer import first_grads, input_grad
from gpu_launch.fit.training.memory_params import Linear, lora_targets
from gpu_launch.fit.training.memory_sharding import FSDP
from gpu_launch.fit.training.setup import TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Saved", "saved", "loss_bytes", "LOSS_CHUNK_TOKENS", "FOUR_NORMS"]

#: Tokens a chunked/fused loss takes at a time where the setup does not say (Liger's fused linear cross
#: entropy and TRL's chunked_nll work on a few thousand rows at a time; cut-cross-entropy on blocks).
LOSS_CHUNK_TOKENS = 1024
#: Families whose RMSNorm computes in fp32 and scales by (1 + weight) (modeling_gemma2.py Gemma2RMSNorm).
_GEMMA = {"gemma", "gemma2", "gemma3", "gemma3_text"}
#: Gemma-2 and -3: four norms a layer (pre/post attention, pre/post feed-forward).
FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}
#: Families whose layers alternate sliding-window and global attention, each kind with its own mask.
_SLIDING_AND_GLOBAL = {"gemma2", "gemma3", "gemma3_text"}
#: Families with a norm on q and k a head (modeling_qwen3.py Qwen3Attention.q_norm/k_norm; Gemma-3).
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2", "olmoe"}


def _norm_in(h: int, e: int) -> int:
    """An RMSNorm's fp32 upcast of its input and its rsqrt, per token."""
    return 4 * h + 4


def _mode(setup: TrainingSetup) -> tuple[int, bool]:
    """(the activations' element size, whether autocast runs the linears in 16 bits on fp32 weights)."""
    if setup.precision in ("amp_bf16", "amp_fp16"):
        return 2, True
    return (2, False) if setup.precision in ("bf16", "fp16") else (4, False)


def _adapters_16bit(setup: TrainingSetup) -> bool:
    """Whether the LoRA adapters compute in 16 bits: under FSDP with mixed precision every unit, its
    adapters too, is all-gathered in MixedPrecisionPolicy.param_dtype (torch/distributed/fsdp/_fully_shard/
    _fsdp_param.py: the unsharded parameter is cast to param_dtype), so peft's cast of the input to the
    adapter's dtype (peft/tuners/lora/layer.py Linear.forward, _cast_input_dtype) is none. Not FSDP1's: with
    peft's wrap policy each adapter is a unit of its own (peft/utils/other.py fsdp_auto_wrap_policy, set by
    transformers/distributed/fsdp.py update_fsdp_plugin_peft), gathered only when lora_A itself is called, so
    peft reads the dtype of its sharded fp32 view (use_orig_params, the Trainer's default: _flat_param.py
    ``_use_sharded_views``) and casts the input to fp32 as on one process (:func:`_autocast_16bit_weights`)."""
    return setup.mixed_precision and setup.sharding in FSDP and setup.fsdp_version != 1


def _lora_bytes(targets: tuple[Linear, ...], setup: TrainingSetup, e: int, autocast: bool = False) -> int:
    """What the LoRA adapters of one layer keep a token: lora_A's fp32 copy of its input (none when the
    input is in the adapter's dtype already: then it is the input itself, counted with the norm's output)
    and lora_B's input, in the adapter's dtype. Under autocast (``autocast``: the Trainer's --bf16 on fp32 or
    on 16-bit weights) lora_A's F.linear saves autocast's 16-bit cast of its input (of peft's fp32 copy on
    16-bit weights), a fresh one an adapter (aten/src/ATen/autocast_mode.cpp cached_cast caches leaves only),
    and lora_B its 16-bit input: seen tensor by tensor through TRL's SFTTrainer and the plain oracle."""
    r = setup.lora_r or 8
    if autocast:
        # dropout (nn.Dropout on the fp32 input: native_dropout's boolean mask kept, its output cast to 16 bits
        # by lora_A, saved in the input's place)
        return sum((x.fan_in if setup.lora_dropout > 0 else 0) + 2 * x.fan_in + 2 * r for x in targets)
    # lora_dropout > 0 (TRL's ModelConfig default, 0.05): peft's nn.Dropout before lora_A keeps its boolean
    # mask (torch native_dropout: the mask is its backward's input), and lora_A then saves the dropped copy
    # where it would have saved the input itself
    drop = sum(x.fan_in + (e * x.fan_in if e == 4 or _adapters_16bit(setup) else 0) for x in targets) \
        if setup.lora_dropout > 0 else 0
    if _adapters_16bit(setup):
        return drop + sum(e * r for _ in targets)
    return drop + sum((4 * x.fan_in if e != 4 else 0) + 4 * r for x in targets)


def _autocast_16bit_weights(setup: TrainingSetup) -> bool:
    """Whether the Trainer's autocast runs on 16-bit weights (--bf16 on a bf16 load, TRL's SFTTrainer): one
    process, DDP or FSDP1 (FSDP2 casts the units itself, DeepSpeed the module; FSDP1's adapters are fp32 when peft
    reads their dtype: :func:`_adapters_16bit`). Measured: an FSDP1 rank's LoRA forward, q,v, each adapter's
    16-bit cast of its own fp32 copy of the input saved (0.982 of PyTorch's count with FSDP2's shared input)."""
    fsdp1 = setup.sharding in FSDP and setup.fsdp_version == 1
    return setup.mixed_precision and setup.precision in ("bf16", "fp16") and (setup.sharding in ("none", "ddp")
                                                                             or fsdp1)


def _output_saved(consumers: tuple[Linear, ...], setup: TrainingSetup, targets: tuple[Linear, ...], e: int,
                  amp: bool) -> bool:
    """Whether a norm's output (in the activations' dtype) is saved: a trained linear reads it as is (full
    fine-tune, no autocast), or an fp32 LoRA adapter reads an fp32 one."""
    if setup.method == "full":
        return not amp
    return (e == 4 or _adapters_16bit(setup)) and not amp and any(x in targets for x in consumers)


class Saved:
    """The saved activations of a step's forward, in bytes: per token of every layer, of the model outside
    the layers (final norm, RoPE tables, ids), and those that do not grow with tokens (autocast's weight
    casts)."""

    def __init__(self, layer: int, first_layer: int, outside: int, fixed: int, checkpointed_layer: int,
                 squared: int = 0, heads: int = 0, layers: int = 1, rope: int = 0, fixed_outside: int = 0,
                 masks: int = 0) -> None:
        self.layer = layer  # bytes a token, one layer
        self.first_layer = first_layer  # the first layer's, which may differ (its input needs no gradient)
        self.outside = outside  # bytes a token outside the layers
        self.fixed = fixed  # bytes, not per token
        self.checkpointed_layer = checkpointed_layer  # bytes a token a layer under gradient checkpointing
        self.squared = squared  # bytes a (token × position) a layer: eager attention's scores
        self.first_squared = squared  # the first layer's (none where its attention saves nothing)
        self.layers = layers
        self.rope = rope  # of ``outside``: what every layer reads (RoPE's tables, the ids), kept to the end
        self.fixed_outside = fixed_outside  # of ``fixed``: the LM head's (outside every checkpointed layer)
        self.masks = masks  # bytes a sequence × position²: eager attention's 4-D masks, kept under checkpointing
        # eager attention's backward: the gradient of the probabilities, in the compute dtype (2 bytes)
        self.squared_backward = 2 * heads if squared else 0
        self.lora_forward = 0  # bytes a token: the widest adapter's unsaved copies while it runs (_lora_forward)
        self.down_saved = 0  # bytes a token of ``layer``: what down_proj's node and its adapter's save (the product)
        self.down_adapter = 0  # elements: down_proj's LoRA adapter, where it has one
        self.adapter_grad = 0  # bytes a token: a gate/up adapter's fp32 output gradients in its backward

    def total(self, setup: TrainingSetup, layers: int) -> int:
        tokens = setup.micro_batch * setup.seq_len
        sq = self.squared * tokens * setup.seq_len
        if setup.gradient_checkpointing:
            return self.checkpointed_layer * tokens * layers + self.outside * tokens + self.fixed_outside \
                + self.masks * setup.micro_batch * setup.seq_len ** 2
        return (self.first_layer + self.layer * (layers - 1)) * tokens + sq * (layers - 1) \
            + self.first_squared * tokens * setup.seq_len + self.outside * tokens + self.fixed

    def one_layer(self, setup: TrainingSetup, first: bool = False) -> int:
        """A layer's saved bytes (``first``: the first layer's, which may save less without checkpointing)."""
        tokens = setup.micro_batch * setup.seq_len
        layer, squared = (self.first_layer, self.first_squared) if first else (self.layer, self.squared)
        return layer * tokens + squared * tokens * setup.seq_len \
            + (self.fixed - self.fixed_outside) // max(1, self.layers)


def saved(facts: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup, block: tuple[Linear, ...],
          total_linear: int) -> Saved:
    hy = facts.hyper
    h = hy.hidden_size or hy.n_heads * hy.key_length
    d = hy.key_length
    heads, kv = hy.n_heads, (hy.kv_heads[0] if hy.kv_heads else hy.n_heads)
    model_type = str(config.get("model_type") or facts.architecture)
    e, amp = _mode(setup)
    full = setup.method == "full"
    targets = lora_targets(setup, block) if not full else ()
    by = {x.name: x for x in block}
    cast16 = amp or _autocast_16bit_weights(setup)  # the adapters' F.linear under autocast
    lora = _lora_bytes(targets, setup, e, cast16) if targets else 0
    gemma = model_type in _GEMMA
    # --- the norms before attention and before the MLP
    attn_in = tuple(by[n] for n in ("q_proj", "k_proj", "v_proj", "qkv_proj") if n in by)
    mlp_in = tuple(by[n] for n in ("gate_proj", "up_proj", "gate_up_proj", "gate", "w1", "w3",
                                   "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert_gate")
                   if n in by)
    # the normalised value the weight's mul keeps: fp32 for Gemma's norms and under autocast (the residual
    # stream stays fp32 there, and the upcast is the input itself)
    norm_core = _norm_in(h, e) + ((4 if gemma or amp else e) * h if full else 0)
    norms = 0
    for consumers in (attn_in, mlp_in):
        norms += norm_core + (e * h if _output_saved(consumers, setup, targets, e, amp) else 0)
        if full and amp:
            norms += sum(2 * x.fan_in for x in consumers)
    if model_type in FOUR_NORMS:  # the post-attention and post-feed-forward norms feed the residual add
        norms += 2 * norm_core
    # --- attention
    q, kvd = heads * d, kv * d
    fused_qkv = "qkv_proj" in by
    eager = setup.attention == "eager" or (model_type == "gemma2" and setup.attention != "flash_attention_2")
    attn = e * q + e * kvd + (e * (q + 2 * kvd) if fused_qkv else e * kvd) + e * q
    squared = 0
    if eager:
        # eager_attention_forward: matmul saves q and k repeated to every head; softmax's fp32 output, its
        # cast (saved by the matmul with v, and v repeated); Gemma-2's tanh soft-capping keeps tanh's output
        attn = e * q + e * q + (e * (q + 2 * kvd) if fused_qkv else e * kvd) + e * q + e * q
        squared = (4 + e) * heads + (e * heads if config.get("attn_logit_softcapping") else 0)
    else:
        attn += 4 * heads
    sliding_mask = _sliding_layers(config, model_type, setup, hy.n_layers) if not eager else 0.0
    if sliding_mask and kv < heads:
        # sdpa with a mask (a sliding-window layer): transformers' sdpa_attention_forward repeats k and v to
        # every head (repeat_kv: use_gqa_in_sdpa is False with a mask), and the kernel saves the copies
        attn += int(2 * e * q * sliding_mask)
    padded = _padding_mask(setup, eager)
    if padded and kv < heads:
        # the same with GRPO's padding mask, in every layer: the kernel saves k and v repeated to every head in
        # place of the kv heads' own (the roped k is saved by nothing else)
        attn += 2 * e * (q - kvd)
    if model_type in _QK_NORM:
        # the fp32 upcast and rsqrt; the normalised value kept by a trained weight (fp32 in Gemma's norm)
        attn += (4 * (q + kvd) + 4 * (heads + kv)) + ((4 if gemma else e) * (q + kvd) if full else 0)
    # --- the MLP
    inter = next((x.fan_out for x in block if x.name in ("gate_proj", "w1")), 0)
    if "gate_up_proj" in by:
        inter = by["gate_up_proj"].fan_out // 2
    # an adapter's lora_A keeps its input as it is where peft casts nothing (fp32 weights without autocast, FSDP's
    # 16-bit adapters; no dropout): down_proj's, the product, saved by nothing else in a LoRA model
    as_is = (e == 4 or _adapters_16bit(setup)) and not cast16 and setup.lora_dropout == 0
    product = e * inter if full or as_is and any(x.name == "down_proj" for x in targets) else 0
    mlp = 3 * e * inter + product
    if hy.expert_count:
        mlp, product = _moe(config, hy.expert_count, h, e, full, amp), 0
    layer = norms + attn + mlp + lora
    first = layer
    grads = first_grads(targets) if not full and not setup.gradient_checkpointing else None
    if grads is not None:
        # the first layer's input, the frozen embedding's output, needs no gradient, so nothing of the layer
        # before its first adapter does, and no op there saves anything (torch/csrc/autograd/generated: a node,
        # with what it saves, is made only where an input requires grad): the input norm; the attention, its
        # q/k norms and, after it, the MLP's norm (the post-attention ones of Gemma) without an adapter above
        # them; SiLU's input and up's output (saved for each other's gradient by the product) without one in
        # gate/up or above, the activation's without one in up or above; the dropout masks of adapters reading
        # a tensor that needs none (tests/test_training_memory.py: MLP-, o_proj- and down_proj-only)
        first -= _norm_in(h, e)
        if not grads["attention"]:  # (o_proj's adapter keeps the attention's output as it is)
            first -= attn - (e * q if as_is and any(x.name == "o_proj" for x in targets) else 0)
        elif model_type in _QK_NORM:
            first -= (0 if grads["q"] else 4 * q + 4 * heads) + (0 if grads["k"] else 4 * kvd + 4 * kv)
        if not grads["residual"]:
            first -= norm_core * (2 if model_type in FOUR_NORMS else 1)
        if not hy.expert_count:
            first -= (0 if grads["gate"] else 2 * e * inter) + (0 if grads["up"] else e * inter)
        elif not grads["residual"]:
            # a routed block below no adapter: its router and its frozen experts save nothing; its shared expert
            # what a gated MLP does, its output not kept by the sigmoid gate's mul (whose other input needs no
            # gradient), the gate's output kept (seen tensor by tensor: Qwen2-MoE, MLP-only)
            shared = int(config.get("shared_expert_intermediate_size") or 0)
            keep = (3 * e * shared + e - (0 if grads["gate"] else 2 * e * shared)
                    - (0 if grads["up"] else e * shared)) if shared else 0
            first -= mlp - keep
        if setup.lora_dropout > 0:
            first -= sum(x.fan_in for x in targets if not input_grad(x.name, grads))
    outside = _norm_in(h, e) + ((4 if gemma or amp else e) * h if full else 0)
    if setup.loss == "fused":
        # TRL's fused head saves its own copy of the scored hidden states, trained or frozen, in their dtype
        # (fp32 under autocast), with a few per-token vectors (memory_fused.py); the final norm's output itself
        # is then kept by nothing; GRPO copies only the completion's positions (memory_fused.scored_tokens)
        fused = memory_fused.hidden_bytes(setup) * h + memory_fused.SAVED_PER_TOKEN
        tokens = setup.micro_batch * setup.seq_len
        outside += fused if not setup.completion_len else -(-fused * memory_fused.scored_tokens(setup) // tokens)
    else:
        outside += e * h if full and not amp else 0  # the head's input, saved when the head trains
    if full and amp and setup.loss != "fused":
        outside += 2 * h  # lm_head's bf16 cast of the final norm's fp32 output
    if setup.loss not in ("plain", "fused"):
        # a chunked loss keeps its input, the final hidden states of every token, to the end of its backward
        # (trl/kernels/chunked_logprob.py ChunkedLogProbFunction.forward: save_for_backward(hidden, ...); a
        # checkpointed chunk saves its input to recompute): in fp32 under autocast (the final norm's output),
        # where a trained head would have saved it (or autocast's 16-bit cast of it)
        loss_in = (4 if amp or e == 4 else e) * h
        outside += (loss_in if not full else loss_in - 2 * h if amp else 0)
    rope = 2 * (4 if amp or e == 4 else e) * d + 16  # RoPE's cos and sin, the ids and the labels
    if sliding_mask:
        # the sliding-window mask (masking_utils.py create_sliding_window_causal_mask: (batch, 1, s, s) in the
        # compute dtype), saved by sdpa in every sliding layer, and the full layers' boolean one beside it:
        # (e + 1)·s bytes a token, once
        rope += (e + 1) * setup.seq_len
        if grads is not None and not grads["attention"] \
                and "sliding_attention" not in list(config.get("layer_types") or ["sliding_attention"] * 2)[1:]:
            rope -= e * setup.seq_len  # its one sliding layer is the first, whose attention saves nothing
    outside += rope
    # autocast's 16-bit casts of the trained weights, kept for the backward (the head's too, outside the layers:
    # under checkpointing the layers' are made again in their recompute, the head's stays)
    # (TRL's fused head casts the head's rows a tile at a time inside its autograd Function: nothing kept)
    head_cast = 2 * (hy.vocab_size or 0) * h if amp and full and setup.loss != "fused" else 0
    routed_weights = hy.n_layers * (hy.expert_count or 0) * 3 * h * int(config.get("moe_intermediate_size") or 0)
    fixed = 2 * (total_linear - routed_weights) + head_cast if amp and full else 0
    if amp and not full:
        head_cast = 2 * (hy.vocab_size or 0) * h if setup.loss == "plain" else 0
        fixed = _weight_casts(block, targets, setup, hy.n_layers) + head_cast
    elif cast16 and targets:  # 16-bit weights: the frozen ones need no cast; the fp32 adapters' casts are kept
        # (by the same rule: lora_A's not in the first layer where its input needs no gradient, _weight_casts)
        fixed = 2 * hy.n_layers * sum((setup.lora_r or 8) * (x.fan_in + x.fan_out) for x in targets) \
            - (2 * sum((setup.lora_r or 8) * x.fan_in for x in targets if not input_grad(x.name, grads))
               if grads is not None else 0)
    checkpointed = e * h if not amp else 4 * h
    # eager attention's masks (masking_utils.py create_causal_mask / create_sliding_window_causal_mask: one
    # (batch, 1, s, s) tensor in the compute dtype a kind of layer, made once for all layers) are inputs of
    # every checkpointed layer, so the checkpoint keeps them (torch/utils/checkpoint.py saves the inputs)
    masks = e * (2 if config.get("sliding_window") and model_type in _SLIDING_AND_GLOBAL else 1) if eager else 0
    out = Saved(layer, first, outside, fixed, checkpointed, squared, heads, hy.n_layers, rope, head_cast, masks)
    if padded:
        # sdpa's own float copy of the boolean padding mask, made at each layer's call and saved by the kernel
        # (aten/src/ATen/native/transformers/attention.cpp scaled_dot_product_attention: convert_boolean_attn_mask
        # to the query's dtype; the memory-efficient kernel CUDA picks with a mask saves its attn_bias): a layer's
        # (batch, 1, s, s) in the compute dtype; the boolean one (masking_utils.py sdpa_mask) is an input of every
        # checkpointed layer, kept by the checkpoint (measured: tests/training_oracle_grpo.py, padded prompts)
        out.squared += e
        out.masks += 1
    # down_proj's, released once its nodes have run: the product, its adapter's copies (memory_backward.py)
    down = tuple(x for x in targets if x.name == "down_proj")
    out.down_saved = product + (_lora_bytes(down, setup, e, cast16) if down else 0)
    out.down_adapter = sum((setup.lora_r or 8) * (x.fan_in + x.fan_out) for x in down)
    if e == 2 and not cast16 and not _adapters_16bit(setup) and not hy.expert_count:
        # fp32 adapters on 16-bit weights: peft adds lora_B's fp32 output to the base's and casts the sum back
        # (peft/tuners/lora/layer.py Linear.forward: ``result.to(torch_result_dtype)``), so a gate/up adapter's
        # backward holds its output's gradient in fp32 twice (the cast's, the scaling's): seen in MemTracker's
        # count of the first layer's MLP backward (bf16 Llama, MLP-only and all-linear, checkpointing)
        out.adapter_grad = 8 * max((x.fan_out for x in targets if x.name in ("gate_proj", "up_proj")), default=0)
    # the first layer's s² tensors (eager attention's scores, sdpa's copy of the padding mask): none where its
    # attention saves nothing
    out.first_squared = 0 if grads is not None and not grads["attention"] else out.squared
    out.lora_forward = _lora_forward(targets, setup, e, h, amp)
    return out


def _weight_casts(block: tuple[Linear, ...], targets: tuple[Linear, ...], setup: TrainingSetup, layers: int) -> int:
    """Autocast's 16-bit copies of a LoRA model's fp32 linear weights kept for the backward, the frozen base's
    and the adapters'. autocast caches the cast of an fp32 leaf that requires grad only
    (aten/src/ATen/autocast_mode.cpp cached_cast: ``arg.requires_grad() && arg.is_leaf()``), so each frozen
    weight's cast is a fresh tensor; where the input needs a gradient (the adapters upstream) the linear's mm
    keeps it (tools/autograd/derivatives.yaml mm: the gradient of ``self`` needs ``mat2``) until its backward
    has run. Without checkpointing no input in the first layer needs one above its first adapter (the frozen
    embedding's output: memory_first_layer.py); under checkpointing the Trainer's enable_input_require_grads
    makes every layer's need one. The adapters' (cached) casts are kept by the same
    rule: lora_B's always, lora_A's where its input needs a gradient. A routed MoE's grouped matmul
    (torch._grouped_mm) is on no autocast list: its experts are not cast."""
    r = setup.lora_r or 8
    per_layer = sum(x.fan_in * x.fan_out * x.count for x in block if not x.expert) \
        + sum(r * (x.fan_in + x.fan_out) for x in targets)
    first = per_layer
    if not setup.gradient_checkpointing:
        # in the first layer a linear's input needs a gradient only below an adapter (first_grads): q/k/v's
        # never, o_proj's below one in q/k/v, the MLP's inputs below one in the attention, down_proj's below
        # one anywhere before it
        grads = first_grads(targets)
        first -= sum(x.fan_in * x.fan_out * x.count for x in block if not x.expert and not input_grad(x.name, grads))
        first -= sum(r * x.fan_in for x in targets if not input_grad(x.name, grads))
    return 2 * (per_layer * (layers - 1) + first)


def _lora_forward(targets: tuple[Linear, ...], setup: TrainingSetup, e: int, h: int, amp: bool = False) -> int:
    """What the widest adapter makes and does not keep while it runs (peft/tuners/lora/layer.py Linear.forward:
    ``result = self.base_layer(x)``, ``x = self._cast_input_dtype(x, lora_A.weight.dtype)``, then
    ``lora_A(dropout(x))``): the fp32 copy of its input, with dropout the dropped fp32 copy, the base linear's
    output, and what its layer holds and does not save: the adapter's own input (unless lora_A keeps it as it
    is, fp32 weights without autocast), and the layer's input (the model's loop still holds it), its residual
    and its norm's output (modeling_llama.py LlamaDecoderLayer.forward), in a layer's forward or its recompute
    under checkpointing. For a tiny model's down_proj this outweighs the loss's tensors (TRL's SFTTrainer,
    counted op by op)."""
    if not targets or _adapters_16bit(setup):
        return 0
    x = max(targets, key=lambda t: t.fan_in)
    widest = x.fan_in
    # o_proj's and down_proj's inputs are 16-bit (the attention's output, the MLP's product) even under autocast
    # on fp32 weights; the others read a norm's output, fp32 there
    norm_fed = x.name.rsplit(".", 1)[-1] not in ("o_proj", "down_proj", "w2")
    in_e = 4 if (amp and norm_fed) or e == 4 else e
    # the base output; the layer's input and its residual (under autocast on fp32 weights they are the norms'
    # saved inputs); the norm's output beside an o_proj or down_proj adapter's own input
    held = e * x.fan_out + (0 if amp else 2 * e * h) + (0 if norm_fed else (4 if amp else e) * h)
    own = 0 if in_e == 4 and not amp else in_e * widest  # the adapter's input, unless lora_A keeps it as it is
    copy = 4 * widest if in_e != 4 else 2 * widest if amp else 0  # peft's fp32 copy, or the base's 16-bit cast
    return held + own + copy + (4 * widest if setup.lora_dropout > 0 else 0)


def _padding_mask(setup: TrainingSetup, eager: bool) -> bool:
    """GRPO's step attends through a padding mask: its prompts are left-padded to the longest and its
    completions right-padded after each eos (grpo_trainer.py ``_generate_and_score_completions``: ``pad(...,
    padding_side="left")``, the completion mask), so the attention mask has zeros and transformers makes the
    4-D mask (masking_utils.py sdpa_mask: no causal skip once a position is padded). flash_attention_2 unpads
    instead (no s² mask); eager attention's masks are counted with its scores."""
    return bool(setup.completion_len) and not eager and setup.attention != "flash_attention_2"


def _sliding_layers(config: Mapping[str, Any], model_type: str, setup: TrainingSetup, layers: int) -> float:
    """The share of layers that attend through a sliding-window mask (0 when the window covers the sequence:
    then the causal kernel needs no mask), for the families that alternate (config's layer_types)."""
    window = int(config.get("sliding_window") or 0)
    if model_type not in _SLIDING_AND_GLOBAL or not window or setup.seq_len <= window:
        return 0.0
    types = config.get("layer_types") or []
    if not types:
        return 0.5
    return sum(1 for t in types if t == "sliding_attention") / max(1, len(types))


def _moe(config: Mapping[str, Any], experts: int, h: int, e: int, full: bool, amp: bool = False) -> int:
    """A routed MoE block's saved tensors a token (transformers v5's grouped experts, modeling_qwen2_moe.py /
    integrations/moe.py: the router's fp32 softmax, the top-k indices and the sort that groups tokens by
    expert, the gathered inputs (saved by the experts' grouped matmul when the experts train), the fused
    gate/up output, the activation's and the product (down's input, when it trains), the routing weights
    and the experts' outputs (saved by the weighting mul); Qwen2-MoE's shared expert as a gated MLP, its
    output saved by the sigmoid gate's mul)."""
    k = int(config.get("num_experts_per_tok") or 2)
    inter = int(config.get("moe_intermediate_size") or config.get("intermediate_size") or 4 * h)
    shared = int(config.get("shared_expert_intermediate_size") or 0)
    # under autocast the experts' grouped matmul (torch._grouped_mm, not on autocast's lists of ops cast to
    # 16 bits) runs on the fp32 inputs and weights: the routed tensors stay fp32, no weight is cast
    x = 4 if amp else e
    routed = 4 * experts + 32 * k + e * k + x * k * h + 3 * x * k * inter + (x * k * (h + inter) if full else 0)
    if shared:
        routed += 3 * e * shared + (e * shared if full else 0) + e * h + e
    return routed


def loss_bytes(facts: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup) -> int:
    """The loss at its peak, in backward. transformers' ForCausalLMLoss (loss/loss_utils.py) upcasts the
    logits to fp32 and cross_entropy keeps log_softmax's fp32 output; its backward allocates the gradient of
    that output and then of the logits, both fp32: 12 bytes a token and vocabulary entry (the 16-bit logits
    themselves are not kept: ``.float()`` needs nothing for its backward). Final-logit soft-capping (Gemma-2)
    keeps tanh's output too. A chunked/fused loss holds one chunk's worth; TRL's fused head what its
    backward allocates (memory_fused.py)."""
    tokens = setup.micro_batch * setup.seq_len
    vocab = facts.hyper.vocab_size or 0
    if setup.loss == "fused":
        h = facts.hyper.hidden_size or facts.hyper.n_heads * facts.hyper.key_length
        return memory_fused.backward_bytes(setup, h, vocab, setup.method == "full")
    if setup.loss != "plain":
        tokens = min(tokens, setup.loss_chunk_tokens or LOSS_CHUNK_TOKENS)
    e, _ = _mode(setup)
    cap = e * tokens * vocab if config.get("final_logit_softcapping") else 0
    return 12 * tokens * vocab + cap
