"""From a training launch to a sizing: the launch read (:mod:`.forms`), the model it names read from its
headers, the setup made (the checkpoint's dtype decides the precision; gpulaunch's ``--train-seq``,
``--train-method``, ``--micro-batch`` win), and the model's config.json kept for the step's rules.
A training launch is never sized as inference: with nothing to size from it is refused (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from gpu_launch.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpu_launch.fit.plan import Sizing
    from gpu_launch.modelfile.facts import ModelFacts

__all__ = ["training_sizing", "TRAINING_OPTIONS"]

TRAINING_OPTIONS = ("train_method", "train_seq", "micro_batch")


def training_sizing(ref: str, argv: Sequence[str], options: Mapping[str, Any], environ: Mapping[str, str],
                    read: Callable[[str, Mapping[str, str]], ModelFacts]) -> Sizing | None:
    """The sizing of the training launch ``argv`` (or of ``ref`` trained as gpulaunch's training options
    say), or None when it is no training launch."""
    from gpu_launch.fit.training import forms
    from gpu_launch.fit.training.forms_common import MICRO_BATCH_WORD, Launch, to_setup

    launch = forms.read_launch(argv, environ) if argv else None
    if launch is None:
        if not any(options.get(k) for k in TRAINING_OPTIONS):
            return None
        launch = Launch("trainer", script=True)
    source = ref
    if ref == "model":
        named = launch.get("model")
        if not named:
            raise UsageError(f"the training launch ({launch.launcher}) names no model gpulaunch can read",
                             hint="add --model_name_or_path ./M to the command (base_model: in an axolotl config, "
                                  "model_name_or_path: in a TRL or LLaMA-Factory one), or name it: --fit ./M")
        source = str(named)
    model = read(source, environ)
    setup = to_setup(launch, source, model.dtype, options)
    open_batch = launch.get("micro_batch") == MICRO_BATCH_WORD and not options.get("micro_batch")
    return sizing_for(model, setup, open_batch, options, launch.nnodes)


def sizing_for(model: ModelFacts, setup: Any, micro_open: bool, options: Mapping[str, Any], nnodes: int = 1
               ) -> Sizing:
    from gpu_launch.fit import plan
    from gpu_launch.fit.engines import TRAINING
    from gpu_launch.fit.training import forms_files
    from gpu_launch.fit.training.steps import TrainingRun

    config = forms_files.model_config(model.files[0] if model.files else model.source)
    run = TrainingRun(setup, json.dumps(config, sort_keys=True) if config else "", micro_open=micro_open,
                      nnodes=nnodes)
    host = None
    if setup.offload_optimizer or setup.offload_params:
        from gpu_launch.hardware.host import memory_available

        host = memory_available()
    settings = plan.Settings(ctx=setup.seq_len, ctx_from="the training launch", training=run, host_free=host,
                             gpus_per_node=options.get("gpus_per_node"))
    return plan.sizing(model, TRAINING, settings)
