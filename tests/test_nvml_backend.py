"""NvmlBackend against the hand-written fake pynvml (tests/fake_pynvml.py): no GPU needed."""

from __future__ import annotations

import dataclasses
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_launch.hardware import host

from gpu_launch.hardware import snapshot
from gpu_launch.hardware.read import Needs
from gpu_launch.hardware.nvml import NvmlBackend
from gpu_launch.errors import ExitCode, NvmlUnavailable
from gpu_launch.hardware.model import GpuProcess, Machine, MigDevice
from tests import fake_pynvml as fake
from tests.fake_pynvml import FakeMig, FakeNvml, FakeProcess, make_gpu

UNSEEN_PID = 4_194_304 + 7  # above Linux's PID_MAX_LIMIT: no such process can exist
ALL = Needs(processes=True, topology=True, mig=True)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """An empty sysfs that knows 256 possible CPUs (so affinity masks span 4 words)."""
    cpu = tmp_path / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "possible").write_text("0-255\n")
    return tmp_path


def read(nvml: FakeNvml, sysfs: Path, needs: Needs = ALL, timings: dict[str, float] | None = None) -> Machine:
    return NvmlBackend(nvml=nvml, needs=needs, timings=timings, sysfs_root=str(sysfs)).read_machine()


def add_pci_device(sysfs: Path, name: str, numa_node: str | None = None, local_cpulist: str | None = None) -> None:
    device = sysfs / "bus" / "pci" / "devices" / name
    device.mkdir(parents=True)
    if numa_node is not None:
        (device / "numa_node").write_text(numa_node + "\n")
    if local_cpulist is not None:
        (device / "local_cpulist").write_text(local_cpulist + "\n")


# -- a healthy GPU ----------------------------------------------------------------------------

def test_reads_every_field_of_a_healthy_gpu(sysfs: Path) -> None:
    gpu = make_gpu(0, name="NVIDIA A100-SXM4-40GB", memory_total_mib=40960, memory_used_mib=1000,
                   utilization_gpu=57, temperature_c=44, compute_capability=(8, 0), numa_node=1,
                   cpu_affinity="0-31,64-95", processes=[FakeProcess(UNSEEN_PID, 900)])
    machine = read(FakeNvml([gpu], driver_version="535.104.05", cuda_version=12020), sysfs)

    (got,) = machine.gpus
    assert got.index == 0 and got.uuid == gpu.uuid and got.name == "NVIDIA A100-SXM4-40GB"
    assert got.pci_bus_id == "00000000:18:00.0"
    assert (got.memory_total_mib, got.memory_used_mib, got.memory_free_mib) == (40960, 1000, 39960)
    assert (got.utilization_gpu, got.temperature_c, got.compute_capability) == (57, 44, "8.0")
    assert (got.numa_node, got.cpu_affinity) == (1, "0-31,64-95")
    assert got.processes == (GpuProcess(pid=UNSEEN_PID, used_memory_mib=900, user=None, command=None),)
    assert got.available and got.error is None and got.mig_devices == ()
    assert machine.driver_version == "535.104.05" and machine.cuda_driver_version == "12.2"
    assert machine.hostname == socket.gethostname() and machine.source == "nvml"
    assert machine.warnings == ()


@pytest.mark.parametrize("code, text", [(12040, "12.4"), (11080, "11.8"), (12000, "12.0"), (13010, "13.1")])
def test_cuda_driver_version_is_major_dot_minor(sysfs: Path, code: int, text: str) -> None:
    assert read(FakeNvml([make_gpu(0)], cuda_version=code), sysfs).cuda_driver_version == text


def test_cuda_version_falls_back_to_the_unversioned_call(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0)], cuda_version=11040, missing={"nvmlSystemGetCudaDriverVersion_v2"})
    assert read(nvml, sysfs).cuda_driver_version == "11.4"


def test_old_bindings_returning_bytes_are_decoded(sysfs: Path) -> None:
    machine = read(fake.workstation_nvlink(legacy_bytes=True, driver_version="470.82.01"), sysfs)
    assert machine.driver_version == "470.82.01"
    assert machine.gpus[0].name == "NVIDIA RTX A6000" and machine.gpus[0].uuid.startswith("GPU-")
    assert machine.gpus[1].pci_bus_id == "00000000:28:00.0"
    assert machine.links is not None and machine.links[0][2] == "NV4"  # remote bus ids decoded too


# -- field level: None, never a crash ---------------------------------------------------------

FIELD_FUNCTIONS = [
    ("nvmlDeviceGetTemperature", "temperature_c"),
    ("nvmlDeviceGetUtilizationRates", "utilization_gpu"),
    ("nvmlDeviceGetCudaComputeCapability", "compute_capability"),
    ("nvmlDeviceGetCpuAffinity", "cpu_affinity"),
    ("nvmlDeviceGetNumaNodeId", "numa_node"),
    ("nvmlDeviceGetPciInfo", "pci_bus_id"),
]
FIELD_ERRORS = [fake.NVMLError_NotSupported, fake.NVMLError_FunctionNotFound, fake.NVMLError_NoPermission,
                fake.NVMLError_Unknown]


