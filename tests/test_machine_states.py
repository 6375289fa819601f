"""States real machines are in, read through the NVML adapter and shown by the whole CLI.

Each state comes from tests/fake_pynvml.py (the same hook as tests/test_nvml_faults.py: the CLI runs
in process and its NvmlBackend reads the fake): a GPU in MIG mode with no MIG devices or with sparse
MIG indices, process lists NVML cannot give, incoherent memory, an NVSwitch fabric, GPU-local CPUs
above the first mask word, and GPUs with health problems. The tests assert what a user sees: the
`ls` table, `ls --json` (and the snapshot it makes, read back), and what a launch chooses or says.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.views import render
from tests import fake_pynvml as fake
from tests.fake_pynvml import FakeNvml, make_gpu
from tests.test_nvml_faults import Run, gpulaunch  # noqa: F401  (the fixture)


def rows(ls_out: str) -> dict[int, str]:
    """The `ls` rows by GPU index (MIG rows left out), plain or rich."""
    return {int(line.split()[0]): line.rstrip() for line in ls_out.splitlines() if line.lstrip()[:1].isdigit()}


def ls_json(run: Run, nvml: FakeNvml) -> dict[str, Any]:
    result = run(nvml, "ls", "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def read_back(doc: dict[str, Any], tmp_path: Path) -> Any:
    """The machine a `ls --json` document describes, read as a snapshot file."""
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(doc))
    return snapshot.load(str(path))


def rich_ls(machine: Any) -> str:
    """The rich `ls` table (what a terminal shows), wide enough not to wrap."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "200")
        render.ls_rich(machine, out)
    return out.getvalue()


# -- MIG mode ---------------------------------------------------------------------------------

def mig_mode_without_instances() -> FakeNvml:
    """GPU 0 just switched to MIG mode: nobody has created an instance yet. GPU 1 is a whole GPU."""
    return FakeNvml([make_gpu(i, name="NVIDIA A100-SXM4-80GB", mig_enabled=i == 0) for i in range(2)])


def test_ls_marks_a_gpu_in_mig_mode_that_has_no_mig_devices(gpulaunch: Run, tmp_path: Path) -> None:
    listing = gpulaunch(mig_mode_without_instances(), "ls")
    assert listing.code == 0
    assert rows(listing.out)[0].endswith("MIG mode, 0 MIG devices")
    assert rows(listing.out)[1].endswith("–")
    doc = ls_json(gpulaunch, mig_mode_without_instances())
    assert [g["mig_mode"] for g in doc["gpus"]] == ["enabled", "disabled"]
    assert "mig_devices" not in doc["gpus"][0]
    machine = read_back(doc, tmp_path)  # the snapshot keeps it: MIG mode is not "has MIG devices"
    assert machine.gpus[0].in_mig_mode and not machine.gpus[1].in_mig_mode
    assert "MIG mode, 0 MIG devices" in rich_ls(machine)


def test_sparse_mig_devices_are_all_listed(gpulaunch: Run) -> None:
    nvml = fake.mig_a100()
    migs = nvml.gpus[0].mig_devices
    nvml.gpus[0].mig_devices = [None, migs[1], None, None, migs[0]]  # instances 0, 2, 3 destroyed
    listing = gpulaunch(nvml, "ls")
    assert listing.code == 0 and rows(listing.out)[0].endswith("MIG mode")
    assert [line.split()[1:3] for line in listing.out.splitlines() if "└ MIG" in line] == [
        ["MIG", "2g.20gb"], ["MIG", "3g.40gb"]]
    chosen = gpulaunch(fake.mig_a100(), "--dry-run", "--json", "-q", "--mig", "--", "x")
    assert chosen.code == 0 and json.loads(chosen.out)["devices"][0]["uuid"].startswith("MIG-")


def test_old_snapshots_without_mig_mode_read_it_from_their_mig_devices() -> None:
    machine = snapshot.resolve("mig-a100")
    assert [g.mig_mode for g in machine.gpus] == ["enabled", "disabled"]
    doc = snapshot.to_dict(machine)
    assert [g["mig_mode"] for g in doc["gpus"]] == ["enabled", "disabled"]


