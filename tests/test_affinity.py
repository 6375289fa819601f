"""--bind: the command runs on the CPUs local to its GPUs, within the CPUs it may use."""

from __future__ import annotations

import os

import pytest

from childproc import example, gpulaunch, launch_report, write
from gpu_launch.run import affinity
from gpu_launch.hardware import snapshot
from gpu_launch.hardware.model import Device

ALLOWED = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs at least 2 usable CPUs to tell a binding apart")


def _machine(tmp_path, affinities: list[str | None], nodes: list[int | None]) -> str:
    """A 2-GPU workstation whose GPUs' local CPUs are CPUs of this machine."""
    doc = example("workstation-4x")
    gpus = [dict(doc["gpus"][i], cpu_affinity=affinities[i], numa_node=nodes[i]) for i in range(2)]
    links = [row[:2] for row in doc["links"][:2]]
    return write(tmp_path, {**doc, "gpus": gpus, "links": links})


@pytest.fixture
def two_nodes(tmp_path) -> str:
    """GPU 0 local to the first usable CPU (NUMA node 0), GPU 1 to the second (node 1)."""
    return _machine(tmp_path, [str(ALLOWED[0]), str(ALLOWED[-1])], [0, 1])


@needs_two
def test_auto_binds_one_gpu_to_its_cpus(two_nodes):
    child, err = launch_report(["--snapshot", two_nodes, "--gpus", "0"])
    assert child["cpus"] == [ALLOWED[0]]
    assert f"gpulaunch: bound to CPUs {ALLOWED[0]} (NUMA node 0, local to GPU 0)" in err
    child, _ = launch_report(["--snapshot", two_nodes, "--gpus", "1"])
    assert child["cpus"] == [ALLOWED[-1]]


@needs_two
def test_auto_does_not_bind_across_numa_nodes_but_on_does(two_nodes):
    child, err = launch_report(["--snapshot", two_nodes, "--gpus", "0,1"])
    assert child["cpus"] == ALLOWED and "bound" not in err
    child, err = launch_report(["--snapshot", two_nodes, "--gpus", "0,1", "--bind", "on"])
    assert child["cpus"] == sorted({ALLOWED[0], ALLOWED[-1]}) and "bound to CPUs" in err


@needs_two
def test_bind_off_leaves_the_affinity_alone(two_nodes):
    child, err = launch_report(["--snapshot", two_nodes, "--gpus", "0", "--bind", "off"])
    assert child["cpus"] == ALLOWED and "bound" not in err


@needs_two
def test_quiet_binds_silently(two_nodes):
    child, err = launch_report(["--snapshot", two_nodes, "--gpus", "0", "-q"])
    assert child["cpus"] == [ALLOWED[0]] and err == ""


def test_cpus_outside_the_allowed_set_skip_binding_with_a_warning(tmp_path):
    far = f"{max(ALLOWED) + 1000}-{max(ALLOWED) + 1003}"
    path = _machine(tmp_path, [far, far], [0, 0])
    child, err = launch_report(["--snapshot", path, "--gpus", "0"])
    assert child["cpus"] == ALLOWED  # no EINVAL crash, no change
    assert "warning: not binding to CPUs: the CPUs local to GPU 0" in err and "are outside the CPUs" in err


def test_bad_bind_mode_and_bind_on_env_are_usage_errors():
    done = gpulaunch(["--snapshot", "pcie-8x", "--bind", "sometimes", "--", "true"])
    assert done.returncode == 2 and "--bind: 'sometimes' is not one of auto, on, off" in done.stderr
    done = gpulaunch(["--snapshot", "pcie-8x", "env", "--bind", "on"])
    assert done.returncode == 2 and "--bind does not apply to `env`" in done.stderr


# --- the decision (pure) ---------------------------------------------------------------------------

PCIE = snapshot.resolve("pcie-8x")  # GPUs 0-3: node 0, CPUs 0-31,64-95; GPUs 4-7: node 1, CPUs 32-63,96-127


def _devices(*indices: int) -> tuple[Device, ...]:
    return tuple(Device(PCIE.gpus[i]) for i in indices)


def test_plan_auto_same_node_intersects_with_the_allowed_cpus():
    binding = affinity.plan(_devices(4, 5), "auto", range(0, 128, 2))
    assert binding.cpus == frozenset(range(32, 64, 2)) | frozenset(range(96, 128, 2))
    assert binding.message == "bound to CPUs " + ",".join(map(str, sorted(binding.cpus))) + \
        " (NUMA node 1, local to GPU 4, GPU 5)"


def test_plan_auto_across_nodes_and_off_do_nothing():
    assert affinity.plan(_devices(3, 4), "auto", range(128)).cpus is None
    assert affinity.plan(_devices(3), "off", range(128)).cpus is None


def test_plan_on_across_nodes_takes_the_union():
    assert affinity.plan(_devices(3, 4), "on", range(128)).cpus == frozenset(range(128))


def test_plan_empty_intersection_warns_instead_of_failing():
    binding = affinity.plan(_devices(4), "auto", {0, 1})
    assert binding.cpus is None and binding.warning and "32-63,96-127" in (binding.message or "")


def test_apply_reports_a_failure_instead_of_raising():
    assert affinity.apply(affinity.Binding(frozenset({10**6}))) is not None
    assert affinity.apply(affinity.Binding(None)) is None
