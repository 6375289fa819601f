"""torchtune: ``tune run [--nproc_per_node N] RECIPE --config CFG [key=value ...]``.

The config is a YAML path or the name of one the installed torchtune ships (``llama3_1/8B_lora``: looked
up in the command's interpreter's ``site-packages/recipes/configs/``, as ``tune run`` resolves it,
torchtune/_cli/run.py and _recipe_registry.py); ``key=value`` words override its keys, dotted for nested
ones (``tokenizer.max_seq_len=4096``; torchtune/config/_parse.py, OmegaConf's from_dotlist).

The keys (the recipes' own, recipes/*.py): ``model._component_`` (a builder: ``lora_llama3_1_8b`` is LoRA,
``qlora_...`` QLoRA, with ``lora_rank``, ``lora_alpha``, ``lora_attn_modules``, ``apply_lora_to_mlp``),
``checkpointer.checkpoint_dir`` (the model read), ``tokenizer.max_seq_len``, ``batch_size``, ``dtype``,
``optimizer._component_``, ``enable_activation_checkpointing``, ``fsdp_cpu_offload``, ``loss._component_``
(``CEWithChunkedOutputLoss``/``LinearCrossEntropyLoss``: chunked), ``gradient_accumulation_steps``. A
``*_distributed`` recipe shards with FSDP's full shard over its processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from gpu_launch.errors import UsageError
from gpu_launch.fit.training import forms_files
from gpu_launch.fit.training.forms_common import Launch, Value, as_bool, as_int, optimizer_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["read_torchtune"]


def _config_path(name: str, argv: Sequence[str], environ: Mapping[str, str]) -> str:
    if os.path.exists(name) or name.endswith((".yaml", ".yml")):
        return name
    from gpu_launch.fit.training.interpreter import interpreter_of, site_dirs

    python = interpreter_of(argv, environ)
    for site in site_dirs(python) if python else []:
        path = os.path.join(site, "recipes", "configs", name + ".yaml")
        if os.path.isfile(path):
            return path
    raise UsageError(f"the torchtune config {name!r} is neither a file nor one the command's torchtune ships",
                     hint="give the YAML's path, or `tune ls` for the configs torchtune has")


def _set(data: dict[str, Any], dotted: str, value: str) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def read_torchtune(argv: Sequence[str], environ: Mapping[str, str]) -> Launch | None:
    if len(argv) < 3 or argv[1] != "run":
        return None
    words = list(argv[2:])
    nproc = None
    i = 0
    while i < len(words) and words[i].startswith("-"):  # torchrun's options, before the recipe
        name, eq, inline = words[i].partition("=")
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        if name.lstrip("-").replace("-", "_") == "nproc_per_node" and value.isdigit():
            nproc = int(value)
        i += 1 if eq else 2
    recipe = words[i] if i < len(words) else ""
    rest = words[i + 1:]
    if "--config" not in rest or rest.index("--config") + 1 >= len(rest):
        raise UsageError("tune run: no --config is given", hint="tune run RECIPE --config CONFIG [key=value ...]")
    name = rest[rest.index("--config") + 1]
    data, full = forms_files.read_mapping(_config_path(name, argv, environ), "the torchtune config")
    for word in rest:
        key, eq, value = word.partition("=")
        if eq and not word.startswith("-"):
            _set(data, key, value)
    return _keys(data, recipe, nproc, full)


_HF_NAMES = {"output_proj": "o_proj", "w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _keys(data: Mapping[str, Any], recipe: str, nproc: int | None, path: str) -> Launch:
    keys: dict[str, Value] = {}

    def put(key: str, value: Any, dotted: str) -> None:
        keys[key] = Value(value, f"{dotted}: {_get(data, dotted)} ({path})")

    model_dir = _get(data, "checkpointer.checkpoint_dir")
    if model_dir:
        put("model", str(model_dir), "checkpointer.checkpoint_dir")
    builder = str(_get(data, "model._component_") or "").rsplit(".", 1)[-1]
    if builder.startswith(("lora_", "qlora_")):
        put("method", "qlora" if builder.startswith("qlora_") else "lora", "model._component_")
        if builder.startswith("qlora_"):
            keys["quant_bits"] = Value(4, "model._component_")
        rank = _get(data, "model.lora_rank")
        if rank is not None:
            put("lora_r", as_int(rank, f"model.lora_rank ({path})", "the LoRA rank"), "model.lora_rank")
        alpha = _get(data, "model.lora_alpha")
        if alpha is not None:
            whole = int(alpha) if isinstance(alpha, float) and alpha == int(alpha) else alpha  # 16.0 in YAML
            put("lora_alpha", as_int(whole, f"model.lora_alpha ({path})", "lora_alpha"), "model.lora_alpha")
        targets = list(_get(data, "model.lora_attn_modules") or ["q_proj", "v_proj"])
        mlp = _get(data, "model.apply_lora_to_mlp")
        if mlp is not None and as_bool(mlp, "model.apply_lora_to_mlp"):
            targets += ["w1", "w2", "w3"]
        # torchtune's module names for the Hugging Face ones the memory rules count (torchtune/modules/
        # transformer.py, feed_forward.py: output_proj is o_proj; w1 gate, w2 down, w3 up)
        put("lora_targets", tuple(_HF_NAMES.get(str(t), str(t)) for t in targets), "model.lora_attn_modules")
    elif builder:
        put("method", "full", "model._component_")
    seq = _get(data, "tokenizer.max_seq_len")
    if seq not in (None, "null"):
        put("seq_len", as_int(seq, f"tokenizer.max_seq_len ({path})", "the sequence length"), "tokenizer.max_seq_len")
    batch = _get(data, "batch_size")
    if batch is not None:
        put("micro_batch", as_int(batch, f"batch_size ({path})", "the per-device batch"), "batch_size")
    accum = _get(data, "gradient_accumulation_steps")
    if accum is not None:
        put("grad_accum", as_int(accum, f"gradient_accumulation_steps ({path})", "gradient_accumulation_steps"),
            "gradient_accumulation_steps")
    dtype = str(_get(data, "dtype") or "bf16").lower()
    keys["dtype"] = Value({"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}.get(dtype, dtype), "dtype")
    ac = _get(data, "enable_activation_checkpointing")
    if ac is not None:
        put("gradient_checkpointing", as_bool(ac, "enable_activation_checkpointing"),
            "enable_activation_checkpointing")
    optim = str(_get(data, "optimizer._component_") or "").rsplit(".", 1)[-1].lower()
    found = {"adamw": "adamw_torch", "pagedadamw8bit": "paged_adamw_8bit", "adamw8bit": "adamw_8bit",
             "pagedadamw": "paged_adamw_32bit", "sgd": "sgd"}.get(optim) or optimizer_of(optim)
    if found:
        put("optimizer", found, "optimizer._component_")
    loss = str(_get(data, "loss._component_") or "")
    if "Chunked" in loss or "LinearCrossEntropy" in loss:
        put("loss", "chunked", "loss._component_")
    if recipe.endswith("_distributed"):
        keys["sharding"] = Value("fsdp_full", f"{recipe} (FSDP full shard)")
        # torchtune's distributed recipes shard with fully_shard, FSDP2 (torchtune/training/_distributed.py
        # shard_model)
        keys["fsdp_version"] = Value(2, f"{recipe} (fully_shard)")
        offload = _get(data, "fsdp_cpu_offload")
        if offload is not None and as_bool(offload, "fsdp_cpu_offload"):
            keys["offload_optimizer"] = keys["offload_params"] = Value(True, "fsdp_cpu_offload")
    return Launch("torchtune", keys=keys, sources=(path,), nproc=nproc,
                  defaults={"gradient_checkpointing": False, "micro_batch": 1})
