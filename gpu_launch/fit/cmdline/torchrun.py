"""torchrun's own options (``torchrun [OPTIONS] script.py ...``, ``python -m torch.distributed.run``).

Read in pytorch/pytorch ``torch/distributed/run.py`` (``get_args_parser``): each option has a
``-`` and a ``_`` spelling (``--nproc-per-node``/``--nproc_per_node``); argparse, last wins; the
options end at the training script, whose own arguments follow it.
"""

from gpu_launch.fit.cmdline import Flag, Table

TABLE = Table("torchrun", (
    Flag("nnodes", ("--nnodes",)),  # N or MIN:MAX
    Flag("nproc_per_node", ("--nproc-per-node", "--nproc_per_node")),
    Flag("node_rank", ("--node-rank", "--node_rank"), "int", low=0, high=1 << 20),
    Flag("master_addr", ("--master-addr", "--master_addr")),
    Flag("master_port", ("--master-port", "--master_port"), "int", low=1, high=65535),
    Flag("rdzv_backend", ("--rdzv-backend", "--rdzv_backend")),
    Flag("rdzv_endpoint", ("--rdzv-endpoint", "--rdzv_endpoint")),
    Flag("rdzv_id", ("--rdzv-id", "--rdzv_id")),
    Flag("standalone", ("--standalone",), "switch"),
), source="pytorch/pytorch torch/distributed/run.py (get_args_parser)", options_end_at_positional=True)
