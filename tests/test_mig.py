"""MIG: --auto/--fit with --mig choose one MIG device; --gpus MIG-…; the child gets MIG UUIDs."""

from __future__ import annotations

from childproc import gpulaunch, launch_report
from gpu_launch.choose import mig
from gpu_launch.hardware import snapshot
from gpu_launch.choose.select import Constraints
from gpu_launch.base.units import parse_size

MACHINE = snapshot.resolve("mig-a100")
GPU0 = MACHINE.gpus[0]
BIG, MID, SMALL = GPU0.mig_devices  # 3g.20gb, 2g.10gb, 1g.5gb


def test_auto_mig_picks_the_mig_device_with_most_free_memory():
    child, err = launch_report(["--snapshot", "mig-a100", "--auto", "1", "--mig"])
    assert child["CUDA_VISIBLE_DEVICES"] == BIG.uuid
    assert child["GPULAUNCH_GPUS"] == "0"
    assert "cuda:0 → GPU 0 MIG 3g.20gb" in err


def test_fit_mig_picks_the_smallest_slice_that_holds_it():
    child, _ = launch_report(["--snapshot", "mig-a100", "--fit", "6GiB", "--mig"])
    assert child["CUDA_VISIBLE_DEVICES"] == MID.uuid
    child, _ = launch_report(["--snapshot", "mig-a100", "--fit", "1GiB", "--mig"])
    assert child["CUDA_VISIBLE_DEVICES"] == SMALL.uuid


def test_more_than_one_mig_device_is_a_usage_error():
    done = gpulaunch(["--snapshot", "mig-a100", "--auto", "2", "--mig", "--", "echo", "RAN"])
    assert done.returncode == 2 and "RAN" not in done.stdout
    assert "CUDA enumerates only one MIG device per process" in done.stderr


def test_mig_on_a_machine_without_mig_says_so():
    done = gpulaunch(["--snapshot", "pcie-8x", "--mig", "--", "true"])
    assert done.returncode == 4 and "no GPU here is in MIG mode" in done.stderr


def test_mig_with_gpus_is_a_usage_error():
    done = gpulaunch(["--snapshot", "mig-a100", "--gpus", "0", "--mig", "--", "true"])
    assert done.returncode == 2 and "--mig makes no sense with --gpus" in done.stderr


def test_gpus_mig_prefix_selects_that_device():
    child, _ = launch_report(["--snapshot", "mig-a100", "--gpus", MID.uuid[:12]])
    assert child["CUDA_VISIBLE_DEVICES"] == MID.uuid


def test_without_mig_auto_skips_a_gpu_in_mig_mode():
    child, _ = launch_report(["--snapshot", "mig-a100", "--auto", "1"])
    assert child["GPULAUNCH_GPUS"] == "1"
    done = gpulaunch(["--snapshot", "mig-a100", "--auto", "2", "--", "true"])
    assert done.returncode == 4 and "use --mig" in done.stderr


def test_constraints_apply_to_mig_devices():
    assert mig.choose_mig(MACHINE, 1, Constraints(exclude=frozenset({BIG.uuid}))).devices[0].mig == MID
    assert mig.choose_mig(MACHINE, 1, Constraints(min_free=parse_size("15GiB"))).devices[0].mig == BIG
    ok, excluded = mig.candidates(MACHINE, Constraints(min_free=parse_size("15GiB")))
    assert [d.mig for d in ok] == [BIG] and len(excluded) == 2


def test_parent_cvd_with_a_mig_uuid_is_the_only_choice():
    child, err = launch_report(["--snapshot", "mig-a100", "--auto", "1", "--mig"], {"CUDA_VISIBLE_DEVICES": SMALL.uuid})
    assert child["CUDA_VISIBLE_DEVICES"] == SMALL.uuid
    assert "(parent cuda:0)" in err
    # the whole GPU 1 is outside that parent set, and GPU 0 is in MIG mode: no whole GPU to give
    done = gpulaunch(["--snapshot", "mig-a100", "--auto", "1", "--", "true"], {"CUDA_VISIBLE_DEVICES": SMALL.uuid})
    assert done.returncode == 4


def test_parent_cvd_legacy_mig_form():
    legacy = f"MIG-{GPU0.uuid}/{MID.gpu_instance_id}/{MID.compute_instance_id}"
    child, _ = launch_report(["--snapshot", "mig-a100", "--mig"], {"CUDA_VISIBLE_DEVICES": legacy})
    assert child["CUDA_VISIBLE_DEVICES"] == MID.uuid


def test_env_mig_prints_the_mig_uuid():
    done = gpulaunch(["--snapshot", "mig-a100", "env", "--mig", "-q"])
    assert done.returncode == 0
    assert f"export CUDA_VISIBLE_DEVICES={BIG.uuid}\n" in done.stdout


def test_idle_takes_a_mig_device_up_to_exactly_5_percent_used():
    # --idle: at most 5 % of the memory used (choose/availability.py IDLE_MAX_USED): 1000 MiB of 20000 is idle.
    from gpu_launch.base.records import replace

    def with_used(mib: int):
        big = replace(BIG, memory_total_mib=20000, memory_used_mib=mib, memory_free_mib=20000 - mib)
        return replace(MACHINE, gpus=(replace(GPU0, mig_devices=(big, MID, SMALL)), *MACHINE.gpus[1:]))

    assert mig.choose_mig(with_used(1000), 1, Constraints(idle=True)).devices[0].mig.uuid == BIG.uuid
    assert mig.choose_mig(with_used(1001), 1, Constraints(idle=True)).devices[0].mig == MID


def test_fit_mig_that_nothing_holds_says_the_most_there_is():
    done = gpulaunch(["--snapshot", "mig-a100", "--fit", "30GiB", "--mig", "--", "true"])
    assert done.returncode == 4
    assert "no eligible MIG device has that much free (the most is 19.5 GiB)" in done.stderr, done.stderr
