"""Detached jobs: ``gpulaunch submit``, ``jobs``, ``log`` and ``cancel``, with no server.

A stage of its own beside reservations: it *calls* the launch (it runs ``python -m gpu_launch``
with the job's launch options, which waits in the ``--wait`` queue, reserves and execs the command
as a foreground launch does); the launch never calls it. Per user, in a private directory
(:mod:`gpu_launch.jobs.store`): a record and a log per job. A small supervisor process per job
(:mod:`gpu_launch.jobs.supervisor`), holding no reservation, starts the launch, learns when it
execs the command, and records how the job ended. What a record means now (still waiting, lost
at reboot, ...) is :mod:`gpu_launch.jobs.status`'s to say.
"""
