"""Choosing right in the states real machines are in (issue 11): MIG mode without instances, the
load of the whole set, nearly full GPUs, unknown processes, unhealthy GPUs, NVSwitch link counts.

States the snapshot reader may not carry yet (MIG mode, health, unknown processes) are tested on
model objects; what a user sees through the whole CLI is tested on snapshot files written here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_cli
from gpu_launch.choose import mig
from gpu_launch.choose.select import Constraints, check_explicit, choose_auto, choose_fit, eligibility
from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.machine import snapshot
from gpu_launch.machine.model import Device, Gpu, GpuProcess, Machine, MigDevice
from gpu_launch.units import parse_size

TOTAL = 81559


def gpu(i: int, *, used: int = 500, util: int = 0, users: tuple[str, ...] = (), numa: int | None = 0,
        name: str = "NVIDIA H100 80GB HBM3", **kw) -> Gpu:
    return Gpu(index=i, uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000", name=name, memory_total_mib=TOTAL,
               memory_used_mib=used, memory_free_mib=TOTAL - used, utilization_gpu=util, numa_node=numa,
               processes=tuple(GpuProcess(1000 + k, used - 400, u, "python") for k, u in enumerate(users)), **kw)


def machine(gpus: list[Gpu], link, **kw) -> Machine:
    """``link(i, j)`` gives the topo code between positions i < j."""
    m = len(gpus)
    links = tuple(tuple("X" if i == j else link(min(i, j), max(i, j)) for j in range(m)) for i in range(m))
    return Machine(tuple(gpus), links, source="test", **kw)


def auto(m: Machine, n: int, **kw) -> list[int]:
    return [d.gpu.index for d in choose_auto(m, n, Constraints(**kw)).devices]


def write_snapshot(path: Path, m: Machine) -> str:
    path.write_text(snapshot.dump(m))
    return str(path)


# --- 1. MIG mode ------------------------------------------------------------------------------

MIG0 = MigDevice(uuid="MIG-11111111-2222-3333-4444-555555555555", profile="3g.40gb", memory_total_mib=40192,
                 memory_used_mib=13, memory_free_mib=40179, gpu_instance_id=1, compute_instance_id=0)


def _four_with_one_in_mig_mode(migs: tuple[MigDevice, ...] = ()) -> Machine:
    gpus = [gpu(i) for i in range(4)]
    gpus[3] = replace(gpus[3], mig_mode="enabled", mig_devices=migs)
    return machine(gpus, lambda i, j: "NV12")


def test_a_gpu_in_mig_mode_without_instances_is_never_chosen_whole():
    m = _four_with_one_in_mig_mode()
    assert auto(m, 3) == [0, 1, 2]
    with pytest.raises(NotEnoughGpus) as exc:
        choose_auto(m, 4, Constraints())
    assert "GPU 3: in MIG mode" in exc.value.message
    reasons = {e.gpu.index: e.reason for e in eligibility(m, Constraints()).excluded}
    assert reasons[3].startswith("in MIG mode") and "no MIG devices" in reasons[3]


def test_gpus_on_a_gpu_in_mig_mode_without_instances_says_how_to_create_them():
    m = _four_with_one_in_mig_mode()
    with pytest.raises(UsageError) as exc:
        check_explicit((Device(m.gpus[3]),), m, Constraints())
    assert exc.value.message == "--gpus: GPU 3 is in MIG mode but has no MIG devices, so CUDA cannot run on it"
    assert "nvidia-smi mig -i 3 -cgi <profile> -C" in exc.value.hint and "root" in exc.value.hint


def test_gpus_on_a_gpu_in_mig_mode_names_its_mig_devices():
    m = _four_with_one_in_mig_mode((MIG0,))
    with pytest.raises(UsageError) as exc:
        check_explicit((Device(m.gpus[3]),), m, Constraints())
    assert f"{MIG0.uuid} (3g.40gb)" in exc.value.message
    assert f"--gpus {MIG0.uuid}" in exc.value.hint and "--mig" in exc.value.hint


def test_gpus_on_a_mig_gpu_through_the_cli_names_its_devices():
    done = run_cli("--snapshot", "mig-a100", "--gpus", "0", "--", "true")
    assert done.returncode == 2
    gpu0 = snapshot.resolve("mig-a100").gpus[0]
    assert all(m.uuid in done.stderr for m in gpu0.mig_devices), done.stderr
    assert done.stderr.count("\n") == 1  # one line, no traceback


def test_mig_tells_no_gpu_in_mig_mode_from_one_without_instances():
    with pytest.raises(NotEnoughGpus) as exc:
        mig.choose_mig(machine([gpu(i) for i in range(2)], lambda i, j: "NV12"), 1, Constraints())
    assert "no GPU here is in MIG mode" in exc.value.message
    with pytest.raises(NotEnoughGpus) as exc:
        mig.choose_mig(_four_with_one_in_mig_mode(), 1, Constraints())
    assert exc.value.message == "--mig: GPU 3 is in MIG mode but has no MIG devices to choose"
    assert "nvidia-smi mig -i 3 -cgi <profile> -C" in exc.value.hint
    # With an instance, --mig picks it.
    assert mig.choose_mig(_four_with_one_in_mig_mode((MIG0,)), 1, Constraints()).devices[0].mig == MIG0
