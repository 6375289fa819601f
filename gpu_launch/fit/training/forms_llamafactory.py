"""LLaMA-Factory: ``llamafactory-cli train cfg.yaml [key=value ...]`` (also ``lmf train``, and
``llamafactory-cli train --key value``).

Its keys (src/llamafactory/hparams: model_args.py, finetuning_args.py, data_args.py, and the Trainer's):
``model_name_or_path``, ``finetuning_type`` (lora by default), ``lora_rank`` (8), ``lora_alpha`` (twice the
rank), ``lora_target`` (all), ``use_dora``, ``quantization_bit``, ``double_quantization`` (on),
``cutoff_len`` (2048), ``per_device_train_batch_size`` (the Trainer's 8), ``bf16``/``fp16``, ``deepspeed``,
``flash_attn``, ``enable_liger_kernel``, ``packing``, and ``disable_gradient_checkpointing``: gradient
checkpointing is ON unless it says true (model/model_utils/checkpointing.py). ``key=value`` words after
the file override its keys (hparams/parser.py reads them with OmegaConf's from_dotlist).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.training import forms_files, forms_hf
from gpu_launch.fit.training.forms_common import Launch, Value, as_bool, as_int, with_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["read_llamafactory"]


def read_llamafactory(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Launch | None:
    if len(argv) < 2 or argv[1] != "train":
        return None
    words = list(argv[2:])
    raw: dict[str, tuple[Any, str]] = {}
    sources: list[str] = []
    files = [w for w in words if w.endswith((".yaml", ".yml", ".json")) and "=" not in w]
    if files:
        data, full = forms_files.read_mapping(files[0], "the LLaMA-Factory config")
        raw.update(forms_hf.from_file(data, files[0]))
        sources.append(full)
    for word in words:
        key, eq, value = word.partition("=")
        if eq and not word.startswith("-"):
            raw[key.strip()] = (value, word)
    raw.update(forms_hf.from_cli(forms_hf.parse_flags(words)))
    if not raw:
        raise UsageError("llamafactory-cli train: no config file or key is given",
                         hint="llamafactory-cli train config.yaml")
    shared = {k: v for k, v in raw.items() if k in ("model_name_or_path", "per_device_train_batch_size",
                                                      "cutoff_len", "gradient_accumulation_steps", "bf16", "fp16",
                                                      "deepspeed", "optim", "packing", "use_dora", "fsdp",
                                                      "fsdp_config")}
    # its YAML's fsdp and fsdp_config are the Trainer's own (Seq2SeqTrainingArguments), as the command's
    # transformers reads them (forms_common.fsdp_version)
    from gpu_launch.fit.training.interpreter import installed_version

    version = installed_version(argv, environ, "transformers") if environ is not None else None
    launch = forms_hf.hf_keys(shared, Launch("llamafactory", sources=tuple(sources),
                                             defaults={"seq_len": 2048, "micro_batch": 8},
                                             transformers=version[0] if version else None,
                                             transformers_version=version))
    extra: dict[str, Value] = {}
    kind = str(raw.get("finetuning_type", ("lora", ""))[0]).lower()
    quant = raw.get("quantization_bit")
    bits = as_int(quant[0], quant[1], "quantization_bit") if quant and quant[0] not in (None, "null") else None
    written = raw.get("finetuning_type", ("", "finetuning_type: lora (LLaMA-Factory's default)"))[1]
    if kind in ("lora", "oft"):
        extra["method"] = Value("qlora" if bits else "lora", written)
        rank = raw.get("lora_rank", (8, "lora_rank: 8 (LLaMA-Factory's default)"))
        r = as_int(rank[0], rank[1], "the LoRA rank")
        extra["lora_r"] = Value(r, rank[1])
        alpha = raw.get("lora_alpha")
        extra["lora_alpha"] = Value(as_int(alpha[0], alpha[1], "lora_alpha") if alpha and alpha[0] is not None
                                    else 2 * r, alpha[1] if alpha else "lora_alpha (twice the rank)")
        target = raw.get("lora_target", ("all", ""))[0]
        targets = [t.strip() for t in (target if isinstance(target, list) else str(target).split(","))]
        extra["lora_targets"] = Value(("all-linear",) if targets == ["all"] else tuple(targets), "lora_target")
        if bits and quant is not None:
            extra["quant_bits"] = Value(bits, quant[1])
            double = raw.get("double_quantization", (True, ""))
            extra["quant_double"] = Value(as_bool(*double), double[1] or "double_quantization")
    elif kind in ("full", "freeze"):
        extra["method"] = Value("full", written)
    else:
        raise UsageError(f"{written}: finetuning_type {kind!r} is not one LLaMA-Factory has",
                         hint="lora, oft, freeze or full")
    disable = raw.get("disable_gradient_checkpointing", (False, ""))
    extra["gradient_checkpointing"] = Value(not as_bool(*disable), disable[1] or "LLaMA-Factory's default "
                                            "(disable_gradient_checkpointing: false)")
    flash = str(raw.get("flash_attn", ("auto", ""))[0]).lower()
    extra["attention"] = Value({"fa2": "flash_attention_2", "disabled": "eager", "sdpa": "sdpa"}.get(flash, "sdpa"),
                               "flash_attn")
    if "enable_liger_kernel" in raw and as_bool(*raw["enable_liger_kernel"]):
        extra["loss"] = Value("liger", raw["enable_liger_kernel"][1])
    return with_keys(launch, **extra)
