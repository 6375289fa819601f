"""What a training launch asks for (:class:`TrainingSetup`) and what one GPU holds at a step's peak
(:class:`TrainingPeak`): the two halves of training sizing meet here (see the package docstring)."""

from __future__ import annotations

from gpu_launch.base.records import dataclass, field

__all__ = ["TrainingSetup", "TrainingPeak", "METHODS", "SHARDING", "OPTIMIZERS", "LOSSES", "PRECISIONS"]

#: How the model's parameters are trained.
METHODS = ("full", "lora", "qlora")
#: How the data-parallel ranks share what a step keeps. "none": one process; "ddp": every rank a full copy.
SHARDING = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp_full", "fsdp_grad_op", "fsdp_hybrid")
#: The optimizers, by the Hugging Face Trainer's ``--optim`` names (TRL, axolotl and LLaMA-Factory use them too).
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_torch_foreach", "adamw_8bit", "paged_adamw_8bit",
              "paged_adamw_32bit", "adafactor", "sgd", "sgd_momentum")
#: The loss as computed: "plain" (full fp32 logits), or a chunked/fused one that never holds them whole;
#: "fused": TRL's fused LM head (trl >= 1.15, every SFTTrainer loss: trl/trainer/utils.py add_fused_lm_head).
LOSSES = ("plain", "chunked", "liger", "cce", "fused")
#: The weights' dtype as loaded and the step's compute: "fp32", "bf16", "fp16" (pure), "amp_bf16" and
#: "amp_fp16" (fp32 weights under autocast, as Trainer's --bf16/--fp16 do when the model loads in fp32).
PRECISIONS = ("fp32", "bf16", "fp16", "amp_bf16", "amp_fp16")


@dataclass(frozen=True)
class TrainingSetup:
    """One training launch as far as memory goes. Every field has the value the framework would use; where
    the launch did not say and the framework's default is not known for sure, the value is an assumption
    and ``assumed`` says so, in words a user can act on ("2048 tokens: say --max_length")."""

    model: str  # the path or Hugging Face id as written
    launcher: str  # "trl", "axolotl", "llamafactory", "trainer", "torchtune"
    method: str = "full"  # METHODS
    precision: str = "bf16"  # PRECISIONS
    micro_batch: int = 1  # per device
    seq_len: int = 2048  # tokens a sequence (after packing: the packed length)
    grad_accum: int = 1
    gradient_checkpointing: bool = False
    optimizer: str = "adamw_torch"  # OPTIMIZERS
    loss: str = "plain"  # LOSSES
    attention: str = "sdpa"  # "sdpa", "eager", "flash_attention_2"
    packing: bool = False
    lora_r: int | None = None
    lora_alpha: int | None = None
    lora_dropout: float = 0.0  # peft's LoraConfig.lora_dropout: above 0 each adapter keeps its dropout mask
    lora_targets: tuple[str, ...] = ()  # module names; ("all-linear",) for every linear layer but the head
    dora: bool = False
    quant_bits: int | None = None  # 4 or 8 (bitsandbytes) for QLoRA / 8-bit bases
    quant_double: bool = False  # bnb_4bit_use_double_quant
    sharding: str = "none"  # SHARDING
    offload_optimizer: bool = False  # ZeRO offload_optimizer / FSDP cpu offload
    offload_params: bool = False
    nproc: int | None = None  # the processes a node the launch asks for, where it says (None: gpulaunch fills {n})
    assumed: tuple[str, ...] = ()  # what was not read: each item says what was taken and how to say otherwise
    sources: tuple[str, ...] = ()  # the files read (YAML, DeepSpeed JSON, accelerate config)
    # Added by the memory half (fit/training/memory*.py): the tokens a chunked/fused loss takes at a time
    # (None: memory_activations.LOSS_CHUNK_TOKENS, the order of Liger's and TRL chunked_nll's chunks).
    loss_chunk_tokens: int | None = None
    # The launch asks for mixed precision (Trainer --bf16/--fp16, accelerate's mixed_precision): under FSDP,
    # accelerate keeps the trainable parameters in fp32 (accelerate/utils/fsdp_utils.py fsdp2_prepare_model).
    mixed_precision: bool = False
    # The DeepSpeed config's ZeRO sizes as written (reduce_bucket_size, stage3_prefetch_bucket_size,
    # stage3_max_reuse_distance, stage3_max_live_parameters, stage3_param_persistence_threshold: a number or
    # "auto"); absent ones take DeepSpeed's defaults (memory_sharding.py)
    zero_buckets: tuple[tuple[str, object], ...] = ()
    # FSDP's version: 2 (fully_shard; the Trainer's --fsdp since transformers 5.10, accelerate's fsdp_version: 2,
    # torchtune) or 1 (FullyShardedDataParallel: accelerate launch's and axolotl's default, the Trainer's --fsdp in
    # transformers 4 and 5.0-5.9): FSDP1 wraps the decoder layers only, so its root unit holds the embedding, the
    # final norm and the head together (memory.py, memory_sharding._fsdp1). Read by forms_common.fsdp_version.
    fsdp_version: int = 2
    # GRPO (``trl grpo``; memory_generation.py): how many of ``seq_len``'s tokens are the completion
    # (max_completion_length; the rest is the prompt; only the completion is scored; 0: the launch generates
    # nothing), and the generation batch: steps_per_generation (each GPU generates micro_batch × it at once), or
    # generation_batch_size over all ranks where the launch says that instead
    completion_len: int = 0
    generation_steps: int = 1
    generation_batch: int = 0
    # the loss compares with a reference model's log-probs computed at each step (GRPO with beta > 0, DPO without
    # precompute_ref_log_probs): a full fine-tune holds a frozen second copy of the weights as loaded; PEFT
    # disables its adapter instead (no copy). DPO runs it after the policy's forward (memory_preference.py)
    reference_model: bool = False
    # the rows of the batch a training example makes: 2 for DPO (dpo_trainer.py DataCollatorForPreference stacks
    # the chosen and the rejected rows: one forward of 2 x per_device_train_batch_size rows), else 1
    rows_per_example: int = 1
    # where the completions are made with vLLM (use_vllm): "" (none: model.generate on this GPU), "server"
    # (another GPU), "colocate" (vLLM in the training process: ``vllm_share`` of each GPU's memory reserved)
    vllm: str = ""
    vllm_share: float = 0.0


