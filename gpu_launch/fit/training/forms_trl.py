"""The TRL CLI: ``trl sft|dpo|grpo|kto|orpo|reward ... [--config x.yaml]``.

TRL's parser (trl/scripts/utils.py, ``TrlParser``) reads ``--config``'s YAML as the defaults of the same
dataclasses and lets the command line override them; the keys are the Trainer's and TRL's own
(``ModelConfig``: --use_peft, --lora_r, --load_in_4bit...; ``SFTConfig``...), read by :mod:`.forms_hf`.
Where neither says, TRL's own defaults apply (trl/trainer/sft_config.py and the other configs):
max_length 1024 tokens, gradient checkpointing on, bf16 unless fp16, the Trainer's batch of 8.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.fit.training import forms_files, forms_hf
from gpu_launch.fit.training.forms_common import Launch, as_int

__all__ = ["VERBS", "read_trl"]

VERBS = ("sft", "dpo", "grpo", "kto", "orpo", "reward", "rloo", "ppo", "xpo", "nash_md", "online_dpo")


def read_trl(argv: Sequence[str]) -> Launch | None:
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
    defaults = {"seq_len": seq, "gradient_checkpointing": True, "micro_batch": 8, "lora_r": 16, "lora_alpha": 32}
    if not ("fp16" in raw and str(raw["fp16"][0]).lower() in ("true", "1", "yes")):
        defaults["bf16"] = True
    if verb == "grpo" and ("max_prompt_length" in raw or "max_completion_length" in raw):
        prompt = as_int(*raw.get("max_prompt_length", (512, "")), "max_prompt_length")
        completion = as_int(*raw.get("max_completion_length", (256, "")), "max_completion_length")
        defaults["seq_len"] = prompt + completion
    return forms_hf.hf_keys(raw, Launch(f"trl {verb}", defaults=defaults, sources=tuple(sources)))