@pytest.mark.parametrize("function, attribute", FIELD_FUNCTIONS)
@pytest.mark.parametrize("error", FIELD_ERRORS, ids=lambda e: e.__name__)
def test_a_field_nvml_cannot_give_is_none(sysfs: Path, function: str, attribute: str, error: type) -> None:
    gpus = [make_gpu(0, numa_node=2, cpu_affinity="0-7"), make_gpu(1, numa_node=2, cpu_affinity="0-7")]
    machine = read(FakeNvml(gpus, errors={(function, 1): error}), sysfs)
    assert getattr(machine.gpus[1], attribute) is None
    assert getattr(machine.gpus[0], attribute) is not None  # only the GPU the error was aimed at
    assert machine.gpus[1].available


@pytest.mark.parametrize("error", FIELD_ERRORS, ids=lambda e: e.__name__)
def test_memory_nvml_cannot_give_is_none(sysfs: Path, error: type) -> None:
    errors = {("nvmlDeviceGetMemoryInfo_v2", 0): error, ("nvmlDeviceGetMemoryInfo", 0): error}
    got = read(FakeNvml([make_gpu(0)], errors=errors), sysfs).gpus[0]
    assert (got.memory_total_mib, got.memory_used_mib, got.memory_free_mib) == (None, None, None)
    assert got.available


def test_none_fields_of_the_fake_are_not_supported(sysfs: Path) -> None:
    gpu = make_gpu(0, temperature_c=None, utilization_gpu=None, compute_capability=None, memory_total_mib=None,
                   processes=None, mig_enabled=None)
    got = read(FakeNvml([gpu], missing={"nvmlSystemGetDriverVersion"}), sysfs)
    assert (got.gpus[0].temperature_c, got.gpus[0].utilization_gpu, got.gpus[0].compute_capability) == (None,) * 3
    assert got.gpus[0].memory_total_mib is None and got.gpus[0].processes == () and got.gpus[0].mig_devices == ()
    assert got.driver_version is None


# -- GPU level: available=False rows ----------------------------------------------------------

@pytest.mark.parametrize("lost_at, uuid_known", [
    ("nvmlDeviceGetHandleByIndex", False),
    ("nvmlDeviceGetUUID", False),
    ("nvmlDeviceGetName", True),
    ("nvmlDeviceGetMemoryInfo_v2", True),
    ("nvmlDeviceGetCpuAffinity", True),
    ("nvmlDeviceGetComputeRunningProcesses", True),
    ("nvmlDeviceGetMigMode", True),
    ("nvmlDeviceGetRemappedRows", True),
    ("nvmlDeviceGetTotalEccErrors", True),
])
def test_a_lost_gpu_becomes_an_unavailable_row(sysfs: Path, lost_at: str, uuid_known: bool) -> None:
    gpus = [make_gpu(0), make_gpu(1, lost_at=lost_at), make_gpu(2)]
    machine = read(FakeNvml(gpus), sysfs)
    lost = machine.gpus[1]
    assert not lost.available and lost.error == "GPU is lost"
    assert lost.index == 1
    assert lost.uuid == (gpus[1].uuid if uuid_known else "GPU-unavailable-1")
    assert lost.memory_total_mib is None and lost.processes == ()
    assert machine.gpus[0].available and machine.gpus[2].available
    assert machine.links is not None and machine.links[1] == ("SYS", "X", "SYS")
    assert machine.links[0][1] == machine.links[2][1] == "SYS"


@pytest.mark.parametrize("function", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID"])
def test_unknown_error_on_identity_makes_the_gpu_unavailable(sysfs: Path, function: str) -> None:
    machine = read(FakeNvml([make_gpu(0), make_gpu(1)], errors={(function, 0): fake.NVMLError_Unknown}), sysfs)
    assert not machine.gpus[0].available and machine.gpus[0].error == "Unknown Error"
    assert machine.gpus[0].uuid == "GPU-unavailable-0"
    assert machine.gpus[1].available


def test_reset_required_on_a_field_makes_the_gpu_unavailable(sysfs: Path) -> None:
    errors = {("nvmlDeviceGetTemperature", 0): fake.NVMLError_ResetRequired}
    got = read(FakeNvml([make_gpu(0)], errors=errors), sysfs).gpus[0]
    assert not got.available and got.error == "GPU requires restart"


def test_gpus_that_vanish_after_the_count_become_unavailable_rows(sysfs: Path) -> None:
    machine = read(FakeNvml([make_gpu(0), make_gpu(1)], reported_count=4), sysfs)
    assert [g.available for g in machine.gpus] == [True, True, False, False]
    assert [g.uuid for g in machine.gpus[2:]] == ["GPU-unavailable-2", "GPU-unavailable-3"]
    assert "disappeared" in (machine.gpus[3].error or "")
    assert machine.links is not None and machine.links[0] == ("X", "PIX", "SYS", "SYS")


# -- NVML level: NvmlUnavailable --------------------------------------------------------------

@pytest.mark.parametrize("error, in_message, in_hint", [
    (fake.NVMLError_LibraryNotFound, "libnvidia-ml.so.1", "--snapshot dgx-h100"),
    (fake.NVMLError_DriverNotLoaded, "driver is not loaded", "--snapshot dgx-h100"),
    (fake.NVMLError_LibRmVersionMismatch, "different versions", "reboot or reload nvidia modules"),
    (fake.NVMLError_NoPermission, "no permission", "/dev/nvidia"),
    (fake.NVMLError_Unknown, "failed to initialize", "--snapshot dgx-h100"),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_init_failure_raises_nvml_unavailable(sysfs: Path, error: type, in_message: str, in_hint: str) -> None:
    nvml = FakeNvml([make_gpu(0)], errors={("nvmlInit", None): error})
    with pytest.raises(NvmlUnavailable) as raised:
        read(nvml, sysfs)
    assert raised.value.exit_code == ExitCode.NO_DRIVER
    assert in_message in raised.value.message and "\n" not in raised.value.message
    assert raised.value.hint is not None and in_hint in raised.value.hint
    assert nvml.called("nvmlShutdown") == 0  # nothing to shut down
    assert nvml.called("nvmlDeviceGetCount") == 0


def test_init_failure_message_includes_nvmls_own_words(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0)], errors={("nvmlInit", None): fake.NVML_ERROR_DRIVER_NOT_LOADED})
    with pytest.raises(NvmlUnavailable, match=r"\(NVML: Driver Not Loaded\)"):
        read(nvml, sysfs)


def test_a_failing_device_count_raises_and_still_shuts_down(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0)], errors={("nvmlDeviceGetCount", None): fake.NVMLError_Unknown})
    with pytest.raises(NvmlUnavailable, match="cannot count the GPUs") as raised:
        read(nvml, sysfs)
    assert raised.value.exit_code == ExitCode.NO_DRIVER
    assert nvml.called("nvmlShutdown") == 1 and nvml.initialized == 0