# -- processes NVML cannot list ---------------------------------------------------------------

def unlistable_processes(error: Any = fake.NVMLError_NoPermission) -> FakeNvml:
    """Four GPUs; NVML cannot list GPU 1's processes (a MIG GPU to a non-root user, for one)."""
    return FakeNvml([make_gpu(i) for i in range(4)], errors={("nvmlDeviceGetComputeRunningProcesses", 1): error})


@pytest.mark.parametrize("error", [fake.NVMLError_NoPermission, fake.NVMLError_NotSupported, fake.NVMLError_Unknown],
                         ids=lambda e: e.__name__)
def test_processes_nvml_cannot_list_are_unknown_not_none(gpulaunch: Run, tmp_path: Path, error: Any) -> None:
    listing = gpulaunch(unlistable_processes(error), "ls")
    assert listing.code == 0
    assert rows(listing.out)[1].endswith("?") and rows(listing.out)[0].endswith("–")
    doc = ls_json(gpulaunch, unlistable_processes(error))
    assert doc["gpus"][1]["processes"] is None and doc["gpus"][0]["processes"] == []
    machine = read_back(doc, tmp_path)
    assert not machine.gpus[1].processes_known and machine.gpus[0].processes_known
    assert rows(rich_ls(machine))[1].endswith("?")


def test_gpus_reads_processes_and_names_the_user_of_a_busy_gpu(gpulaunch: Run) -> None:
    import os
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    gpus = [make_gpu(0, utilization_gpu=97, memory_used_mib=60000, processes=[fake.FakeProcess(os.getpid(), 59000)]),
            make_gpu(1, processes=[fake.FakeProcess(os.getpid(), 300)])]
    busy = gpulaunch(FakeNvml(gpus), "--dry-run", "--gpus", "0", "--", "x")
    assert busy.code == 0 and f"warning: GPU 0 is busy by {me} (97% utilisation" in busy.err
    # GPU 1's memory and utilisation look idle: only NVML's process list tells that someone is on it.
    idle = gpulaunch(FakeNvml(gpus), "--dry-run", "--idle", "--gpus", "1", "--", "x")
    assert idle.code == 0 and "warning: GPU 1: not idle (partly used; --idle)" in idle.err
    quiet = gpulaunch(FakeNvml(gpus), "--dry-run", "-q", "--gpus", "0", "--", "x")
    assert quiet.code == 0 and "warning" not in quiet.err


# -- memory that does not add up --------------------------------------------------------------

def incoherent_memory(**gpu0: Any) -> FakeNvml:
    """GPU 0 reports used 0 and free 0 of 40 GiB: NVIDIA's mock NVML does so by default. GPU 1 is idle."""
    gpu0 = {"memory_used_mib": 0, "memory_free_mib": 0, **gpu0}
    return FakeNvml([make_gpu(i, memory_total_mib=40960, **(gpu0 if i == 0 else {})) for i in range(2)])


@pytest.mark.parametrize("driver_generation", [550, 470], ids=["memory-v2", "memory-v1"])
def test_memory_that_does_not_add_up_is_never_idle(gpulaunch: Run, driver_generation: int) -> None:
    nvml = incoherent_memory()
    nvml.absent_symbols |= {"nvmlDeviceGetMemoryInfo_v2"} if driver_generation < 510 else set()
    listing = gpulaunch(nvml, "ls")
    assert "40.0 GiB / 40.0 GiB" in rows(listing.out)[0] and "4 MiB / 40.0 GiB" in rows(listing.out)[1]
    doc = ls_json(gpulaunch, incoherent_memory())
    assert [(g["memory_used_mib"], g["memory_free_mib"]) for g in doc["gpus"]] == [(40960, 0), (4, 40956)]
    assert gpulaunch(incoherent_memory(), "--dry-run", "--json", "-q", "--auto", "1", "--", "x").chosen() == [1]
    explicit = gpulaunch(incoherent_memory(), "--dry-run", "--gpus", "0", "--", "x")
    assert explicit.code == 0 and "warning: GPU 0 is full (0% utilisation, 0 MiB free)" in explicit.err


