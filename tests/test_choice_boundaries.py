"""The choice at the edge of each rule (issue 28): a GPU at exactly ``--max-util`` or exactly ``--min-free``
is eligible (docs/choosing-gpus.md: "at or below PCT utilisation", "at least SIZE free"), and an
inherited MIG device lets a job use that MIG device, never its whole GPU or a sibling.

Each test fails when the rule is off by one the other way (``>=`` for ``>``, ``<=`` for ``<``) or the
MIG device is matched by its GPU: what the user sees is the GPU the command got, or the refusal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from childproc import example, gpulaunch, launch_report, write
from gpu_launch.errors import ExitCode
from gpu_launch.hardware import snapshot

MIG = snapshot.resolve("mig-a100")
BIG, MID, SMALL = MIG.gpus[0].mig_devices  # 3g.20gb, 2g.10gb, 1g.5gb, all on GPU 0


def _machine(tmp_path: Path, **by_index: dict[str, Any]) -> str:
    """pcie-8x (8 × 48 GiB) with every GPU busy and full, except the GPUs given, set as given."""
    doc = example("pcie-8x")
    for gpu in doc["gpus"]:
        gpu.update(utilization_gpu=100, memory_used_mib=gpu["memory_total_mib"] - 100, memory_free_mib=100,
                   processes=[])
        gpu.update(by_index.get(f"g{gpu['index']}", {}))
    return write(tmp_path, doc)


def _memory(total: int, free: int) -> dict[str, Any]:
    return {"memory_total_mib": total, "memory_free_mib": free, "memory_used_mib": total - free, "utilization_gpu": 0}


def test_a_gpu_at_exactly_max_util_is_eligible(tmp_path: Path) -> None:
    path = _machine(tmp_path, g3={"utilization_gpu": 30, "memory_used_mib": 1000, "memory_free_mib": 48140},
                    g4={"utilization_gpu": 31, "memory_used_mib": 1000, "memory_free_mib": 48140})
    child, _ = launch_report(["--snapshot", path, "--auto", "1", "--max-util", "30"])
    assert child["CUDA_VISIBLE_DEVICES"] == "3"  # GPU 4, at 31 %, is just over
    done = gpulaunch(["--snapshot", path, "--auto", "2", "--max-util", "30", "--", "echo", "RAN"])
    assert done.returncode == ExitCode.NOT_ENOUGH_GPUS and "RAN" not in done.stdout
    assert "GPU 4: 31% utilisation > --max-util 30%" in done.stderr, done.stderr
    child, _ = launch_report(["--snapshot", path, "--gpus", "3", "--max-util", "30"])
    assert child["CUDA_VISIBLE_DEVICES"] == "3"


def test_a_gpu_with_exactly_min_free_is_eligible(tmp_path: Path) -> None:
    """20 GiB free meets --min-free 20GiB; 20 GiB less 1 MiB does not. And 25 % of 80 GiB free meets 25%.
    (--max-util 100: GPUs this full count as busy, which --auto otherwise leaves out.)"""
    path = _machine(tmp_path, g2=_memory(49140, 20479), g5=_memory(49140, 20480), g6=_memory(81920, 20480))
    child, _ = launch_report(["--snapshot", path, "--auto", "1", "--max-util", "100", "--min-free", "20GiB",
                              "--exclude", "6"])
    assert child["CUDA_VISIBLE_DEVICES"] == "5"
    done = gpulaunch(["--snapshot", path, "--auto", "1", "--max-util", "100", "--min-free", "20GiB", "--exclude", "5,6",
                      "--", "echo", "RAN"])
    assert done.returncode == ExitCode.NOT_ENOUGH_GPUS and "RAN" not in done.stdout
    assert "GPU 2: 20.0 GiB free < 20.0 GiB asked by --min-free" in done.stderr, done.stderr
    child, _ = launch_report(["--snapshot", path, "--auto", "1", "--max-util", "100", "--min-free", "25%",
                              "--exclude", "2,5"])
    assert child["CUDA_VISIBLE_DEVICES"] == "6"  # 20480 of 81920 MiB: exactly 25 %


def test_an_inherited_mig_device_is_not_its_whole_gpu() -> None:
    """CUDA_VISIBLE_DEVICES=<a MIG device>: that device is the job's, not GPU 0 nor its other MIG devices."""
    parent = {"CUDA_VISIBLE_DEVICES": SMALL.uuid}
    for other in (BIG.uuid, MID.uuid[:16], "0"):
        done = gpulaunch(["--snapshot", "mig-a100", "--gpus", other, "--", "echo", "RAN"], parent)
        assert done.returncode in (ExitCode.USAGE, ExitCode.NOT_ENOUGH_GPUS) and "RAN" not in done.stdout, (other, done)
        assert "outside what the parent allows" in done.stderr or "MIG mode" in done.stderr, (other, done.stderr)
    sibling = gpulaunch(["--snapshot", "mig-a100", "--gpus", BIG.uuid, "--", "true"], parent)
    assert f"is outside what the parent allows (CUDA_VISIBLE_DEVICES={SMALL.uuid}: GPU 0 MIG 1g.5gb)" in sibling.stderr
    child, err = launch_report(["--snapshot", "mig-a100", "--gpus", SMALL.uuid], parent)
    assert child["CUDA_VISIBLE_DEVICES"] == SMALL.uuid and "(parent cuda:0)" in err
    child, _ = launch_report(["--snapshot", "mig-a100", "--auto", "1", "--mig"], parent)
    assert child["CUDA_VISIBLE_DEVICES"] == SMALL.uuid  # BIG has the most free memory, but is not the parent's
    # In a container that shows GPU 0's second MIG device only (NVIDIA_VISIBLE_DEVICES=0:1), an inherited
    # CUDA_VISIBLE_DEVICES naming the first leaves no device, rather than letting it in by their common GPU.
    both = {"CUDA_VISIBLE_DEVICES": BIG.uuid, "NVIDIA_VISIBLE_DEVICES": "0:1"}
    done = gpulaunch(["--snapshot", "mig-a100", "--auto", "1", "--mig", "--", "echo", "RAN"], both)
    assert done.returncode == ExitCode.NOT_ENOUGH_GPUS and "RAN" not in done.stdout, done
    assert "and NVIDIA_VISIBLE_DEVICES=0:1 allows no GPU" in done.stderr, done.stderr
