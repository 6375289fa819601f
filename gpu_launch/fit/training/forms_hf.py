"""Hugging Face Trainer flags (``--per_device_train_batch_size 4 --bf16 ...``) as ``HfArgumentParser`` reads
them, and their keys in the launch vocabulary (:mod:`.forms_common`): shared by a script behind torchrun,
accelerate launch, deepspeed or python, and by the TRL CLI, whose flags and YAML use the same names.

The parser's rules (transformers ``src/transformers/hf_argparser.py``): every field is ``--name`` and, since
v4.3x, ``--name-with-dashes`` too; a boolean field takes no value (``--bf16``), or one (``--bf16 True``,
``--bf16 false``: ``string_to_bool``); a list field takes every word up to the next option
(``--lora_target_modules q_proj v_proj``); argparse, so ``--name=value`` works and the last repeat wins. A
script that is given one ``.json``/``.yaml`` argument reads its arguments from it (``parse_json_file``,
``parse_yaml_file``, as the Transformers examples do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.fit.training import forms_files
from gpu_launch.fit.training.forms_common import (MICRO_BATCH_WORD, Launch, Value, as_bool, as_int, optimizer_of)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["parse_flags", "hf_keys", "TRAINER_WORDS", "looks_like_training"]

#: Flags only a training run has: one of them on a script's command line makes it a training launch.
TRAINER_WORDS = frozenset({"per_device_train_batch_size", "per_gpu_train_batch_size", "gradient_accumulation_steps",
                           "gradient_checkpointing", "num_train_epochs", "do_train", "learning_rate", "deepspeed",
                           "fsdp", "optim", "lora_r", "use_peft", "lora_target_modules", "max_steps",
                           "warmup_ratio", "warmup_steps", "lr_scheduler_type", "train_file"})
_MODEL = ("model_name_or_path", "model", "model_id", "model_path", "base_model", "pretrained_model_name_or_path")
_SEQ = ("max_seq_length", "max_length", "block_size", "model_max_length", "max_seq_len", "seq_length",
        "cutoff_len", "sequence_len")
_LIST = frozenset({"lora_target_modules", "fsdp", "target_modules"})
_BOOL = frozenset({"bf16", "fp16", "gradient_checkpointing", "packing", "use_peft", "use_lora", "use_dora", "load_in_4bit",
                   "load_in_8bit", "use_bnb_nested_quant", "bnb_4bit_use_double_quant", "use_liger_kernel",
                   "use_liger", "do_train"})


def _is_option(word: str) -> bool:
    return word.startswith("--") and len(word) > 2


def parse_flags(words: Sequence[str]) -> dict[str, tuple[list[str] | None, str]]:
    """``--name [values...]`` -> {name with underscores: (values or None for a bare flag, as written)}; the
    last repeat wins. A value starts with anything but ``--`` (``-1`` is a value)."""
    out: dict[str, tuple[list[str] | None, str]] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not _is_option(word):
            i += 1
            continue
        name, eq, inline = word[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            out[key] = ([inline], word)
            i += 1
            continue
        values: list[str] = []
        j = i + 1
        while j < len(words) and not _is_option(words[j]) and (key in _LIST or not values):
            values.append(words[j])
            j += 1
        out[key] = (values or None, " ".join(words[i:j]))
        i = j
    return out


def looks_like_training(flags: Mapping[str, Any], script: str) -> bool:
    """A trainer flag, or a script named for training (``train.py``, ``finetune.py``, ``sft.py``)."""
    base = script.rsplit("/", 1)[-1].lower()
    return bool(TRAINER_WORDS & set(flags)) or any(w in base for w in ("train", "finetune", "fine_tune", "sft",
                                                                       "dpo", "grpo"))


def _one(values: list[str] | None) -> str:
    return values[-1] if values else ""


def from_cli(flags: Mapping[str, tuple[list[str] | None, str]]) -> dict[str, tuple[Any, str]]:
    """The command line's flags as (value, written): a bare boolean is True; a list keeps its words."""
    out: dict[str, tuple[Any, str]] = {}
    for key, (values, written) in flags.items():
        if key in _LIST:
            out[key] = (list(values or []), written)
        elif values is None:
            out[key] = (True, written)
        else:
            out[key] = (_one(values), written)
    return out


def from_file(data: Mapping[str, Any], path: str) -> dict[str, tuple[Any, str]]:
    return {str(k).replace("-", "_"): (v, f"{k}: {v} ({path})") for k, v in data.items()}