def test_missing_pynvml_module_raises_nvml_unavailable(tmp_path: Path) -> None:
    """A real ModuleNotFoundError: the child runs without site-packages (-S), then reads NVML."""
    child = (
        "from gpu_launch.hardware.nvml import NvmlBackend\n"
        "from gpu_launch.errors import NvmlUnavailable\n"
        "try:\n    NvmlBackend().read_machine()\n"
        "except NvmlUnavailable as e:\n    print(int(e.exit_code), e.message, '|', e.hint)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-S", "-c", child], check=False, capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(root)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{int(ExitCode.NO_DRIVER)} NVML unavailable: cannot import pynvml")
    assert "nvidia-ml-py" in out.stdout


# -- one pass: init, query, shutdown ----------------------------------------------------------

def test_shutdown_is_called_once_after_a_good_read(sysfs: Path) -> None:
    nvml = fake.dgx_h100()
    read(nvml, sysfs)
    assert nvml.called("nvmlInit") == 1 and nvml.called("nvmlShutdown") == 1
    assert nvml.calls[0][0] == "nvmlInit" and nvml.calls[-1][0] == "nvmlShutdown"


def test_shutdown_is_called_when_a_bug_escapes(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0)], errors={("nvmlDeviceGetName", 0): RuntimeError("boom")})
    with pytest.raises(RuntimeError, match="boom"):  # a bug is not hidden as a missing field
        read(nvml, sysfs)
    assert nvml.called("nvmlShutdown") == 1 and nvml.initialized == 0


def test_a_failing_shutdown_does_not_lose_the_machine(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0)], errors={("nvmlShutdown", None): fake.NVMLError_Unknown})
    assert read(nvml, sysfs).gpus[0].available


def test_timings_are_recorded_per_query_kind(sysfs: Path) -> None:
    timings: dict[str, float] = {}
    read(fake.mig_a100(), sysfs, timings=timings)
    assert {"init", "devices", "memory", "utilization", "processes", "topology", "mig", "shutdown"} <= set(timings)
    assert all(seconds >= 0 for seconds in timings.values())


# -- what needs asks for ----------------------------------------------------------------------

def test_processes_are_not_queried_when_not_needed(sysfs: Path) -> None:
    gpus = [make_gpu(0, processes=[FakeProcess(os.getpid())])]
    nvml = FakeNvml(gpus)
    machine = read(nvml, sysfs, needs=Needs(processes=False))
    assert machine.gpus[0].processes == ()
    assert not [name for name, _ in nvml.calls if "RunningProcesses" in name]


def test_topology_is_not_queried_when_not_needed(sysfs: Path) -> None:
    nvml = fake.dgx_h100()
    assert read(nvml, sysfs, needs=Needs(topology=False)).links is None
    assert not [name for name, _ in nvml.calls if "NvLink" in name or "Topology" in name or "P2P" in name]


def test_mig_is_not_queried_when_not_needed(sysfs: Path) -> None:
    nvml = fake.mig_a100()
    assert read(nvml, sysfs, needs=Needs(mig=False)).gpus[0].mig_devices == ()
    assert not [name for name, _ in nvml.calls if "Mig" in name]


# -- processes --------------------------------------------------------------------------------

def test_a_visible_pid_gets_its_user_and_command(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0, processes=[FakeProcess(os.getpid(), 2048), FakeProcess(UNSEEN_PID, 10)])])
    mine, unseen = read(nvml, sysfs).gpus[0].processes
    with open("/proc/self/cmdline", "rb") as fh:
        own_command = " ".join(fh.read().decode().rstrip("\0").split("\0"))
    assert mine == GpuProcess(pid=os.getpid(), used_memory_mib=2048,
                              user=pwd.getpwuid(os.getuid()).pw_name, command=own_command)
    assert unseen == GpuProcess(pid=UNSEEN_PID, used_memory_mib=10, user=None, command=None)


