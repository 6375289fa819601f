"""The ``deepspeed`` launcher's own options (``deepspeed [OPTIONS] script.py ...``).

Read in deepspeedai/DeepSpeed ``deepspeed/launcher/runner.py`` (``parse_args``): ``--num_nodes``,
``--num_gpus``, ``--node_rank``, ``--master_addr``, ``--master_port``, ``--hostfile``,
``--include``/``--exclude``, ``--no_ssh``; argparse, last wins; the options end at the script.
"""

from gpu_launch.fit.cmdline import Flag, Table

TABLE = Table("deepspeed", (
    Flag("nnodes", ("--num_nodes",), "int", low=-1, high=1 << 20),
    Flag("num_gpus", ("--num_gpus",), "int", low=-1, high=1 << 20),
    Flag("node_rank", ("--node_rank",), "int", low=-1, high=1 << 20),
    Flag("master_addr", ("--master_addr",)),
    Flag("master_port", ("--master_port",), "int", low=1, high=65535),
    Flag("hostfile", ("--hostfile", "-H")),
    Flag("include", ("--include", "-i")),
    Flag("exclude", ("--exclude", "-e")),
    Flag("no_ssh", ("--no_ssh",), "switch"),
), source="deepspeedai/DeepSpeed deepspeed/launcher/runner.py (parse_args)", options_end_at_positional=True)
