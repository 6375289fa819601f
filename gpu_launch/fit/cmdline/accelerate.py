"""``accelerate launch [OPTIONS] script.py ...``'s own options (also ``accelerate-launch``,
``python -m accelerate.commands.launch``).

Read in huggingface/accelerate ``src/accelerate/commands/launch.py`` (``launch_command_parser``):
``--num_processes``, ``--num_machines``, ``--machine_rank``, ``--main_process_ip``,
``--main_process_port``, ``--gpu_ids``; its parser (``commands/utils.py``, ``CustomArgumentParser``)
registers each ``_`` option with a ``-`` spelling too (``--num-machines``), with ``allow_abbrev=False``
(no prefixes); argparse, last wins; the options end at the script. The first positional is ``launch``.

On every node of a several-node run (:func:`on_nodes`): its multi-machine options.
"""

import os
from collections.abc import Sequence

from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline.node_flags import NodeCommand, NodeRun


def _both(*names: str) -> tuple[str, ...]:
    """Each ``_`` option and its ``-`` spelling, as accelerate's ``_StoreAction`` registers them."""
    return tuple(n for name in names for n in dict.fromkeys((name, name[:2] + name[2:].replace("_", "-"))))


TABLE = Table("accelerate", (
    Flag("num_processes", _both("--num_processes"), "int", low=1, high=1 << 20),
    Flag("nnodes", _both("--num_machines"), "int", low=1, high=1 << 20),
    Flag("node_rank", _both("--machine_rank"), "int", low=0, high=1 << 20),
    Flag("master_addr", _both("--main_process_ip")),
    Flag("master_port", _both("--main_process_port"), "int", low=1, high=65535),
    Flag("gpu_ids", _both("--gpu_ids")),
    # what sizes a training step (fit/training/forms_launchers.py): the config file, else the default one
    Flag("config_file", _both("--config_file")),
    Flag("mixed_precision", _both("--mixed_precision")),
    Flag("use_deepspeed", _both("--use_deepspeed"), "switch"),
    Flag("use_fsdp", _both("--use_fsdp"), "switch"),
    Flag("zero_stage", _both("--zero_stage"), "int", low=0, high=3, valid="0, 1, 2 or 3"),
    Flag("deepspeed_config_file", _both("--deepspeed_config_file")),
    Flag("fsdp_sharding_strategy", _both("--fsdp_sharding_strategy")),
    Flag("fsdp_version", _both("--fsdp_version"), "int", low=1, high=2, valid="1 or 2"),
    Flag("offload_optimizer_device", _both("--offload_optimizer_device")),
    Flag("offload_param_device", _both("--offload_param_device")),
), source="huggingface/accelerate src/accelerate/commands/launch.py (launch_command_parser)",
    options_end_at_positional=True, commands=("launch",),
    switches=("-h", "--help", "-q", "-m", *_both(
        "--quiet", "--cpu", "--multi_gpu", "--tpu", "--ipex", "--mps", "--use_xpu", "--enable_cpu_affinity",
        "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--dynamo_use_regional_compilation", "--use_deepspeed",
        "--use_fsdp", "--use_parallelism_config", "--use_megatron_lm", "--same_network", "--module", "--no_python",
        "--tpu_cluster", "--no_tpu_cluster", "--tpu_use_sudo", "--downcast_bf16", "--fp8_use_autocast_during_eval",
        "--debug")))


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    """``accelerate launch``, ``accelerate-launch`` or ``python -m accelerate.commands.launch``."""
    return said.verb == "launch" or os.path.basename(argv[0]) == "accelerate-launch" \
        or said.module == "accelerate.commands.launch"


def on_nodes(run: NodeRun) -> NodeCommand:
    """``accelerate launch`` across machines: ``--num_machines --machine_rank --main_process_ip
    --main_process_port`` and ``--num_processes`` (the total over every machine)."""
    world = run.world
    run.value("nnodes", str(world.nnodes), "the nodes of this run")
    run.value("node_rank", str(world.rank), "this node's rank")
    run.value("master_addr", world.head_addr, "the head's address")
    run.value("master_port", str(world.head_port), "a free port picked for this run on the head")
    run.value("num_processes", str(world.gpus * world.nnodes), "one process a GPU, on every node")
    return run.done(append=False)
