"""A launch asks NVML only what its choice needs (issue 21), counted on the fake pynvml.

``--gpus 2`` reads GPU 2's state only (the others: who they are), no launch reads temperatures,
compute capabilities or versions (only `ls` shows them), and ``--auto 1`` reads no links.
"""

from __future__ import annotations

import json

import pytest

from tests import fake_pynvml as fake
from tests.fake_pynvml import FakeNvml, FakeProcess
from tests.test_nvml_faults import Run, gpulaunch  # noqa: F401 (gpulaunch: the fixture, the CLI in process)

#: What a GPU's state costs: asked only of the GPUs a choice looks at.
STATE = ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetUtilizationRates",
         "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMigMode", "nvmlDeviceGetCpuAffinity",
         "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors")
#: Shown by `ls` (and kept in snapshots), never a reason to choose a GPU.
DISPLAY = ("nvmlDeviceGetTemperature", "nvmlDeviceGetCudaComputeCapability", "nvmlSystemGetDriverVersion",
           "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2")
LINKS = ("nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemoteDeviceType",
         "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus")


def _asked(nvml: FakeNvml, names: tuple[str, ...]) -> set[object]:
    """The devices (indices) the calls of ``names`` were made for."""
    return {device for name, device in nvml.calls if name in names}


def test_explicit_gpus_read_the_state_of_the_named_gpus_only(gpulaunch: Run) -> None:
    nvml = fake.dgx_h100()
    result = gpulaunch(nvml, "--dry-run", "--json", "-q", "--gpus", "2,5", "--", "x")
    assert result.code == 0, result.err
    assert result.chosen() == [2, 5]
    assert _asked(nvml, STATE) == {2, 5}
    assert _asked(nvml, ("nvmlDeviceGetUUID",)) == set(range(8))  # every GPU is still known by name
    assert not _asked(nvml, DISPLAY) and not _asked(nvml, LINKS)


def test_explicit_gpus_still_see_a_named_gpus_processes(gpulaunch: Run) -> None:
    nvml = fake.dgx_h100()
    nvml.gpus[2].processes = [FakeProcess(pid=4_194_311)]
    nvml.gpus[2].utilization_gpu = 97
    nvml.gpus[0].processes = [FakeProcess(pid=4_194_312)]  # not asked about, and not read
    result = gpulaunch(nvml, "--dry-run", "--gpus", "2", "--", "x")
    assert result.code == 0, result.err
    assert "GPU 2 is busy" in result.err and "GPU 0" not in result.err
    assert nvml.called("nvmlDeviceGetComputeRunningProcesses", 0) == 0


