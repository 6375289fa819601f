"""Inherited visibility: a parent's CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, Slurm steps."""

from __future__ import annotations

import pytest

from childproc import example, gpulaunch, launch_report, uuids, write
from gpu_launch.hardware import snapshot
from gpu_launch.choose import visibility
from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.hardware.model import Device

PCIE = snapshot.resolve("pcie-8x")
MIG = snapshot.resolve("mig-a100")
U = uuids("pcie-8x")


def _indices(reading: visibility.CvdReading) -> list[int]:
    return [d.gpu.index for d in reading.devices]


# --- reading CVD the way CUDA does (pure) ---------------------------------------------------------

def test_invalid_entry_truncates_the_list_as_cuda_does():
    reading = visibility.read_cvd("0,2,-1,1", PCIE)
    assert _indices(reading) == [0, 2]
    assert "'-1' is negative" in reading.problems[0] and "ignores it and everything after it ('1')" in reading.problems[0]


def test_out_of_range_index_truncates():
    reading = visibility.read_cvd("1,16,2", PCIE)
    assert _indices(reading) == [1]
    assert "out of range" in reading.problems[0] and "0-7" in reading.problems[0]


def test_duplicate_hides_every_gpu():
    reading = visibility.read_cvd("0,1,0", PCIE)
    assert reading.devices == ()
    assert "a second time" in reading.problems[0]


def test_mixed_index_and_uuid_stops_at_the_first_other_kind():
    reading = visibility.read_cvd(f"3,{U[5]},4", PCIE)
    assert _indices(reading) == [3]
    assert "mixes a UUID into a list of indices" in reading.problems[0]
    reading = visibility.read_cvd(f"{U[5]},3", PCIE)
    assert _indices(reading) == [5]
    assert "mixes an index into a list of UUIDs" in reading.problems[0]


def test_abbreviated_and_ambiguous_uuid_prefixes():
    assert _indices(visibility.read_cvd(f"{U[6][:12]},{U[1][:9]}", PCIE)) == [6, 1]
    reading = visibility.read_cvd("GPU-", PCIE)
    assert reading.devices == () and "ambiguous UUID prefix" in reading.problems[0]


def test_unknown_uuid_and_garbage_stop_the_list():
    reading = visibility.read_cvd(f"{U[2]},GPU-00000000-dead,{U[3]}", PCIE)
    assert _indices(reading) == [2] and "matches no GPU" in reading.problems[0]
    reading = visibility.read_cvd("cuda0", PCIE)
    assert reading.devices == () and "neither an index nor" in reading.problems[0]


def test_trailing_junk_after_digits_is_read_as_the_digits():
    reading = visibility.read_cvd("1a,2", PCIE)
    assert _indices(reading) == [1, 2]
    assert "read as '1'" in reading.problems[0]


def test_empty_value_hides_every_gpu():
    reading = visibility.read_cvd("", PCIE)
    assert reading.devices == () and "hides every GPU" in reading.problems[0]


def test_mig_uuid_and_legacy_mig_form_resolve_to_the_mig_device():
    mig = MIG.gpus[0].mig_devices[1]
    assert visibility.read_cvd(mig.uuid, MIG).devices == (Device(MIG.gpus[0], mig),)
    legacy = f"MIG-{MIG.gpus[0].uuid}/{mig.gpu_instance_id}/{mig.compute_instance_id}"
    assert visibility.read_cvd(legacy, MIG).devices == (Device(MIG.gpus[0], mig),)
    two = visibility.read_cvd(f"{mig.uuid},{MIG.gpus[0].mig_devices[0].uuid}", MIG)
    assert any("only one MIG device per process" in p for p in two.problems)


def test_index_list_in_order():
    vis = visibility.resolve(PCIE, {"CUDA_VISIBLE_DEVICES": "5,2"})
    assert [d.gpu.index for d in vis.allowed or ()] == [5, 2]
    assert vis.parent_label(Device(PCIE.gpus[2])) == "parent cuda:1"
    restricted = vis.restrict(PCIE)
    assert [g.index for g in restricted.gpus] == [2, 5]  # NVML order kept; links cut to the pair
    assert restricted.links is not None and len(restricted.links) == 2 and restricted.links[0][0] == "X"