def hf_keys(raw: Mapping[str, tuple[Any, str]], launch: Launch, base: str = "") -> Launch:
    """The Trainer/TRL keys of ``raw`` in the launch vocabulary, added to ``launch``. Raises one line for
    a value the framework would refuse (a batch of 0, a LoRA rank of 0, a boolean that is none)."""
    keys: dict[str, Value] = dict(launch.keys)
    sources = list(launch.sources)

    def put(key: str, value: Any, written: str) -> None:
        keys[key] = Value(value, written)

    for name in _MODEL:
        if name in raw and raw[name][0] not in (None, "", True):
            put("model", str(raw[name][0]), raw[name][1])
            break
    for name in ("per_device_train_batch_size", "per_gpu_train_batch_size", "micro_batch_size"):
        if name in raw:
            value, written = raw[name]
            put("micro_batch", value if value == MICRO_BATCH_WORD else as_int(value, written, "the per-device batch"),
                written)
            break
    for name in _SEQ:
        if name in raw and raw[name][0] is not None:
            put("seq_len", as_int(raw[name][0], raw[name][1], "the sequence length"), raw[name][1])
            break
    if "gradient_accumulation_steps" in raw:
        value, written = raw["gradient_accumulation_steps"]
        put("grad_accum", as_int(value, written, "gradient_accumulation_steps"), written)
    for name in ("bf16", "fp16", "gradient_checkpointing", "packing"):
        if name in raw:
            put(name, as_bool(*raw[name]), raw[name][1])
    for name in ("dtype", "torch_dtype"):
        if name in raw and raw[name][0] not in (None, True):
            put("dtype", str(raw[name][0]), raw[name][1])
            break
    if "optim" in raw:
        value, written = raw["optim"]
        found = optimizer_of(value)
        if found == "sgd" and _momentum(raw.get("optim_args", (None, ""))[0]):
            # Trainer's SGD takes momentum from --optim_args (transformers/trainer_optimizer.py _get_sgd)
            found, written = "sgd_momentum", f"{written} {raw['optim_args'][1]}"
        if found is not None:
            put("optimizer", found, written)
    if "attn_implementation" in raw and raw["attn_implementation"][0] not in (None, True):
        put("attention", str(raw["attn_implementation"][0]), raw["attn_implementation"][1])
    for name in ("use_liger_kernel", "use_liger"):
        if name in raw and as_bool(*raw[name]):
            put("loss", "liger", raw[name][1])
    if "loss_type" in raw and "chunk" in str(raw["loss_type"][0]).lower():
        put("loss", "chunked", raw["loss_type"][1])
    _peft(raw, put, launch.launcher.startswith("trl"))
    _sharding(raw, put, sources, base)
    from gpu_launch.base.records import replace

    return replace(launch, keys=keys, sources=tuple(sources))


def _peft(raw: Mapping[str, tuple[Any, str]], put: Any, trl: bool) -> None:
    """TRL's ModelConfig (trl/trainer/model_config.py): --use_peft, --lora_r (16), --lora_alpha (32),
    --lora_target_modules, --use_dora, --load_in_4bit/--load_in_8bit, --use_bnb_nested_quant."""
    switch = next((k for k in ("use_peft", "use_lora") if k in raw and as_bool(*raw[k])), None)
    # TRL turns LoRA on with --use_peft only; a script of one's own may take --use_lora or a bare --lora_r
    said = switch or ("lora_r" if "lora_r" in raw and not trl else None)
    quant = 4 if "load_in_4bit" in raw and as_bool(*raw["load_in_4bit"]) else \
        8 if "load_in_8bit" in raw and as_bool(*raw["load_in_8bit"]) else None
    if said is not None:
        put("method", "qlora" if quant else "lora", raw[said][1])
    if quant:
        put("quant_bits", quant, raw["load_in_4bit" if quant == 4 else "load_in_8bit"][1])
    if "lora_r" in raw:
        put("lora_r", as_int(raw["lora_r"][0], raw["lora_r"][1], "the LoRA rank"), raw["lora_r"][1])
    if "lora_alpha" in raw:
        put("lora_alpha", as_int(raw["lora_alpha"][0], raw["lora_alpha"][1], "lora_alpha"), raw["lora_alpha"][1])
    if "lora_dropout" in raw:
        put("lora_dropout", _fraction(*raw["lora_dropout"]), raw["lora_dropout"][1])
    for name in ("lora_target_modules", "target_modules"):
        if name in raw:
            value = raw[name][0]
            targets = value if isinstance(value, list) else [value]
            put("lora_targets", tuple(str(t) for t in targets), raw[name][1])
    if "use_dora" in raw:
        put("dora", as_bool(*raw["use_dora"]), raw["use_dora"][1])
    for name in ("use_bnb_nested_quant", "bnb_4bit_use_double_quant"):
        if name in raw:
            put("quant_double", as_bool(*raw[name]), raw[name][1])


def _fraction(value: Any, written: str) -> float:
    """A probability as the parser takes it (``--lora_dropout 0.05``): 0 to 1, else one line."""
    from gpu_launch.errors import UsageError

    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0.0 <= number <= 1.0:
        raise UsageError(f"{written}: {value!r} is not a dropout probability", hint="a number from 0 to 1")
    return number