def test_process_users_alone_come_from_proc_without_commands(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0, processes=[FakeProcess(os.getpid(), 2048), FakeProcess(UNSEEN_PID, 10)])])
    mine, unseen = read(nvml, sysfs, Needs(process_details=False, process_users=True)).gpus[0].processes
    assert (mine.user, mine.command) == (pwd.getpwuid(os.getuid()).pw_name, None)
    assert (unseen.user, unseen.command) == (None, None)
    counted = read(nvml, sysfs, Needs(process_details=False)).gpus[0].processes
    assert [(p.pid, p.user) for p in counted] == [(os.getpid(), None), (UNSEEN_PID, None)]


@pytest.mark.parametrize("error", [fake.NVMLError_NotSupported, fake.NVMLError_NoPermission, fake.NVMLError_Unknown,
                                   fake.NVMLError_Timeout], ids=lambda e: e.__name__)
def test_a_process_list_nvml_cannot_give_is_unknown(sysfs: Path, error: type) -> None:
    gpus = [make_gpu(i, processes=[FakeProcess(UNSEEN_PID)]) for i in range(2)]
    machine = read(FakeNvml(gpus, errors={("nvmlDeviceGetComputeRunningProcesses", 1): error}), sysfs)
    assert (machine.gpus[1].processes, machine.gpus[1].processes_known) == ((), False)
    assert machine.gpus[0].processes_known and len(machine.gpus[0].processes) == 1
    assert machine.gpus[1].available


def test_processes_are_unknown_without_any_process_call(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0)], missing={"nvmlDeviceGetComputeRunningProcesses",
                                            "nvmlDeviceGetComputeRunningProcesses_v2"})
    assert not read(nvml, sysfs).gpus[0].processes_known
    assert not read(fake.dgx_h100(), sysfs, needs=Needs(processes=False)).gpus[0].processes_known  # not asked


@pytest.mark.parametrize("raw_sentinel", [False, True], ids=["None", "2**64-1"])
def test_unavailable_process_memory_is_none(sysfs: Path, raw_sentinel: bool) -> None:
    gpus = [make_gpu(0, processes=[FakeProcess(UNSEEN_PID, None, raw_sentinel=raw_sentinel)])]
    assert read(FakeNvml(gpus), sysfs).gpus[0].processes[0].used_memory_mib is None


def test_processes_fall_back_to_v2_on_old_drivers_and_remember_it(sysfs: Path) -> None:
    gpus = [make_gpu(i, processes=[FakeProcess(UNSEEN_PID + i, 100)]) for i in range(3)]
    nvml = FakeNvml(gpus, driver_generation=470)
    machine = read(nvml, sysfs)
    assert [g.processes[0].pid for g in machine.gpus] == [UNSEEN_PID, UNSEEN_PID + 1, UNSEEN_PID + 2]
    assert nvml.called("nvmlDeviceGetComputeRunningProcesses") == 1  # probed once, not per GPU
    assert nvml.called("nvmlDeviceGetComputeRunningProcesses_v2") == 3


# -- memory v2 -> v1 --------------------------------------------------------------------------

def test_memory_uses_v2_where_the_driver_has_it(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0, memory_total_mib=1000, memory_used_mib=300, memory_reserved_mib=100)])
    backend = NvmlBackend(nvml=nvml, sysfs_root=str(sysfs))
    got = backend.read_machine().gpus[0]
    # v2 tells the driver's reserved memory apart, and its used leaves it out (as nvidia-smi shows)
    assert (got.memory_total_mib, got.memory_used_mib, got.memory_free_mib) == (1000, 200, 700)
    assert got.memory_reserved_mib == 100
    assert backend.memory_api == "v2" and nvml.called("nvmlDeviceGetMemoryInfo") == 0


def test_memory_falls_back_to_v1_on_drivers_before_510_and_remembers_it(sysfs: Path) -> None:
    gpus = [make_gpu(i, memory_total_mib=1000, memory_used_mib=300, memory_reserved_mib=100) for i in range(3)]
    nvml = FakeNvml(gpus, driver_generation=470)
    backend = NvmlBackend(nvml=nvml, sysfs_root=str(sysfs))
    got = backend.read_machine().gpus
    assert [(g.memory_total_mib, g.memory_used_mib, g.memory_free_mib) for g in got] == [(1000, 300, 700)] * 3
    assert [g.memory_reserved_mib for g in got] == [None] * 3  # v1 does not tell it
    assert backend.memory_api == "v1"
    assert nvml.called("nvmlDeviceGetMemoryInfo_v2") == 1 and nvml.called("nvmlDeviceGetMemoryInfo") == 3


