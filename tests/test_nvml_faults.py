"""NVML faults, end to end: the whole CLI, in process, reading a fake pynvml that fails on purpose.

The hook: the :func:`gpulaunch` fixture replaces ``gpu_launch.hardware.nvml.NvmlBackend`` (which
``backends.read_machine`` imports at call time) with a subclass that passes the fake in through the
constructor's documented ``nvml=`` argument, so nothing else is patched and the rest of the path
(selection, visibility, rendering, exit codes) is the real one. Launches use ``--dry-run`` so
nothing is exec'd in the test process.

What must hold for every fault: ``ls`` still shows what it can, ``--auto`` never picks a GPU whose
state could not be read, an explicit ``--gpus`` on such a GPU warns (unknown fields) or refuses
(a lost GPU, documented in docs/choosing-gpus.md), and every failure is one line with a documented exit code.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import gpu_launch.hardware.nvml as nvml_module
from gpu_launch import cli
from gpu_launch.hardware import snapshot
from gpu_launch.errors import ExitCode
from tests import fake_pynvml as fake
from tests.fake_pynvml import FakeNvml, make_gpu


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("gpulaunch: error: ")]

    def chosen(self) -> list[int]:
        """The physical GPUs of a ``--dry-run --json`` launch."""
        return [d["index"] for d in json.loads(self.out)["devices"]]


Run = Callable[..., Result]


@pytest.fixture
def gpulaunch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any) -> Run:
    """``gpulaunch(fake_nvml, *argv) -> Result``: the CLI in process, reading ``fake_nvml``."""
    for name in ("GPULAUNCH_SNAPSHOT", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                 "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPULAUNCH_CONFIG", "")  # no config file: the tester's defaults stay out
    monkeypatch.setenv("GPULAUNCH_LOCK_DIR", str(tmp_path / "locks"))  # never the machine's reservations
    current: dict[str, Any] = {}
    real = nvml_module.NvmlBackend

    class FakeBackedNvml(real):  # type: ignore[misc, valid-type]
        def __init__(self, nvml: Any = None, **kwargs: Any) -> None:
            kwargs.setdefault("sysfs_root", str(tmp_path))
            super().__init__(nvml=current["nvml"], **kwargs)

    monkeypatch.setattr(nvml_module, "NvmlBackend", FakeBackedNvml)
    # cli.main resets SIGPIPE, and ignores SIGINT after a Ctrl-C: give pytest its own back.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGPIPE, signal.SIGINT)}

    def run(nvml: FakeNvml | None, *argv: str) -> Result:
        current["nvml"] = nvml
        capsys.readouterr()
        try:
            with pytest.raises(SystemExit) as exit_:
                cli.main(list(argv))
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        out, err = capsys.readouterr()
        result = Result(int(exit_.value.code or 0), out, err)
        assert "Traceback" not in out + err
        if result.code == ExitCode.INTERRUPTED:
            assert err.splitlines() == ["gpulaunch: interrupted"] and out == ""
        elif result.code != 0:
            assert len(result.error_lines) == 1, err
            assert out == "", "a failed run prints nothing on stdout"
        if nvml is not None and ("nvmlShutdown", None) not in nvml.errors:
            assert nvml.initialized == 0, "nvmlShutdown balances nvmlInit"
        return result

    return run


def _four(**changes: Any) -> list[fake.FakeGpu]:
    """Four PCIe H100s; ``changes`` apply to GPU 1 only."""
    return [make_gpu(i, **(changes if i == 1 else {})) for i in range(4)]


AUTO = ("--dry-run", "--json", "-q", "--auto")
LS = ("ls", "--topo")  # --topo: the pair queries run too

# -- NVML itself unusable: exit 3, one line, a hint ------------------------------------------

INIT_FAULTS = {
    "library-not-found": (fake.NVMLError_LibraryNotFound, "libnvidia-ml.so.1 was not found", "--snapshot dgx-h100"),
    "driver-not-loaded": (fake.NVMLError_DriverNotLoaded, "kernel driver is not loaded", "modprobe nvidia"),
    "lib-rm-version-mismatch": (fake.NVMLError_LibRmVersionMismatch, "different versions", "reboot"),
    "no-permission": (fake.NVMLError_NoPermission, "no permission to use NVML", "/dev/nvidiactl"),
    "unknown": (fake.NVMLError_Unknown, "NVML failed to initialize", "--snapshot dgx-h100"),
}
NO_DRIVER = ("library-not-found", "driver-not-loaded")  # no driver at all, not a failing one
COMMANDS = [("ls",), LS, ("ls", "--json"), (*AUTO, "1", "--", "x"), ("--dry-run", "--gpus", "0", "--", "x"),
            ("env", "--auto", "1")]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("fault", INIT_FAULTS, ids=str)
def test_nvml_init_failure_is_one_line_and_exit_3(gpulaunch: Run, fault: str, argv: tuple[str, ...]) -> None:
    error, says, hint = INIT_FAULTS[fault]
    nvml = fake.dgx_h100(errors={("nvmlInit", None): error})
    result = gpulaunch(nvml, *argv)
    if argv[0] == "ls" and fault in NO_DRIVER:  # a new user's first `ls` (--json too): the demo
        assert result.code == 0 and ("snapshot dgx-h100" in result.out or '"example": "dgx-h100"' in result.out)
        assert result.error_lines == [] and "so this is the example machine dgx-h100" in result.err
        return
    assert result.code == ExitCode.NO_DRIVER
    assert says in result.error_lines[0] and hint in result.error_lines[0]
    assert [name for name, _ in nvml.calls] == ["nvmlInit"], "nothing else is asked of a failed NVML"


def test_gpu_count_failing_is_exit_3(gpulaunch: Run) -> None:
    result = gpulaunch(fake.dgx_h100(errors={("nvmlDeviceGetCount", None): fake.NVMLError_Unknown}), "ls")
    assert result.code == ExitCode.NO_DRIVER
    assert "cannot count the GPUs" in result.error_lines[0]


def test_pynvml_not_installed_is_exit_3(gpulaunch: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    result = gpulaunch(None, "ls")
    assert result.code == ExitCode.NO_DRIVER
    assert "cannot import pynvml" in result.error_lines[0] and "pip install nvidia-ml-py" in result.error_lines[0]


def test_shutdown_failing_changes_nothing(gpulaunch: Run) -> None:
    result = gpulaunch(FakeNvml(_four(), errors={("nvmlShutdown", None): fake.NVMLError_Unknown}), *AUTO, "2", "--", "x")
    assert result.code == 0 and len(result.chosen()) == 2


# -- one GPU lost while it is read -----------------------------------------------------------

LOST_AT = [
    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetName",
    "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetTemperature", "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMigMode",
    # after the GPU's own fields were read: the pair queries of the topology
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor",
]


def _lost_machine(lost_at: str) -> FakeNvml:
    gpus = _four(lost_at=lost_at, numa_node=None)
    if lost_at == "nvmlDeviceGetNvLinkState":
        fake.connect_nvlink(gpus, 0, 1, links=2)
        fake.connect_nvlink(gpus, 1, 2, links=2)
    if lost_at == "nvmlDeviceGetP2PStatus":  # asked only across NVSwitches
        fake.connect_nvswitch(gpus)
    return FakeNvml(gpus)


#: Asked by `ls` only: a launch never reads them (issue 21). Where only such a query fails, the GPU
#: answers every query a launch makes (a GPU really lost fails them all, and the launch's next one).
DISPLAY_ONLY = {"nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetTemperature"}


@pytest.mark.parametrize("lost_at", LOST_AT)
def test_a_gpu_lost_mid_query_is_shown_and_never_chosen(gpulaunch: Run, lost_at: str) -> None:
    listing = gpulaunch(_lost_machine(lost_at), *LS)
    assert listing.code == 0
    rows = [line.split() for line in listing.out.splitlines()[2:6]]
    assert [row[0] for row in rows] == ["0", "1", "2", "3"], listing.out
    assert "unavailable" in rows[1] and "lost" in listing.out.splitlines()[3]
    assert all("GiB" in " ".join(row) for i, row in enumerate(rows) if i != 1), "the others still show memory"

    doc = gpulaunch(_lost_machine(lost_at), "ls", "--json")  # a faulty machine is still a valid snapshot
    machine = snapshot.loads(doc.out, source="nvml-faults")
    if lost_at not in ("nvmlDeviceGetNvLinkState", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor"):
        assert not machine.gpus[1].available  # (`ls --json` reads topology too, so the late ones show here)
    assert [g.available for i, g in enumerate(machine.gpus) if i != 1] == [True] * 3

    if lost_at in DISPLAY_ONLY:
        assert gpulaunch(_lost_machine(lost_at), *AUTO, "4", "--", "x").chosen() == [0, 1, 2, 3]
        return
    assert gpulaunch(_lost_machine(lost_at), *AUTO, "3", "--", "x").chosen() == [0, 2, 3]
    refused = gpulaunch(_lost_machine(lost_at), *AUTO, "4", "--", "x")
    assert refused.code == ExitCode.NOT_ENOUGH_GPUS and "GPU 1: unavailable" in refused.error_lines[0]


@pytest.mark.parametrize("lost_at", [f for f in LOST_AT[:12] if f != "nvmlDeviceGetComputeRunningProcesses"])
def test_explicit_gpus_on_a_lost_gpu_is_refused(gpulaunch: Run, lost_at: str) -> None:
    result = gpulaunch(_lost_machine(lost_at), "--dry-run", "--gpus", "0,1", "--", "x")
    if lost_at in DISPLAY_ONLY:  # never asked by a launch
        assert result.code == 0, result.error_lines
        return
    assert result.code == ExitCode.NOT_ENOUGH_GPUS
    assert "GPU 1 is unavailable" in result.error_lines[0] and "`gpulaunch ls`" in result.error_lines[0]


@pytest.mark.parametrize("error", [fake.NVMLError_GpuIsLost, fake.NVMLError_ResetRequired])
def test_gpu_fatal_errors_on_memory_make_it_unavailable(gpulaunch: Run, error: Any) -> None:
    nvml = FakeNvml(_four(), errors={("nvmlDeviceGetMemoryInfo_v2", 1): error, ("nvmlDeviceGetMemoryInfo", 1): error})
    result = gpulaunch(nvml, "ls")
    assert result.code == 0 and str(error()) in result.out
    assert gpulaunch(FakeNvml(_four(), errors={("nvmlDeviceGetMemoryInfo_v2", 1): error}),
                     *AUTO, "3", "--", "x").chosen() == [0, 2, 3]


# -- the GPU count shrinks between counting and reading --------------------------------------

@pytest.mark.parametrize("reported", [5, 6])
def test_gpu_count_that_shrinks(gpulaunch: Run, reported: int) -> None:
    listing = gpulaunch(FakeNvml(_four(), reported_count=reported), "ls")
    assert listing.code == 0
    assert listing.out.count("GPU disappeared after it was counted") == reported - 4
    assert f"{reported} GPUs" in listing.out.splitlines()[0]
    doc = snapshot.loads(gpulaunch(FakeNvml(_four(), reported_count=reported), "ls", "--json").out)
    assert [g.available for g in doc.gpus] == [True] * 4 + [False] * (reported - 4)
    assert len({g.uuid for g in doc.gpus}) == reported
    assert gpulaunch(FakeNvml(_four(), reported_count=reported), *AUTO, "4", "--", "x").chosen() == [0, 1, 2, 3]
    refused = gpulaunch(FakeNvml(_four(), reported_count=reported), *AUTO, "5", "--", "x")
    named = "GPU 4" if reported == 5 else "GPUs 4,5"  # the GPUs of one reason are named together
    assert refused.code == ExitCode.NOT_ENOUGH_GPUS and f"{named}: unavailable" in refused.error_lines[0]
    explicit = gpulaunch(FakeNvml(_four(), reported_count=reported), "--dry-run", "--gpus", "4", "--", "x")
    assert explicit.code == ExitCode.NOT_ENOUGH_GPUS


# -- NotSupported for each optional field ----------------------------------------------------

@dataclass(frozen=True)
class Optional_:
    """GPU 1 cannot give one field: how it is made, and what ``ls`` shows instead."""

    changes: dict[str, Any]
    errors: tuple[str, ...] = ()  # NVML functions that raise NotSupported on GPU 1
    system: tuple[str, ...] = ()  # system-level functions that raise NotSupported
    blocks_auto: bool = False  # only the free memory decides eligibility


OPTIONAL = {
    "temperature": Optional_({"temperature_c": None}),
    "utilization": Optional_({"utilization_gpu": None}),
    "compute-capability": Optional_({"compute_capability": None}),
    "numa-node": Optional_({"numa_node": None}),
    "cpu-affinity": Optional_({"cpu_affinity": None}),
    "nvlink": Optional_({"nvlinks": None}),
    "processes": Optional_({"processes": None}),
    "mig-mode": Optional_({"mig_enabled": None}),
    "memory": Optional_({"memory_total_mib": None}, blocks_auto=True),
    "memory-v2-only": Optional_({}, errors=("nvmlDeviceGetMemoryInfo_v2",)),
    "name": Optional_({}, errors=("nvmlDeviceGetName",)),
    "pci-info": Optional_({}, errors=("nvmlDeviceGetPciInfo",)),
    "max-mig-count": Optional_({}, errors=("nvmlDeviceGetMaxMigDeviceCount",)),
    "driver-version": Optional_({}, system=("nvmlSystemGetDriverVersion",)),
    "cuda-version": Optional_({}, system=("nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2")),
}


def _optional_machine(field: str) -> FakeNvml:
    spec = OPTIONAL[field]
    errors: dict[tuple[str, Any], Any] = {(fn, 1): fake.NVMLError_NotSupported for fn in spec.errors}
    errors.update({(fn, None): fake.NVMLError_NotSupported for fn in spec.system})
    return FakeNvml(_four(**spec.changes), errors=errors)


@pytest.mark.parametrize("field", OPTIONAL)
def test_an_unsupported_field_is_a_dash_not_a_failure(gpulaunch: Run, field: str) -> None:
    spec = OPTIONAL[field]
    listing = gpulaunch(_optional_machine(field), *LS)
    assert listing.code == 0
    lines = listing.out.splitlines()
    assert [line.split()[0] for line in lines[2:6]] == ["0", "1", "2", "3"]
    assert "unavailable" not in listing.out
    if field in ("temperature", "utilization", "memory"):
        assert "–" in lines[3] and "–" not in lines[2].replace("  –", "")  # GPU 1 shows a dash there
    auto = gpulaunch(_optional_machine(field), *AUTO, "4", "--", "x")
    if spec.blocks_auto:
        assert auto.code == ExitCode.NOT_ENOUGH_GPUS and "GPU 1: free memory unknown" in auto.error_lines[0]
        assert gpulaunch(_optional_machine(field), *AUTO, "3", "--", "x").chosen() == [0, 2, 3]
    else:
        assert auto.code == 0 and auto.chosen() == [0, 1, 2, 3]


def test_explicit_gpus_on_a_gpu_with_unknown_memory_warns_and_obeys(gpulaunch: Run) -> None:
    result = gpulaunch(_optional_machine("memory"), "--dry-run", "--gpus", "1,2", "--", "x")
    assert result.code == 0
    assert "gpulaunch: warning: GPU 1: free memory unknown" in result.err
    assert "CUDA_VISIBLE_DEVICES=1,2" in result.out


def test_unknown_utilisation_is_excluded_by_max_util_and_warned_about_with_gpus(gpulaunch: Run) -> None:
    auto = gpulaunch(_optional_machine("utilization"), *AUTO, "4", "--max-util", "50", "--", "x")
    assert auto.code == ExitCode.NOT_ENOUGH_GPUS and "GPU 1: utilisation unknown" in auto.error_lines[0]
    explicit = gpulaunch(_optional_machine("utilization"), "--dry-run", "--max-util", "50", "--gpus", "1", "--", "x")
    assert explicit.code == 0 and "warning: GPU 1: utilisation unknown" in explicit.err


# -- the process list cannot be read ---------------------------------------------------------

@pytest.mark.parametrize("error", [fake.NVMLError_NoPermission, fake.NVMLError_Unknown, fake.NVMLError_Timeout])
def test_process_query_failing_leaves_the_rest_of_the_gpu(gpulaunch: Run, error: Any) -> None:
    """A field-level failure (NVML refuses process lists on MIG GPUs to non-root users, for one):
    the GPU keeps its memory and utilisation, which still decide whether it is busy."""
    errors = {("nvmlDeviceGetComputeRunningProcesses", 1): error}
    listing = gpulaunch(FakeNvml(_four(), errors=errors), "ls")
    assert listing.code == 0 and "unavailable" not in listing.out
    busy = _four(memory_used_mib=70000, utilization_gpu=90)
    chosen = gpulaunch(FakeNvml(busy, errors=errors), *AUTO, "1", "--", "x").chosen()
    assert chosen != [1], "a GPU whose memory says busy is not picked for lack of a process list"


# -- MIG queries failing ---------------------------------------------------------------------

MIG_FAULTS = {
    "mig-mode-unknown": ("nvmlDeviceGetMigMode", fake.NVMLError_Unknown, True),
    "mig-mode-no-permission": ("nvmlDeviceGetMigMode", fake.NVMLError_NoPermission, True),
    "mig-count-unknown": ("nvmlDeviceGetMaxMigDeviceCount", fake.NVMLError_Unknown, True),
    "mig-count-not-supported": ("nvmlDeviceGetMaxMigDeviceCount", fake.NVMLError_NotSupported, True),
    "mig-handle-unknown": ("nvmlDeviceGetMigDeviceHandleByIndex", fake.NVMLError_Unknown, True),
    "mig-instance-id-unknown": ("nvmlDeviceGetGpuInstanceId", fake.NVMLError_Unknown, False),
    "mig-compute-id-unknown": ("nvmlDeviceGetComputeInstanceId", fake.NVMLError_Unknown, False),
}


@pytest.mark.parametrize("fault", MIG_FAULTS)
def test_mig_query_failures_never_hand_out_a_mig_gpu_whole(gpulaunch: Run, fault: str) -> None:
    function, error, gpu_unreadable = MIG_FAULTS[fault]

    def machine() -> FakeNvml:
        return fake.mig_a100(errors={(function, 0): error})

    listing = gpulaunch(machine(), "ls")
    assert listing.code == 0
    assert [line.split()[0] for line in listing.out.splitlines()[2:] if line[:1].isdigit()] == ["0", "1"]
    two = gpulaunch(machine(), *AUTO, "2", "--", "x")
    assert two.code == ExitCode.NOT_ENOUGH_GPUS, "GPU 0 is in MIG mode: never given whole"
    assert gpulaunch(machine(), *AUTO, "1", "--", "x").chosen() == [1]
    whole = gpulaunch(machine(), "--dry-run", "--gpus", "0", "--", "x")
    assert whole.code in (ExitCode.NOT_ENOUGH_GPUS, ExitCode.USAGE)
    mig = gpulaunch(machine(), "--dry-run", "--json", "-q", "--mig", "--", "x")
    if gpu_unreadable:
        assert "its MIG state is unknown" in listing.out or "cannot count its MIG devices" in listing.out
        assert mig.code == ExitCode.NOT_ENOUGH_GPUS and "no readable GPU is in MIG mode (GPU 0: " in mig.error_lines[0]
    else:
        assert "unavailable" not in listing.out
        assert mig.code == 0 and json.loads(mig.out)["devices"][0]["uuid"].startswith("MIG-")


# -- the links between two GPUs cannot be read -----------------------------------------------

@pytest.mark.parametrize("function", ["nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"])
def test_unanswered_pair_queries_warn_and_still_choose(gpulaunch: Run, function: str) -> None:
    def machine() -> FakeNvml:
        gpus = _four()
        if function == "nvmlDeviceGetP2PStatus":  # asked only across NVSwitches
            fake.connect_nvswitch(gpus)
        return FakeNvml(gpus, errors={(function, (0, 1)): fake.NVMLError_Unknown})

    nvml = machine()
    listing = gpulaunch(nvml, *LS)
    assert listing.code == 0 and nvml.called(function, (0, 1)) + nvml.called(function, (1, 0)) == 1
    if function == "nvmlDeviceGetTopologyCommonAncestor":
        assert "warning: NVML could not tell how GPU 0 and GPU 1 are connected" in listing.out
    else:  # NVML cannot confirm P2P over the switch: the link count is trusted
        assert [ln.split()[:3] for ln in listing.out.splitlines() if ln.startswith("GPU0 ")] == [["GPU0", "X", "NV18"]]
    result = gpulaunch(machine(), *AUTO, "2", "--", "x")
    assert result.code == 0 and len(result.chosen()) == 2


# -- old bindings and drivers ----------------------------------------------------------------

@pytest.mark.parametrize("options", [{"driver_generation": 470}, {"legacy_bytes": True},
                                     {"missing": {"nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNumaNodeId"}}],
                         ids=["driver-470", "bytes-strings", "old-bindings"])
def test_old_bindings_and_drivers_still_work(gpulaunch: Run, options: dict[str, Any]) -> None:
    assert gpulaunch(fake.dgx_h100(**options), "ls").code == 0
    assert len(gpulaunch(fake.dgx_h100(**options), *AUTO, "8", "--", "x").chosen()) == 8


# -- Ctrl-C while NVML is being read ---------------------------------------------------------

@pytest.mark.parametrize("where", ["nvmlDeviceGetCount", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTopologyCommonAncestor"])
def test_ctrl_c_during_the_nvml_read_shuts_nvml_down_and_exits_130(gpulaunch: Run, where: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any) -> None:
        raise AssertionError("the command was started after Ctrl-C")

    monkeypatch.setattr("gpu_launch.run.execute.exec_command", never)
    nvml = FakeNvml(_four(), errors={(where, None): KeyboardInterrupt})
    result = gpulaunch(nvml, "--auto", "2", "--", sys.executable)  # no --dry-run: nothing may start
    assert result.code == ExitCode.INTERRUPTED
    assert nvml.called("nvmlShutdown") == 1 and nvml.initialized == 0
