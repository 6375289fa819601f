"""One GPU's peak of one training step, as PyTorch's allocator counts it (``torch.cuda.max_memory_allocated``):
the weights as loaded, gradients, optimizer states, the optimizer step's temporaries, the activations
autograd saves, the loss, divided over the data-parallel ranks as the sharding divides them; plus an
allowance for what no tensor count sees (CUDA context, workspaces, NCCL, allocator rounding).

A step's peak is in its backward or its optimizer step (run twice, so the optimizer's states exist):

* the backward (memory_backward.py): at its start weights + states + every saved activation + the loss's
  fp32 tensors or the last layer's backward (the gradients of the step before are gone: Trainer's
  ``zero_grad`` sets them to None; the LM head's own may be there), or at its end most gradients and one
  layer's activations;
* the optimizer step: weights + gradients + states + the step's temporaries (foreach AdamW's sqrt).

Checked against PyTorch's own accounting of real steps of the real Hugging Face code
(tests/test_training_memory*.py, benchmarks/training_sizing.py), where each term's accuracy is stated.
Assumptions (documented on :class:`~gpu_launch.fit.training.setup.TrainingSetup`): the setup's
``precision`` is the weights' dtype as loaded (the launch readers decide it from the transformers
version: v5 loads the checkpoint's dtype, v4 fp32 unless told); no torch is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.base.records import replace

from gpu_launch.fit.training import memory_generation, memory_preference, memory_sharding
from gpu_launch.fit.training.memory_activations import loss_bytes, saved
from gpu_launch.fit.training.memory_backward import backward_peak
from gpu_launch.fit.training.memory_sharding import FSDP
from gpu_launch.fit.training.memory_params import (QUANT4_BLOCK, QUANT4_NESTED_BLOCK, element_bytes, linears,
                                                   param_counts, shapes, state_bytes, step_temporary_bytes)
from gpu_launch.fit.training.setup import TrainingPeak, TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["peak", "phases", "CONTEXT_BYTES"]

MiB = 1 << 20
#: The CUDA context and cuBLAS/cuDNN handles of one process (nvidia-smi counts them, no tensor does).
CONTEXT_BYTES = 512 * MiB
#: cuBLAS workspaces (CUBLAS_WORKSPACE_CONFIG's default: a few MiB per handle and stream) and kernels' own.
WORKSPACE_BYTES = 64 * MiB
#: NCCL's buffers per communicator (NCCL_BUFFSIZE 4 MiB × channels × peers, order of a few hundred MiB).
NCCL_BYTES = 256 * MiB
#: DDP's gradient buckets (torch/nn/parallel/distributed.py bucket_cap_mb=25, two in flight).
DDP_BUCKET_BYTES = 50 * MiB
#: The caching allocator's rounding and fragmentation, as a share of the peak.
FRAGMENTATION = 0.05

#: The optimizers whose states depend on each tensor's shape (memory_params.shapes)
_PER_TENSOR = ("adamw_8bit", "paged_adamw_8bit", "adafactor")
_SHARDS_STATES = {"zero1", "zero2", "zero3", "fsdp_full", "fsdp_grad_op", "fsdp_hybrid"}
_SHARDS_GRADS = {"zero2", "zero3", "fsdp_full", "fsdp_grad_op", "fsdp_hybrid"}
_SHARDS_WEIGHTS = {"zero3", "fsdp_full", "fsdp_hybrid"}
#: The families whose attention normalizes q and k per head (modeling_qwen3.py Qwen3Attention q_norm, k_norm)
_QK_NORM = ("qwen3", "qwen3_moe")


#: How the loss's term was worked out, by loss (LOSSES); the others: the plain fp32 logits' rule.
_LOSS_RULES = {"fused": "loss: TRL's fused LM head (no logits: one 4,096 × 32,768 tile, the hidden states' fp32 "
                        "gradient, the head's fp32 accumulator when it trains; trl/kernels/chunked_logprob.py)"}


def _weights_bytes(facts: ModelFacts, setup: TrainingSetup, counts_total: int, linear: int) -> int:
    """The frozen base and the trained weights as the step holds them. QLoRA: the blocks' linears in 4 bits
    (bitsandbytes Params4bit: two a byte) with their quant state, the rest in the compute dtype."""
    e = element_bytes(setup.precision)
    if setup.method == "qlora" or setup.quant_bits == 4:
        blocks = -(-linear // QUANT4_BLOCK)
        state = blocks + 4 * -(-blocks // QUANT4_NESTED_BLOCK) if setup.quant_double else 4 * blocks
        return linear // 2 + state + (counts_total - linear) * e
    if setup.quant_bits == 8:
        return linear + 4 * linear // 4096 + (counts_total - linear) * e
    return counts_total * e


def _first_grads(block: tuple) -> int:
    """The elements whose gradients a layer's MLP backward makes first: a routed MoE block's experts (their
    grouped matmuls run before the routing's backward), else down_proj (the MLP's last linear)."""
    experts = sum(x.fan_in * x.fan_out * x.count for x in block if x.expert)
    return experts or next((x.fan_in * x.fan_out for x in block if x.name == "down_proj"), 0)


def _trained_sizes(model: ModelFacts, setup: TrainingSetup, block: tuple, layer: int, counts: Any) -> tuple[int, ...]:
    """The trained parameters' elements in the model's order (named_parameters: the embedding, each layer's
    attention and MLP linears then its norms, the final norm, the untied head), as DeepSpeed flattens them."""
    layers = model.hyper.n_layers or 1
    if setup.method != "full":
        return (-(-counts.trainable // layers),) * layers
    h, vocab_h = model.hyper.hidden_size or 0, (model.hyper.vocab_size or 0) * (model.hyper.hidden_size or 0)
    linear = tuple(x.fan_in * x.fan_out * x.count for x in block)
    one = linear + (max(0, layer - sum(linear)),)
    return (vocab_h, *one * layers, h) + (() if model.weights.tied_embeddings else (vocab_h,))


def info_e(setup: TrainingSetup) -> int:
    """The activations' element size: 16-bit under autocast and for 16-bit weights, else 4."""
    return 2 if setup.precision in ("bf16", "fp16", "amp_bf16", "amp_fp16") else 4


