"""What the README's "Frameworks" section promises about the environment a command receives.

The frameworks themselves are not installed here; these tests check gpulaunch's side of each claim
in a real child process: the child sees exactly the chosen GPUs, renumbered from 0 in table order.
"""

from __future__ import annotations

import re

from childproc import launch_report, uuids


def _table(err: str) -> list[tuple[int, int]]:
    """(cuda index, physical GPU) pairs from the mapping table."""
    return [(int(a), int(b)) for a, b in re.findall(r"cuda:(\d+) → GPU (\d+)", err)]


def test_cuda_i_is_the_i_th_chosen_gpu_and_the_table_agrees():
    # PyTorch/candle/MLC-LLM: cuda:0 is the first entry of CUDA_VISIBLE_DEVICES
    child, err = launch_report(["--snapshot", "dgx-h100", "--auto", "4"])
    visible = child["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(visible) == 4  # torchrun --nproc-per-node gpu / vLLM --tensor-parallel-size 4
    assert _table(err) == [(i, int(g)) for i, g in enumerate(visible)]
    assert child["GPULAUNCH_GPUS"] == child["CUDA_VISIBLE_DEVICES"]


def test_explicit_order_is_kept():
    # DataParallel(device_ids=[0, 1]) means GPU 5 then GPU 2 here
    child, err = launch_report(["--snapshot", "pcie-8x", "--gpus", "5,2"])
    assert child["CUDA_VISIBLE_DEVICES"] == "5,2" and _table(err) == [(0, 5), (1, 2)]


def test_deepspeed_can_read_the_list_as_integers_without_a_parent():
    # the deepspeed launcher turns CUDA_VISIBLE_DEVICES into --include localhost:<list> with int()
    child, _ = launch_report(["--snapshot", "pcie-8x", "--gpus", "4,5"])
    assert [int(x) for x in child["CUDA_VISIBLE_DEVICES"].split(",")] == [4, 5]
    assert child["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_under_a_parent_the_list_is_uuids_and_gpulaunch_gpus_keeps_indices():
    child, _ = launch_report(["--snapshot", "pcie-8x", "--gpus", "4,5"], {"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert child["CUDA_VISIBLE_DEVICES"].split(",") == uuids("pcie-8x")[4:6]
    assert child["GPULAUNCH_GPUS"] == "4,5"
