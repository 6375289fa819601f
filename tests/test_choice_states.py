"""Choosing right in the states real machines are in (issue 11): MIG mode without instances, the
load of the whole set, nearly full GPUs, unknown processes, unhealthy GPUs, NVSwitch link counts.

States the snapshot reader may not carry yet (MIG mode, health, unknown processes) are tested on
model objects; what a user sees through the whole CLI is tested on snapshot files written here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_cli
from gpu_launch.choose import mig
from gpu_launch.choose.select import Constraints, check_explicit, choose_auto, choose_fit, eligibility
from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.hardware import snapshot
from gpu_launch.hardware.model import Device, Gpu, GpuProcess, Machine, MigDevice
from gpu_launch.base.units import parse_size

TOTAL = 81559


def gpu(i: int, *, used: int = 500, util: int = 0, users: tuple[str, ...] = (), numa: int | None = 0,
        name: str = "NVIDIA H100 80GB HBM3", **kw) -> Gpu:
    return Gpu(index=i, uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000", name=name, memory_total_mib=TOTAL,
               memory_used_mib=used, memory_free_mib=TOTAL - used, utilization_gpu=util, numa_node=numa,
               processes=tuple(GpuProcess(1000 + k, used - 400, u, "python") for k, u in enumerate(users)), **kw)


def machine(gpus: list[Gpu], link, **kw) -> Machine:
    """``link(i, j)`` gives the topo code between positions i < j."""
    m = len(gpus)
    links = tuple(tuple("X" if i == j else link(min(i, j), max(i, j)) for j in range(m)) for i in range(m))
    return Machine(tuple(gpus), links, source="test", **kw)


def auto(m: Machine, n: int, **kw) -> list[int]:
    return [d.gpu.index for d in choose_auto(m, n, Constraints(**kw)).devices]


def write_snapshot(path: Path, m: Machine) -> str:
    path.write_text(snapshot.dump(m))
    return str(path)


# --- 1. MIG mode ------------------------------------------------------------------------------

MIG0 = MigDevice(uuid="MIG-11111111-2222-3333-4444-555555555555", profile="3g.40gb", memory_total_mib=40192,
                 memory_used_mib=13, memory_free_mib=40179, gpu_instance_id=1, compute_instance_id=0)


def _four_with_one_in_mig_mode(migs: tuple[MigDevice, ...] = ()) -> Machine:
    gpus = [gpu(i) for i in range(4)]
    gpus[3] = replace(gpus[3], mig_mode="enabled", mig_devices=migs)
    return machine(gpus, lambda i, j: "NV12")


def test_a_gpu_in_mig_mode_without_instances_is_never_chosen_whole():
    m = _four_with_one_in_mig_mode()
    assert auto(m, 3) == [0, 1, 2]
    with pytest.raises(NotEnoughGpus) as exc:
        choose_auto(m, 4, Constraints())
    assert "GPU 3: in MIG mode" in exc.value.message
    reasons = {e.gpu.index: e.reason for e in eligibility(m, Constraints()).excluded}
    assert reasons[3].startswith("in MIG mode") and "no MIG devices" in reasons[3]


def test_gpus_on_a_gpu_in_mig_mode_without_instances_says_how_to_create_them():
    m = _four_with_one_in_mig_mode()
    with pytest.raises(UsageError) as exc:
        check_explicit((Device(m.gpus[3]),), m, Constraints())
    assert exc.value.message == "--gpus: GPU 3 is in MIG mode but has no MIG devices, so CUDA cannot run on it"
    assert "nvidia-smi mig -i 3 -cgi <profile> -C" in exc.value.hint and "root" in exc.value.hint


def test_gpus_on_a_gpu_in_mig_mode_names_its_mig_devices():
    m = _four_with_one_in_mig_mode((MIG0,))
    with pytest.raises(UsageError) as exc:
        check_explicit((Device(m.gpus[3]),), m, Constraints())
    assert f"{MIG0.uuid} (3g.40gb)" in exc.value.message
    assert f"--gpus {MIG0.uuid}" in exc.value.hint and "--mig" in exc.value.hint


def test_gpus_on_a_mig_gpu_through_the_cli_names_its_devices():
    done = run_cli("--snapshot", "mig-a100", "--gpus", "0", "--", "true")
    assert done.returncode == 2
    gpu0 = snapshot.resolve("mig-a100").gpus[0]
    assert all(m.uuid in done.stderr for m in gpu0.mig_devices), done.stderr
    assert done.stderr.count("\n") == 1  # one line, no traceback


def test_mig_tells_no_gpu_in_mig_mode_from_one_without_instances():
    with pytest.raises(NotEnoughGpus) as exc:
        mig.choose_mig(machine([gpu(i) for i in range(2)], lambda i, j: "NV12"), 1, Constraints())
    assert "no GPU here is in MIG mode" in exc.value.message
    with pytest.raises(NotEnoughGpus) as exc:
        mig.choose_mig(_four_with_one_in_mig_mode(), 1, Constraints())
    assert exc.value.message == "--mig: GPU 3 is in MIG mode but has no MIG devices to choose"
    assert "nvidia-smi mig -i 3 -cgi <profile> -C" in exc.value.hint
    # With an instance, --mig picks it.
    assert mig.choose_mig(_four_with_one_in_mig_mode((MIG0,)), 1, Constraints()).devices[0].mig == MIG0


# --- 2. availability of the whole set ----------------------------------------------------------

def _pairs_0_1_and_2_3() -> Machine:
    """The issue's machine: NVLink pairs 0-1 and 2-3; GPU 0 idle, GPUs 2 and 3 busy (GPU 1 idle)."""
    gpus = [gpu(0), gpu(1), gpu(2, used=60000, util=97, users=("alice",)), gpu(3, used=60000, util=95, users=("bob",))]
    return machine(gpus, lambda i, j: "NV12" if (i, j) in ((0, 1), (2, 3)) else "SYS")


