"""What every launch form's reader hands on (:class:`Launch`): the memory-relevant keys in one vocabulary,
each with how the user wrote it, and how they become a :class:`TrainingSetup` once the model is known
(:func:`to_setup`: the precision depends on the checkpoint's dtype; gpulaunch's ``--train-seq``,
``--train-method`` and ``--micro-batch`` win over the launch's own, as ``--ctx`` wins over ``-c``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.base.records import dataclass, field, replace
from gpu_launch.errors import UsageError
from gpu_launch.fit.training.setup import OPTIMIZERS, TrainingSetup

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Launch", "Value", "as_bool", "as_int", "optimizer_of", "to_setup", "fsdp_version", "DEFAULT_SEQ",
           "MICRO_BATCH_WORD", "FSDP2_TRAINER_SINCE"]

DEFAULT_SEQ = 2048  # tokens a sequence when nothing says: an assumption the plan states
#: The first transformers whose Trainer builds FSDP2 for ``--fsdp`` when ``fsdp_config`` names no version
#: (training_args.py ``_process_fsdp_args``: ``fsdp_config.get("version", 2)``; 5.0 to 5.9: 1)
FSDP2_TRAINER_SINCE = (5, 10)
MICRO_BATCH_WORD = "{micro_batch}"
_TRUE = {"true", "t", "yes", "y", "1", "on"}
_FALSE = {"false", "f", "no", "n", "0", "off"}


@dataclass(frozen=True)
class Value:
    """One key's value and how it was written (``--bf16``, ``micro_batch_size: 4 (cfg.yml)``)."""

    value: Any
    written: str


@dataclass(frozen=True)
class Launch:
    """A training launch as read, before the model is known. ``keys`` use one vocabulary: model, method,
    lora_r, lora_alpha, lora_dropout, lora_targets, dora, quant_bits, quant_double, micro_batch, seq_len, grad_accum,
    gradient_checkpointing, optimizer, loss, attention, packing, bf16, fp16, dtype, sharding,
    offload_optimizer, offload_params; for FSDP's version (:func:`fsdp_version`): fsdp_version (the launch names
    the one that runs), fsdp_trainer (the Trainer's ``--fsdp`` builds the plugin: the version its
    ``fsdp_config`` names, or None), fsdp_launcher (what accelerate's plugin reads from the environment:
    accelerate launch's config or ``--fsdp_version``, ``FSDP_VERSION``). ``defaults``: the framework's own values where the launch says
    nothing (known, not assumed); what neither says is assumed and listed."""

    launcher: str
    keys: Mapping[str, Value] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    nproc: int | None = None  # processes a node the launcher is told (None: gpulaunch's {n})
    script: bool = False  # the model, LoRA and length may live in the user's script: what is not read is assumed
    transformers: int | None = None  # transformers' major version in the command's interpreter (None: not found)
    transformers_version: tuple[int, ...] | None = None  # its whole version (the FSDP default moved in 5.10)
    nnodes: int = 1  # the nodes the launcher spreads its ranks over (torchrun --nnodes, accelerate --num_machines)
    trainer_flags: bool = False  # the script takes Trainer flags: TrainingArguments' defaults apply to what it omits
    notes: tuple[str, ...] = ()

    def get(self, key: str) -> Any:
        found = self.keys.get(key)
        return found.value if found is not None else self.defaults.get(key)

    def said(self, key: str) -> bool:
        return key in self.keys

    def written(self, key: str) -> str:
        found = self.keys.get(key)
        return found.written if found is not None else key


