"""The TRL CLI: ``trl sft|dpo|grpo|kto|orpo|reward ... [--config x.yaml]``.

TRL's parser (trl/scripts/utils.py, ``TrlParser``) reads ``--config``'s YAML as the defaults of the same
dataclasses and lets the command line override them; the keys are the Trainer's and TRL's own
(``ModelConfig``: --use_peft, --lora_r, --load_in_4bit...; ``SFTConfig``...), read by :mod:`.forms_hf`.
Where neither says, TRL's own defaults apply (trl/trainer/sft_config.py and the other configs):
max_length 1024 tokens, gradient checkpointing on, bf16 unless fp16, the Trainer's batch of 8, LoRA r16,
alpha 32, dropout 0.05 (trl/trainer/model_config.py).

The loss: since trl 1.15 SFTTrainer computes it through TRL's fused LM head, never making the logits
(trl/trainer/sft_trainer.py ``SFTTrainer.__init__``: ``add_fused_lm_head``; :mod:`.memory_fused`), whatever
``loss_type`` says (``nll``, ``dft``) and with ``use_liger_kernel`` too (Liger's fused linear cross entropy
is turned off there: "it replaces the model's forward, which this trainer patches with a fused LM head");
only ``label_smoothing_factor`` > 0 makes the full logits again (``compute_loss``: "Label smoothing needs
the full logits"). trl 1.14 and before made the logits (``loss_type: chunked_nll`` chunked them in 1.14).
The version is read from the command's own interpreter (:mod:`.interpreter`); none found: the current one's.

``trl dpo`` (trl 1.16's DPOTrainer, :mod:`.memory_preference`): two rows an example (chosen and rejected in one
forward), max_length 1024 (trl/trainer/dpo_config.py), the fused LM head for the policy and the reference, and
the reference model unless ``precompute_ref_log_probs``. ``beta``, ``loss_type`` and ``loss_weights`` work on one
log-prob a row and change no tensor that grows with the tokens: not read. trl before 1.16 (1.10 is the last
looked at) made both models' logits (``selective_log_softmax``): a plain loss there.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.fit.training import forms_files, forms_hf
from gpu_launch.fit.training.forms_common import Launch, Value, as_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["VERBS", "read_trl"]

VERBS = ("sft", "dpo", "grpo", "kto", "orpo", "reward", "rloo", "ppo", "xpo", "nash_md", "online_dpo")


#: The first trl whose SFTTrainer computes its loss through the fused LM head.
FUSED_SINCE = (1, 15)
#: The first trl whose DPOTrainer is known to score through it (1.16, read; 1.10 made the logits).
DPO_FUSED_SINCE = (1, 16)


def read_trl(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Launch | None:
    """``trl VERB ...`` -> its launch; None for TRL's other commands (``trl env``)."""
    if len(argv) < 2 or argv[1] not in VERBS:
        return None
    verb, words = argv[1], list(argv[2:])
    flags = forms_hf.from_cli(forms_hf.parse_flags(words))
    raw = {}
    sources: list[str] = []
    if "config" in flags and flags["config"][0] not in (True, ""):
        path = str(flags["config"][0])
        data, full = forms_files.read_mapping(path, "the TRL config")
        raw.update(forms_hf.from_file(data, path))
        sources.append(full)
    raw.update({k: v for k, v in flags.items() if k != "config"})  # the command line wins over the YAML
    defaults = {"seq_len": 1024, "gradient_checkpointing": True, "micro_batch": 8, "lora_r": 16, "lora_alpha": 32,
                "lora_dropout": 0.05}
    if verb == "grpo":
        del defaults["seq_len"]  # prompt + completion (forms_common.to_setup)
    elif "max_length" in raw and str(raw["max_length"][0]).lower() in ("none", "null"):
        # max_length None: TRL truncates nothing (sft_config.py, dpo_config.py: ``int | None``), the data's length
        # decides: assumed (forms_common.to_setup), as for a script
        del raw["max_length"], defaults["seq_len"]
    if not ("fp16" in raw and str(raw["fp16"][0]).lower() in ("true", "1", "yes")):
        defaults["bf16"] = True
    from gpu_launch.fit.training.interpreter import installed_version

    # the command's transformers decides what --fsdp builds (forms_common.fsdp_version)
    version = installed_version(argv, environ, "transformers") if environ is not None and "fsdp" in raw else None
    launch = forms_hf.hf_keys(raw, Launch(f"trl {verb}", defaults=defaults, sources=tuple(sources),
                                          transformers_version=version))
    if verb == "sft":
        launch = _sft_loss(launch, raw, argv, environ)
    if verb == "grpo":
        launch = _grpo(launch, raw)
    if verb == "dpo":
        launch = _dpo(launch, raw, argv, environ)
    return launch


