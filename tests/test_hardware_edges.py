"""The slips in reading the host a user would suffer (issue 37): a GPU's NUMA node and local CPUs from sysfs
as the kernel writes them (or damaged), the CPU lists `--bind` works from, and who runs a process on a GPU.
Unit-level: a sysfs and a /proc written under tmp_path; no NVML."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_launch.hardware import host

BUS = "00000000:3B:00.0"  # as NVML gives it; sysfs names it 0000:3b:00.0


def sysfs(tmp_path: Path, **attrs: str) -> Path:
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0"
    device.mkdir(parents=True)
    for name, text in attrs.items():
        (device / name).write_text(text)
    return tmp_path / "sys"


@pytest.mark.parametrize(("text", "node"), [("1\n", 1), ("0\n", 0), ("-1\n", None), ("x\n", None), ("", None)])
def test_a_gpus_numa_node_is_the_kernels_and_a_damaged_one_is_unknown(tmp_path: Path, text: str,
                                                                      node: int | None) -> None:
    """-1 is the kernel's "no NUMA node"; anything that is not a number is unknown too, not a traceback."""
    assert host.pci_numa_node(BUS, sysfs(tmp_path, numa_node=text)) == node


def test_a_gpu_without_sysfs_entries_has_no_numa_node_or_cpus(tmp_path: Path) -> None:
    root = sysfs(tmp_path)
    assert host.pci_numa_node(BUS, root) is None and host.pci_local_cpulist(BUS, root) is None
    assert host.pci_numa_node("not a bus id", root) is None and host.pci_numa_node(None, root) is None


def test_a_gpus_local_cpus_are_normalised_and_a_damaged_list_is_none(tmp_path: Path) -> None:
    assert host.pci_local_cpulist(BUS, sysfs(tmp_path, local_cpulist="64-95,0-31\n")) == "0-31,64-95"


def test_cpu_lists_merge_what_overlaps_or_touches_and_refuse_what_is_none() -> None:
    assert host.parse_cpulist("0-3,4-7,2") == list(range(8))
    assert host.format_cpulist(host.parse_cpulist("8,0-2,3")) == "0-3,8"
    for bad in ("3-1", "0-99999999999", "a", "0,,1"):
        with pytest.raises(ValueError):
            host.cpulist_ranges(bad)


def test_the_user_of_a_process_is_its_real_uid_from_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "status").write_text(f"Name:\ttrain\nUmask:\t0022\nUid:\t{os.getuid()}\t0\t0\t0\nGid:\t0\n")
    (proc / "4243").mkdir()
    (proc / "4243" / "status").write_text("Name:\tbroken\nUid:\tnot-a-number\n")
    import pwd

    assert host.process_user(4242, str(proc)) == pwd.getpwuid(os.getuid()).pw_name
    assert host.process_user(4243, str(proc)) is None and host.process_user(4244, str(proc)) is None
