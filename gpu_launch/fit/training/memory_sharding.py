"""What one rank of an FSDP2 step holds (``fully_shard`` as accelerate applies it: Trainer ``--fsdp``, whose
default is FSDP2 in transformers 5, and accelerate configs with ``fsdp_version: 2``). Arithmetic only.

From torch's own code (torch/distributed/fsdp/_fully_shard) and accelerate's (accelerate/utils/fsdp_utils.py
``fsdp2_prepare_model``), checked against ``FSDPMemTracker`` on 2 fake ranks (tests/test_training_sharded.py):

* every parameter is stored as its rank's dim-0 shard (_fsdp_param.py ``_init_sharded_param``); under mixed
  precision accelerate first upcasts the trainable parameters to fp32 ("FSDP upcast of low precision
  parameters"), so the shards, their gradients (``foreach_reduce`` casts the reduce-scatter output back to the
  parameter's dtype, _fsdp_collectives.py) and the optimizer's states are fp32: 4 + 4 + 8 bytes a parameter
  over N for AdamW, where a bf16 model without FSDP holds 2 + 2 + 4;
* a unit is all-gathered in ``MixedPrecisionPolicy.param_dtype`` (accelerate's ``set_mixed_precision``: bf16
  for --bf16) while it runs: accelerate wraps each decoder layer, the input embedding, and the final norm
  with the head as one unit that is *not* resharded after forward (it is needed again at once), so at the
  start of backward the head is held whole beside the shards; SHARD_GRAD_OP (``reshard_after_forward=False``)
  keeps every unit gathered from its forward to its backward;
* late in backward (a decoder layer's backward: its recompute and gradients), that unit is gathered, the
  unit before it prefetched and the previous unit's reduce-scatter input still held (one in flight:
  ``reduce_scatter_max_input_buffers = 1``; _fsdp_param_group.py ``post_backward`` frees the oldest only when
  the next unit's reduce-scatter starts), all in the param dtype. The layer's own unsharded gradient grows as
  autograd runs the layer backwards: in its MLP's backward only down_proj's is there (the layer's activations
  all alive), at its first norm's backward all of it (the activations gone): FSDPMemTracker's count peaks
  there on a wide model (post_backward runs after the layer's first op, its input norm). With tied embeddings
  the tail unit (final norm, embedding and head, grouped by accelerate) is reduce-scattered only after the
  embedding's backward, the last: its unsharded gradient is there through every layer's backward. The
  untied embedding's own backward holds it gathered with its dense gradient beside the layer's
  reduce-scatter input;
* ``CPUOffloadPolicy`` keeps the shards, their gradients and the optimizer's states (and its step) in host
  RAM (_fsdp_param.py ``offload_to_cpu``): the GPU holds the gathered units and the activations only.

DeepSpeed ZeRO-3 (:func:`zero3`), from deepspeed/runtime/zero (0.19.8), checked against rank 0 of a real
DeepSpeed step over 2 gloo ranks on CPU (tests/test_training_deepspeed.py): a rank keeps its 16-bit partition,
a contiguous gradient partition buffer of the same size (stage3.py ``_setup_for_real_optimizer``:
``grad_partitions_flat_buffer``, in ``gradient_accumulation_dtype``: the parameters' own), one reduce bucket
of ``reduce_bucket_size`` elements (stage3.py ``IPGBucketZ3`` buffers, ``contiguous_gradients``), and the fp32
master partition with the optimizer's states (memory.py). What is gathered whole through the backward is the
parameter coordinator's replay (memory_zero3.py: its prefetch runs ahead of the step, ``stage3_max_live_parameters``
bounds it, ``stage3_max_reuse_distance`` keeps what is used again soon, ``stage3_param_persistence_threshold``
keeps the small ones for good).
"""

from __future__ import annotations

from gpu_launch.base.records import dataclass
from gpu_launch.fit.training import memory_zero3

__all__ = ["FSDP", "Shards", "fsdp", "Zero3", "zero3", "zero_bucket", "Zero12", "zero12", "ZeroOffload",
           "zero_offload"]

#: The sharding kinds FSDP2 runs (hybrid: FULL_SHARD within a node, replicated across nodes)
FSDP = ("fsdp_full", "fsdp_grad_op", "fsdp_hybrid")