def test_memory_v2_not_supported_on_one_gpu_falls_back_for_that_gpu_only(sysfs: Path) -> None:
    gpus = [make_gpu(i, memory_used_mib=300, memory_reserved_mib=100) for i in range(2)]
    nvml = FakeNvml(gpus, errors={("nvmlDeviceGetMemoryInfo_v2", 0): fake.NVMLError_NotSupported})
    backend = NvmlBackend(nvml=nvml, sysfs_root=str(sysfs))
    got = backend.read_machine().gpus
    assert [g.memory_used_mib for g in got] == [300, 200]
    assert backend.memory_api == "v1+v2" and nvml.called("nvmlDeviceGetMemoryInfo_v2") == 2


class _BindingsWithoutVersionKeyword(FakeNvml):
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:  # type: ignore[override]
        return super().nvmlDeviceGetMemoryInfo(handle)


@pytest.mark.parametrize("nvml", [
    _BindingsWithoutVersionKeyword([make_gpu(0, memory_used_mib=300, memory_reserved_mib=100)]),
    FakeNvml([make_gpu(0, memory_used_mib=300, memory_reserved_mib=100)], missing={"nvmlMemory_v2"}),
], ids=["TypeError", "no-nvmlMemory_v2"])
def test_memory_falls_back_to_v1_with_old_bindings(sysfs: Path, nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml=nvml, sysfs_root=str(sysfs))
    assert backend.read_machine().gpus[0].memory_used_mib == 300
    assert backend.memory_api == "v1"


# -- health -----------------------------------------------------------------------------------

@pytest.mark.parametrize("state, problems", [
    ({}, ()),
    ({"retired_pages_pending": False}, ()),
    ({"retired_pages_pending": True}, ("pages pending retirement",)),
    ({"remapped_rows": (3, 1, False, True)}, ("row remapping failed",)),
    ({"remapped_rows": (0, 1, True, False)}, ("row remapping pending",)),
    ({"remapped_rows": (12, 0, False, False)}, ()),  # rows already remapped: the memory is whole
    ({"ecc_uncorrected": (1, 1)}, ("1 volatile uncorrectable ECC error",)),
    ({"ecc_uncorrected": (0, 9)}, ()),  # errors before the last driver load were dealt with
    ({"ecc_uncorrected": (2, 2), "remapped_rows": (0, 2, True, False)},
     ("row remapping pending", "2 volatile uncorrectable ECC errors")),
], ids=["healthy", "no-pages-pending", "pages-pending", "remap-failed", "remap-pending", "remapped", "ecc-1",
        "ecc-aggregate-only", "pending-and-ecc"])
def test_health_problems_are_read_with_the_gpu(sysfs: Path, state: dict[str, Any], problems: tuple[str, ...]) -> None:
    machine = read(FakeNvml([make_gpu(0, **state), make_gpu(1)]), sysfs)
    assert machine.gpus[0].health == problems and machine.gpus[0].available
    assert machine.gpus[1].health == ()


@pytest.mark.parametrize("error", FIELD_ERRORS, ids=lambda e: e.__name__)
def test_a_health_query_nvml_cannot_answer_is_not_a_problem(sysfs: Path, error: type) -> None:
    gpu = make_gpu(0, retired_pages_pending=True, remapped_rows=(0, 1, True, True), ecc_uncorrected=(4, 4))
    errors = {(name, 0): error for name in ("nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
                                            "nvmlDeviceGetTotalEccErrors")}
    got = read(FakeNvml([gpu], errors=errors), sysfs).gpus[0]
    assert got.health == () and got.available


def test_health_needs_no_function_the_bindings_lack(sysfs: Path) -> None:
    nvml = FakeNvml([make_gpu(0, ecc_uncorrected=(4, 4))],
                    missing={"nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows"})
    assert read(nvml, sysfs).gpus[0].health == ("4 volatile uncorrectable ECC errors",)


def test_health_is_asked_once_per_gpu(sysfs: Path) -> None:
    nvml = fake.dgx_h100()
    timings: dict[str, float] = {}
    read(nvml, sysfs, timings=timings)
    assert "health" in timings
    for name in ("nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors"):
        assert [nvml.called(name, i) for i in range(8)] == [1] * 8


# -- MIG --------------------------------------------------------------------------------------

def test_mig_instances_are_listed_with_uuid_profile_memory_and_ids(sysfs: Path) -> None:
    nvml = fake.mig_a100()
    machine = read(nvml, sysfs)
    assert machine.gpus[0].mig_devices == (
        MigDevice("MIG-0a0a0a0a-0000-5000-8000-000000000001", "3g.40gb", 40192, 25, 40167, 2, 0),
        MigDevice("MIG-0a0a0a0a-0000-5000-8000-000000000002", "2g.20gb", 19968, 13, 19955, 3, 0),
        MigDevice("MIG-0a0a0a0a-0000-5000-8000-000000000003", "1g.10gb", 9728, 7, 9721, 9, 0),
    )
    assert machine.gpus[1].mig_devices == ()
    assert (machine.gpus[0].mig_mode, machine.gpus[1].mig_mode) == ("enabled", "disabled")
    # Every one of the 7 slots is asked: indices may be sparse, so an empty one is no end.
    assert nvml.called("nvmlDeviceGetMigDeviceHandleByIndex", 0) == 7
    assert nvml.called("nvmlDeviceGetMigDeviceHandleByIndex", 1) == 0  # MIG mode off: nothing to list