def test_auto_takes_one_busy_gpu_not_two_when_an_idle_one_is_left(tmp_path):
    snap = write_snapshot(tmp_path / "pairs.json", _pairs_0_1_and_2_3())
    # Busy GPUs are only taken when the user says so (--max-util 100); then one, not two.
    ask = ("--snapshot", snap, "--exclude", "1", "--auto", "2", "--max-util", "100")
    done = run_cli(*ask, "--dry-run", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "CUDA_VISIBLE_DEVICES=0,2" in done.stdout  # {0, 2}: one other person's GPU, not two
    # The choice said so: GPU 2 is alice's; -q does not hide it (she computes there).
    said = "gpulaunch: warning: GPU 2 is busy by alice (97% utilisation, 21.1 GiB free)"
    assert said in done.stderr
    quiet = run_cli(*ask, "--dry-run", "-q", "--", "true")
    assert quiet.returncode == 0 and quiet.stderr == said + "\n"
    doc = json.loads(run_cli(*ask, "--explain", "--json").stdout)
    assert doc["set"]["gpus_by_availability"] == {"idle": 1, "partly_used": 0, "busy": 1, "full": 0}
    # Runner-ups tie the chosen set up to the models: {0, 3}, never the better-linked {2, 3}.
    assert [(s["gpus"], s["lost_on"]) for s in doc["next_best"]] == [([0, 3], "lower indices")]
    text = run_cli(*ask, "--explain").stdout
    assert "  availability: busy (non-idle GPUs: 1 busy); model: NVIDIA H100 80GB HBM3\n" in text
    assert "ranked by: availability > non-idle GPUs taken > GPU models > worst link" in text


def test_a_nearly_full_gpu_is_its_own_class_below_busy(tmp_path):
    # 8-GPU PCIe box: GPUs 0, 2, 3 idle; GPU 1 beside them has 4.9 GiB of 80 free (94 % used); the
    # other socket's GPUs are busy (60 % utilisation, 46 GiB free). Four GPUs: three idle ones and a
    # busy one across the socket link, not the nearly full one for a better link.
    gpus = [gpu(0), gpu(1, used=TOTAL - 5018, util=10, users=("carol",)), gpu(2), gpu(3)]
    gpus += [gpu(i, used=TOTAL - 47104, util=60, users=("dave",), numa=1) for i in range(4, 8)]
    m = machine(gpus, lambda i, j: "PIX" if i // 2 == j // 2 else "PXB" if i // 4 == j // 4 else "SYS")
    snap = write_snapshot(tmp_path / "pcie.json", m)
    done = run_cli("--snapshot", snap, "--auto", "4", "--max-util", "100", "--dry-run", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "CUDA_VISIBLE_DEVICES=0,2,3,4" in done.stdout
    assert "warning: GPU 4 is busy by dave" in done.stderr
    doc = json.loads(run_cli("--snapshot", snap, "--auto", "4", "--max-util", "100", "--explain", "--json").stdout)
    assert doc["less_available"] == [{"gpu": 1, "availability": "full"}]
    assert doc["thresholds"]["full_min_memory_used_percent"] == 90


def test_sets_compare_by_full_then_busy_then_partly_used_gpus():
    # Two idle GPUs, then: 2 partly used, 1 busy, 1 full. Every link equal.
    gpus = [gpu(0), gpu(1), gpu(2, used=8000, users=("a",)), gpu(3, used=8000, users=("b",)),
            gpu(4, util=80, users=("c",)), gpu(5, used=TOTAL - 100, users=("d",))]
    m = machine(gpus, lambda i, j: "NV12")
    assert auto(m, 3) == [0, 1, 2]
    assert auto(m, 4) == [0, 1, 2, 3]
    assert auto(m, 5) == [0, 1, 2, 3, 4]  # the busy one before the full one
    # Worst class busy either way, but {idle, idle, busy} beats {idle, busy, busy}... and partly used
    # GPUs are taken before a second busy one, however they are linked.
    gpus = [gpu(0), gpu(1, used=8000, users=("a",)), gpu(2, util=80, users=("c",)), gpu(3, util=90, users=("e",))]
    m = machine(gpus, lambda i, j: "NV18" if (i, j) == (2, 3) else "SYS")
    assert auto(m, 3) == [0, 1, 2]


def test_gpus_whose_processes_are_unknown_are_at_best_partly_used():
    gpus = [gpu(0, processes_known=False), gpu(1), gpu(2)]
    m = machine(gpus, lambda i, j: "NV12" if (i, j) == (0, 1) else "SYS")
    assert auto(m, 2) == [1, 2]  # not the better-linked pair with the unknown GPU
    selection = choose_auto(m, 3, Constraints())
    assert selection.warnings == ("GPU 0 is partly used (0% utilisation, 79.2 GiB free, processes unknown)",)
    reasons = {e.gpu.index: e.reason for e in eligibility(m, Constraints(idle=True)).excluded}
    assert reasons == {0: "processes unknown (NVML could not list them), so --idle cannot be checked"}


# --- 3. fewest pairs at the worst link ---------------------------------------------------------

def _dual_socket_l40s() -> Machine:
    """8 idle L40S on two sockets (PIX pairs, PXB quads, SYS across); GPUs 0 and 4 hold a little more
    driver memory, so free memory alone would pick 3+2 GPUs per socket around them."""
    gpus = [gpu(i, used=1500 if i in (0, 4) else 400, numa=i // 4, name="NVIDIA L40S") for i in range(8)]
    gpus = [replace(g, memory_total_mib=46068, memory_free_mib=46068 - g.memory_used_mib) for g in gpus]
    return machine(gpus, lambda i, j: "PIX" if i // 2 == j // 2 else "PXB" if i // 4 == j // 4 else "SYS")


def test_auto_5_on_a_dual_socket_pcie_box_takes_4_plus_1(tmp_path):
    snap = write_snapshot(tmp_path / "l40s.json", _dual_socket_l40s())
    done = run_cli("--snapshot", snap, "--auto", "5", "--dry-run", "--", "true")
    assert done.returncode == 0, done.stderr
    chosen = [int(i) for i in done.stdout.split("CUDA_VISIBLE_DEVICES=")[1].split()[0].split(",")]
    per_socket = sorted(sum(1 for i in chosen if i // 4 == s) for s in (0, 1))
    assert per_socket == [1, 4], chosen  # 4 cross-socket pairs, not 6
    doc = json.loads(run_cli("--snapshot", snap, "--auto", "5", "--explain", "--json").stdout)
    assert doc["set"]["worst_link"] == "SYS" and doc["set"]["pairs_at_worst_link"] == 4
    text = run_cli("--snapshot", snap, "--auto", "5", "--explain").stdout
    assert "(worst SYS on 4 pairs, 0 NVLinks inside)" in text
    assert "ranked by: availability > non-idle GPUs taken > GPU models > worst link > pairs at the worst link" in text


def test_fewer_pairs_at_the_worst_link_lose_only_to_a_better_link():
    # Still the worst link first: a set with one SYS pair loses to one with only PXB pairs.
    m = _dual_socket_l40s()
    assert [i // 4 for i in auto(m, 4)] in ([0] * 4, [1] * 4)
    assert sorted(sum(1 for i in auto(m, 6) if i // 4 == s) for s in (0, 1)) == [2, 4]  # 8 pairs, not 9


# --- 4. NVLinks inside on NVSwitch machines ------------------------------------------------------

def _hgx_a100(nvswitch: bool = True) -> Machine:
    """8 A100 on NVSwitches: every pair shows NV12, the same 12 links of each GPU."""
    gpus = [gpu(i, numa=i // 4, name="NVIDIA A100-SXM4-80GB") for i in range(8)]
    return machine(gpus, lambda i, j: "NV12", nvswitch=nvswitch)


def test_nvlinks_inside_count_each_gpus_own_links_on_nvswitch():
    from gpu_launch.choose import explain

    selection = choose_auto(_hgx_a100(), 8, Constraints(), runner_ups=3)
    doc = explain.as_json(selection, _hgx_a100())
    assert doc["set"]["nvlinks_inside"] == 96 and doc["set"]["nvswitch"] is True  # 8 GPUs × 12, not 28 × 12
    assert "96 NVLinks inside through NVSwitch" in explain.as_text(selection, _hgx_a100())
    # Direct links (no switch) keep the pairs' count.
    direct = explain.as_json(choose_auto(_hgx_a100(False), 8, Constraints()), _hgx_a100(False))
    assert direct["set"]["nvlinks_inside"] == 336 and direct["set"]["nvswitch"] is False


def test_on_nvswitch_a_degraded_gpu_is_left_out_by_its_own_links():
    # GPU 0 lost links: its pairs show NV6 (the fewer of the two ends), every other pair NV12.
    gpus = [gpu(i, name="NVIDIA A100-SXM4-80GB") for i in range(8)]
    m = machine(gpus, lambda i, j: "NV6" if i == 0 else "NV12", nvswitch=True)
    assert auto(m, 4) == [1, 2, 3, 4]
    assert auto(m, 7) == [1, 2, 3, 4, 5, 6, 7]


# --- 5. health ----------------------------------------------------------------------------------

def test_an_unhealthy_gpu_is_skipped_by_auto_and_fit_and_explained():
    from gpu_launch.choose import explain

    gpus = [gpu(i) for i in range(4)]
    gpus[1] = replace(gpus[1], health=("row remapping failed",))
    m = machine(gpus, lambda i, j: "NV12" if (i, j) in ((0, 1), (2, 3)) else "SYS")
    assert auto(m, 2) == [2, 3]
    assert auto(m, 3) == [0, 2, 3]
    assert [d.gpu.index for d in choose_fit(m, parse_size("100GiB"), Constraints()).devices] == [2, 3]
    with pytest.raises(NotEnoughGpus) as exc:
        choose_auto(m, 4, Constraints())
    assert "GPU 1: unhealthy (row remapping failed)" in exc.value.message
    selection = choose_auto(m, 2, Constraints(), runner_ups=3)
    assert explain.as_json(selection, m)["excluded"] == [{"gpu": 1, "reason": "unhealthy (row remapping failed)"}]
    assert "excluded:\n  GPU 1: unhealthy (row remapping failed)\n" in explain.as_text(selection, m)


def test_gpus_on_an_unhealthy_gpu_warns_and_obeys():
    gpus = [gpu(0), replace(gpu(1), health=("pages pending retirement", "2 volatile uncorrectable ECC errors"))]
    m = machine(gpus, lambda i, j: "NV12")
    selection = check_explicit((Device(m.gpus[1]),), m, Constraints())
    assert [d.gpu.index for d in selection.devices] == [1]
    assert selection.warnings == ("GPU 1: unhealthy (pages pending retirement; 2 volatile uncorrectable ECC errors)",)


# --- 6. --auto and --fit say when they put the job on someone's GPU ------------------------------

def test_fit_warns_about_each_non_idle_gpu_it_takes_and_quiet_does_not_hide_others_work():
    ask = ("--snapshot", "pcie-8x", "--fit", "300GiB", "--max-util", "100")
    done = run_cli(*ask, "--dry-run", "--", "true")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warnings == ["gpulaunch: warning: GPU 2 is busy by carol (60% utilisation, 27.6 GiB free)",
                        "gpulaunch: warning: GPU 6 is full by dave (100% utilisation, 2.6 GiB free)"]
    # The same words as --gpus on that GPU.
    explicit = run_cli("--snapshot", "pcie-8x", "--gpus", "2", "--dry-run", "--", "true")
    assert warnings[0] in explicit.stderr.splitlines()
    # -q: carol and dave compute there, so it is said all the same.
    quiet = run_cli(*ask, "--dry-run", "-q", "--", "true")
    assert quiet.returncode == 0 and quiet.stderr.splitlines() == warnings
    idle = run_cli("--snapshot", "pcie-8x", "--auto", "6", "--dry-run", "--", "true")  # the six idle GPUs
    assert idle.returncode == 0 and "warning" not in idle.stderr


def test_gpus_with_wait_does_not_wait_for_an_unhealthy_gpu_to_heal():
    from gpu_launch.choose import spec
    from gpu_launch.reservations import acquire

    gpus = [gpu(0), replace(gpu(1), health=("row remapping failed",))]
    m = machine(gpus, lambda i, j: "NV12")
    request = acquire.Request(gpus=spec.parse("1"), min_free=parse_size("10GiB"), strict=True)
    got = acquire.attempt(request, m, None)  # ready now: the constraint holds; health only warns
    assert [d.gpu.index for d in got.selection.devices] == [1]
    assert got.selection.warnings == ("GPU 1: unhealthy (row remapping failed)",)
    with pytest.raises(NotEnoughGpus, match="GPU 1: 79.2 GiB free < 100.0 GiB asked by --min-free"):
        acquire.attempt(replace(request, min_free=parse_size("100GiB")), m, None)


def test_not_enough_whole_gpus_does_not_hint_wait_when_no_wait_can_help(tmp_path) -> None:
    """GPUs in MIG mode or excluded stay so however long one waits: the hint says so instead of --wait."""
    from gpu_launch.choose.select import Constraints, choose_auto
    from gpu_launch.errors import NotEnoughGpus
    from gpu_launch.hardware.model import Gpu, Machine

    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="A100", memory_total_mib=40960, memory_used_mib=0,
                     memory_free_mib=40960, utilization_gpu=0, mig_mode="enabled" if i == 3 else "disabled")
                 for i in range(4))
    machine = Machine(gpus=gpus)
    with pytest.raises(NotEnoughGpus) as caught:
        choose_auto(machine, 4, Constraints())
    assert "no wait can help: only 3 of 4 GPUs can be given whole" in caught.value.hint
    assert "--wait" not in caught.value.hint and "--mig" not in caught.value.hint  # GPU 3 has no MIG devices
    busy = Machine(gpus=tuple(Gpu(index=i, uuid=f"GPU-{i}", name="A100", memory_total_mib=40960,
                                  memory_used_mib=30000, memory_free_mib=10960, utilization_gpu=90) for i in range(4)))
    with pytest.raises(NotEnoughGpus) as caught:
        choose_auto(busy, 4, Constraints(idle=True))
    assert "--wait" in caught.value.hint  # busy GPUs may free up: waiting can help