def test_reserved_memory_is_not_counted_as_used_twice(gpulaunch: Run) -> None:
    """Used + free + reserved = total (an idle GPU, as NVIDIA's mock A100 profile has it): coherent."""
    doc = ls_json(gpulaunch, incoherent_memory(memory_used_mib=583, memory_reserved_mib=583, memory_free_mib=40377))
    assert (doc["gpus"][0]["memory_used_mib"], doc["gpus"][0]["memory_reserved_mib"]) == (0, 583)
    # used 0, free 0, reserved 583: the rest is in use
    doc = ls_json(gpulaunch, incoherent_memory(memory_used_mib=583, memory_reserved_mib=583))
    assert (doc["gpus"][0]["memory_used_mib"], doc["gpus"][0]["memory_free_mib"]) == (40377, 0)


def test_a_snapshot_whose_memory_does_not_add_up_is_read_coherently(gpulaunch: Run, tmp_path: Path) -> None:
    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    doc["gpus"][0].update(memory_used_mib=0, memory_free_mib=0)
    doc["gpus"][1].update(memory_used_mib=0, memory_free_mib=1024, memory_reserved_mib=512)
    machine = read_back(doc, tmp_path)
    total = machine.gpus[0].memory_total_mib
    assert machine.gpus[0].memory_used_mib == total and machine.gpus[1].memory_used_mib == total - 1024 - 512
    again = snapshot.loads(snapshot.dump(machine), source=machine.source)
    assert again == machine  # what is written is read back the same
    (tmp_path / "m.json").write_text(json.dumps(doc))
    listing = gpulaunch(None, "--snapshot", str(tmp_path / "m.json"), "--dry-run", "--gpus", "0", "--", "x")
    assert listing.code == 0 and "warning: GPU 0 is full (0% utilisation, 0 MiB free)" in listing.err


# -- NVSwitch ---------------------------------------------------------------------------------

def test_ls_json_says_when_nvlinks_go_through_nvswitches(gpulaunch: Run, tmp_path: Path) -> None:
    doc = ls_json(gpulaunch, fake.dgx_h100())
    assert doc["nvswitch"] is True and doc["links"][0][1] == "NV18"
    assert read_back(doc, tmp_path).nvswitch
    bridged = ls_json(gpulaunch, fake.workstation_nvlink())
    assert bridged["nvswitch"] is False and bridged["links"][0][2] == "NV4"


@pytest.mark.parametrize("name", snapshot.example_names())
def test_bundled_nvswitch_machines_say_so(name: str) -> None:
    assert snapshot.resolve(name).nvswitch == (name in ("dgx-h100", "mig-a100"))  # DGX H100, DGX A100


# -- CPU affinity above the first mask word ---------------------------------------------------

def test_ls_topo_shows_gpu_local_cpus_far_above_cpu_0(gpulaunch: Run, tmp_path: Path) -> None:
    gpus = [make_gpu(0, cpu_affinity="0-63"), make_gpu(1, cpu_affinity="960-1023"), make_gpu(2, cpu_affinity=None)]
    local = tmp_path / "bus" / "pci" / "devices" / "0000:38:00.0"  # GPU 2: NVML has nothing, sysfs knows
    local.mkdir(parents=True)
    (local / "local_cpulist").write_text("64-127\n")
    listing = gpulaunch(FakeNvml(gpus), "ls", "--topo")
    assert listing.code == 0
    affinity = {line.split()[0]: line.split()[4] for line in listing.out.splitlines() if line.startswith("GPU") and
                line.split()[0][3:].isdigit()}
    assert affinity == {"GPU0": "0-63", "GPU1": "960-1023", "GPU2": "64-127"}


# -- health -----------------------------------------------------------------------------------

def unhealthy() -> FakeNvml:
    """GPU 1: row remapping failed; GPU 2: an uncorrectable ECC error since the driver loaded;
    GPU 3: NVML answers none of the health queries (unknown, so nothing to say)."""
    gpus = [make_gpu(0), make_gpu(1, remapped_rows=(0, 3, False, True)), make_gpu(2, ecc_uncorrected=(1, 1)),
            make_gpu(3, remapped_rows=None, ecc_uncorrected=None)]
    return FakeNvml(gpus)


