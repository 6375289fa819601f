"""The ``deepspeed`` launcher's own options (``deepspeed [OPTIONS] script.py ...``).

Read in deepspeedai/DeepSpeed ``deepspeed/launcher/runner.py`` (``parse_args``): ``--num_nodes``,
``--num_gpus`` (alias ``--num_accelerators``), ``--node_rank``, ``--master_addr``, ``--master_port``,
``-H``/``--hostfile``, ``-i``/``--include``, ``-e``/``--exclude``, ``--launcher``, ``--no_ssh``;
argparse, so a unique prefix of an option is that option and the last of a repeat wins; the options
end at the script.

On every node of a several-node run (:func:`on_nodes`): the runner without ssh, and a hostfile.
"""

import os
from collections.abc import Sequence

from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline.node_flags import NodeCommand, NodeRun

TABLE = Table("deepspeed", (
    Flag("nnodes", ("--num_nodes",), "int", low=-1, high=1 << 20),
    Flag("num_gpus", ("--num_gpus", "--num_accelerators"), "int", low=-1, high=1 << 20),
    Flag("node_rank", ("--node_rank",), "int", low=-1, high=1 << 20),
    Flag("master_addr", ("--master_addr",)),
    Flag("master_port", ("--master_port",), "int", low=1, high=65535),
    Flag("hostfile", ("--hostfile", "-H")),
    Flag("include", ("--include", "-i")),
    Flag("exclude", ("--exclude", "-e")),
    Flag("launcher", ("--launcher",)),
    Flag("no_ssh", ("--no_ssh",), "switch"),
), source="deepspeedai/DeepSpeed deepspeed/launcher/runner.py (parse_args)", abbreviations=True,
    options_end_at_positional=True,
    switches=("-h", "--help", "--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check",
              "--force_multi", "--save_pid", "--elastic_training", "--bind_cores_to_rank", "-q", "--quiet"),
    others=("--min_elastic_nodes", "--max_elastic_nodes", "--launcher_args", "--module", "--no_python",
            "--no_local_rank", "--no_ssh_check", "--force_multi", "--save_pid", "--enable_each_rank_log",
            "--autotuning", "--elastic_training", "--bind_cores_to_rank", "--bind_core_list", "--ssh_port",
            "--venv_script", "--log_level", "--quiet"))


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    """The runner: ``deepspeed`` or ``python -m deepspeed.launcher.runner`` (not its per-node launcher)."""
    return said.module in ("", "deepspeed.launcher.runner")


def on_nodes(run: NodeRun) -> NodeCommand:
    """The deepspeed runner without ssh: ``--no_ssh --node_rank --master_addr --master_port`` and a
    hostfile of the run's nodes (``NAME slots=N``, runner.py ``_parse_hostfile``). With a hostfile the
    runner no longer reads CUDA_VISIBLE_DEVICES, and its per-node launcher sets it to the hostfile's slot
    numbers (launch.py ``set_visible_devices_envs``), which would be GPUs 0..G-1; ``--include`` names this
    node's chosen GPUs (CUDA's numbers under PCI_BUS_ID: NVML's, as a rule) as its slots instead, and each
    other node's as 0..G-1, which only count there."""
    world = run.world
    for meaning in ("hostfile", "include", "exclude", "nnodes", "num_gpus", "launcher"):
        run.refuse(meaning, "gpulaunch writes the hostfile and --include from the nodes and GPUs it chose")
    local = world.local_ids or tuple(range(world.gpus))
    lines, include = [], []
    for rank, name in enumerate(world.names):
        ids = local if rank == world.rank else tuple(range(world.gpus))
        lines.append(f"{name} slots={max(ids) + 1}")
        include.append(f"{name}:{','.join(str(i) for i in ids)}")
    hostfile = os.path.join(run.files, f"hostfile.{world.rank}")
    run.switch("no_ssh", True, "every node starts its own part")
    run.value("node_rank", str(world.rank), "this node's rank")
    run.value("master_addr", world.head_addr, "the head's address")
    run.value("master_port", str(world.head_port), "a free port picked for this run on the head")
    run.added += [run.name("hostfile"), hostfile, run.name("include"), "@".join(include)]
    return run.done(append=False, files=((hostfile, "".join(line + "\n" for line in lines)),))
