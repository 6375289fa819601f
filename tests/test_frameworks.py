"""What docs/frameworks.md promises about the environment a command receives.

The frameworks themselves are not installed here; these tests check gpulaunch's side of each claim
in a real child process: the child sees exactly the chosen GPUs, renumbered from 0 in table order.
"""

from __future__ import annotations

import os
import re

import pytest

from childproc import gpulaunch, launch_report, uuids


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


# --- launchers that would override gpulaunch's CUDA_VISIBLE_DEVICES: a warning naming the flag ---

def _fake_launchers(tmp_path):
    """`accelerate`, `deepspeed` (and DeepSpeed's other name for it, `ds`) and a `python3` (for the `python -m`
    forms) on PATH that print the CUDA_VISIBLE_DEVICES they were given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("accelerate", "deepspeed", "ds", "python3"):
        exe = bin_dir / name
        exe.write_text('#!/bin/sh\necho "got CVD=$CUDA_VISIBLE_DEVICES"\n')
        exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}"}


OVERRIDING = [
    (["accelerate", "launch", "--gpu_ids", "0,1", "train.py"], "--gpu_ids"),
    (["accelerate", "launch", "--multi_gpu", "--gpu-ids=0,1", "train.py"], "--gpu-ids"),
    (["deepspeed", "--include", "localhost:0,1", "train.py"], "--include"),
    (["deepspeed", "-i", "localhost:0", "train.py"], "-i"),
    (["deepspeed", "--num_gpus", "2", "train.py"], "--num_gpus"),
    (["deepspeed", "--exclude=localhost:3", "train.py"], "--exclude"),
    # read through the launchers' own tables: python's options before -m, argparse's prefixes, DeepSpeed's `ds`
    (["python3", "-W", "ignore", "-m", "deepspeed.launcher.runner", "--include", "localhost:0", "train.py"],
     "--include"),
    (["python3", "-X", "dev", "-m", "accelerate.commands.launch", "--gpu_ids", "0", "train.py"], "--gpu_ids"),
    (["ds", "--include", "localhost:0,1", "train.py"], "--include"),
    (["deepspeed", "--num_nod", "2", "train.py"], "--num_nod"),
    (["deepspeed", "-H", "hosts", "train.py"], "-H"),  # its launcher sets CUDA_VISIBLE_DEVICES to the slots
]


@pytest.mark.parametrize(("command", "flag"), OVERRIDING)
def test_a_launcher_flag_that_overrides_the_choice_is_named_in_a_warning(tmp_path, command, flag):
    env = _fake_launchers(tmp_path)
    proc = gpulaunch(["--snapshot", "dgx-h100", "--gpus", "4,5", "--", *command], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "got CVD=4,5\n"  # it still runs, with gpulaunch's choice handed over
    warning = [line for line in proc.stderr.splitlines() if "overriding gpulaunch's choice" in line]
    assert len(warning) == 1 and warning[0].startswith("gpulaunch: warning: `"), proc.stderr
    assert f" {flag} " in warning[0] and f"drop {flag}:" in warning[0]
    assert "CUDA_VISIBLE_DEVICES already scopes" in warning[0]
    quiet = gpulaunch(["--snapshot", "dgx-h100", "--gpus", "4,5", "-q", "--", *command], env)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "got CVD=4,5\n", "")


@pytest.mark.parametrize("command", [
    ["accelerate", "launch", "--gpu_ids", "all", "train.py"],  # `all` keeps CUDA_VISIBLE_DEVICES
    ["accelerate", "launch", "train.py", "--gpu_ids", "0"],  # the script's own option
    ["accelerate", "launch", "--num_processes", "2", "train.py"],
    ["deepspeed", "train.py", "--include", "x"],  # the script's own option
    ["deepspeed", "--num_nodes", "1", "--master_port", "29501", "train.py"],
    ["deepspeed", "--num_gpus", "-1", "train.py"],  # its default: the runner keeps CUDA_VISIBLE_DEVICES (num_gpus > 0)
    ["deepspeed", "--master_port", "29501", "train.py", "-i", "x"],  # the script's own -i
    ["accelerate", "launch", "--gpu_ids=all", "--multi_gpu", "train.py"],
    ["python3", "-c", "pass", "--gpu_ids", "0"],
])
def test_no_warning_when_the_launcher_keeps_the_choice(tmp_path, command):
    proc = gpulaunch(["--snapshot", "dgx-h100", "--gpus", "4,5", "--dry-run", "--", *command], _fake_launchers(tmp_path))
    assert proc.returncode == 0 and "overriding" not in proc.stderr, proc.stderr


def test_a_node_is_not_warned_about_the_flags_gpulaunch_added(tmp_path):
    # was: a --nodes deepspeed run warned "drop --include" about the --include gpulaunch itself writes
    proc = gpulaunch(["--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head",
                      "10.0.0.1:29400", "--log-dir", str(tmp_path / "logs"), "--dry-run", "--", "deepspeed", "train.py"],
                     _fake_launchers(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "--include node0:0,1@node1:" in proc.stdout and "overriding" not in proc.stderr, proc.stderr