def test_ls_shows_what_is_wrong_with_a_gpus_health(gpulaunch: Run, tmp_path: Path) -> None:
    listing = gpulaunch(unhealthy(), "ls")
    assert listing.code == 0
    shown = rows(listing.out)
    assert shown[1].endswith("unhealthy: row remapping failed")
    assert shown[2].endswith("unhealthy: 1 volatile uncorrectable ECC error")
    assert "unhealthy" not in shown[0] + shown[3]
    doc = ls_json(gpulaunch, unhealthy())
    assert [g["health"] for g in doc["gpus"]] == [[], ["row remapping failed"], ["1 volatile uncorrectable ECC error"], []]
    machine = read_back(doc, tmp_path)
    assert machine.gpus[1].health == ("row remapping failed",)
    assert rows(rich_ls(machine))[1].endswith("unhealthy: row remapping failed")


def test_ls_puts_notes_before_processes(gpulaunch: Run) -> None:
    gpus = [make_gpu(0, mig_enabled=True, ecc_uncorrected=(2, 2)),
            make_gpu(1, remapped_rows=(0, 1, True, False), processes=[fake.FakeProcess(4_194_311, 2048)])]
    nvml = FakeNvml(gpus, errors={("nvmlDeviceGetComputeRunningProcesses", 0): fake.NVMLError_NoPermission})
    shown = rows(gpulaunch(nvml, "ls").out)
    assert shown[0].endswith("MIG mode, 0 MIG devices; unhealthy: 2 volatile uncorrectable ECC errors; processes ?")
    assert shown[1].endswith("unhealthy: row remapping pending; ?:4194311 2.0 GiB")


def test_topo_json_is_a_whole_snapshot_with_processes(gpulaunch: Run) -> None:
    gpus = [make_gpu(0, processes=[fake.FakeProcess(4_194_311, 512)]), make_gpu(1)]
    doc = json.loads(gpulaunch(FakeNvml(gpus), "topo", "--json").out)
    assert [len(g["processes"]) for g in doc["gpus"]] == [1, 0]  # read, not null (unknown)


def test_the_parents_narrowed_view_keeps_the_nvswitch_fabric() -> None:
    from gpu_launch.choose import visibility
    from gpu_launch.hardware.model import Device

    dgx = snapshot.resolve("dgx-h100")
    narrowed = visibility.Visibility(tuple(Device(g) for g in dgx.gpus[2:5])).restrict(dgx)
    assert [g.index for g in narrowed.gpus] == [2, 3, 4] and narrowed.nvswitch
    assert snapshot.loads(snapshot.dump(narrowed)).nvswitch


# -- NVML's numbers that are not the PCI bus order ----------------------------------------------
# CUDA under CUDA_DEVICE_ORDER=PCI_BUS_ID counts GPUs by bus id; NVIDIA's mock NVML L40S profile numbers
# them otherwise (GPU 4 at bus 18, between GPU 0 and GPU 1), and NVML does not promise the bus order.

def env_json(run: Run, nvml: FakeNvml, *args: str) -> tuple[dict[str, Any], str]:
    result = run(nvml, "env", "--json", *args)
    assert result.code == 0, result.err
    return json.loads(result.out), result.err


def test_gpus_nvml_numbers_out_of_bus_order_are_given_by_uuid(gpulaunch: Run) -> None:
    nvml = fake.l40s_out_of_bus_order()
    doc, err = env_json(gpulaunch, nvml, "--gpus", "4")
    # The index 4 would be the fifth GPU by bus id under PCI_BUS_ID: GPU 2 (bus B1), not GPU 4.
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == nvml.gpus[4].uuid and doc["env"]["GPULAUNCH_GPUS"] == "4"
    assert "cuda:0 → GPU 4" in err and "00000000:18:00.0" in err
    doc, _ = env_json(gpulaunch, fake.l40s_out_of_bus_order(), "--auto", "2")
    chosen = [d["uuid"] for d in doc["devices"]]
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(chosen) and len(chosen) == 2
    # Numbered by bus id, as NVML numbers every real machine seen: indices, as before.
    doc, _ = env_json(gpulaunch, fake.pcie_dual_socket(), "--gpus", "4")
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == "4"


