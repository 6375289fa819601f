"""axolotl: ``axolotl train cfg.yml [--key value]``, ``accelerate launch -m axolotl.cli.train cfg.yml``,
``python -m axolotl.cli.train cfg.yml``.

The YAML's keys (axolotl's config schema, src/axolotl/utils/schemas/config.py): ``base_model``,
``load_in_4bit``/``load_in_8bit``, ``adapter`` (lora, qlora), ``lora_r``, ``lora_alpha``,
``lora_target_modules`` or ``lora_target_linear``, ``peft_use_dora``, ``sequence_len``, ``sample_packing``,
``micro_batch_size``, ``gradient_accumulation_steps``, ``gradient_checkpointing``, ``bf16`` (true or auto),
``fp16``, ``optimizer``, ``flash_attention``/``sdp_attention``, ``deepspeed`` (a JSON file), ``fsdp`` and
``fsdp_config``, and the plugins' loss switches (Liger's fused linear cross-entropy, cut-cross-entropy,
``chunked_cross_entropy``). ``--key value`` after the file overrides the file's key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.training import forms_files, forms_hf
from gpu_launch.fit.training.forms_common import Launch, Value, as_bool, with_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["read_axolotl", "from_words"]


def read_axolotl(argv: Sequence[str]) -> Launch | None:
    if len(argv) < 2 or argv[1] != "train":
        return None
    return from_words(list(argv[2:]), "axolotl")


def from_words(words: Sequence[str], launcher: str) -> Launch:
    files = [w for w in words if not w.startswith("-")]
    if not files:
        raise UsageError("axolotl train: no config file is named", hint="axolotl train config.yml")
    path = files[0]
    data, full = forms_files.read_mapping(path, "the axolotl config")
    flags = forms_hf.from_cli(forms_hf.parse_flags([w for w in words if w != path]))
    raw: dict[str, tuple[Any, str]] = {**forms_hf.from_file(data, path), **flags}
    return _keys(raw, Launch(launcher, sources=(full,)))


def _truth(raw: Mapping[str, tuple[Any, str]], key: str) -> bool:
    if key not in raw or raw[key][0] is None:
        return False
    value = raw[key][0]
    return value == "auto" or as_bool(value, raw[key][1])


def _keys(raw: dict[str, tuple[Any, str]], launch: Launch) -> Launch:
    shared = {k: v for k, v in raw.items() if k in ("base_model", "micro_batch_size", "sequence_len",
                                                      "gradient_accumulation_steps", "gradient_checkpointing",
                                                      "lora_r", "lora_alpha", "lora_target_modules", "deepspeed",
                                                      "load_in_4bit", "load_in_8bit")}
    if "micro_batch_size" in shared:  # a DeepSpeed "auto" batch is filled from it
        shared["per_device_train_batch_size"] = shared.pop("micro_batch_size")
    for key in ("bf16", "fp16"):
        if key in raw and raw[key][0] == "auto":
            shared[key] = (True, raw[key][1])  # auto: bf16 where the GPU has it (every GPU sized here does)
        elif key in raw:
            shared[key] = raw[key]
    if "optimizer" in raw:
        shared["optim"] = raw["optimizer"]
    if "sample_packing" in raw:
        shared["packing"] = raw["sample_packing"]
    launch = forms_hf.hf_keys(shared, launch)
    extra: dict[str, Value] = {}
    adapter = str(raw.get("adapter", ("", ""))[0] or "").lower()
    if adapter in ("lora", "qlora"):
        quant = 4 if adapter == "qlora" or _truth(raw, "load_in_4bit") else 8 if _truth(raw, "load_in_8bit") else None
        extra["method"] = Value("qlora" if quant else "lora", raw["adapter"][1])
        if quant:
            extra["quant_bits"] = Value(quant, raw["adapter"][1])
            extra["quant_double"] = Value(True, raw["adapter"][1])  # axolotl's bnb config: double quant on
    elif "method" in launch.keys:
        extra["method"] = Value("full", "no adapter")  # load_in_4bit alone loads a frozen base: still no LoRA
    if _truth(raw, "lora_target_linear"):
        extra["lora_targets"] = Value(("all-linear",), raw["lora_target_linear"][1])
    if _truth(raw, "peft_use_dora"):
        extra["dora"] = Value(True, raw["peft_use_dora"][1])
    if _truth(raw, "flash_attention"):
        extra["attention"] = Value("flash_attention_2", raw["flash_attention"][1])
    elif _truth(raw, "sdp_attention"):
        extra["attention"] = Value("sdpa", raw["sdp_attention"][1])
    for key, loss in (("liger_fused_linear_cross_entropy", "liger"), ("cut_cross_entropy", "cce"),
                      ("chunked_cross_entropy", "chunked")):
        if _truth(raw, key):
            extra["loss"] = Value(loss, raw[key][1])
    cfg = raw.get("fsdp_config", ({}, ""))[0] or {}
    cfg = cfg if isinstance(cfg, dict) else {}
    if ("fsdp" in raw and raw["fsdp"][0]) or cfg:
        # FSDP is on with ``fsdp`` (a list, deprecated) or ``fsdp_config`` alone (src/axolotl/utils/trainer.py
        # prepare_optim_env: ``if cfg.fsdp or cfg.fsdp_config``)
        value = raw["fsdp"][0] if "fsdp" in raw and raw["fsdp"][0] else ""
        words = " ".join(value if isinstance(value, list) else [str(value)]).lower().split()
        reshard = str(cfg.get("reshard_after_forward", cfg.get("fsdp_reshard_after_forward", ""))).lower()
        kind = "fsdp_grad_op" if "shard_grad_op" in words or reshard in ("false", "shard_grad_op") \
            else "fsdp_hybrid" if "hybrid_shard" in words else "fsdp_full"
        extra["sharding"] = Value(kind, raw["fsdp"][1] if value else raw["fsdp_config"][1])
        if str(cfg.get("fsdp_offload_params", cfg.get("offload_params", ""))).lower() == "true":
            extra["offload_optimizer"] = extra["offload_params"] = Value(True, raw["fsdp_config"][1])
        extra["fsdp_version"] = _fsdp_version(raw, cfg)
    return with_keys(launch, **extra)


def _fsdp_version(raw: Mapping[str, tuple[Any, str]], cfg: Mapping[str, Any]) -> Value:
    """axolotl's ``fsdp_version`` (top-level; in ``fsdp_config`` it is moved there: src/axolotl/utils/schemas/
    validation.py check_fsdp_version_in_fsdp_config). Only 2 sets ``FSDP_VERSION`` (utils/trainer.py
    setup_fsdp_envs), so anything else runs accelerate's default, FSDP1 (check_fsdp_version: "FSDP1 will be
    deprecated")."""
    if "fsdp_version" in raw and raw["fsdp_version"][0] is not None:
        value, written = raw["fsdp_version"]
    elif cfg.get("fsdp_version", cfg.get("version")) is not None:
        value = cfg.get("fsdp_version", cfg.get("version"))
        written = f"fsdp_config.fsdp_version: {value}"
    else:
        return Value(1, "axolotl's default without fsdp_version: 2 (FSDP1)")
    return Value(2 if str(value).strip() == "2" else 1, written)
