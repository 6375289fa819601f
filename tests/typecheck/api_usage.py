"""How a user's code calls the Python API; tests/test_api_types.py runs mypy on it (never imported).

Every line must type-check, except those whose comment starts with E (an error expected):
the signatures are what is tested.
"""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta

import gpu_launch
from gpu_launch.hardware.model import Machine

gpus: tuple[gpu_launch.Device, ...] = gpu_launch.use(2, min_free="20GiB")
first: str = gpus[0].cuda
index: int = gpus[0].index
free: int | None = gpus[0].memory_free_mib
gpu_launch.use(gpus="4-7", wait="30m", quiet=True)
gpu_launch.use(gpus=[3, 1], exclude=0, min_free=20 * 2**30, max_util=30, idle=True, wait=90.0)
gpu_launch.use(fit="60GiB", wait=True, snapshot="dgx-h100", lock_dir=os.path.join("/tmp", "locks"))
gpu_launch.use(mig=True, uuid=True, wait=timedelta(minutes=5))
devs: tuple[gpu_launch.Device, ...] = gpu_launch.select(2, idle=True)
gpu_launch.use(max_count=4, min_count=1, min_total_memory="80GB", account_as_free=True)
elastic: tuple[gpu_launch.Device, ...] = gpu_launch.select(max_count=4, account_as_free=["alice", "bob"])
gpu_launch.reserve(min_count=2, min_total_memory=80 * 10**9, account_as_free="alice").release()
m: Machine = gpu_launch.machine()
m2: Machine = gpu_launch.machine(snapshot="dgx-h100")
with gpu_launch.reserve(gpus="4-7", wait="30m") as r:
    env: dict[str, str] = r.env
    subprocess.run(["true"], env={**os.environ, **r.env}, check=True)
    held: tuple[gpu_launch.Device, ...] = r.devices
r.release()
gpu_launch.release()
try:
    gpu_launch.use(1)
except gpu_launch.Reserved as exc:
    code: int = exc.exit_code
    hint: str | None = exc.hint
except (gpu_launch.NotEnoughGpus, gpu_launch.WaitTimeout, gpu_launch.NoDriver, gpu_launch.CudaAlreadyInitialized):
    pass
except gpu_launch.GpuLaunchError as exc:
    message: str = exc.message

gpu_launch.use("2")  # E: n is a number
gpu_launch.use(2, 3)  # E: options are keyword-only
gpu_launch.use(min_free=[20])  # E: not a size
gpu_launch.use(gpus=3.5)  # E: not a GPU spec
gpu_launch.use(wait=[1])  # E: not a duration
gpu_launch.use(min_fre="20GiB")  # E: no such option
gpu_launch.use(max_count="4")  # E: a count is a number
gpu_launch.select(account_as_free=3)  # E: True or user names
gpu_launch.select(2).cuda  # E: a tuple of devices
bad: int = gpu_launch.machine()  # E: returns the model