def test_a_parents_indices_count_the_gpus_by_bus_id(gpulaunch: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's CUDA_VISIBLE_DEVICES=1 under PCI_BUS_ID is the second GPU by bus id: GPU 4 here."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    chosen = gpulaunch(fake.l40s_out_of_bus_order(), "--dry-run", "--json", "-q", "--auto", "1", "--", "x")
    assert chosen.code == 0, chosen.err
    assert chosen.chosen() == [4]


def test_a_machine_with_no_gpu_to_give_whole_does_not_say_ask_for_fewer(gpulaunch: Run) -> None:
    """NVIDIA's mock NVML with MIG mode on: every GPU in MIG mode, none with a MIG device. Fewer than one
    GPU cannot be asked for."""
    nvml = FakeNvml([make_gpu(i, name="NVIDIA A100-SXM4-40GB", mig_enabled=True) for i in range(2)])
    result = gpulaunch(nvml, "--dry-run", "--auto", "1", "--", "x")
    assert result.code == 4
    line = result.error_lines[0]
    assert "need 1 GPU, but only 0 of 2 are eligible" in line and "in MIG mode, with no MIG devices yet" in line
    assert "none of the 2 GPUs can be given whole" in line and "ask for fewer" not in line and "--wait" not in line
    one_left = gpulaunch(FakeNvml([make_gpu(0, mig_enabled=True), make_gpu(1)]), "--dry-run", "--auto", "2", "--", "x")
    assert "only 1 of 2 GPUs can be given whole" in one_left.error_lines[0] and "ask for fewer" in one_left.error_lines[0]


# -- what NVIDIA's mock NVML showed (k8s-test-infra pkg/gpu/mocknvml, run through the real pynvml) ----------

def test_the_mock_nvml_default_machine_reads_as_the_mock_showed_it(gpulaunch: Run) -> None:
    listing = gpulaunch(fake.mock_nvml_default(), "ls")
    assert listing.code == 0
    assert rows(listing.out)[0].split() == ["0", "Mock", "NVIDIA", "A100-SXM4-40GB", "0", "MiB", "40.0", "GiB", "/",
                                            "40.0", "GiB", "0%", "–", "–"]
    topo = gpulaunch(fake.mock_nvml_default(), "topo")
    assert topo.code == 0 and "warning" not in topo.err
    assert topo.out.splitlines()[1].split() == ["GPU0", "X", *["PIX"] * 7, "N/A", "N/A"]
    chosen = gpulaunch(fake.mock_nvml_default(), *("--dry-run", "--json", "--auto", "1", "--", "x"))
    assert chosen.code == 4 and "GPUs 0-7: full" in chosen.err  # no memory free: never idle, never chosen
    assert "(hint: wait for a GPU with --wait, or relax the constraints)" in chosen.err  # not "ask for fewer"


def test_nvswitch_links_whose_remote_pci_is_all_fs_are_the_switch_fabric(gpulaunch: Run) -> None:
    doc = ls_json(gpulaunch, fake.mock_nvml_a100_nvswitch())
    assert doc["links"][0] == ["X", *["NV12"] * 7] and doc["links"][7][:7] == ["NV12"] * 7
    assert [g["numa_node"] for g in doc["gpus"]] == [0] * 4 + [1] * 4
    assert [g["cpu_affinity"] for g in doc["gpus"]] == ["0-63"] * 4 + ["64-127"] * 4
    assert [g["memory_used_mib"] for g in doc["gpus"]] == [0] * 8  # v2: the 583 MiB are reserved, not used
    chosen = gpulaunch(fake.mock_nvml_a100_nvswitch(), "--dry-run", "--json", "-q", "--auto", "4", "--", "x")
    assert chosen.code == 0 and chosen.chosen() == [0, 1, 2, 3]  # one NUMA node