def test_a_gpu_in_mig_mode_without_instances_is_in_mig_mode(sysfs: Path) -> None:
    machine = read(FakeNvml([make_gpu(0, mig_enabled=True, mig_devices=[]), make_gpu(1)]), sysfs)
    assert machine.gpus[0].mig_mode == "enabled" and machine.gpus[0].mig_devices == ()
    assert machine.gpus[0].in_mig_mode and machine.gpus[0].available
    assert machine.gpus[1].mig_mode == "disabled" and not machine.gpus[1].in_mig_mode


@pytest.mark.parametrize("empty_slot", [fake.NVML_ERROR_NOT_FOUND, fake.NVML_ERROR_INVALID_ARGUMENT],
                         ids=["NotFound", "InvalidArgument"])
def test_sparse_mig_indices_are_all_found(sysfs: Path, empty_slot: int) -> None:
    """Instance 1 of three destroyed: slots 0 and 2 are left, and 2 must not be lost behind the gap."""
    migs = fake.mig_a100().gpus[0].mig_devices
    gpu = make_gpu(0, mig_enabled=True, mig_devices=[migs[0], None, migs[2]], mig_empty_slot=empty_slot)
    got = read(FakeNvml([gpu]), sysfs).gpus[0]
    assert [m.profile for m in got.mig_devices] == ["3g.40gb", "1g.10gb"]
    assert got.available and got.mig_mode == "enabled"


@pytest.mark.parametrize("how", ["not-supported", "not-in-bindings", "function-not-found"])
def test_a_gpu_without_mig_support_is_not_in_mig_mode(sysfs: Path, how: str) -> None:
    gpu = make_gpu(0, mig_enabled=None if how == "not-supported" else False)
    nvml = FakeNvml([gpu], missing={"nvmlDeviceGetMigMode"} if how == "not-in-bindings" else (),
                    absent_symbols={"nvmlDeviceGetMigMode"} if how == "function-not-found" else ())
    got = read(nvml, sysfs).gpus[0]
    assert got.mig_mode == "disabled" and got.available


def test_mig_mode_is_unknown_when_not_asked(sysfs: Path) -> None:
    assert read(fake.mig_a100(), sysfs, needs=Needs(mig=False)).gpus[1].mig_mode == "unknown"


def test_mig_profile_is_none_when_the_name_does_not_say(sysfs: Path) -> None:
    gpu = make_gpu(0, mig_enabled=True, mig_devices=[FakeMig("MIG-1111", profile="mystery")])
    assert read(FakeNvml([gpu]), sysfs).gpus[0].mig_devices[0].profile is None


def test_mig_fields_nvml_cannot_give_are_none(sysfs: Path) -> None:
    errors = {("nvmlDeviceGetGpuInstanceId", 0): fake.NVMLError_NotSupported,
              ("nvmlDeviceGetComputeInstanceId", 0): fake.NVMLError_NoPermission}
    mig = read(fake.mig_a100(errors=errors), sysfs).gpus[0].mig_devices[0]
    assert (mig.gpu_instance_id, mig.compute_instance_id) == (None, None) and mig.profile == "3g.40gb"


# -- topology ---------------------------------------------------------------------------------

def links_of(machine: Machine) -> list[list[str]]:
    assert machine.links is not None
    assert all(machine.links[i][j] == machine.links[j][i] for i in range(len(machine.links))
               for j in range(len(machine.links)))
    return [list(row) for row in machine.links]


def test_nvswitch_machine_is_nv18_everywhere(sysfs: Path) -> None:
    machine = read(fake.dgx_h100(), sysfs)
    assert links_of(machine) == [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]
    assert machine.nvswitch  # each GPU's 18 links, shared by its 7 pairs


@pytest.mark.parametrize("nvml", [fake.workstation_nvlink, fake.pcie_dual_socket, lambda: fake.dgx_h100(
    nvlink_p2p={(i, j): fake.NVML_P2P_STATUS_NOT_SUPPORTED for i in range(8) for j in range(8) if i != j})],
    ids=["direct-bridges", "pcie", "switch-without-p2p"])
def test_only_nvlinks_through_a_switch_make_an_nvswitch_machine(sysfs: Path, nvml: Any) -> None:
    assert not read(nvml(), sysfs).nvswitch


def test_nvswitch_is_not_known_without_the_topology(sysfs: Path) -> None:
    assert not read(fake.dgx_h100(), sysfs, needs=Needs(topology=False)).nvswitch


def test_nvswitch_pairs_get_the_smaller_link_count(sysfs: Path) -> None:
    nvml = fake.dgx_h100()
    nvml.gpus[7].nvlinks = nvml.gpus[7].nvlinks[:12]  # type: ignore[index]
    links = links_of(read(nvml, sysfs))
    assert links[0][7] == links[6][7] == "NV12" and links[0][6] == "NV18"


def test_nvswitch_count_is_trusted_when_p2p_status_is_missing(sysfs: Path) -> None:
    links = links_of(read(fake.dgx_h100(missing={"nvmlDeviceGetP2PStatus"}), sysfs))
    assert links[0][5] == "NV18"


