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

    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a container's user without a name: its number, as psutil gives it
        me = str(os.getuid())
    assert host.process_user(4242, str(proc)) == me
    assert host.process_user(4243, str(proc)) is None and host.process_user(4244, str(proc)) is None


# --- small input files read whole or refused (hardware/files.py), the numbers NVML gives (model, nvml_answers) ---------

def test_an_input_one_byte_over_its_limit_is_refused_never_cut_short(tmp_path: Path) -> None:
    """A snapshot or config given on a pipe (`--snapshot <(...)`) of limit + 1 bytes is refused (its last
    byte is never silently dropped); one of exactly the limit is read whole; the limit is said in KiB from
    1024 bytes."""
    from gpu_launch.errors import SnapshotError
    from gpu_launch.hardware import files

    def piped(size: int, limit: int) -> bytes:
        read_end, write_end = os.pipe()
        os.write(write_end, b"x" * size)
        os.close(write_end)
        try:
            return files.read_fd(read_end, "--snapshot /dev/fd/63", SnapshotError, limit)
        finally:
            os.close(read_end)

    assert piped(1024, 1024) == b"x" * 1024 and piped(0, 1024) == b""
    with pytest.raises(SnapshotError, match=r"^--snapshot /dev/fd/63: more than the limit of 1 KiB$"):
        piped(1025, 1024)
    with pytest.raises(SnapshotError, match=r"more than the limit of 1023 bytes$"):
        piped(1024, 1023)
    path = tmp_path / "snap.json"
    path.write_bytes(b"x" * 1025)
    with pytest.raises(SnapshotError, match=r"1 KiB is too large \(limit 1 KiB\)"):
        files.read_bytes(str(path), "--snapshot snap.json", SnapshotError, 1024)


def test_a_device_is_its_mig_instance_when_it_has_one_else_its_gpu() -> None:
    from gpu_launch.hardware.model import Device, Gpu, MigDevice

    gpu = Gpu(0, "GPU-aaaa", "NVIDIA A100", memory_total_mib=81920, memory_free_mib=80000)
    mig = MigDevice("MIG-bbbb", "1g.10gb", memory_total_mib=9728, memory_free_mib=9000)
    assert (Device(gpu).uuid, Device(gpu).memory_free_mib, Device(gpu).memory_total_mib) == ("GPU-aaaa", 80000, 81920)
    assert (Device(gpu, mig).uuid, Device(gpu, mig).memory_free_mib) == ("MIG-bbbb", 9000)


def test_used_memory_is_raised_to_what_free_memory_leaves_never_lowered() -> None:
    """NVIDIA's mock NVML says used 0, free 0 of 40 GiB: the GPU is full, not idle."""
    from gpu_launch.hardware.model import coherent_used

    assert coherent_used(40960, 0, 0) == 40960
    assert coherent_used(40960, None, 40000, 500) == 460  # no used figure: what the others leave
    assert coherent_used(40960, 30000, 40000) == 30000  # more used than the rest: kept
    assert coherent_used(None, 7, 0) == 7 and coherent_used(40960, 7, None) == 7


def test_nvml_memory_figures_that_cannot_be_are_unknown() -> None:
    from gpu_launch.hardware.nvml_answers import NOT_AVAILABLE, to_mib

    assert to_mib(3 * 1024 * 1024) == 3 and to_mib(0) == 0
    assert to_mib(-1) is None and to_mib(-(1 << 20)) is None and to_mib(NOT_AVAILABLE) is None and to_mib(True) is None


def test_gpus_named_by_index_are_the_ones_whose_state_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--gpus 0-3,6` reads the state of GPUs 0, 1, 2, 3 and 6 only (the fast path); a UUID (prefix) or
    a parent's CUDA_VISIBLE_DEVICES needs every GPU's (None)."""
    from types import SimpleNamespace

    from gpu_launch.choose import spec
    from gpu_launch.placing.pick import named_indices

    def asked(text: str) -> SimpleNamespace:
        return SimpleNamespace(gpus=spec.parse(text))

    assert named_indices(asked("0-3,6"), {}) == frozenset({0, 1, 2, 3, 6})
    assert named_indices(asked("5"), {}) == frozenset({5})
    assert named_indices(asked("GPU-4f2a"), {}) is None and named_indices(asked("0,GPU-4f2a"), {}) is None
    assert named_indices(asked("0"), {"CUDA_VISIBLE_DEVICES": "1"}) is None
    assert named_indices(SimpleNamespace(gpus=None), {}) is None
