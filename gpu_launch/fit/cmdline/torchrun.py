"""torchrun's own options (``torchrun [OPTIONS] script.py ...``, ``python -m torch.distributed.run``, and
the deprecated ``python -m torch.distributed.launch``: the same parser, plus its ``--use-env`` switch,
``torch/distributed/launch.py`` ``parse_args``).

Read in pytorch/pytorch ``torch/distributed/run.py`` (``get_args_parser``): each option has a
``-`` and a ``_`` spelling (``--nproc-per-node``/``--nproc_per_node``); argparse, so a unique
prefix of an option is that option (``--nproc-per`` is, ``--nproc`` is ambiguous) and the last of a
repeat wins; the options end at the training script, whose own arguments follow it. Each option
also reads ``PET_<DEST>`` when the command line leaves it out (``torch/distributed/argparse_util.py``:
``env`` takes the variable as the default; ``check_env`` reads ``PET_STANDALONE=1`` as the switch).

On every node of a several-node run (:func:`on_nodes`): the c10d rendezvous at the head.
"""

from collections.abc import Sequence

from gpu_launch.fit.cmdline import Flag, Said, Table
from gpu_launch.fit.cmdline.node_flags import NodeCommand, NodeRun, endpoint

TABLE = Table("torchrun", (
    Flag("nnodes", ("--nnodes",), env="PET_NNODES"),  # N or MIN:MAX
    Flag("nproc_per_node", ("--nproc-per-node", "--nproc_per_node"), env="PET_NPROC_PER_NODE"),
    Flag("node_rank", ("--node-rank", "--node_rank"), "int", "PET_NODE_RANK", 0, 1 << 20),
    Flag("master_addr", ("--master-addr", "--master_addr"), env="PET_MASTER_ADDR"),
    Flag("master_port", ("--master-port", "--master_port"), "int", "PET_MASTER_PORT", 1, 65535),
    Flag("rdzv_backend", ("--rdzv-backend", "--rdzv_backend"), env="PET_RDZV_BACKEND"),
    Flag("rdzv_endpoint", ("--rdzv-endpoint", "--rdzv_endpoint"), env="PET_RDZV_ENDPOINT"),
    Flag("rdzv_id", ("--rdzv-id", "--rdzv_id"), env="PET_RDZV_ID"),
    Flag("rdzv_conf", ("--rdzv-conf", "--rdzv_conf"), env="PET_RDZV_CONF"),
    Flag("standalone", ("--standalone",), "switch", "PET_STANDALONE"),
    Flag("local_addr", ("--local-addr", "--local_addr"), env="PET_LOCAL_ADDR"),
), source="pytorch/pytorch torch/distributed/run.py (get_args_parser)", abbreviations=True,
    options_end_at_positional=True,
    switches=("--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
              "--virtual-local-rank", "--virtual_local_rank", "-h", "--help", "--use-env", "--use_env"),
    others=("--max-restarts", "--max_restarts", "--monitor-interval", "--monitor_interval", "--start-method",
            "--start_method", "--event-log-handler", "--event_log_handler", "--role", "--module", "--no-python",
            "--no_python", "--run-path", "--run_path", "--log-dir", "--log_dir", "--redirects", "--tee",
            "--local-ranks-filter", "--local_ranks_filter", "--logs-specs",
            "--logs_specs", "--numa-binding", "--numa_binding", "--signals-to-handle", "--signals_to_handle",
            "--virtual-local-rank", "--virtual_local_rank", "--use-env", "--use_env"))


def nodes_form(argv: Sequence[str], said: Said) -> bool:
    return True


def on_nodes(run: NodeRun) -> NodeCommand:
    """torchrun's c10d rendezvous: ``--nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint
    HOST:PORT --rdzv-id JOB`` on every node; ``--rdzv-conf is_host=`` says which node hosts the store, so
    two nodes on one host do not both try (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py
    ``_create_tcp_store``)."""
    world = run.world
    run.refuse("standalone", "it starts a single-node rendezvous of its own")
    for meaning in ("node_rank", "master_addr", "master_port"):
        run.refuse(meaning, "those are for --rdzv-backend static; gpulaunch uses c10d with the head's address")
    run.value("nnodes", str(world.nnodes), "the nodes of this run", same=(f"{world.nnodes}:{world.nnodes}",))
    run.value("nproc_per_node", str(world.gpus), "GPUs per node", same=("gpu", "auto"))
    run.value("rdzv_backend", "c10d", "the rendezvous every node joins")
    run.value("rdzv_endpoint", endpoint(world.head_addr, world.head_port),
              "the head's address and a free port picked for this run")
    run.value("rdzv_id", world.job, "one id for the run")
    if run.said.get("rdzv_conf") is None:
        run.added += [run.name("rdzv_conf"), f"is_host={1 if world.rank == 0 else 0}"]
    if run.said.get("local_addr") is None and world.addr:
        # The workers' MASTER_ADDR is the address of the node c10d ranks first (whichever joined first), and
        # without --local-addr that is its socket.getfqdn(), a name the other nodes may not resolve or
        # route to (torch/distributed/elastic/rendezvous/api.py, RendezvousStoreInfo.build; the node
        # descriptor in dynamic_rendezvous.py). Each node's own address toward the head is routable from it.
        run.added += [run.name("local_addr"), world.addr]
    return run.done(append=False)