def test_nvswitch_pair_without_nvlink_p2p_falls_back_to_pcie(sysfs: Path) -> None:
    nvml = fake.dgx_h100(nvlink_p2p={(0, 5): fake.NVML_P2P_STATUS_NOT_SUPPORTED})
    links = links_of(read(nvml, sysfs))
    assert links[0][5] == "SYS" and links[0][4] == "NV18"  # GPU 0 and 5 sit on different sockets


def test_direct_nvlink_bridges_and_pcie_codes(sysfs: Path) -> None:
    assert links_of(read(fake.workstation_nvlink(), sysfs)) == [
        ["X", "PIX", "NV4", "PHB"],
        ["PIX", "X", "PHB", "NV4"],
        ["NV4", "PHB", "X", "PIX"],
        ["PHB", "NV4", "PIX", "X"],
    ]


def test_direct_nvlink_without_remote_device_type_in_the_bindings(sysfs: Path) -> None:
    links = links_of(read(fake.workstation_nvlink(missing={"nvmlDeviceGetNvLinkRemoteDeviceType"}), sysfs))
    assert links[0][2] == "NV4" and links[1][3] == "NV4"


def test_links_rejected_on_one_side_are_counted_from_the_other(sysfs: Path) -> None:
    errors = {("nvmlDeviceGetNvLinkState", 0): fake.NVMLError_InvalidArgument}
    links = links_of(read(fake.workstation_nvlink(errors=errors), sysfs))
    assert links[0][2] == "NV4"


def test_a_disabled_link_is_not_counted(sysfs: Path) -> None:
    nvml = fake.workstation_nvlink()
    for gpu in (nvml.gpus[0], nvml.gpus[2]):
        gpu.nvlinks[0].enabled = False  # type: ignore[index]
    assert links_of(read(nvml, sysfs))[0][2] == "NV3"


def test_pcie_only_dual_socket_maps_every_level(sysfs: Path) -> None:
    links = links_of(read(fake.pcie_dual_socket(), sysfs))
    assert links[0][:4] == ["X", "PIX", "PXB", "PHB"]
    assert links[4][4:] == ["X", "PIX", "NODE", "NODE"] and links[6][7] == "PIX"
    assert all(links[i][j] == "SYS" for i in range(4) for j in range(4, 8))


@pytest.mark.parametrize("level, code", [
    (fake.NVML_TOPOLOGY_INTERNAL, "PIX"), (fake.NVML_TOPOLOGY_SINGLE, "PIX"),
    (fake.NVML_TOPOLOGY_MULTIPLE, "PXB"), (fake.NVML_TOPOLOGY_HOSTBRIDGE, "PHB"),
    (fake.NVML_TOPOLOGY_NODE, "NODE"), (fake.NVML_TOPOLOGY_SYSTEM, "SYS"),
])
def test_common_ancestor_levels_map_to_topo_codes(sysfs: Path, level: int, code: str) -> None:
    nvml = FakeNvml([make_gpu(0), make_gpu(1)], topology={(0, 1): level})
    assert links_of(read(nvml, sysfs))[0][1] == code


@pytest.mark.parametrize("error", [fake.NVMLError_Unknown, fake.NVMLError_NotSupported, fake.NVMLError_GpuIsLost])
def test_a_pair_nvml_cannot_answer_is_sys_with_a_warning(sysfs: Path, error: type) -> None:
    nvml = fake.pcie_dual_socket(errors={("nvmlDeviceGetTopologyCommonAncestor", (0, 1)): error})
    machine = read(nvml, sysfs)
    links = links_of(machine)
    assert links[0][1] == "SYS" and links[0][2] == "PXB"
    assert len(machine.warnings) == 1
    assert "GPU 0" in machine.warnings[0] and "GPU 1" in machine.warnings[0] and "SYS" in machine.warnings[0]


def test_many_unanswered_pairs_make_one_warning(sysfs: Path) -> None:
    nvml = fake.pcie_dual_socket(errors={("nvmlDeviceGetTopologyCommonAncestor", None): fake.NVMLError_NotSupported})
    machine = read(nvml, sysfs)
    assert all(code == "SYS" for row in links_of(machine) for code in row if code != "X")
    assert machine.warnings == ("NVML could not tell how 28 GPU pairs are connected (Not Supported); "
                                "treating them as SYS",)


def test_an_unknown_ancestor_level_is_sys_with_a_warning(sysfs: Path) -> None:
    machine = read(FakeNvml([make_gpu(0), make_gpu(1)], topology={(0, 1): 77}), sysfs)
    assert links_of(machine)[0][1] == "SYS" and "77" in machine.warnings[0]


# -- NUMA node and CPU affinity ---------------------------------------------------------------

def test_numa_node_and_cpus_come_from_sysfs_for_pcie_gpus(sysfs: Path) -> None:
    add_pci_device(sysfs, "0000:18:00.0", numa_node="1", local_cpulist="32-63,96-127")
    got = read(FakeNvml([make_gpu(0, numa_node=None, cpu_affinity=None)]), sysfs).gpus[0]
    assert (got.numa_node, got.cpu_affinity) == (1, "32-63,96-127")


def test_sysfs_numa_node_wins_over_nvml(sysfs: Path) -> None:
    add_pci_device(sysfs, "0000:18:00.0", numa_node="1")
    assert read(FakeNvml([make_gpu(0, numa_node=5)]), sysfs).gpus[0].numa_node == 1


