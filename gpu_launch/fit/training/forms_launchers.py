"""A training script behind a launcher: ``torchrun``, ``accelerate launch``, ``deepspeed`` or ``python``.

The launcher's own options are read through its table (fit/cmdline: torchrun.py, accelerate.py,
deepspeed.py), which says where they end: at the script (or ``-m MODULE``). What follows is the
script's, read as Trainer flags (:mod:`.forms_hf`). The launcher adds what it decides: the processes a
node (``--nproc-per-node``, ``--num_processes``, ``--num_gpus``), and for accelerate the config it reads
(``--config_file``, else accelerate's default file) with its DeepSpeed or FSDP plugin and mixed precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.base.records import replace
from gpu_launch.fit import cmdline
from gpu_launch.fit.training import forms_files, forms_hf
from gpu_launch.fit.training.forms_common import Launch, Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["behind_launcher"]

_NPROC = {"torchrun": "nproc_per_node", "accelerate": "num_processes", "deepspeed": "num_gpus"}


def _script(argv: Sequence[str], table: str | None, environ: Mapping[str, str]
            ) -> tuple[cmdline.Said | None, str, str, list[str]]:
    """(the launcher's reading, module or "", script or "", the script's words)."""
    if table in ("torchrun", "accelerate", "deepspeed"):
        said = cmdline.read(argv, table, environ)
        if said.script < 0:
            return said, "", "", []
        word = argv[said.script]
        module = word if said.script > 0 and argv[said.script - 1] in ("-m", "--module") else ""
        return said, module, "" if module else word, list(argv[said.script + 1:])
    module, start = cmdline.python_start(argv)
    if module:
        return None, module, "", list(argv[start:])
    if start >= len(argv):
        return None, "", "", []
    return None, "", argv[start], list(argv[start + 1:])


def behind_launcher(argv: Sequence[str], environ: Mapping[str, str]) -> Launch | None:
    """The training launch ``argv`` makes through a launcher, or None when it is no training run (an
    inference script: no trainer flag, no training name)."""
    table = cmdline.engine_of(argv)
    if table not in ("torchrun", "accelerate", "deepspeed", "transformers"):
        return None
    said, module, script, words = _script(argv, table, environ)
    if module.startswith("axolotl.cli.train") or module == "axolotl.cli":
        from gpu_launch.fit.training import forms_axolotl

        launch = forms_axolotl.from_words(words, "axolotl")
    elif module.startswith("llamafactory") or module.startswith("trl"):
        return None  # their CLIs are read by their own command word
    else:
        flags = forms_hf.parse_flags(words)
        if not forms_hf.looks_like_training(flags, script or module):
            return None
        raw = forms_hf.from_cli(flags)
        sources: list[str] = []
        positional = [w for w in words if not w.startswith("-")]
        if len(words) == 1 and positional and positional[0].endswith((".json", ".yaml", ".yml")):
            data, path = forms_files.read_mapping(positional[0], "the script's arguments file")
            raw = forms_hf.from_file(data, positional[0])
            sources.append(path)
        elif "config" in raw and str(raw["config"][0]).endswith((".yaml", ".yml", ".json")):
            # TRL's scripts (trl/scripts/*.py, TrlParser): --config's YAML holds defaults, the flags win
            data, path = forms_files.read_mapping(str(raw["config"][0]), "the script's --config")
            raw = {**forms_hf.from_file(data, str(raw["config"][0])), **raw}
            sources.append(path)
        from gpu_launch.fit.training.interpreter import installed_version

        version = installed_version(argv, environ, "transformers")
        launch = forms_hf.hf_keys(raw, Launch("trainer", sources=tuple(sources), script=True,
                                              transformers=version[0] if version else None,
                                              transformers_version=version,
                                              trainer_flags=bool(forms_hf.TRAINER_WORDS & set(raw))))
    launch = _fsdp_env(launch, environ)
    if said is not None:
        launch = _launcher_keys(launch, said, table or "", environ)
    return launch


def _fsdp_env(launch: Launch, environ: Mapping[str, str]) -> Launch:
    """``FSDP_VERSION`` in the environment: what accelerate's FSDP plugin reads when its caller names no version
    (accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__)."""
    text = str(environ.get("FSDP_VERSION", "")).strip()
    if text not in ("1", "2"):
        return launch
    return replace(launch, keys={"fsdp_launcher": Value(int(text), f"FSDP_VERSION={text}"), **launch.keys})


def _launcher_keys(launch: Launch, said: cmdline.Said, table: str, environ: Mapping[str, str]) -> Launch:
    """What the launcher itself decides: the processes a node, the nodes, and accelerate's config. A
    placeholder (``--nproc-per-node {n}``) leaves the count to gpulaunch, whatever a config file says."""
    nproc = said.get(_NPROC.get(table, ""))
    count = None
    if nproc is not None and not nproc.placeholder and nproc.text.strip().isdigit():
        count = int(nproc.text)
    nodes = said.get("nnodes")
    # torchrun's --nnodes N or MIN:MAX (the ranks it waits for: MIN), accelerate's --num_machines, deepspeed's
    # --num_nodes (-1: every host of its hostfile, unknown here)
    text = nodes.text.split(":", 1)[0].strip() if nodes is not None and not nodes.placeholder else ""
    nnodes = int(text) if text.isdigit() and 0 < int(text) <= 1 << 16 else 1
    if table == "accelerate":
        launch = _accelerate(launch, said, environ)
        if count is None and launch.nproc is not None and nproc is None:
            count = launch.nproc
    return replace(launch, nproc=count, nnodes=nnodes)


def _accelerate(launch: Launch, said: cmdline.Said, environ: Mapping[str, str]) -> Launch:
    """``accelerate launch``'s config: the file ``--config_file`` names, else the default file accelerate
    reads silently (src/accelerate/commands/launch.py, ``_validate_launch_command``: defaults from
    ``load_config_from_file``); its command-line options win over the file's."""
    path = said.text("config_file") or forms_files.default_accelerate_config(environ)
    keys: dict[str, Value] = {}
    sources = list(launch.sources)
    nproc = None
    if path:
        cfg = forms_files.accelerate_config(path)
        sources.append(cfg["source"])
        where = cfg["source"]
        if isinstance(cfg["num_processes"], int) and not isinstance(cfg["num_processes"], bool):
            nproc = cfg["num_processes"]
        _mixed(cfg["mixed_precision"], f"mixed_precision ({where})", keys)
        if cfg["sharding"]:
            keys["sharding"] = Value(cfg["sharding"], f"distributed_type ({where})")
        for key in ("offload_optimizer", "offload_params"):
            if cfg[key]:
                keys[key] = Value(True, f"fsdp_offload_params ({where})")
        if cfg["gradient_checkpointing"]:
            keys["gradient_checkpointing"] = Value(True, f"fsdp_activation_checkpointing ({where})")
        if cfg["sharding"] and cfg["sharding"] != "ddp" and cfg["deepspeed"] is None:
            # accelerate launch sets FSDP_VERSION for the script from its config (utils/launch.py
            # prepare_multi_gpu_env), over the environment's; none in the file: its --fsdp_version default, 1
            version = cfg["fsdp_version"]
            keys["fsdp_launcher"] = Value(version or 1, f"fsdp_version {version} ({where})" if version else
                                          f"accelerate launch's fsdp_version 1 ({where} names none)")
        if cfg["deepspeed"] is not None:
            ds = cfg["deepspeed"]
            if ds["source"]:
                sources.append(ds["source"])
            forms_hf.resolve_deepspeed(ds, {}, lambda k, v, w: keys.__setitem__(k, Value(v, w)))
    _mixed(said.text("mixed_precision"), f"--mixed_precision {said.text('mixed_precision')}", keys)
    if said.text("deepspeed_config_file"):
        ds = forms_files.deepspeed_config(said.text("deepspeed_config_file") or "")
        sources.append(ds["source"])
        forms_hf.resolve_deepspeed(ds, {}, lambda k, v, w: keys.__setitem__(k, Value(v, w)))
    elif said.get("zero_stage") is not None and said.number("zero_stage") is not None:
        stage = int(said.number("zero_stage") or 0)
        keys["sharding"] = Value({0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}[stage], f"--zero_stage {stage}")
    if said.text("fsdp_sharding_strategy"):
        keys["sharding"] = Value(forms_files.fsdp_strategy(said.text("fsdp_sharding_strategy"), "--fsdp_sharding_"
                                                           "strategy"), "--fsdp_sharding_strategy")
    elif said.text("use_fsdp") == "1" and "sharding" not in keys:
        keys["sharding"] = Value("fsdp_full", "--use_fsdp")
    if said.number("fsdp_version") is not None:
        keys["fsdp_launcher"] = Value(int(said.number("fsdp_version") or 1), f"--fsdp_version {said.text('fsdp_version')}")
    elif said.text("use_fsdp") == "1" and "fsdp_launcher" not in keys:
        keys["fsdp_launcher"] = Value(1, "--use_fsdp (accelerate launch's --fsdp_version default: 1)")
    # the script's own flags (the Trainer's --bf16, --deepspeed) win over the launcher's; the launcher's FSDP
    # version over the environment's
    merged = {**keys, **launch.keys}
    if "fsdp_launcher" in keys:
        merged["fsdp_launcher"] = keys["fsdp_launcher"]
    return replace(launch, keys=merged, sources=tuple(dict.fromkeys(sources)), nproc=nproc)


def _mixed(value: Any, written: str, keys: dict[str, Value]) -> None:
    text = str(value or "").strip().lower()
    if text in ("bf16", "fp16"):
        keys[text] = Value(True, written)

