"""Sweeps: ``gpulaunch each``, one command a line, each on GPUs of its own.

``jobfile`` reads the job file (shell text a line, placeholders, the per-job log files) for both kinds of
sweep; ``sweep`` is the local scheduler (this process starts each job as GPUs free up, on GPUs reserved
for it). ``each --slurm`` hands the same job file to Slurm as a job array (:mod:`gpu_launch.cluster.submitting`).
"""