def as_bool(value: Any, written: str) -> bool:
    """HfArgumentParser's ``string_to_bool`` (transformers/hf_argparser.py): yes/no, true/false, t/f, y/n,
    1/0, any case; a YAML boolean as it is. Anything else is one line."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UsageError(f"{written}: {value!r} is not a boolean", hint="true or false (yes/no, 1/0)")


def as_int(value: Any, written: str, what: str, low: int = 1) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.strip()
                                                                    .lstrip("+-").isdigit()
                                                                    and len(value.strip()) <= 12)):
        raise UsageError(f"{written}: {what} {value!r} is not a whole number", hint=f"{what} is {low} or more")
    number = int(value)
    if number < low:
        raise UsageError(f"{written}: {what} {number} must be {low} or more", hint=f"{what} is {low} or more")
    return number


#: Trainer's --optim names (transformers/training_args.py, OptimizerNames) onto what the memory rules know.
_OPTIM = {"adamw_torch": "adamw_torch", "adamw_hf": "adamw_torch", "adamw": "adamw_torch",
          "adamw_torch_fused": "adamw_torch_fused", "adamw_torch_foreach": "adamw_torch_foreach",
          "adamw_bnb_8bit": "adamw_8bit", "adamw_8bit": "adamw_8bit", "bnb_8bit": "adamw_8bit",
          "paged_adamw_8bit": "paged_adamw_8bit", "paged_adamw_32bit": "paged_adamw_32bit", "adafactor": "adafactor",
          "sgd": "sgd", "adamw_apex_fused": "adamw_torch_fused", "adamw_torch_xla": "adamw_torch"}


def optimizer_of(value: Any) -> str | None:
    key = str(value).strip().lower()
    return _OPTIM.get(key, key if key in OPTIMIZERS else None)


def _precision(launch: Launch, model_dtype: str | None, assumed: list[str]) -> str:
    """The weights' dtype as loaded and the step's compute. An explicit ``dtype`` wins; else the
    checkpoint's own (transformers v5 loads ``dtype="auto"`` by default; v4 loaded fp32: say --dtype)."""
    bf16 = bool(launch.get("bf16"))
    fp16 = bool(launch.get("fp16"))
    dtype = str(launch.get("dtype") or "").lower().replace("torch.", "")
    v4 = launch.script and launch.transformers is not None and launch.transformers < 5
    if dtype in ("", "none") and v4:
        # transformers 4's from_pretrained loads fp32 unless told (modeling_utils.py: torch_dtype=None -> the
        # default dtype, float32); the script may say torch_dtype itself, so it stays an assumption
        dtype = "float32"
        assumed.append(f"weights loaded as float32 (transformers {launch.transformers}'s default in the command's "
                       "interpreter, unless the script passes torch_dtype): say --dtype")
    elif dtype in ("", "auto", "none"):
        ckpt = (model_dtype or "").lower()
        dtype = "bfloat16" if "bf16" in ckpt or "bfloat16" in ckpt else "float16" if "f16" in ckpt or "float16" in ckpt \
            else "float32" if ckpt else "bfloat16"
        if launch.script and not launch.said("dtype"):
            found = f"transformers {launch.transformers} in the command's interpreter" \
                if launch.transformers is not None else "transformers v5's default; none found in the command's " \
                                                        "interpreter"
            assumed.append(f"weights loaded as {dtype} (the checkpoint's dtype: {found}): say --dtype")
    if dtype in ("float32", "fp32", "32"):
        return "amp_bf16" if bf16 else "amp_fp16" if fp16 else "fp32"
    if dtype in ("float16", "fp16", "half"):
        return "fp16"
    return "bf16"


def to_setup(launch: Launch, model: str, model_dtype: str | None, options: Mapping[str, Any]) -> TrainingSetup:
    """The setup of ``launch`` for the model (its source and checkpoint dtype), gpulaunch's options winning."""
    assumed: list[str] = []
    g = launch.get
    method = options.get("train_method") or g("method")
    if method is None:
        method = "full"
        if launch.script:
            assumed.append("full fine-tune (the script may add LoRA): say --train-method full|lora|qlora")
    quant = g("quant_bits")
    if method == "qlora":
        quant = quant or 4
    elif method == "lora" and quant:
        method = "qlora"
    completion = int(g("completion_len") or 0)
    seq = options.get("train_seq") or g("seq_len")
    if completion:
        seq = _generated_seq(launch, options, completion, assumed)
        if (g("attention") or "sdpa") not in ("eager", "flash_attention_2"):
            # the step's attention mask has zeros in a real batch (memory_activations._padding_mask): sized so
            assumed.append("a padding mask in every step, as prompts and completions of different lengths make "
                           "(sdpa keeps a (batch, 1, s, s) mask a layer, about 2·s² bytes a sequence and layer): a "
                           "batch with none (equal prompts, every completion to max_completion_length) holds less, "
                           "so the plan is over for it, never under; --attn_implementation flash_attention_2 keeps "
                           "none")
    elif seq is None:
        seq = DEFAULT_SEQ
        assumed.append(f"{DEFAULT_SEQ} tokens a sequence: say --train-seq or the launch's max length")
    micro = options.get("micro_batch") or g("micro_batch")
    if micro == MICRO_BATCH_WORD:
        micro = 1
    elif micro is None:
        # TrainingArguments.per_device_train_batch_size defaults to 8 (transformers/training_args.py): a script
        # that takes Trainer flags runs 8 when none is given; any other script: the smallest, 1
        micro = 8 if launch.trainer_flags else 1
        why = " (the Trainer's default)" if launch.trainer_flags else ""
        assumed.append(f"micro-batch {micro} a GPU{why}: say --micro-batch or the launch's batch size")
    lora_r = g("lora_r") if method in ("lora", "qlora") else None
    if method in ("lora", "qlora") and lora_r is None:
        lora_r = 16
        assumed.append("LoRA rank 16: say the launch's lora_r")
    targets = g("lora_targets") or (() if method == "full" else ("q_proj", "v_proj"))
    optimizer = g("optimizer") or "adamw_torch"
    version = fsdp_version(launch, assumed)
    return TrainingSetup(
        model=model, launcher=launch.launcher, method=method, precision=_precision(launch, model_dtype, assumed),
        micro_batch=int(micro), seq_len=int(seq), grad_accum=int(g("grad_accum") or 1),
        gradient_checkpointing=bool(g("gradient_checkpointing")), optimizer=optimizer,
        loss=g("loss") or "plain", attention=g("attention") or "sdpa", packing=bool(g("packing")),
        lora_r=lora_r, lora_alpha=g("lora_alpha") if lora_r else None,
        lora_dropout=float(g("lora_dropout") or 0.0) if lora_r else 0.0,
        lora_targets=tuple(targets) if method != "full" else (), dora=bool(g("dora")) and method != "full",
        quant_bits=int(quant) if quant and method != "full" else None, quant_double=bool(g("quant_double")),
        sharding=g("sharding") or "none", offload_optimizer=bool(g("offload_optimizer")),
        offload_params=bool(g("offload_params")), nproc=launch.nproc, assumed=tuple(assumed),
        mixed_precision=bool(g("bf16") or g("fp16")), zero_buckets=tuple(g("zero_buckets") or ()),
        sources=launch.sources, fsdp_version=version, completion_len=completion,
        # steps_per_generation defaults to gradient_accumulation_steps (grpo_config.py GRPOConfig.__post_init__)
        generation_steps=int(g("generation_steps") or g("grad_accum") or 1),
        generation_batch=int(g("generation_batch") or 0),
        # a full fine-tune's is a frozen copy; PEFT disables its adapter instead (memory.py)
        reference_model=bool(g("reference_model")), rows_per_example=int(g("rows_per_example") or 1),
        vllm=str(g("vllm") or ""), vllm_share=float(g("vllm_share") or 0.0))


