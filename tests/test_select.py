"""Eligibility, exclusion reasons, availability classes, --fit, and the "not enough GPUs" error."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from conftest import PRINT_CVD, run_cli
from gpu_launch.hardware import snapshot
from gpu_launch.errors import ExitCode, NotEnoughGpus, UsageError
from gpu_launch.hardware.model import Gpu, GpuProcess, Machine
from gpu_launch.choose.select import (Availability, Constraints, availability, check_explicit, choose_auto, choose_fit,
                               eligibility)
from gpu_launch.choose.spec import parse, resolve
from gpu_launch.base.units import parse_size

TOTAL = 49140


def gpu(i: int, used: int = 3, util: int = 0, procs: int = 0, **kw) -> Gpu:
    return Gpu(index=i, uuid=f"GPU-{i:08d}", name="RTX A6000", memory_total_mib=TOTAL, memory_used_mib=used,
               memory_free_mib=TOTAL - used, utilization_gpu=util,
               processes=tuple(GpuProcess(100 + k, user="erin") for k in range(procs)), **kw)


def box(*gpus: Gpu) -> Machine:
    m = len(gpus)
    return Machine(tuple(gpus), tuple(tuple("X" if i == j else "PHB" for j in range(m)) for i in range(m)))


def reasons(machine: Machine, **kw) -> dict[int, str]:
    return {e.gpu.index: e.reason for e in eligibility(machine, Constraints(**kw)).excluded}


def test_availability_thresholds():
    assert availability(gpu(0, used=3)) is Availability.IDLE
    assert availability(gpu(0, used=int(TOTAL * 0.05))) is Availability.IDLE  # at most 5 % used
    assert availability(gpu(0, used=int(TOTAL * 0.06))) is Availability.PARTLY_USED
    assert availability(gpu(0, used=3, procs=1)) is Availability.PARTLY_USED  # any compute process
    assert availability(gpu(0, used=3, util=50)) is Availability.BUSY
    assert availability(gpu(0, used=TOTAL // 2)) is Availability.BUSY
    assert availability(gpu(0, used=100, util=49, procs=1)) is Availability.PARTLY_USED


def test_min_free_reason():
    m = box(gpu(0), gpu(1, used=40000))
    why = reasons(m, min_free=parse_size("20GiB", "--min-free"))
    assert list(why) == [1]
    assert why[1] == "8.9 GiB free < 20.0 GiB asked by --min-free"
    assert list(reasons(m, min_free=parse_size("80%", "--min-free"))) == [1]
    assert reasons(m, min_free=parse_size("512MiB", "--min-free")) == {}


def test_max_util_reason():
    why = reasons(box(gpu(0, util=10), gpu(1, util=30)), max_util=20)
    assert why == {1: "30% utilisation > --max-util 20%"}


def test_max_util_with_unknown_utilisation_excludes():
    why = reasons(box(dataclasses.replace(gpu(0), utilization_gpu=None)), max_util=50)
    assert "utilisation unknown" in why[0]


def test_idle_reason():
    why = reasons(box(gpu(0), gpu(1, procs=1), gpu(2, util=90)), idle=True)
    assert why == {1: "not idle (partly used; --idle)", 2: "not idle (busy; --idle)"}


def test_exclude_reason():
    m = box(gpu(0), gpu(1), gpu(2))
    excluded = frozenset(d.uuid for d in resolve(parse("0,2"), m))
    assert reasons(m, exclude=excluded) == {0: "excluded by --exclude", 2: "excluded by --exclude"}
    assert [d.gpu.index for d in choose_auto(m, 1, Constraints(exclude=excluded)).devices] == [1]


def test_unavailable_gpu_reason():
    lost = dataclasses.replace(gpu(1), available=False, error="GPU is lost")
    assert reasons(box(gpu(0), lost)) == {1: "unavailable (GPU is lost)"}


def test_not_enough_says_how_many_exist_and_why():
    m = box(gpu(0), gpu(1, util=90), dataclasses.replace(gpu(2), available=False, error="GPU is lost"), gpu(3))
    with pytest.raises(NotEnoughGpus) as err:
        choose_auto(m, 3, Constraints(max_util=50))
    message = err.value.message
    assert "need 3 GPUs, but only 2 of 4 are eligible" in message
    assert "GPU 1: 90% utilisation > --max-util 50%" in message
    assert "GPU 2: unavailable (GPU is lost)" in message
    assert err.value.exit_code == ExitCode.NOT_ENOUGH_GPUS


def test_more_than_the_machine_has():
    with pytest.raises(NotEnoughGpus, match="this machine has 2"):
        choose_auto(box(gpu(0), gpu(1)), 3, Constraints())


def test_fit_picks_the_smallest_count():
    m = snapshot.resolve("dgx-h100")  # idle GPUs have 79.6 GiB free
    fit = lambda size: [d.gpu.index for d in choose_fit(m, parse_size(size, "--fit"), Constraints()).devices]
    assert fit("60GiB") == [2]
    assert fit("100GiB") == [2, 3]
    assert fit("200GiB") == [2, 3, 4, 6]  # 3 is not a tensor-parallel size: 2 → 4
    assert len(fit("400GiB")) == 8


def test_fit_too_big_says_the_most_there_is():
    m = snapshot.resolve("dgx-h100")
    with pytest.raises(NotEnoughGpus) as err:
        choose_fit(m, parse_size("2TiB", "--fit"), Constraints())
    assert err.value.message.startswith("--fit 2048")
    assert "holds at most 492.0 GiB free (on 8; 8 of 8 GPUs are eligible)" in err.value.message


def test_fit_rejects_a_percentage():
    from gpu_launch.base.units import Size
    with pytest.raises(UsageError):
        choose_fit(box(gpu(0)), Size(percent=50), Constraints())


def test_explicit_gpus_warn_but_obey():
    m = box(gpu(0), gpu(1, used=40000, util=99, procs=1))
    selection = check_explicit(resolve(parse("1"), m), m, Constraints(max_util=50))
    assert [d.gpu.index for d in selection.devices] == [1]
    assert selection.warnings == ("GPU 1: 99% utilisation > --max-util 50%",)


def test_cli_not_enough_gpus_exit_code_and_message():
    result = run_cli("--snapshot", "pcie-8x", "--auto", "7", "--idle", "--", sys.executable, "-c", PRINT_CVD)
    assert result.returncode == int(ExitCode.NOT_ENOUGH_GPUS)
    assert result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith("gpulaunch: error: need 7 GPUs, but only 6 of 8 are eligible")
    assert "GPU 2: not idle (busy; --idle)" in line and "GPU 6: not idle (full; --idle)" in line
    assert "Traceback" not in result.stderr


def test_cli_constraints_steer_the_child():
    # pcie-8x: GPUs 2 and 6 are busy; excluding 0 and 1 moves the best PIX pair to 4,5.
    result = run_cli("--snapshot", "pcie-8x", "--auto", "2", "--exclude", "0,1", "-q", "--", sys.executable, "-c", PRINT_CVD)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4,5"


def test_cli_fit_reaches_the_child():
    result = run_cli("--snapshot", "dgx-h100", "--fit", "100GiB", "-q", "--", sys.executable, "-c", PRINT_CVD)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2,3"


def test_cli_unavailable_gpu_is_never_chosen(tmp_path):
    m = snapshot.resolve("workstation-4x")
    broken = dataclasses.replace(m.gpus[0], available=False, error="GPU is lost")
    path = tmp_path / "lost.json"
    path.write_text(snapshot.dump(dataclasses.replace(m, gpus=(broken, *m.gpus[1:]))))
    result = run_cli("--snapshot", str(path), "--auto", "2", "-q", "--", sys.executable, "-c", PRINT_CVD)
    assert result.returncode == 0, result.stderr
    # Not the other bridged pair 1,3: GPU 3 is partly used, and idle GPUs come first.
    assert result.stdout.strip() == "1,2"


def test_not_enough_groups_gpus_that_fail_alike_and_says_what_decided_busy() -> None:
    # Seed 39: GPUs of one reason are "GPUs 3-5", not "GPU 3, GPU 4, GPU 5"; a GPU busy by its memory says its
    # share (30000 of 49140 MiB is 61 %) and its utilisation.
    m = box(gpu(0), gpu(1, used=30000, util=10, procs=1), gpu(2, used=30000, util=10, procs=1), gpu(3), gpu(4), gpu(5))
    with pytest.raises(NotEnoughGpus) as err:
        choose_auto(m, 6, Constraints(exclude=frozenset(f"GPU-{i:08d}" for i in (3, 4, 5)), polite=True))
    assert err.value.message == (
        "need 6 GPUs, but only 1 of 6 is eligible (GPUs 1,2: busy by erin (61% of its memory in use, 10% utilisation;"
        " --max-util 100 takes it anyway); GPUs 3-5: excluded by --exclude)")


def test_held_gpus_are_named_in_the_plural_from_two() -> None:
    from gpu_launch.choose.select import grouped

    held = [("GPU 2", "reserved by bob"), ("GPU 3", "reserved by bob"), ("GPU 4", "reserved by carol")]
    assert grouped(held, " is ") == "GPUs 2,3 are reserved by bob; GPU 4 is reserved by carol"


def test_a_busy_gpus_warning_says_its_utilisation() -> None:
    m = box(gpu(0), gpu(1, used=30000, util=10, procs=1))
    sel = check_explicit(resolve(parse("1"), m), m, Constraints())
    assert sel.warnings == ("GPU 1 is busy by erin (10% utilisation, 18.7 GiB free)",)


def test_gpus_naming_a_whole_gpu_in_mig_mode_hints_its_first_mig_device() -> None:
    m = snapshot.resolve("mig-a100")
    with pytest.raises(UsageError) as err:
        check_explicit(resolve(parse("0"), m), m, Constraints())
    first = m.gpus[0].mig_devices[0].uuid
    assert err.value.hint == f"name one: --gpus {first}, or let --mig choose (--auto 1 --mig)"