def test_under_a_parents_cuda_visible_devices_every_gpus_state_is_read(gpulaunch: Run,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2,3")  # resolved against every GPU, MIG devices included
    nvml = fake.dgx_h100()
    result = gpulaunch(nvml, "--dry-run", "--json", "-q", "--gpus", "2", "--", "x")
    assert result.code == 0, result.err
    assert result.chosen() == [2]
    assert _asked(nvml, ("nvmlDeviceGetMemoryInfo_v2",)) == set(range(8))


@pytest.mark.parametrize("n", ["1", "3"])
def test_auto_reads_every_gpus_state_but_nothing_only_ls_shows(gpulaunch: Run, n: str) -> None:
    nvml = fake.dgx_h100()
    result = gpulaunch(nvml, "--dry-run", "--json", "-q", "--auto", n, "--", "x")
    assert result.code == 0, result.err
    assert _asked(nvml, STATE) == set(range(8))
    assert not _asked(nvml, DISPLAY)
    assert bool(_asked(nvml, LINKS)) is (n != "1")  # one GPU compares no links


def test_ls_still_shows_temperatures_and_versions(gpulaunch: Run) -> None:
    nvml = fake.dgx_h100()
    result = gpulaunch(nvml, "ls")
    assert result.code == 0, result.err
    assert _asked(nvml, ("nvmlDeviceGetTemperature",)) == set(range(8))
    assert "°C" in result.out and "driver 550.54.15" in result.out


def _busy_gpu0() -> FakeNvml:
    nvml = fake.dgx_h100()
    nvml.gpus[0].processes = [FakeProcess(pid=4_194_313)]
    nvml.gpus[0].utilization_gpu = 95
    return nvml


def test_auto_reads_no_links_of_a_gpu_it_could_not_choose(gpulaunch: Run) -> None:
    nvml = _busy_gpu0()
    result = gpulaunch(nvml, "--dry-run", "--json", "-q", "--auto", "2", "--idle", "--", "x")
    assert result.code == 0, result.err
    assert result.chosen() == [1, 2]
    assert _asked(nvml, ("nvmlDeviceGetNvLinkState",)) == set(range(1, 8))  # GPU 0 is busy: --idle rules it out


def test_auto_reads_the_links_of_every_gpu_it_could_choose(gpulaunch: Run) -> None:
    nvml = _busy_gpu0()  # busy, but without --idle still a candidate
    result = gpulaunch(nvml, "--dry-run", "--json", "-q", "--auto", "2", "--", "x")
    assert result.code == 0, result.err
    assert _asked(nvml, ("nvmlDeviceGetNvLinkState",)) == set(range(8))



def test_explain_reads_every_gpus_links_and_chooses_as_the_launch_does(gpulaunch: Run) -> None:
    nvml = _busy_gpu0()
    explained = gpulaunch(nvml, "--json", "--auto", "2", "--idle", "--explain")
    assert explained.code == 0, explained.err
    assert json.loads(explained.out)["chosen"] == [1, 2]
    assert _asked(nvml, ("nvmlDeviceGetNvLinkState",)) == set(range(8))


def test_a_sweep_of_two_gpu_jobs_reads_the_links_and_pairs_the_nvlinked_gpus(gpulaunch: Run, tmp_path) -> None:
    """`each --gpus-per-job 2` on 4 GPUs bridged 0-2 and 1-3 (0,1 and 2,3 only share a PCIe switch): each
    job gets a bridged pair, which only the links NVML is asked for tell; one-GPU jobs compare no links."""
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("sh -c 'echo $CUDA_VISIBLE_DEVICES'\n" * 2)
    nvml = fake.workstation_nvlink()
    result = gpulaunch(nvml, "each", str(jobs), "--gpus-per-job", "2", "-q", "--log-dir", str(tmp_path / "two"))
    assert result.code == 0, result.err
    assert sorted((tmp_path / "two" / f"job-{n}.log").read_text() for n in (1, 2)) == ["0,2\n", "1,3\n"]
    nvml = fake.workstation_nvlink()
    result = gpulaunch(nvml, "each", str(jobs), "-q", "--log-dir", str(tmp_path / "one"))
    assert result.code == 0, result.err
    assert not _asked(nvml, LINKS)


def test_ls_of_some_gpus_reads_and_shows_their_state(gpulaunch: Run) -> None:
    nvml = fake.dgx_h100()
    result = gpulaunch(nvml, "ls", "--gpus", "2,5-6", "--json")
    assert result.code == 0, result.err
    assert _asked(nvml, ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo")) == {2, 5, 6}
    shown = {g["index"]: g for g in json.loads(result.out)["gpus"]}
    assert sorted(shown) == [2, 5, 6] and all(g["memory_free_mib"] is not None for g in shown.values())


def test_ls_reads_the_processes_and_topo_does_not(gpulaunch: Run) -> None:
    nvml = _busy_gpu0()
    assert gpulaunch(nvml, "ls").code == 0
    assert 0 in _asked(nvml, ("nvmlDeviceGetComputeRunningProcesses",))
    nvml = _busy_gpu0()
    assert gpulaunch(nvml, "topo").code == 0
    assert not _asked(nvml, ("nvmlDeviceGetComputeRunningProcesses",))