def test_fastest_first_with_indices_warns():
    vis = visibility.resolve(PCIE, {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert any("FASTEST_FIRST" in w for w in vis.warnings)
    assert not visibility.resolve(PCIE, {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).warnings
    assert not visibility.resolve(PCIE, {"CUDA_VISIBLE_DEVICES": f"{U[0]}", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}).warnings


def test_nothing_set_narrows_nothing():
    vis = visibility.resolve(PCIE, {})
    assert vis.allowed is None and not vis.restricted and vis.restrict(PCIE) is PCIE


def test_require_some_and_check_allowed_raise_clear_errors():
    with pytest.raises(NotEnoughGpus, match="allows no GPU"):
        visibility.resolve(PCIE, {"CUDA_VISIBLE_DEVICES": ""}).require_some()
    vis = visibility.resolve(PCIE, {"CUDA_VISIBLE_DEVICES": "2,3"})
    with pytest.raises(UsageError, match=r"GPU 0 is outside .*CUDA_VISIBLE_DEVICES=2,3: GPU 2, GPU 3"):
        vis.check_allowed((Device(PCIE.gpus[0]),))


# --- NVIDIA_VISIBLE_DEVICES (containers) ----------------------------------------------------------

def test_nvd_all_void_empty_narrow_nothing_and_none_allows_nothing():
    for value in ("all", "void", "", "ALL"):
        assert visibility.resolve(PCIE, {"NVIDIA_VISIBLE_DEVICES": value}).allowed is None
    assert visibility.resolve(PCIE, {"NVIDIA_VISIBLE_DEVICES": "none"}).allowed == ()


def test_nvd_list_narrows_when_nvml_shows_more():
    vis = visibility.resolve(PCIE, {"NVIDIA_VISIBLE_DEVICES": f"{U[6]},{U[7]}"})
    assert [d.gpu.index for d in vis.allowed or ()] == [6, 7]
    assert [d.gpu.index for d in visibility.resolve(PCIE, {"NVIDIA_VISIBLE_DEVICES": "4,5"}).allowed or ()] == [4, 5]


def test_nvd_indices_are_not_applied_when_the_runtime_already_narrowed():
    two = snapshot.loads(snapshot.dump(visibility.Visibility(tuple(Device(g) for g in PCIE.gpus[:2])).restrict(PCIE)))
    assert visibility.resolve(two, {"NVIDIA_VISIBLE_DEVICES": "4,5"}).allowed is None


def test_cvd_and_nvd_together_intersect():
    vis = visibility.resolve(PCIE, {"NVIDIA_VISIBLE_DEVICES": "4,5,6", "CUDA_VISIBLE_DEVICES": "5,7"})
    assert [d.gpu.index for d in vis.allowed or ()] == [5]
    assert any("not in NVIDIA_VISIBLE_DEVICES" in w for w in vis.warnings)


# --- real child processes --------------------------------------------------------------------------

def test_parent_cvd_2_3_auto_1_picks_among_them_and_the_table_says_so():
    child, err = launch_report(["--snapshot", "pcie-8x", "--auto", "1"], {"CUDA_VISIBLE_DEVICES": "2,3"})
    # GPU 2 is busy in this example, so the best of the two is GPU 3, the parent's cuda:1
    assert child["GPULAUNCH_GPUS"] == "3"
    assert child["CUDA_VISIBLE_DEVICES"] == U[3]  # UUIDs: the child's CVD replaces the parent's
    assert child["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "choosing among GPU 2, GPU 3, as the parent's CUDA_VISIBLE_DEVICES=2,3 allows" in err
    assert "cuda:0 → GPU 3  (parent cuda:1)" in err


@pytest.mark.parametrize("n", [1, 2])
def test_parent_cvd_auto_never_leaves_the_parent_set(n):
    child, _ = launch_report(["--snapshot", "dgx-h100", "--auto", str(n)], {"CUDA_VISIBLE_DEVICES": "6,1,7"})
    chosen = child["GPULAUNCH_GPUS"].split(",")
    assert len(chosen) == n and set(chosen) <= {"6", "1", "7"}


def test_parent_cvd_with_uuids_reversed():
    child, err = launch_report(["--snapshot", "pcie-8x", "--auto", "2"], {"CUDA_VISIBLE_DEVICES": f"{U[5]},{U[4][:10]}"})
    assert sorted(child["GPULAUNCH_GPUS"].split(",")) == ["4", "5"]
    assert set(child["CUDA_VISIBLE_DEVICES"].split(",")) == {U[4], U[5]}
    assert "(parent cuda:0)" in err and "(parent cuda:1)" in err
    assert "GPU 5  (parent cuda:0)" in err


def test_parent_cvd_empty_means_no_gpu():
    done = gpulaunch(["--snapshot", "pcie-8x", "--auto", "1", "--", "echo", "RAN"], {"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 4
    assert "RAN" not in done.stdout
    assert "CUDA_VISIBLE_DEVICES= allows no GPU (the value is empty, which hides every GPU)" in done.stderr
    assert "does not widen it" in done.stderr


def test_gpus_outside_the_parent_set_is_an_error_naming_what_it_allowed():
    done = gpulaunch(["--snapshot", "pcie-8x", "--gpus", "0", "--", "echo", "RAN"], {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert done.returncode == 2 and "RAN" not in done.stdout
    assert done.stderr.strip() == (
        "gpulaunch: error: --gpus: GPU 0 is outside what the parent allows (CUDA_VISIBLE_DEVICES=2,3: GPU 2, GPU 3) "
        "(hint: name one of those, or use --auto to choose among them; inside a gpulaunch job or a Slurm step, "
        "those are the GPUs it was given; if this shell set it (eval \"$(gpulaunch env ...)\", export), "
        "`unset CUDA_VISIBLE_DEVICES` or a new shell lifts the limit)")


def test_gpus_inside_the_parent_set_runs_with_the_uuid():
    child, err = launch_report(["--snapshot", "pcie-8x", "--gpus", "3,2"], {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert child["CUDA_VISIBLE_DEVICES"] == f"{U[3]},{U[2]}" and child["GPULAUNCH_GPUS"] == "3,2"


def test_more_than_the_parent_allows_says_so():
    done = gpulaunch(["--snapshot", "pcie-8x", "--auto", "3", "--", "true"], {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert done.returncode == 4
    assert "the parent's CUDA_VISIBLE_DEVICES=4,5 allows GPU 4, GPU 5" in done.stderr


def test_truncated_parent_cvd_is_warned_about_and_followed():
    child, err = launch_report(["--snapshot", "pcie-8x", "--auto", "2"], {"CUDA_VISIBLE_DEVICES": "0,1,-1,3"})
    assert sorted(child["GPULAUNCH_GPUS"].split(",")) == ["0", "1"]
    assert "warning: the parent's CUDA_VISIBLE_DEVICES: entry 3 '-1' is negative" in err


def test_container_nvd_narrows_when_nvml_shows_every_gpu():
    child, err = launch_report(["--snapshot", "pcie-8x", "--auto", "1"], {"NVIDIA_VISIBLE_DEVICES": f"{U[6]},{U[7]}"})
    assert child["GPULAUNCH_GPUS"] == "7"  # GPU 6 is busy
    assert child["CUDA_VISIBLE_DEVICES"] == U[7]
    assert "as the parent's NVIDIA_VISIBLE_DEVICES=" in err
    assert gpulaunch(["--snapshot", "pcie-8x", "--auto", "1", "--", "true"], {"NVIDIA_VISIBLE_DEVICES": "none"}).returncode == 4


def test_without_a_parent_restriction_indices_are_written():
    child, err = launch_report(["--snapshot", "pcie-8x", "--gpus", "4"], {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert child["CUDA_VISIBLE_DEVICES"] == "4" and "parent" not in err


# --- a simulated Slurm step ------------------------------------------------------------------------

def _slurm_cgroup_machine(tmp_path) -> tuple[str, list[str]]:
    """What NVML shows inside a Slurm step with ConstrainDevices: only the 2 allocated GPUs (host GPUs 4
    and 5 of a DGX H100), renumbered 0 and 1 in PCI order, exactly as CUDA numbers them there."""
    doc = example("dgx-h100")
    gpus = [dict(doc["gpus"][4], index=0), dict(doc["gpus"][5], index=1)]
    links = [[doc["links"][i][j] for j in (4, 5)] for i in (4, 5)]
    path = write(tmp_path, {**doc, "gpus": gpus, "links": links, "hostname": "node017"})
    return path, [g["uuid"] for g in gpus]


# The variables `srun --gres=gpu:2` (or --gpus-per-task 2) sets for the task (srun.1, gres.shtml):
# CUDA_VISIBLE_DEVICES is relative to the cgroup, SLURM_*_GPUS stay global.
SRUN = {"SLURM_JOB_ID": "81234", "SLURM_JOBID": "81234", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_GPUS": "4,5", "SLURM_STEP_GPUS": "4,5",
        "SLURM_GPUS_ON_NODE": "2", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_slurm_step_subdivides_the_allocation(tmp_path):
    path, alloc = _slurm_cgroup_machine(tmp_path)
    first, err = launch_report(["--snapshot", path, "--auto", "1"], SRUN)
    # GPU 4 of the host (cgroup index 0) is idle, GPU 5 has processes: the idle one wins
    assert first["CUDA_VISIBLE_DEVICES"] == alloc[0] and first["GPULAUNCH_GPUS"] == "0"
    assert "Slurm job 81234 step 0, SLURM_STEP_GPUS=4,5" in err
    assert "(parent cuda:0)" in err
    # a second sub-job in the same allocation, told to keep off the first one's GPU, gets the other
    second, err2 = launch_report(["--snapshot", path, "--auto", "1", "--exclude", alloc[0]], SRUN)
    assert second["CUDA_VISIBLE_DEVICES"] == alloc[1] and "(parent cuda:1)" in err2
    both, _ = launch_report(["--snapshot", path, "--auto", "2"], SRUN)
    assert set(both["CUDA_VISIBLE_DEVICES"].split(",")) == set(alloc)
    done = gpulaunch(["--snapshot", path, "--auto", "3", "--", "true"], SRUN)
    assert done.returncode == 4


def test_slurm_step_with_one_gpu_per_task(tmp_path):
    path, alloc = _slurm_cgroup_machine(tmp_path)
    task1 = {**SRUN, "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "1", "SLURM_STEP_GPUS": "5"}
    child, err = launch_report(["--snapshot", path, "--auto", "1"], task1)
    assert child["CUDA_VISIBLE_DEVICES"] == alloc[1]
    assert "cuda:0 → GPU 1  (parent cuda:0)" in err


def test_slurm_without_cgroup_uses_global_indices():
    # no ConstrainDevices: NVML shows all 8 GPUs and Slurm's CUDA_VISIBLE_DEVICES holds global indices
    env = {**SRUN, "CUDA_VISIBLE_DEVICES": "6,7", "SLURM_JOB_GPUS": "6,7", "SLURM_STEP_GPUS": "6,7"}
    child, err = launch_report(["--snapshot", "dgx-h100", "--auto", "1"], env)
    assert child["GPULAUNCH_GPUS"] in ("6", "7")
    assert child["CUDA_VISIBLE_DEVICES"] == uuids("dgx-h100")[int(child["GPULAUNCH_GPUS"])]


def test_slurm_job_without_gpu_restriction_is_named_in_the_header():
    child, err = launch_report(["--snapshot", "pcie-8x", "--gpus", "1"], {"SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "1"})
    assert child["CUDA_VISIBLE_DEVICES"] == "1"  # nothing narrowed: indices, as always
    assert "gpulaunch: Slurm job 77, SLURM_JOB_GPUS=1" in err


def test_ls_says_which_gpus_the_parent_allows():
    done = gpulaunch(["--snapshot", "dgx-h100", "ls"], {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == "choosing among GPU 2, GPU 3, as the parent's CUDA_VISIBLE_DEVICES=2,3 allows"
    done = gpulaunch(["--snapshot", "dgx-h100", "ls"])
    assert "choosing among" not in done.stdout
