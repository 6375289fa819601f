"""``accelerate launch [OPTIONS] script.py ...``'s own options.

Read in huggingface/accelerate ``src/accelerate/commands/launch.py`` (``launch_command_parser``):
``--num_processes``, ``--num_machines``, ``--machine_rank``, ``--main_process_ip``,
``--main_process_port``, ``--gpu_ids``; argparse, last wins; the options end at the script.
The first positional is ``launch``.
"""

from gpu_launch.fit.cmdline import Flag, Table

TABLE = Table("accelerate", (
    Flag("num_processes", ("--num_processes",), "int", low=1, high=1 << 20),
    Flag("nnodes", ("--num_machines",), "int", low=1, high=1 << 20),
    Flag("node_rank", ("--machine_rank",), "int", low=0, high=1 << 20),
    Flag("master_addr", ("--main_process_ip",)),
    Flag("master_port", ("--main_process_port",), "int", low=1, high=65535),
    Flag("gpu_ids", ("--gpu_ids",)),
), source="huggingface/accelerate src/accelerate/commands/launch.py (launch_command_parser)")