@dataclass(frozen=True)
class Shards:
    """One rank's bytes: resident ``weights`` (shards), ``grads``, ``states``, the step's ``temp``; what is
    gathered whole at the start of backward and late in it; what offload keeps in ``host`` RAM."""

    weights: int
    grads: int
    states: int
    temp: int
    gathered_backward: int
    gathered_late: int  # the layer, the unit prefetched, a reduce-scatter input (and a tied tail's gradient)
    late_grads: int  # the gradients' shards at that moment
    unit_grad_mlp: int  # the layer's unsharded gradient in its MLP's backward: down_proj's
    unit_grad: int  # the layer's unsharded gradient at its first norm's backward: all of it
    gathered_embed: int  # the untied embedding's backward: gathered, its gradient, the reduce-scatter input
    embed_grads: int
    head_grad: int  # the head's unsharded gradient while a chunked loss accumulates it
    host: int
    master: int  # bytes of a trained parameter's shard (4 under mixed precision)
    gathered_last: int = 0  # FSDP1: gathered at the last layer's end (SHARD_GRAD_OP: every unit), else gathered_late


def _over(n: int, d: int) -> int:
    return -(-n // max(1, d))


def fsdp(*, sharding: str, divisor: int, mixed: bool, e: int, te: int, weights: int, trainable: int,
         states_of, temp_of, total: int, layer: int, layers: int, head: int, embed: int,
         offload: bool, trained_layer: int | None = None, down: int = 0, version: int = 2,
         head_weight: int = 0) -> Shards:
    """One rank of ``divisor`` ranks. ``weights``: every parameter's bytes as loaded (``te`` a trainable
    one); ``states_of(b)`` / ``temp_of(b)``: the optimizer's states and step temporaries for ``b``-byte
    parameters; ``total``, ``layer``, ``head``, ``embed``: elements of the model, of its largest decoder layer
    (of ``layers``), of the tail unit (final norm + head, the embedding too when tied) and of the untied input
    embedding (0); ``trained_layer``: a layer's trained elements when not all are (LoRA's adapters);
    ``down``: the elements of a layer's down_proj (its MLP's last linear, the first whose gradient is made).
    ``version`` 1: FSDP1 (:func:`_fsdp1`), ``head`` its root unit, ``head_weight`` the root's elements whose
    gradients come first (the LM head's and the final norm's)."""
    master = 4 if mixed else te  # accelerate's upcast of the trainable parameters
    gathered_e = 2 if mixed else e  # MixedPrecisionPolicy.param_dtype (bf16/fp16), else as stored
    resident = _over(weights - trainable * te + trainable * master, divisor)
    grads = _over(trainable * master, divisor)
    states, temp = _over(states_of(master), divisor), _over(temp_of(master), divisor)
    if sharding == "fsdp_grad_op":
        at_backward = total * gathered_e  # nothing resharded after forward
    else:
        at_backward = head * gathered_e
    # layer k's backward (of L): it gathered, the unit before it prefetched (layer k-1; the first layer: the
    # untied embedding, none when tied: the embedding is in the tail, gathered already), the reduce-scatter
    # input of the unit after it (layer k+1's; the last layer: the untied tail's, none when tied) and its own
    # unsharded gradient (unit_grad, unit_grad_mlp: memory_backward.py counts it by moment); the largest k.
    # The gradients' shards: all but this layer's and the tail's or embedding's. Under CPU offload the same:
    # _fsdp_collectives.py foreach_reduce frees the reduce-scatter's output on the GPU as soon as its copy to
    # the host is issued ("we can free it here by not keeping a ref"), the input stays held as without offload.
    grad_unit = layer if trained_layer is None else trained_layer  # LoRA: the adapters' gradients only
    tail_grad = head if trained_layer is None else 0  # the tail trains in a full fine-tune only
    first = embed + (grad_unit if layers >= 2 else tail_grad * bool(embed))
    middle = layer + grad_unit if layers >= 3 else 0
    last = layer + (tail_grad if embed else 0) if layers >= 2 else 0
    late = layer + max(first, middle, last)
    if not embed:
        # tied: the tail unit (accelerate groups final norm, embedding and head) stays gathered from forward
        # (reshard_after_forward=False) and its gradient, the head's and the embedding's summed, waits for the
        # embedding's backward, the last of all
        late += head + tail_grad
    # the first layer's moment: its gradients and the embedding's not reduced yet (untied: the tail's are;
    # tied: the tail is the embedding's unit)
    late_grads = grads - _over((layer + (embed or head)) * master, divisor)
    late *= gathered_e
    at_embed = (2 * embed + layer) * gathered_e if embed else 0
    embed_grads = grads - _over(embed * master, divisor)
    head_grad = head * gathered_e
    last = late
    if version == 1:
        late, late_grads, at_embed, embed_grads, head_grad = _fsdp1(
            grads=grads, master=master, divisor=divisor, gathered_e=gathered_e, layer=layer, root=head,
            early=head_weight if trained_layer is None else 0, trains_root=trained_layer is None)
        last = late
        if sharding == "fsdp_grad_op":
            # SHARD_GRAD_OP reshards a unit only after its backward (_runtime_utils.py _post_forward_reshard: not
            # after forward; _post_backward_reshard): at the last layer's end every unit is still gathered, with
            # the root's early gradients (measured: 0.980 of the wide model's offloaded backward without them)
            last = (total + (head_weight if trained_layer is None else 0)) * gathered_e
    host = 0
    if offload:
        host = resident + grads + states + temp
        if version == 1:
            # FSDP1 allocates a host gradient for every unit's shard, frozen ones too (torch/distributed/fsdp/
            # _flat_param.py init_flat_param_attributes: ``_cpu_grad = torch.zeros_like(flat_param._local_shard)``): as
            # large as the shards, where a LoRA model's trained ones are a sliver (measured: 0.55 of the host's
            # bytes without them)
            host += resident - grads
        resident = grads = states = temp = 0
        # FSDP1 keeps each unit's reduce-scattered gradient on the device, cast to the parameter's dtype, from its
        # post-backward to the end of backward (torch/distributed/fsdp/_runtime_utils.py _accumulate_sharded_grad:
        # ``_saved_grad_shard``, copied to the host's ``_cpu_grad`` without blocking; _flat_param.py
        # prepare_gradient_for_optim deletes it in the final callback): late in backward the shards' gradients
        # are there as without offload (measured: the wide model's root's end, 0.861 without them)
        if version != 1:
            late_grads = embed_grads = 0
        # the reduce-scatter's output, in the parameters' dtype, waits on the GPU for its copy to the host
        at_embed += _over(embed * master, divisor)
    unit_mlp = min(down, grad_unit) if trained_layer is None else 0  # down_proj's gradient comes first
    return Shards(resident, grads, states, temp, at_backward, late, max(0, late_grads), unit_mlp * gathered_e,
                  grad_unit * gathered_e, at_embed, max(0, embed_grads), head_grad, host, master, last)


def _fsdp1(*, grads: int, master: int, divisor: int, gathered_e: int, layer: int, root: int, early: int,
           trains_root: bool) -> tuple[int, int, int, int, int]:
    """FSDP1 (``FullyShardedDataParallel`` as accelerate wraps it: each decoder layer a unit, the root unit the
    embedding, the final norm and the head; backward_prefetch None, accelerate's and the Trainer's default):
    (gathered late, the gradients' shards then, gathered at the root's end, the shards then, the head's
    gradient). From torch/distributed/fsdp (2.13):

    * the root is not resharded after forward (_runtime_utils.py ``_post_forward_reshard``) and its post-backward
      runs only once its last parameter's gradient is made, the embedding's (``_post_backward_hook`` is
      registered on the flat parameter's AccumulateGrad, _runtime_utils.py ``_register_post_backward_hook``):
      through every layer's backward the root stays gathered with its head's and final norm's gradients;
    * a unit's original parameters are views of its flat parameter (flat_param.py ``_use_unsharded_views``), so
      autograd makes the flat gradient by concatenating the views' gradients once the last of them is made
      (the split's backward, a ``cat``): at a unit's end its gradient is there twice, the views' and the cat's,
      before ``_post_backward_hook`` reduce-scatters it and frees them;
    * nothing is prefetched (``BackwardPrefetch`` None) and the collective is waited on in the hook, so no
      other layer is gathered and no reduce-scatter input outlives its unit.

    Measured (tests/training_oracle_sharded.py measure_fsdp1: use_orig_params True and False hold the same bytes):
    memory_backward.py's two FSDP1 moments (the last layer's end, every other activation alive, no gradient
    sharded yet; the first layer's end, every other gradient sharded), and the root's own end here."""
    late = (layer + root + early) * gathered_e
    late_grads = grads - _over((layer + root) * master, divisor)
    root_grad = root if trains_root else 0
    at_root = (root + 2 * root_grad) * gathered_e
    root_grads = grads - _over(root_grad * master, divisor)
    return late, late_grads, at_root, root_grads, early * gathered_e


#: DeepSpeed's defaults where the config does not name them (deepspeed/runtime/zero/config.py
#: DeepSpeedZeroConfig: reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7, stage3_max_reuse_distance 1e9,
#: stage3_max_live_parameters 1e9, stage3_param_persistence_threshold 1e5)
ZERO_DEFAULTS = {"reduce_bucket_size": 500_000_000, "stage3_prefetch_bucket_size": 50_000_000,
                 "stage3_max_reuse_distance": 1_000_000_000, "stage3_max_live_parameters": 1_000_000_000,
                 "stage3_param_persistence_threshold": 100_000}


def zero_bucket(written: tuple[tuple[str, object], ...], key: str, h: int) -> int:
    """A ZeRO size in elements as DeepSpeed runs it: the number written, DeepSpeed's default when absent, or
    ``"auto"`` as the Trainer fills it from the hidden size (transformers integrations/deepspeed.py
    ``trainer_config_finalize``: reduce_bucket_size h², stage3_prefetch_bucket_size 0.9·h²,
    stage3_param_persistence_threshold 10·h; it fills no other)."""
    value = dict(written).get(key, ZERO_DEFAULTS[key])
    if value == "auto":
        return {"reduce_bucket_size": h * h, "stage3_prefetch_bucket_size": int(0.9 * h * h),
                "stage3_param_persistence_threshold": 10 * h}.get(key, 0) or ZERO_DEFAULTS[key]
    try:
        return int(float(str(value)))
    except ValueError:
        return ZERO_DEFAULTS[key]


@dataclass(frozen=True)
class Zero3:
    """One ZeRO-3 rank's bytes beside its partitions: ``gathered`` early in the backward and ``late`` (the first
    layer's backward), the gradient partition buffer ``grads`` and the reduce ``bucket``; ``at_norm``: gathered at
    the final norm's backward; ``persistent``: the parameters gathered for good (stage3_param_persistence_threshold)."""

    gathered: int
    late: int
    grads: int
    bucket: int
    at_norm: int = 0
    persistent: int = 0
    # a full fine-tune's reference model (DPO, GRPO's beta > 0) under its own coordinator: the most it holds gathered
    # in its forward, its prefetches' flat buffers too, and what it holds gathered for good (memory_zero3.reference)
    ref_gathered: int = 0
    ref_persistent: int = 0


def zero3(*, divisor: int, e: int, trainable: int, block: tuple[tuple[str, int], ...], layers: int, head: int,
          tied: bool, h: int, head_dim: int, qk_norm: bool, checkpointing: bool,
          written: tuple[tuple[str, object], ...]) -> Zero3:
    """``e``: the 16-bit (or fp32) element size DeepSpeed computes in; ``block``: a decoder layer's linears (name,
    elements) as it calls them (of ``layers``); ``head``: the head's elements (the embedding's, tied or not)."""
    size = dict((k, zero_bucket(written, k, h)) for k in ZERO_DEFAULTS)
    got = memory_zero3.gathered(
        block=block, layers=layers, h=h, head_dim=head_dim, vocab=head // max(1, h), tied=tied,
        checkpointing=checkpointing, qk_norm=qk_norm, prefetch=size["stage3_prefetch_bucket_size"],
        max_live=size["stage3_max_live_parameters"], reuse=size["stage3_max_reuse_distance"],
        persist=size["stage3_param_persistence_threshold"])
    # the reference's own engine (trl/models/utils.py prepare_deepspeed) takes a copy of the config as
    # DPOTrainer.__init__ finds it: before the Trainer's trainer_config_finalize (at train(), integrations/
    # deepspeed.py deepspeed_init) fills the hidden size's "auto" values, and TRL's own fill is written as top-level
    # "zero_optimization.*" keys, which DeepSpeed does not read: "auto" is DeepSpeed's default there (its config's
    # pp_int fields take "auto" as the default). Measured: prefetch 5e7, persistence 1e5 on the reference's engine
    ref = {k: ZERO_DEFAULTS[k] if dict(written).get(k) == "auto" else size[k] for k in ZERO_DEFAULTS}
    _, ref_gathered, ref_persistent = memory_zero3.reference(
        block=block, layers=layers, h=h, head_dim=head_dim, vocab=head // max(1, h), tied=tied, qk_norm=qk_norm,
        prefetch=ref["stage3_prefetch_bucket_size"], max_live=ref["stage3_max_live_parameters"],
        reuse=ref["stage3_max_reuse_distance"], persist=ref["stage3_param_persistence_threshold"])
    return Zero3(gathered=got.early * e, late=got.late * e, grads=_over(trainable * e, divisor),
                 bucket=size["reduce_bucket_size"] * e, at_norm=got.at_norm * e, persistent=got.persistent * e,
                 ref_gathered=ref_gathered * e, ref_persistent=ref_persistent * e)


@dataclass(frozen=True)
class Zero12:
    """What a ZeRO-1/2 rank's backward holds beside its gradients, in bytes: the 16-bit gradient ``buffer`` of the
    parameters its partition overlaps (the most of any rank; ``buffer_last`` the last rank's, the head's owner),
    the reduce ``bucket`` (of ``bucket_elements``) and, under offload, ``norm64``: the largest share of a
    parameter in a partition, in fp64 (``last64``: the last parameter's, the head's, in the last partition)."""

    buffer: int
    buffer_last: int
    bucket: int
    bucket_elements: int
    norm64: int
    last64: int


def zero12(*, divisor: int, e: int, sizes: tuple[int, ...], written: tuple[tuple[str, object], ...],
           h: int) -> Zero12:
    """``sizes``: the trained parameters' elements in the model's order (DeepSpeed flattens each group so and
    gives rank r the elements [r·P, (r+1)·P)). From deepspeed/runtime/zero/stage_1_and_2.py (0.19.8), checked
    against rank 0 of a real step (tests/test_training_deepspeed.py, llama_wide):

    * ``__init__``: the flat group padded to a multiple of ``nccl_start_alignment_factor`` (2) × ranks, P its
      share; ``get_partition_info``: a rank's ``params_in_partition`` are those starting in its range and the
      one straddling its start, whole;
    * ``copy_grads_in_partition`` (contiguous_gradients, DeepSpeed's default, not under offload): at the first
      reduction of one of them, ``grads_in_partition``, one 16-bit buffer of all their elements, kept to the
      epilogue (``_release_ipg_buffers``) and on to the step through the gradients that view it;
    * ``setup_buckets``: at the first gradient hook, the ipg bucket of ``reduce_bucket_size`` elements;
    * ``reduce_independent_p_g_buckets_and_remove_grads``: a gradient larger than the bucket is not copied into
      it but stays the parameter's own (``extra_large_param_to_reduce``) until the next hook reduces it;
    * offload (``copy_grads_in_partition``'s cpu path): ``set_norm_for_param_grad_in_gpu`` casts the parameter's
      share in the partition to fp64 (``get_norm_dtype``: double where the device has it, as CUDA does) on the
      device for its norm, the gradient beside it."""
    bucket = zero_bucket(written, "reduce_bucket_size", h)
    total = sum(sizes)
    align = 2 * max(1, divisor)
    part = _over(_over(total, align) * align, divisor)
    starts, at = [], 0
    for n in sizes:
        starts.append(at)
        at += n
    ranks = max(1, divisor)
    overlap, share = [0] * ranks, 0
    for begin, n in zip(starts, sizes):
        first, last = begin // max(1, part), min((begin + n - 1) // max(1, part), ranks - 1)
        overlap[min(first, ranks - 1)] += n  # it starts in this rank's range: in its partition, whole
        for r in range(first + 1, last + 1):
            overlap[r] += n  # it straddles rank r's start: in that partition too, whole
        for r in range(first, last + 1):
            share = max(share, min(begin + n, (r + 1) * part) - max(begin, r * part))
    last = min(sizes[-1], total - (ranks - 1) * part) if sizes else 0
    return Zero12(buffer=max(overlap) * e, buffer_last=overlap[-1] * e, bucket=bucket * e, bucket_elements=bucket,
                  norm64=8 * share, last64=8 * max(0, last))


@dataclass(frozen=True)
class ZeroOffload:
    """What DeepSpeed's ZeRO-Offload (``offload_optimizer`` device cpu) keeps in pinned ``host`` RAM per rank, and
    the ``gpu`` staging buffer it adds on the device (ZeRO-1/2); ZeRO-3's device bytes beside an untied head's whole
    gradient while its partition goes to the host: ``reduce_norm``, the fp64 copy its norm takes, and ``reduce_copy``,
    the partition brought back to the device (a copy on a GPU only)."""

    host: int
    gpu: int
    reduce_norm: int = 0
    reduce_copy: int = 0


def zero_offload(*, stage: int, divisor: int, e: int, trainable: int, states: int, largest: int,
                 grad_buffer: int, head: int = 0) -> ZeroOffload:
    """``states``: the rank's fp32 master partition and the optimizer's fp32 states (memory.py); ``largest``: the
    elements of the largest trained parameter; ``grad_buffer``: ZeRO-3's gradient partition buffer (bytes);
    ``head``: the trained LM head's elements (ZeRO-3).

    From deepspeed/runtime/zero (0.19.8), measured by role on rank 0 of a real step (tests/
    test_training_deepspeed.py): under offload the fp32 gradient partition is allocated once and kept for good
    (stage_1_and_2.py ``initialize_optimizer_states``: the partition's ``.grad`` stays set when ``cpu_offload``;
    stage3.py ``_setup_for_real_optimizer``: the sub-group's ``subgroup_gradient_buffer``), beside the master
    partition and the states. ZeRO-1/2 add a 16-bit copy of the partition (``__init__``:
    ``param_buffer_of_bit16_for_cpu_offload_groups``, what the step writes before it goes to the device) and one
    largest parameter's 16-bit gradient on each side (``temp_grad_buffer_for_cpu_offload`` on the host,
    ``temp_grad_buffer_for_gpu_offload`` on the device). ZeRO-3 puts its gradient partition buffer on the host
    (stage3.py ``_setup_for_real_optimizer``: ``grad_partitions_flat_buffer`` on ``self.device``, the cpu under
    offload). DeepSpeedCPUAdam (the optimizer DeepSpeed makes under offload; a torch one is refused:
    engine.py ``_configure_optimizer``, ``zero_force_ds_cpu_optimizer``) steps in place in C++: no temporaries."""
    grads32 = _over(trainable * 4, divisor)
    if stage == 3:
        # each gradient's partition, reduce-scattered on the device, is moved to the host one parameter at a time
        # (stage3.py partition_grads: copied into the host buffer, then ``grad_buffer.to(grad_partition.device)``
        # brings it back, a copy in the parameters' dtype; on a CPU-only machine a no-op), its norm taken there
        # in fp64 (``_offload_grad_partition_at_boundary`` -> ``_constant_buffered_norm2``:
        # ``part.to(get_norm_dtype())``, zero/utils.py: torch.double where the accelerator has fp64), then cast to
        # fp32 for the host's fp32 gradient (4 bytes, after the fp64 copy is freed). The head's, the largest, is
        # reduced in the next gradient's hook (the final norm's), its whole 16-bit gradient alive
        return ZeroOffload(host=states + grads32 + grad_buffer, gpu=0, reduce_norm=_over(head * 8, divisor),
                           reduce_copy=_over(head * e, divisor))
    return ZeroOffload(host=states + grads32 + _over(trainable * e, divisor) + largest * e, gpu=largest * e)