@dataclass(frozen=True)
class TrainingPeak:
    """One GPU at the peak of a step. ``peak_bytes`` is what PyTorch's allocator holds then (the tensors, as
    ``torch.cuda.max_memory_allocated`` counts them); ``allowance_bytes`` comes on top (CUDA context,
    workspaces, NCCL, allocator rounding). The terms are what is alive at that moment, so they add up to
    ``peak_bytes`` (``other_bytes`` holds what none of them names: the optimizer step's temporaries, say)."""

    peak_bytes: int
    # "generation" (GRPO's model.generate before the step: weights, states, the KV cache), "backward" (the start
    # of backward: every activation alive, the loss's tensors, the last layer's backward;
    # the only gradient then is the LM head's, when it trains), "reference forward" (DPO's reference model run after
    # the policy's forward: every activation alive, no gradient; memory_preference.py), "end of backward" (the gradients nearly all
    # there, one layer's activations) or "optimizer step"
    peak_at: str
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    loss_bytes: int
    allowance_bytes: int
    host_bytes: int = 0  # what the setup keeps in host RAM (offloaded states, parameters)
    other_bytes: int = 0
    generation_bytes: int = 0  # GRPO's generation at its peak: the KV cache and generate's temporaries
    dominant: str = ""  # the largest term's name
    rules: tuple[str, ...] = ()  # one line a term: how it was worked out and where the rule comes from
    labels: dict[str, str] = field(default_factory=dict)  # term -> "exact" / "rule" / "allowance"

    @property
    def moment(self) -> str:
        """The peak's moment as plans and errors say it: "the start of backward", "the end of backward"..."""
        return "the start of backward" if self.peak_at == "backward" else f"the {self.peak_at}"