def _deepspeed(setup: TrainingSetup) -> bool:
    return setup.sharding.startswith("zero")


def phases(model: ModelFacts, config: Mapping[str, Any] | None, setup: TrainingSetup,
           world: int) -> dict[str, dict[str, int]]:
    """Each candidate peak's terms, per GPU: {"backward": {...}, "optimizer step": {...}}, plus "host" (what
    offload keeps in host RAM) and "rules" data for :func:`peak`."""
    config = config or {}
    world = max(1, world)
    if _deepspeed(setup) and setup.mixed_precision and setup.precision in ("amp_bf16", "amp_fp16"):
        # DeepSpeed's bf16/fp16 casts the module itself (engine.py _configure_distributed_model,
        # _cast_module_mixed_precision; ZeRO-3's zero.Init at load): the step is a 16-bit one, no autocast
        setup = replace(setup, precision=setup.precision[4:])
    counts = param_counts(model, config, setup)
    block = linears(model, config)
    e = element_bytes(setup.precision)
    # the trained parameters' dtype: peft keeps adapters in fp32 (peft/tuners/tuners_utils.py
    # autocast_adapter_dtype=True casts bf16/fp16 adapters to fp32)
    te = e if setup.method == "full" else 4
    weights = _weights_bytes(model, setup, counts.total, counts.linear)
    if setup.method != "full":
        weights += counts.trainable * te
    grads = counts.trainable * te
    kinds = shapes(model, config, setup) if setup.optimizer in _PER_TENSOR else ()
    states = state_bytes(setup.optimizer, counts.trainable, counts.trainable_tensors, te, kinds)
    temp = step_temporary_bytes(setup.optimizer, counts, te)
    if _deepspeed(setup):
        # DeepSpeed keeps an fp32 master copy of each rank's partition whatever the parameters' dtype (a clone
        # even of fp32 ones: stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ single_partition_of_fp32_groups,
        # stage3.py _create_fp32_partitions) and the optimizer steps it: fp32 states, the step's temporaries in
        # fp32 and the flat fp32 copy of the gradients' partition (stage3.py _prepare_fp32_grad_for_sub_group)
        states = counts.trainable * (4 + state_bytes(setup.optimizer, 1, 1, 4))
        temp = step_temporary_bytes(setup.optimizer, counts, 4) + counts.trainable * 4
    divisor = world
    if setup.sharding == "fsdp_hybrid":
        divisor = min(world, setup.nproc or world)
    if setup.sharding in _SHARDS_STATES:
        states, temp = -(-states // divisor), -(-temp // divisor)
    if setup.sharding in _SHARDS_GRADS:
        grads = -(-grads // divisor)
    gathered = 0
    file_bytes = max(1, model.weights.total) / max(1, counts.total)
    layer = int(max(model.weights.layers, default=0) / file_bytes)
    h = model.hyper.hidden_size or 0
    vocab_h = (model.hyper.vocab_size or 0) * h
    fsdp = zero = None
    if setup.sharding in FSDP:
        fsdp = memory_sharding.fsdp(
            sharding=setup.sharding, divisor=divisor, mixed=setup.mixed_precision, e=e, te=te,
            weights=weights,
            trainable=counts.trainable, total=counts.total, layer=layer, layers=model.hyper.n_layers,
            # FSDP1's root unit (accelerate's FSDP1 auto wrap policy wraps the decoder layer class only) holds the
            # untied embedding with the head: sized as FSDP2's tied tail, kept gathered from forward to backward
            # (torch/distributed/fsdp/_runtime_utils.py _post_forward_reshard: the root is not resharded) and its
            # one flat gradient whole to the end of backward (measured: tests/training_oracle_sharded.py fsdp1)
            head=vocab_h + h + (vocab_h if setup.fsdp_version == 1 and not model.weights.tied_embeddings else 0),
            embed=0 if model.weights.tied_embeddings or setup.fsdp_version == 1 else vocab_h,
            states_of=lambda b: state_bytes(setup.optimizer, counts.trainable, counts.trainable_tensors, b, kinds),
            temp_of=lambda b: step_temporary_bytes(setup.optimizer, counts, b),
            offload=setup.offload_optimizer or setup.offload_params,
            trained_layer=None if setup.method == "full" else counts.trainable // max(1, model.hyper.n_layers),
            down=_first_grads(block), version=setup.fsdp_version, head_weight=vocab_h + h)
        weights, grads, states, temp = fsdp.weights, fsdp.grads, fsdp.states, fsdp.temp
    elif setup.sharding in _SHARDS_WEIGHTS:
        # ZeRO-3 (memory_sharding.zero3): what is gathered early and late in the backward (memory_zero3.py replays
        # the parameter coordinator), the gradient partition buffer, the reduce bucket
        zero = memory_sharding.zero3(
            divisor=divisor, e=e, trainable=counts.trainable, layers=model.hyper.n_layers, head=vocab_h,
            block=tuple((x.name, x.fan_in * x.fan_out * x.count) for x in block), tied=model.weights.tied_embeddings,
            h=h, head_dim=model.hyper.key_length or 0, checkpointing=setup.gradient_checkpointing,
            qk_norm=str(config.get("model_type") or model.architecture) in _QK_NORM, written=setup.zero_buckets)
        weights = -(-weights // divisor)
        gathered, grads = zero.gathered, zero.grads
    z12 = None
    if setup.sharding in ("zero1", "zero2"):
        # ZeRO-1/2 (memory_sharding.zero12): the partition's 16-bit gradient buffer, the reduce bucket, the fp64
        # norm of an offloaded gradient, by the partitions of the trained parameters in the model's order
        z12 = memory_sharding.zero12(divisor=divisor, e=e, sizes=_trained_sizes(model, setup, block, layer, counts),
                                     written=setup.zero_buckets, h=h)
    host = fsdp.host if fsdp else 0
    offload_gpu = 0
    off: memory_sharding.ZeroOffload | None = None
    if setup.offload_optimizer and not fsdp:
        # ZeRO-Offload (memory_sharding.zero_offload): master, states and the fp32 gradient partition on the host
        largest = max([vocab_h] + [x.fan_in * x.fan_out for x in block]) if setup.method == "full" else 0
        off = memory_sharding.zero_offload(
            stage=int(setup.sharding[4:]) if _deepspeed(setup) else 2, divisor=divisor, e=e, trainable=counts.trainable,
            states=states, largest=largest, grad_buffer=zero.grads if zero else 0,
            head=vocab_h if setup.method == "full" and not model.weights.tied_embeddings else 0)
        host += off.host
        states, temp, offload_gpu = 0, off.gpu, off.gpu
        if zero:
            zero = replace(zero, grads=0)
            grads = 0
    if setup.offload_params and setup.sharding in _SHARDS_WEIGHTS and not fsdp:
        host += weights
        weights = 0
    # the weights at each moment: FSDP holds some units gathered beside the shards, ZeRO-3 its gathered modules
    at_backward = weights + (fsdp.gathered_backward if fsdp else gathered)
    at_late = weights + (fsdp.gathered_late if fsdp else zero.late if zero else gathered)
    if fsdp and setup.mixed_precision and setup.precision in ("amp_bf16", "amp_fp16"):
        # FSDP casts the fp32 weights to MixedPrecisionPolicy.param_dtype itself: the step computes as a 16-bit one
        setup = replace(setup, precision=setup.precision[4:])
    # DPO's chosen and rejected rows go through the model as one batch (memory_preference.py); from here on the
    # setup's micro-batch is the rows a forward takes
    preference = setup.rows_per_example > 1
    setup = memory_preference.step_rows(setup)
    act_setup = setup
    if setup.sharding == "zero3" and setup.method != "full":
        # zero.Init swaps F.linear for LinearFunctionForZeroStage3, which saves every linear's input, frozen or
        # not, for good (deepspeed/runtime/zero/partition_parameters.py _enable_mem_efficient_linear, linear.py
        # setup_context); DeepSpeed's bf16 casts the adapters too: the layers save what a full fine-tune's do
        act_setup = replace(setup, method="full")
    act = saved(model, config, act_setup, block, counts.linear)
    loss = loss_bytes(model, config, setup)
    tokens = setup.micro_batch * setup.seq_len
    head = vocab_h * te if setup.method == "full" else 0
    # (ZeRO-2 holds the head's whole 16-bit gradient too: larger than the bucket, it waits for the next hook)
    head = -(-head // divisor) if setup.sharding in _SHARDS_GRADS and not zero and not z12 else head
    late_grads = fsdp.late_grads if fsdp else (grads if zero else None)
    if z12 and setup.sharding == "zero2":
        # the first layer's backward: the rank's gradient buffer (none under offload: each gradient goes to the
        # host as it is reduced), the gradient just made and the one before it, whole when larger than the bucket
        # (measured: llama_wide's first layer's up_proj, down_proj's gradient waiting)
        made = max((x.fan_in * x.fan_out * x.count for x in block), default=0) if setup.method == "full" \
            else -(-counts.trainable // max(1, model.hyper.n_layers))
        late_grads = (0 if setup.offload_optimizer else z12.buffer) + made * e * (2 if made > z12.bucket_elements
                                                                                    else 1)
    reduced_early = 0
    if z12 and setup.sharding == "zero2" and setup.method == "full" and not model.weights.tied_embeddings:
        # the last rank owns the head: at its reduction (the final norm's hook), every activation alive, it makes
        # its buffer, or offloaded casts the head's share to fp64 (measured on rank 1: 0.978 and 0.936 without)
        reduced_early = z12.last64 if setup.offload_optimizer else z12.buffer_last
    # ZeRO-3: the head's 16-bit gradient is made whole by its matmul; larger than the reduce bucket it is not copied
    # into it but stays param.grad until the next gradient's hook reduces it (stage3.py
    # reduce_independent_p_g_buckets_and_remove_grads, __add_grad_to_ipg_bucket, __reduce_and_partition_ipg_grads).
    # Measured: the step's backward peaks in lm_head's backward matmul (tests/test_training_deepspeed.py llama_wide)
    late_extra = 0
    if fsdp and setup.method == "full":
        head = fsdp.head_grad  # the tail unit's gradient is whole until its reduce-scatter
    if fsdp and setup.gradient_checkpointing:
        # measured under FSDP, where the end of backward is the peak (a layer's backward,
        # tests/test_training_sharded.py): the layer's checkpointed input, the rotary tables every layer is
        # handed (torch/utils/checkpoint.py keeps a checkpointed call's inputs to the end of its backward)
        late_extra = info_e(setup) * tokens * (h + 2 * (model.hyper.key_length or 0))
    backward_at, backward = backward_peak(
        model, config, setup, act, weights=at_backward, states=states, grads=grads, head=head, loss=loss,
        e=info_e(setup), late_weights=at_late, late_grads=late_grads,
        late_extra=late_extra, late_unit_grads=(fsdp.unit_grad_mlp, fsdp.unit_grad) if fsdp else None,
        fsdp1=weights + fsdp.gathered_last if fsdp and setup.fsdp_version == 1 else None,
        standing_grads=zero.grads if zero else 0, reduced_early=reduced_early)
    if fsdp and weights + fsdp.gathered_embed + fsdp.embed_grads + states > sum(backward.values()):
        # FSDP's last unit in backward: the untied embedding gathered with its dense gradient (FSDP1: the root
        # gathered with its gradient twice, memory_sharding._fsdp1)
        backward_at = "end of backward"
        backward = {"weights": weights + fsdp.gathered_embed, "gradients": fsdp.embed_grads, "optimizer": states,
                    "activations": 0, "loss": 0, "other": 0}
    cuda_copy = 0
    if zero and off and off.reduce_norm:
        # ZeRO-3 offload: the untied head's gradient moved to the host in the final norm's gradient hook
        # (memory_sharding.zero_offload), what is gathered then (memory_zero3.py), every activation, the gradient
        # the norm's backward passes on. Measured: llama_wide's backward peaks there (tests/test_training_deepspeed.py).
        # A head no larger than reduce_bucket_size is copied into the bucket instead and reduced with it later
        # (stage3.py __add_grad_to_ipg_bucket), reduce_scatter_coalesced's flat copy of the bucket in place of its
        # gradient: the same moment stands for it (measured 0.990 of that step's backward with a 1e6 bucket)
        at_norm = {"weights": weights + zero.at_norm, "gradients": head, "optimizer": states,
                   "activations": act.total(setup, model.hyper.n_layers), "loss": 0,
                   "other": info_e(setup) * h * tokens + off.reduce_norm + off.reduce_copy}
        if sum(at_norm.values()) > sum(backward.values()):
            backward_at, backward, cuda_copy = "backward", at_norm, off.reduce_copy
    reference: dict[str, int] | None = None
    if preference and setup.reference_model:
        # DPO's reference forward, after the policy's, every activation of the policy alive (memory_preference.py)
        ref_fw = memory_preference.reference_forward(model, config, setup, act, weights=at_backward, states=states,
                                                     e=info_e(setup))
        ref_fw["gradients"] += zero.grads if zero else 0  # ZeRO's gradient partition buffer: all step long
        if zero and setup.method == "full":
            # ZeRO-3: what the reference's own coordinator gathers in its forward beyond its persistent parameters
            # (memory_sharding.zero3; those are in its weights at every moment, below)
            ref_fw["weights"] += zero.ref_gathered - zero.ref_persistent
        reference = ref_fw
        if sum(ref_fw.values()) > sum(backward.values()):
            backward_at, backward, cuda_copy = "reference forward", ref_fw, 0
    if z12:
        # the reductions at the end of backward (stage_1_and_2.py reduce_gradients, the epilogue's reduce_ipg_grads;
        # memory_sharding.zero12): ZeRO-1 reduces every gradient only now, all of them there as its buffer is made
        # (or, offloaded, beside the fp64 copy of the first one's share); ZeRO-2 the last, the embedding's,
        # the largest that waits, with the buffer or its fp64 copy
        largest = max(_trained_sizes(model, setup, block, layer, counts), default=0) * e
        reduced = {"weights": weights, "gradients": grads if setup.sharding == "zero1" else largest,
                   "optimizer": states, "activations": 0, "loss": 0,
                   "other": z12.norm64 if setup.offload_optimizer else z12.buffer}
        if sum(reduced.values()) > sum(backward.values()):
            backward_at, backward, cuda_copy = "end of backward", reduced, 0
        backward["other"] += z12.bucket  # from the first gradient hook to the epilogue
    if zero:  # the reduce bucket exists all step long (the gradient buffer too: standing_grads, late_grads)
        backward["other"] += zero.bucket
    backward["other"] += offload_gpu  # ZeRO-Offload's device-side gradient staging buffer: all step long
    if setup.sharding in ("zero1", "zero2"):
        # the 16-bit gradients are flattened into the fp32 partition's gradient and freed before the optimizer
        # steps (stage_1_and_2.py DeepSpeedZeroOptimizer.step; measured: tests/test_training_deepspeed.py)
        grads = 0
    step = {"weights": weights, "gradients": grads, "optimizer": states, "activations": 0, "loss": 0,
            "other": temp + (zero.bucket if zero else 0)}
    if zero and off:
        # ZeRO-3 offload, the device's step (the optimizer's on the host): after it the persistent parameters are
        # gathered afresh, a new whole buffer each (stage3.py _post_step, partition_parameters.py
        # _allgather_params_coalesced)
        step["other"] += zero.persistent
    out = {"backward": backward, "optimizer step": step}
    if reference:
        # its own moment (a copy: the reference's weights are added to each moment below)
        out["reference forward"] = dict(reference) if reference is backward else \
            dict(reference, other=reference["other"] + (zero.bucket if zero else 0) + offload_gpu)
    if memory_generation.rows(setup, world):
        # GRPO's generate before the step (memory_generation.py): the weights (ZeRO-3 gathers them whole for it:
        # trl/models/utils.py _unwrap_model_for_generation, ds3_gather_for_generation), the states, no gradients
        gen = memory_generation.generation_bytes(model, config, setup, world)
        whole = counts.total * e if setup.sharding == "zero3" else 0
        out["generation"] = {"weights": at_backward + whole, "gradients": 0, "optimizer": states, "activations": 0,
                             "loss": 0, "other": 0, "generation": max(gen.values())}
    if setup.reference_model and setup.method == "full":
        # the reference model of a full fine-tune (GRPO's beta > 0, DPO without precompute_ref_log_probs; PEFT
        # disables its adapter instead): grpo_trainer.py GRPOTrainer.__init__ and dpo_trainer.py DPOTrainer.__init__
        # create_model_from_path in the policy's dtype, frozen, prepared as the policy is (sharded where its
        # weights are)
        ref = _weights_bytes(model, setup, counts.total, counts.linear)
        ref = -(-ref // divisor) if setup.sharding in _SHARDS_WEIGHTS else ref
        # ZeRO-3: its partition and, whole, the parameters its engine keeps gathered for good (memory_sharding.zero3)
        ref += zero.ref_persistent if zero else 0
        for moment in out.values():
            moment["weights"] += ref
    return {**out, "host": {"bytes": host},
            "info": {"late": int(backward_at == "end of backward"), "ref": int(backward_at == "reference forward"),
                     "total": counts.total,
                     "trainable": counts.trainable, "divisor": divisor, "e": e, "te": te, "cuda_copy": cuda_copy,
                     "master": fsdp.master if fsdp else te}}


def peak(model: ModelFacts, config: Mapping[str, Any] | None, setup: TrainingSetup, world: int) -> TrainingPeak:
    """The per-GPU peak of one step of ``setup`` on ``model`` over ``world`` data-parallel ranks."""
    ph = phases(model, config, setup, world)
    info = ph["info"]
    sums: dict[str, int] = {k: sum(ph[k].values()) for k in ("backward", "optimizer step", "generation") if k in ph}
    peak_at: str = max(sums, key=lambda k: sums[k])
    at = ph[peak_at]
    total = sums[peak_at]
    if peak_at == "backward":  # the loss's moment, the last layer's, or the end of backward (memory_backward)
        peak_at = "end of backward" if info["late"] else "reference forward" if info["ref"] else "backward"
    allowance = CONTEXT_BYTES + WORKSPACE_BYTES + int(FRAGMENTATION * total)
    if world > 1 and setup.sharding != "none":
        allowance += NCCL_BYTES + DDP_BUCKET_BYTES
    terms = {k: at.get(k, 0) for k in ("weights", "gradients", "optimizer", "activations", "loss", "generation")}
    dominant = max(terms, key=lambda k: terms[k])
    fsdp = setup.sharding in FSDP
    over = f" over {info['divisor']} ranks" if fsdp else ""
    master = info["master"]
    rules: tuple[str, ...] = (f"weights: {info['total']:,} parameters, {info['e']} bytes each as loaded"
             + (f" (+ {info['trainable']:,} adapter parameters in fp32)" if setup.method != "full" else "")
             + (f"; FSDP shards{over}, the trained ones in fp32 (mixed precision), units gathered in 16 bits"
                if fsdp and master != info["te"] else f"; FSDP shards{over} and the units it gathers" if fsdp else ""),
             f"gradients: {info['trainable']:,} trainable parameters x {master} bytes{over}",
             f"optimizer: {setup.optimizer} states" + (f" over {info['divisor']} ranks"
                                                       if setup.sharding in _SHARDS_STATES else ""),
             f"activations: {setup.micro_batch} x {setup.seq_len} tokens"
             + (f" x {setup.rows_per_example} rows (chosen and rejected)" if setup.rows_per_example > 1 else "")
             + ", checkpointing "
             + ("on" if setup.gradient_checkpointing else "off"),
             _LOSS_RULES.get(setup.loss, f"loss: {setup.loss} (fp32 logits: 12 bytes a token and vocabulary entry)"))
    if setup.completion_len:
        gen = ph.get("generation")
        rules += (memory_generation.rule(model, setup, world, gen["generation"] if gen else 0,
                                         sum(gen.values()) if gen else 0),)
    if setup.reference_model:
        why = "without precompute_ref_log_probs" if setup.rows_per_example > 1 else "beta > 0"
        rules += (f"weights: + the reference model's ({why}: a frozen copy as loaded)" if setup.method == "full"
                  else f"reference model: the adapter disabled ({why} with PEFT: no copy)",)
    return TrainingPeak(
        peak_bytes=total, peak_at=peak_at, weights_bytes=at["weights"], gradients_bytes=at["gradients"],
        optimizer_bytes=at["optimizer"], activations_bytes=at["activations"], loss_bytes=at["loss"],
        allowance_bytes=allowance, host_bytes=ph["host"]["bytes"], other_bytes=at["other"],
        generation_bytes=at.get("generation", 0), dominant=dominant,
        rules=rules,
        labels={"weights": "exact" if setup.method == "full" and setup.sharding not in _SHARDS_WEIGHTS else "rule",
                "gradients": "rule", "optimizer": "rule", "activations": "rule", "loss": "rule",
                "allowance": "allowance", **({"generation": "rule"} if setup.completion_len else {})})