def _dpo(launch: Launch, raw: Mapping[str, tuple[Any, str]], argv: Sequence[str],
         environ: Mapping[str, str] | None) -> Launch:
    """DPOTrainer's step (module docstring): dpo_trainer.py ``DataCollatorForPreference`` (2 rows an example),
    ``DPOTrainer.__init__`` (``ref_model`` None: a frozen copy unless PEFT or ``precompute_ref_log_probs``),
    ``_compute_loss`` (the fused LM head)."""
    from gpu_launch.base.records import replace
    from gpu_launch.fit.training.forms_common import as_bool
    from gpu_launch.fit.training.interpreter import installed_version

    keys = dict(launch.keys)
    keys["rows_per_example"] = Value(2, "DPOTrainer's chosen and rejected rows")
    precompute = raw.get("precompute_ref_log_probs")
    if precompute is not None and as_bool(*precompute):
        keys["reference_model"] = Value(False, precompute[1])  # the log-probs come with the batch
    else:
        keys["reference_model"] = Value(True, "DPOTrainer's reference model")
    version = installed_version(argv, environ, "trl") if environ is not None else None
    if version is None or version >= DPO_FUSED_SINCE:
        keys["loss"] = Value("fused", "TRL's fused LM head")
    return replace(launch, keys=keys)


def _grpo(launch: Launch, raw: Mapping[str, tuple[Any, str]]) -> Launch:
    """GRPOTrainer's step and generation (trl 1.16: trl/trainer/grpo_config.py, grpo_trainer.py;
    memory_generation.py): the completion's length (max_completion_length 512), the generation batch
    (steps_per_generation, default gradient_accumulation_steps, or generation_batch_size), the fused LM head
    over the completion, a reference model when beta > 0 (0.0 by default), vLLM (use_vllm False by default;
    vllm_mode colocate, vllm_gpu_memory_utilization 0.3). The prompts' length is the data's: max_prompt_length
    where an older trl had it, else assumed (forms_common.to_setup)."""
    from gpu_launch.base.records import replace
    from gpu_launch.errors import UsageError
    from gpu_launch.fit.training.forms_common import as_bool

    keys = dict(launch.keys)

    def number(name: str, default: int) -> Value:
        value, written = raw.get(name, (default, f"TRL's {name} {default}"))
        return Value(as_int(value, written, name), written)

    keys["completion_len"] = number("max_completion_length", 512)
    if "max_prompt_length" in raw:  # trl before 1.x truncated prompts to it (512); 1.16 has no such field
        keys["prompt_len"] = number("max_prompt_length", 512)
    if raw.get("num_generations") is not None and number("num_generations", 8).value < 2:
        # grpo_config.py GRPOConfig.__post_init__
        raise UsageError(f"{raw['num_generations'][1]}: GRPO needs 2 generations a prompt or more",
                         hint="--num_generations 2 or more (TRL's default: 8)")
    if "generation_batch_size" in raw and "steps_per_generation" in raw:
        raise UsageError("generation_batch_size and steps_per_generation cannot both be set (TRL refuses them)",
                         hint="keep one of them")
    if "steps_per_generation" in raw:
        keys["generation_steps"] = number("steps_per_generation", 1)
    if "generation_batch_size" in raw:
        keys["generation_batch"] = number("generation_batch_size", 1)
    beta = raw.get("beta")
    if beta is not None and _positive(beta[0]):
        keys["reference_model"] = Value(True, beta[1])
    keys["loss"] = Value("fused", "TRL's fused LM head")
    if "use_vllm" in raw and as_bool(*raw["use_vllm"]):
        mode = str(raw.get("vllm_mode", ("colocate", ""))[0]).lower()
        if mode not in ("colocate", "server"):
            raise UsageError(f"{raw['vllm_mode'][1]}: vllm_mode is colocate or server", hint="--vllm_mode colocate")
        keys["vllm"] = Value(mode, raw["use_vllm"][1])
        share = raw.get("vllm_gpu_memory_utilization", (0.3, ""))[0]
        try:
            fraction = float(share)
        except (TypeError, ValueError):
            fraction = -1.0
        if not 0 < fraction <= 1:
            raise UsageError(f"vllm_gpu_memory_utilization {share!r} is not a share of the GPU's memory",
                             hint="a number above 0 and up to 1 (TRL's default: 0.3)")
        keys["vllm_share"] = Value(fraction, raw.get("vllm_gpu_memory_utilization", (0, "TRL's 0.3"))[1])
    return replace(launch, keys=keys)


def _sft_loss(launch: Launch, raw: Mapping[str, tuple[Any, str]], argv: Sequence[str],
              environ: Mapping[str, str] | None) -> Launch:
    """SFTTrainer's loss by the trl the command runs (module docstring)."""
    from gpu_launch.base.records import replace
    from gpu_launch.errors import UsageError
    from gpu_launch.fit.training.interpreter import installed_version

    version = installed_version(argv, environ, "trl") if environ is not None else None
    if version is not None and version < FUSED_SINCE:
        return launch  # the logits, chunked by loss_type chunked_nll (forms_hf) or whole
    keys = dict(launch.keys)
    smoothing = raw.get("label_smoothing_factor")
    loss_type = raw.get("loss_type")
    if loss_type is not None and str(loss_type[0]).lower() not in ("nll", "dft") and version is not None:
        # sft_trainer.py SFTTrainer.__init__ refuses any other
        raise UsageError(f"{loss_type[1]}: trl {'.'.join(map(str, version))} takes loss_type nll or dft",
                         hint="leave loss_type out (nll): its fused LM head chunks the loss already")
    if smoothing is not None and _positive(smoothing[0]):
        keys["loss"] = Value("plain", smoothing[1])  # the full logits' forward (compute_loss: label_smoother)
    else:
        said = next((raw[k][1] for k in ("use_liger_kernel", "use_liger", "loss_type") if k in raw), "")
        keys["loss"] = Value("fused", said or "TRL's fused LM head")
    return replace(launch, keys=keys)


def _positive(value: Any) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False
