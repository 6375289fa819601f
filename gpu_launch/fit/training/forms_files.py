"""The files a training launch points to: YAML configs (TRL ``--config``, axolotl, LLaMA-Factory, the
accelerate config), a DeepSpeed JSON, the model's config.json. Each read bounded, each problem one line
(exit 2, :class:`~gpu_launch.errors.UsageError`): a missing file, YAML that is not a mapping, a ZeRO
stage DeepSpeed does not have. PyYAML is imported here only, when a YAML file is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from gpu_launch.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["read_mapping", "deepspeed_config", "accelerate_config", "default_accelerate_config", "model_config",
           "MAX_BYTES"]

MAX_BYTES = 4 << 20  # no training config is larger; a bigger file is refused before it is parsed


def _text(path: str, what: str, base: str = "") -> tuple[str, str]:
    full = path if os.path.isabs(path) or not base else os.path.join(base, path)
    try:
        with open(full, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{what} {path!r} does not exist", hint="check the path (it is read relative to the "
                                                                  "current directory)") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path!r}: {exc.strerror or exc}", hint="check the path") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(f"{what} {path!r} is larger than {MAX_BYTES >> 20} MiB", hint="is it the right file?")
    return full, raw.decode("utf-8", errors="replace")


def read_mapping(path: str, what: str, base: str = "") -> tuple[dict[str, Any], str]:
    """``path`` (YAML or JSON) as a mapping, and the path read; one line when it is missing, unreadable,
    not YAML/JSON, or not a mapping at its top."""
    full, text = _text(path, what, base)
    if full.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{what} {path!r} is not JSON: {exc}", hint="fix the file") from None
    else:
        try:
            import yaml  # type: ignore[import-untyped,unused-ignore]  # lazy: only a launch naming a YAML file pays
        except ImportError:  # pragma: no cover - a dependency in pyproject
            raise UsageError(f"cannot read {what} {path!r}: PyYAML is not installed",
                             hint="pip install pyyaml") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" (line {where.line + 1})" if where is not None else ""
            raise UsageError(f"{what} {path!r} is not valid YAML{at}", hint="fix the file") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path!r} is not a mapping of keys to values (it is a {type(data).__name__})",
                         hint="the file should hold `key: value` lines")
    return data, full


def _device(section: Any) -> bool:
    """An ``offload_optimizer``/``offload_param`` section that moves the bytes to the host (cpu or nvme)."""
    return isinstance(section, Mapping) and str(section.get("device", "none")).lower() in ("cpu", "nvme")


def deepspeed_config(source: str | Mapping[str, Any], what: str = "the DeepSpeed config") -> dict[str, Any]:
    """A DeepSpeed config (a path, a JSON string as Trainer's ``--deepspeed '{...}'`` takes, or a mapping)
    -> ``{"stage": 0..3, "offload_optimizer": bool, "offload_params": bool, "micro_batch": int|"auto"|None,
    "bf16": bool|"auto"|None, "fp16": ..., "grad_accum": ..., "source": path}``."""
    if isinstance(source, Mapping):
        data, path = dict(source), ""
    elif source.lstrip().startswith("{"):
        try:
            data, path = json.loads(source), ""
        except ValueError as exc:
            raise UsageError(f"{what} is not JSON: {exc}", hint="--deepspeed takes a file or a JSON object") from None
        if not isinstance(data, dict):
            raise UsageError(f"{what} is not a JSON object", hint="--deepspeed takes a file or a JSON object")
    else:
        data, path = read_mapping(source, what)
    zero = data.get("zero_optimization") or {}
    if not isinstance(zero, Mapping):
        raise UsageError(f"{what}: zero_optimization is not a mapping", hint='"zero_optimization": {"stage": 2}')
    stage = zero.get("stage", 0)
    # deepspeed/runtime/zero/config.py: ZeroStageEnum has 0 (disabled), 1, 2, 3 and nothing else
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage <= 3:
        raise UsageError(f"{what}: ZeRO stage {stage!r} does not exist", hint="zero_optimization.stage is 0, 1, 2 "
                                                                               "or 3")

    def enabled(key: str) -> Any:
        section = data.get(key)
        return section.get("enabled") if isinstance(section, Mapping) else None

    return {"stage": stage, "offload_optimizer": _device(zero.get("offload_optimizer")),
            "offload_params": _device(zero.get("offload_param")),
            "micro_batch": data.get("train_micro_batch_size_per_gpu"), "bf16": enabled("bf16"),
            "fp16": enabled("fp16"), "grad_accum": data.get("gradient_accumulation_steps"), "source": path,
            "buckets": tuple((k, zero[k]) for k in _ZERO_SIZES if isinstance(zero.get(k), (int, float, str)))}


#: The ZeRO sizes that decide a rank's buffers (fit/training/memory_sharding.py zero3)
_ZERO_SIZES = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_reuse_distance",
               "stage3_max_live_parameters", "stage3_param_persistence_threshold")


def default_accelerate_config(environ: Mapping[str, str]) -> str | None:
    """The file ``accelerate launch`` reads when no ``--config_file`` is given, if it exists: accelerate's
    ``default_config_file`` (src/accelerate/commands/config/config_args.py): $HF_HOME/accelerate/
    default_config.yaml, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface, that to ~/.cache."""
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache"),
        "huggingface")
    for name in ("default_config.yaml", "default_config.json"):  # yaml first, as accelerate looks
        path = os.path.join(home, "accelerate", name)
        if os.path.isfile(path):
            return path
    return None


#: accelerate's FSDP sharding strategies, by name and by number (FSDP_SHARDING_STRATEGY in accelerate/utils/constants.py)
_FSDP = {"FULL_SHARD": "fsdp_full", "1": "fsdp_full", "SHARD_GRAD_OP": "fsdp_grad_op", "2": "fsdp_grad_op",
         "NO_SHARD": "ddp", "3": "ddp", "HYBRID_SHARD": "fsdp_hybrid", "4": "fsdp_hybrid",
         "HYBRID_SHARD_ZERO2": "fsdp_hybrid", "5": "fsdp_hybrid"}


def fsdp_strategy(value: Any, what: str) -> str:
    key = str(value).strip().upper()
    if key not in _FSDP:
        raise UsageError(f"{what}: FSDP sharding strategy {value!r} does not exist",
                         hint="FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD (or 1-5)")
    return _FSDP[key]


def accelerate_config(path: str) -> dict[str, Any]:
    """The memory-relevant part of an accelerate config: ``sharding``, ``num_processes``,
    ``mixed_precision``, offload, and the DeepSpeed config it names (``deepspeed_config_file``)."""
    what = "the accelerate config"
    data, full = read_mapping(path, what)
    kind = str(data.get("distributed_type", "NO")).upper()
    out: dict[str, Any] = {"source": full, "num_processes": data.get("num_processes"),
                           "mixed_precision": data.get("mixed_precision"), "sharding": None,
                           "offload_optimizer": False, "offload_params": False, "deepspeed": None,
                           "gradient_checkpointing": None, "fsdp_version": None}
    if kind == "DEEPSPEED":
        ds = data.get("deepspeed_config") or {}
        if not isinstance(ds, Mapping):
            raise UsageError(f"{what} {path!r}: deepspeed_config is not a mapping", hint="fix the file")
        if ds.get("deepspeed_config_file"):
            out["deepspeed"] = deepspeed_config(str(ds["deepspeed_config_file"]), "the DeepSpeed config "
                                                "(deepspeed_config_file)")
        else:
            stage = ds.get("zero_stage", 0)
            out["deepspeed"] = deepspeed_config({"zero_optimization": {
                "stage": stage, "offload_optimizer": {"device": ds.get("offload_optimizer_device", "none")},
                "offload_param": {"device": ds.get("offload_param_device", "none")}}}, f"{what} {path!r}")
    elif kind == "FSDP":
        fsdp = data.get("fsdp_config") or {}
        if not isinstance(fsdp, Mapping):
            raise UsageError(f"{what} {path!r}: fsdp_config is not a mapping", hint="fix the file")
        out["sharding"] = fsdp_strategy(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD"), f"{what} {path!r}")
        offload = fsdp.get("fsdp_offload_params")
        out["offload_optimizer"] = out["offload_params"] = offload is True or str(offload).lower() == "true"
        ac = fsdp.get("fsdp_activation_checkpointing")
        out["gradient_checkpointing"] = True if ac is True or str(ac).lower() == "true" else None
        # accelerate launch reads fsdp_config's ``fsdp_version`` (a key without the prefix gets it:
        # commands/launch.py _validate_launch_command); absent, its ``--fsdp_version`` default, 1
        version = fsdp.get("fsdp_version", fsdp.get("version"))
        if version is not None and str(version).strip() not in ("1", "2"):
            raise UsageError(f"{what} {path!r}: fsdp_version {version!r} does not exist", hint="1 or 2")
        out["fsdp_version"] = None if version is None else int(str(version).strip())
    elif kind in ("MULTI_GPU",):
        out["sharding"] = "ddp"
    return out


def model_config(folder_or_file: str) -> dict[str, Any] | None:
    """The model's config.json beside its weights, as a dict (None: there is none, or it is unreadable:
    the readers already said what they could of the model)."""
    folder = folder_or_file if os.path.isdir(folder_or_file) else os.path.dirname(folder_or_file)
    path = os.path.join(folder, "config.json")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
