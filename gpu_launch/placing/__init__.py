"""Placing a command on GPUs: the one conductor of choosing, reserving and building the environment.

:mod:`pick` reads the machine, chooses within the parent's view (:mod:`gpu_launch.choose`), reserves
(:mod:`gpu_launch.reservations`), builds the child's environment (:mod:`gpu_launch.run.environment`) and
says what it did. A launch, ``env``, ``check``, ``each``, detached jobs, the node task and the Python API
all place their GPUs through it, so they agree on what they choose.
"""