def fsdp_version(launch: Launch, assumed: list[str]) -> int:
    """The FSDP that runs: 1 (FullyShardedDataParallel) or 2 (fully_shard); 2 when the launch does not shard
    with FSDP. accelerate's plugin takes ``fsdp_version`` from its caller, else ``FSDP_VERSION`` from the
    environment, else 1 (accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__);
    accelerate launch sets that from its config's ``fsdp_version`` or ``--fsdp_version``, 1 by default
    (commands/launch.py, utils/launch.py prepare_multi_gpu_env). The Trainer's ``--fsdp`` passes its own plugin,
    which wins (trainer.py create_accelerator_and_postprocess): in transformers 5 its version is
    ``fsdp_config``'s ``version`` (``fsdp_version`` read the same: the prefix is dropped), defaulting to 2 since
    5.10 and to 1 before (training_args.py ``_process_fsdp_args``); transformers 4 sets the plugin's other
    variables in the environment but not the version, so the environment's (or accelerate launch's) decides."""
    from gpu_launch.fit.training.memory_sharding import FSDP

    if launch.get("sharding") not in FSDP:
        return 2
    if launch.said("fsdp_version"):
        return int(launch.get("fsdp_version"))
    trainer, launcher = launch.keys.get("fsdp_trainer"), launch.keys.get("fsdp_launcher")
    version = launch.transformers_version
    if trainer is not None and version is not None and version[0] < 5:
        return int(launcher.value) if launcher is not None else 1
    if trainer is not None:
        if trainer.value is not None:
            return int(trainer.value)
        if version is None:
            assumed.append("FSDP2 (the Trainer's --fsdp since transformers 5.10; none found in the command's "
                           "interpreter, and 5.0 to 5.9 run FSDP1): say fsdp_config's version")
            return 2
        return 2 if version >= FSDP2_TRAINER_SINCE else 1
    if launcher is not None:
        return int(launcher.value)
    assumed.append("FSDP1 (accelerate's default where nothing names the version): say FSDP_VERSION=2 or the "
                   "config's fsdp_version: 2")
    return 1


def _generated_seq(launch: Launch, options: Mapping[str, Any], completion: int, assumed: list[str]) -> int:
    """GRPO's sequence: the prompt + the completion (memory_generation.py). The prompts' length is the data's:
    ``--train-seq`` says prompt + completion, an older trl's max_prompt_length the prompt; else it is assumed."""
    from gpu_launch.fit.training.memory_generation import DEFAULT_PROMPT

    said = options.get("train_seq")
    if said:
        if int(said) <= completion:
            raise UsageError(f"--train-seq {said}: {launch.launcher} sizes prompt + completion, and the completion "
                             f"alone is {completion} tokens ({launch.written('completion_len')})",
                             hint=f"--train-seq {completion + DEFAULT_PROMPT} (a {DEFAULT_PROMPT}-token prompt)")
        return int(said)
    if launch.get("prompt_len"):
        return int(launch.get("prompt_len")) + completion
    assumed.append(f"prompts of {DEFAULT_PROMPT} tokens (the data's; trl 1.16 caps none): say --train-seq for prompt "
                   f"+ completion ({completion} + {DEFAULT_PROMPT} = {completion + DEFAULT_PROMPT} now)")
    return DEFAULT_PROMPT + completion


def with_keys(launch: Launch, **values: Value) -> Launch:
    return replace(launch, keys={**launch.keys, **values})