def _momentum(optim_args: Any) -> bool:
    """``--optim_args "momentum=0.9,nesterov=True"`` names a non-zero momentum (trainer_optimizer.py
    _parse_optim_args: comma-separated key=value, spaces dropped)."""
    for pair in str(optim_args or "").replace(" ", "").split(","):
        key, _, value = pair.partition("=")
        if key == "momentum":
            try:
                return float(value) != 0
            except ValueError:
                return False
    return False


def _sharding(raw: Mapping[str, tuple[Any, str]], put: Any, sources: list[str], base: str) -> None:
    """Trainer's ``--deepspeed ds.json`` (a file or a JSON object) and ``--fsdp "full_shard auto_wrap
    offload"`` (training_args.py, FSDPOption: full_shard, shard_grad_op, hybrid_shard, offload)."""
    if "deepspeed" in raw and raw["deepspeed"][0] not in (None, True, ""):
        value, written = raw["deepspeed"]
        ds = forms_files.deepspeed_config(value if isinstance(value, dict) else str(value))
        resolve_deepspeed(ds, raw, put)
        if ds["source"]:
            sources.append(ds["source"])
    if "fsdp" in raw and raw["fsdp"][0] not in (None, "", False):
        value, written = raw["fsdp"]
        words = " ".join(value if isinstance(value, list) else [str(value)]).lower().split()
        # a bare --fsdp (or fsdp: true) turns FSDP on with its defaults: full shard (transformers 5's
        # ``nargs="?", const=True``; transformers 4's ``fsdp is True -> [FULL_SHARD]``)
        bare = not words or words in (["true"], ["1"], ["yes"])
        kind = "fsdp_full" if "full_shard" in words or bare else "fsdp_grad_op" if "shard_grad_op" in words \
            else "fsdp_hybrid" if "hybrid_shard" in words or "hybrid_shard_zero2" in words else None
        if kind:
            put("sharding", kind, written)
            put("fsdp_trainer", _fsdp_config_version(raw, sources), written)
        if "offload" in words:
            put("offload_optimizer", True, written)
            put("offload_params", True, written)


def _fsdp_config_version(raw: Mapping[str, tuple[Any, str]], sources: list[str]) -> int | None:
    """The FSDP version ``--fsdp_config`` names (a JSON file, or a mapping in an arguments file): its
    ``version`` or ``fsdp_version`` (training_args.py ``_process_fsdp_args`` drops the ``fsdp_`` prefix of
    every key), or None."""
    from gpu_launch.errors import UsageError

    if "fsdp_config" not in raw or raw["fsdp_config"][0] in (None, "", True):
        return None
    value, written = raw["fsdp_config"]
    if isinstance(value, Mapping):
        data = dict(value)
    else:
        data, path = forms_files.read_mapping(str(value), "the Trainer's --fsdp_config")
        sources.append(path)
    found = data.get("version", data.get("fsdp_version"))
    if found is None:
        return None
    if str(found).strip() not in ("1", "2"):
        raise UsageError(f"{written}: FSDP version {found!r} does not exist", hint="version is 1 or 2")
    return int(str(found).strip())


def resolve_deepspeed(ds: Mapping[str, Any], raw: Mapping[str, tuple[Any, str]], put: Any) -> None:
    """The DeepSpeed config's memory keys, its ``"auto"`` values filled as the Trainer fills them
    (transformers ``integrations/deepspeed.py``, HfTrainerDeepSpeedConfig.trainer_config_process:
    train_micro_batch_size_per_gpu <- per_device_train_batch_size, gradient_accumulation_steps <- the
    same, bf16/fp16.enabled <- --bf16/--fp16); a number that disagrees with the Trainer's is refused there
    ("Please correct the following DeepSpeed config values that mismatch TrainingArguments values")."""
    from gpu_launch.errors import UsageError

    where = ds["source"] or "the DeepSpeed config"
    put("sharding", {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}[ds["stage"]], f"ZeRO stage {ds['stage']} ({where})")
    if ds.get("buckets"):
        put("zero_buckets", ds["buckets"], f"ZeRO bucket sizes ({where})")
    if ds["offload_optimizer"]:
        put("offload_optimizer", True, f"offload_optimizer ({where})")
    if ds["offload_params"]:
        put("offload_params", True, f"offload_param ({where})")
    micro = ds["micro_batch"]
    if micro not in (None, "auto"):
        number = as_int(micro, f"train_micro_batch_size_per_gpu in {where}", "the per-device batch")
        given = raw.get("per_device_train_batch_size")
        if given is not None and given[0] != MICRO_BATCH_WORD and str(given[0]) != str(number):
            raise UsageError(f"{where}: train_micro_batch_size_per_gpu {number} disagrees with the command's "
                             f"{given[1]}", hint='the Trainer refuses it too: write "auto" in the DeepSpeed config')
        if given is None:
            put("micro_batch", number, f"train_micro_batch_size_per_gpu {number} ({where})")
    for key in ("bf16", "fp16"):
        if ds[key] is True and key not in raw:
            put(key, True, f"{key}.enabled ({where})")
