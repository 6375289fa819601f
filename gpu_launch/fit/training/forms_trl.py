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
    seq = 768 if verb == "grpo" else 1024  # GRPOConfig: max_prompt_length 512 + max_completion_length 256
    defaults = {"seq_len": seq, "gradient_checkpointing": True, "micro_batch": 8, "lora_r": 16, "lora_alpha": 32,
                "lora_dropout": 0.05}
    if not ("fp16" in raw and str(raw["fp16"][0]).lower() in ("true", "1", "yes")):
        defaults["bf16"] = True
    if verb == "grpo" and ("max_prompt_length" in raw or "max_completion_length" in raw):
        prompt = as_int(*raw.get("max_prompt_length", (512, "")), "max_prompt_length")
        completion = as_int(*raw.get("max_completion_length", (256, "")), "max_completion_length")
        defaults["seq_len"] = prompt + completion
    from gpu_launch.fit.training.interpreter import installed_version

    # the command's transformers decides what --fsdp builds (forms_common.fsdp_version)
    version = installed_version(argv, environ, "transformers") if environ is not None and "fsdp" in raw else None
    launch = forms_hf.hf_keys(raw, Launch(f"trl {verb}", defaults=defaults, sources=tuple(sources),
                                          transformers_version=version))
    if verb == "sft":
        launch = _sft_loss(launch, raw, argv, environ)
    return launch


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
