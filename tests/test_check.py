"""`gpulaunch check`: lint of an inherited CVD, and CUDA's own view compared by UUID.

The CUDA part needs libcuda. Without a GPU the tests use tests/fake_libcuda (compiled here when a C
compiler exists), which reports UUIDs the way the real driver does, so the probe's ctypes calls and
the comparison run for real; "no driver" is tested with a library path that does not exist.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from childproc import gpulaunch, uuids
from gpu_launch.run import cuda_probe as check
from gpu_launch.hardware import snapshot
from gpu_launch.hardware.model import Device

PCIE = snapshot.resolve("pcie-8x")
MIG = snapshot.resolve("mig-a100")
U = uuids("pcie-8x")
NO_DRIVER = {"GPULAUNCH_LIBCUDA": "/nonexistent/libcuda.so.1"}


def _build(tmp_path_factory, *flags: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    out = tmp_path_factory.mktemp("cuda") / "libcuda.so.1"
    src = Path(__file__).parent / "fake_libcuda" / "fake_libcuda.c"
    subprocess.run([cc, "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return str(out)


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory) -> str:
    return _build(tmp_path_factory)


@pytest.fixture(scope="module")
def fake_cuda_v1(tmp_path_factory) -> str:
    """A driver with only cuDeviceGetUuid (no _v2)."""
    return _build(tmp_path_factory, "-DV1_ONLY")


def _cuda(lib: str, machine_uuids: list[str], **extra: str) -> dict[str, str]:
    return {"GPULAUNCH_LIBCUDA": lib, "FAKE_CUDA_UUIDS": ",".join(machine_uuids), **extra}


# --- without a driver ------------------------------------------------------------------------------

def test_no_driver_says_so_with_exit_code_3():
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--auto", "2"], NO_DRIVER)
    assert done.returncode == 3
    assert "gpulaunch: error: no CUDA driver: libcuda cannot be loaded here" in done.stderr
    assert "checking CUDA with CUDA_VISIBLE_DEVICES=0,1 CUDA_DEVICE_ORDER=PCI_BUS_ID" in done.stdout


def test_a_libcuda_that_is_no_driver_says_so_with_exit_code_3(tmp_path_factory):
    """A stub with cuInit and no device calls (NVIDIA's mock libcuda, k8s-test-infra pkg/gpu/mockcuda, has
    no cuDeviceGetCount): the probe said "AttributeError: ... undefined symbol" and exit 8, as if CUDA saw
    other devices than the chosen ones."""
    stub = _build(tmp_path_factory, "-DINIT_ONLY")
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--auto", "1"], {"GPULAUNCH_LIBCUDA": stub})
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("gpulaunch: error: the libcuda found is no CUDA driver")
    assert len(done.stderr.splitlines()) == 1
    assert "has no cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetUuid" in done.stderr
    assert "AttributeError" not in done.stderr


def test_lint_is_printed_even_without_a_driver():
    done = gpulaunch(["--snapshot", "pcie-8x", "check"], {**NO_DRIVER, "CUDA_VISIBLE_DEVICES": "3,3"})
    # a duplicate makes CUDA see nothing, so there is nothing to choose from either
    assert done.returncode == 4
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--auto", "1"], {**NO_DRIVER, "CUDA_VISIBLE_DEVICES": f"4,{U[5]},5"})
    assert done.returncode == 3
    assert "inherited CUDA_VISIBLE_DEVICES=4," in done.stdout and "1 problem\n" in done.stdout
    assert "mixes a UUID into a list of indices" in done.stdout


def test_check_takes_no_arguments():
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "extra"], NO_DRIVER)
    assert done.returncode == 2


# --- comparing CUDA's view with the choice (pure) --------------------------------------------------

def _seen(*full: str) -> check.ProbeResult:
    return check.ProbeResult(tuple(check.uuid_body(u) for u in full))


def test_compare_accepts_exactly_the_chosen_devices_in_order():
    devices = (Device(PCIE.gpus[3]), Device(PCIE.gpus[1]))
    lines, problems = check.compare(devices, _seen(U[3], U[1]))
    assert problems == [] and lines[0].startswith("  cuda:0 ✓ GPU 3")


def test_compare_flags_order_missing_and_extra_devices():
    devices = (Device(PCIE.gpus[3]), Device(PCIE.gpus[1]))
    assert check.compare(devices, _seen(U[1], U[3]))[1][0].startswith("cuda:0 should be GPU 3, but CUDA shows")
    assert "CUDA shows 1 device(s)" in check.compare(devices, _seen(U[3]))[1][0]
    assert "was not chosen" in check.compare(devices[:1], _seen(U[3], U[1]))[1][0]


def test_compare_mig_by_mig_uuid_or_by_the_parent_gpu_uuid():
    gpu = MIG.gpus[0]
    device = (Device(gpu, gpu.mig_devices[1]),)
    assert check.compare(device, _seen(gpu.mig_devices[1].uuid))[1] == []
    lines, problems = check.compare(device, _seen(gpu.uuid))  # cuDeviceGetUuid (v1) on some drivers
    assert problems == [] and "parent GPU's UUID" in lines[0]
    assert check.compare(device, _seen(gpu.mig_devices[0].uuid))[1]


# --- with the stand-in driver ----------------------------------------------------------------------

def test_check_passes_when_cuda_sees_the_chosen_gpus(fake_cuda):
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--gpus", "5,2"], _cuda(fake_cuda, U))
    assert done.returncode == 0, done.stderr
    assert f"cuda:0 ✓ GPU 5  {U[5]}" in done.stdout and f"cuda:1 ✓ GPU 2  {U[2]}" in done.stdout
    assert "ok: cuda:0..1 are exactly the chosen devices, in order" in done.stdout


def test_check_with_uuids_and_under_a_parent_cvd(fake_cuda):
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--auto", "1"], _cuda(fake_cuda, U, CUDA_VISIBLE_DEVICES="6,7"))
    assert done.returncode == 0, done.stderr
    assert f"checking CUDA with CUDA_VISIBLE_DEVICES={U[7]}" in done.stdout


def test_check_fails_with_exit_8_when_cuda_disagrees(fake_cuda):
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--gpus", "5,2"], _cuda(fake_cuda, U, FAKE_CUDA_REVERSE="1"))
    assert done.returncode == 8
    assert "gpulaunch: error: CUDA does not see what gpulaunch chose: cuda:0 should be GPU 5" in done.stderr


def test_check_when_the_driver_does_not_start(fake_cuda):
    done = gpulaunch(["--snapshot", "pcie-8x", "check"], _cuda(fake_cuda, U, FAKE_CUDA_INIT_ERROR="999"))
    assert done.returncode == 3 and "the CUDA driver did not start (cuInit: CUDA_ERROR_FAKE)" in done.stderr


def test_check_mig_device(fake_cuda):
    all_uuids = [MIG.gpus[0].mig_devices[0].uuid, MIG.gpus[1].uuid]
    done = gpulaunch(["--snapshot", "mig-a100", "check", "--mig"], _cuda(fake_cuda, all_uuids))
    assert done.returncode == 0, done.stderr
    assert "cuda:0 ✓ GPU 0 MIG 3g.20gb" in done.stdout


def test_check_with_a_driver_that_has_only_cuDeviceGetUuid(fake_cuda_v1):
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--gpus", "7"], _cuda(fake_cuda_v1, U))
    assert done.returncode == 0, done.stderr
    assert f"cuda:0 ✓ GPU 7  {U[7]}" in done.stdout


def test_check_catches_a_cuda_view_that_differs_from_nvml(fake_cuda):
    # CUDA in the child sees only GPUs 2-7 (say docker inside a Slurm job): index 1 is another GPU there
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--gpus", "1"], _cuda(fake_cuda, U[2:]))
    assert done.returncode == 8
    assert f"cuda:0 should be GPU 1, but CUDA shows {U[3][4:]}" in done.stderr
    # by UUID it cannot name another GPU: CUDA shows nothing, and check says so
    done = gpulaunch(["--snapshot", "pcie-8x", "check", "--gpus", "1", "--uuid"], _cuda(fake_cuda, U[2:]))
    assert done.returncode == 8
    assert "cuda:0 should be GPU 1, but CUDA shows 0 device(s)" in done.stderr