@pytest.mark.parametrize("sysfs_value, nvml_value, expected", [
    ("-1", None, None),  # the kernel does not know, nor does NVML
    ("-1", 3, 3),  # e.g. Grace Hopper, where NVML knows the node
    (None, 2, 2),  # no numa_node file
])
def test_numa_node_falls_back_to_nvml(sysfs: Path, sysfs_value: str | None, nvml_value: int | None,
                                      expected: int | None) -> None:
    add_pci_device(sysfs, "0000:18:00.0", numa_node=sysfs_value)
    assert read(FakeNvml([make_gpu(0, numa_node=nvml_value)]), sysfs).gpus[0].numa_node == expected


def test_nvml_cpu_affinity_beyond_the_first_64_cpus(sysfs: Path) -> None:
    add_pci_device(sysfs, "0000:18:00.0", local_cpulist="0-3")
    got = read(FakeNvml([make_gpu(0, cpu_affinity="56-111,168-223")]), sysfs).gpus[0]
    assert got.cpu_affinity == "56-111,168-223"  # NVML first; sysfs only when NVML has nothing


@pytest.mark.parametrize("cpus", ["64-127", "960-1023", "0-7,1016-1023"])
def test_nvml_cpu_affinity_above_the_cpus_this_host_says_are_possible(sysfs: Path, cpus: str) -> None:
    """A container or VM that sees 2 possible CPUs, on a board whose GPU is local to CPUs 64-127:
    NVML is asked for 1024 CPUs' worth of words, so the GPU keeps its CPUs instead of none."""
    (sysfs / "devices" / "system" / "cpu" / "possible").write_text("0-1\n")
    nvml = FakeNvml([make_gpu(0, cpu_affinity=cpus)])
    assert read(nvml, sysfs).gpus[0].cpu_affinity == cpus


@pytest.mark.parametrize("nvml_says", ["", None], ids=["empty-mask", "not-supported"])
def test_cpu_affinity_falls_back_to_sysfs_when_nvml_gives_nothing(sysfs: Path, nvml_says: str | None) -> None:
    add_pci_device(sysfs, "0000:18:00.0", local_cpulist="64-127")
    assert read(FakeNvml([make_gpu(0, cpu_affinity=nvml_says)]), sysfs).gpus[0].cpu_affinity == "64-127"


def test_sysfs_bus_id_is_lowercase_with_a_four_digit_domain(sysfs: Path) -> None:
    add_pci_device(sysfs, "0000:b1:00.0", numa_node="1")
    assert read(FakeNvml([make_gpu(0, bus_id="00000000:B1:00.0")]), sysfs).gpus[0].numa_node == 1


# -- the snapshot round trip ------------------------------------------------------------------

@pytest.mark.parametrize("build", [fake.dgx_h100, fake.mig_a100, fake.pcie_dual_socket, fake.workstation_nvlink])
def test_a_machine_read_from_nvml_round_trips_through_a_snapshot(sysfs: Path, build: Any) -> None:
    nvml = build()
    nvml.gpus[0].processes = [FakeProcess(os.getpid(), 512), FakeProcess(UNSEEN_PID, None)]
    nvml.gpus[1].lost_at = "nvmlDeviceGetTemperature"
    machine = read(nvml, sysfs)
    assert not machine.gpus[1].available
    loaded = snapshot.loads(snapshot.dump(machine))
    assert dataclasses.replace(loaded, source="nvml") == machine


# -- host helpers -----------------------------------------------------------------------------

@pytest.mark.parametrize("words, cpulist", [
    ([0b1111], "0-3"), ([0, 1], "64"), ([2**64 - 1, 0, 2**64 - 1], "0-63,128-191"), ([0, 0], None),
    ([0b1010_0111], "0-2,5,7"),
])
def test_cpu_mask_words_to_cpulist(words: list[int], cpulist: str | None) -> None:
    assert host.cpulist_from_mask(words) == cpulist


@pytest.mark.parametrize("bus_id, name", [
    ("00000000:07:00.0", "0000:07:00.0"), ("00000000:B1:00.0", "0000:b1:00.0"), ("0001:3B:00.1", "0001:3b:00.1"),
    (" 00000000:07:00.0\x00", "0000:07:00.0"), ("garbage", None),
])
def test_pci_sysfs_name(bus_id: str, name: str | None) -> None:
    assert host.pci_sysfs_name(bus_id) == name


def test_cpulist_round_trip() -> None:
    assert host.format_cpulist(host.parse_cpulist("8,0-3,4,96-127")) == "0-4,8,96-127"
    with pytest.raises(ValueError):
        host.parse_cpulist("0-3,x")


# -- the fake stays true to the real bindings -------------------------------------------------

def test_the_fake_matches_the_real_pynvml_names_and_values() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name in dir(fake):
        if name.startswith("NVML_") or name == "nvmlMemory_v2":
            assert getattr(pynvml, name) == getattr(fake, name), name
        elif name.startswith("NVMLError_"):
            code = getattr(fake, name)().value
            real = pynvml.NVMLError(code)
            assert type(real).__name__ == name and real.value == code
            assert str(real) == str(getattr(fake, name)()), name
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            assert callable(getattr(pynvml, name, None)), f"pynvml has no {name}"
