"""Snapshot files: examples load, round-trip, and bad files name the field that is wrong."""

from __future__ import annotations

import json

import pytest

from gpu_launch.hardware import snapshot
from gpu_launch.errors import ExitCode, SnapshotError


@pytest.mark.parametrize("name", snapshot.example_names())
def test_examples_load_and_round_trip(name):
    machine = snapshot.resolve(name)
    assert machine.gpus, name
    again = snapshot.loads(snapshot.dump(machine), source=name)
    assert again == machine
    assert json.loads(snapshot.dump(machine))["schema"] == 1


def test_example_names_cover_the_promised_shapes():
    assert {"dgx-h100", "pcie-8x", "workstation-4x", "dgx1-v100"} <= set(snapshot.example_names())


def _doc(**changes):
    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    for path, value in changes.items():
        target = doc
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        last = keys[-1]
        if value is KeyError:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return json.dumps(doc)


@pytest.mark.parametrize("text, fragment", [
    ("", "file is empty"),
    ("{not json", "not valid JSON (line 1"),
    ("[]", "top level: expected an object"),
    ('{"gpus": []}', "schema: missing"),
    ('{"schema": 2, "gpus": []}', "version 2 is not supported"),
    ('{"schema": 1}', "gpus: expected a list, got null"),
    (_doc(gpus__1__index=0), "gpus[1].index: duplicate index 0"),
    (_doc(gpus__2__uuid="GPU-1"), None),
    (_doc(gpus__0__memory_used_mib=-5), "gpus[0].memory_used_mib: -5 is below 0"),
    (_doc(gpus__0__memory_used_mib=10**7), "exceeds memory_total_mib"),
    (_doc(gpus__0__memory_total_mib="big"), "gpus[0].memory_total_mib: expected an integer, got a string"),
    (_doc(gpus__0__uuid=KeyError), "gpus[0].uuid: missing (required)"),
    (_doc(gpus__0__uuid="abc"), "does not start with 'GPU-'"),
    (_doc(gpus__0__utilization_gpu=150), "utilization_gpu: 150 is above 100"),
    (_doc(gpus__0__cpu_affinity="zero"), "is not a CPU list"),
    (_doc(links=[["X"]]), "links: expected 4x4 matrix"),
    (_doc(links__0=["X", "NV4"]), "links[0]: expected 4 entries"),
    (_doc(links__0__1="FAST"), "is not a topology code"),
    (_doc(links__0__1="X"), "'X' belongs on the diagonal"),
    (_doc(links__0__1="SYS"), "differs from links[0][1]"),
    (_doc(gpus__0__mig_mode="on"), "gpus[0].mig_mode: 'on' is not one of enabled, disabled, unknown"),
    (_doc(gpus__0__mig_mode="unknown"), None),
    (_doc(gpus__0__processes=None), None),  # NVML could not list them
    (_doc(gpus__0__processes="none"), "gpus[0].processes: expected a list or null, got a string"),
    (_doc(gpus__0__health="ok"), "gpus[0].health: expected a list of problems"),
    (_doc(gpus__0__health=[""]), "gpus[0].health: expected a list of problems"),
    (_doc(gpus__0__health=["row remapping failed"]), None),
    (_doc(gpus__0__memory_reserved_mib=10**7), "gpus[0].memory_reserved_mib: 10000000 exceeds memory_total_mib"),
    (_doc(nvswitch="yes"), "nvswitch: expected true or false, got a string"),
])
def test_bad_files_name_the_field(text, fragment):
    if fragment is None:  # a valid change: must load
        snapshot.loads(text)
        return
    with pytest.raises(SnapshotError) as info:
        snapshot.loads(text, source="x.json")
    assert fragment in info.value.message
    assert info.value.message.startswith("snapshot x.json: ")
    assert info.value.exit_code == ExitCode.BAD_FILE


def test_duplicate_uuid_is_refused():
    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    doc["gpus"][1]["uuid"] = doc["gpus"][0]["uuid"]
    with pytest.raises(SnapshotError, match=r"gpus\[1\].uuid: duplicate uuid"):
        snapshot.loads(json.dumps(doc))


def test_unknown_keys_are_ignored_and_optional_keys_may_be_absent():
    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    doc["future_field"] = {"x": 1}
    doc["gpus"][0]["fan_speed"] = 40
    for key in ("temperature_c", "utilization_gpu", "numa_node", "cpu_affinity", "processes", "compute_capability"):
        del doc["gpus"][1][key]
    del doc["links"]
    machine = snapshot.loads(json.dumps(doc))
    assert machine.links is None and machine.gpus[1].temperature_c is None


def test_unavailable_gpu_needs_no_memory():
    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    gpu = doc["gpus"][3]
    for key in ("memory_total_mib", "memory_used_mib", "memory_free_mib"):
        gpu[key] = None
    gpu["available"] = False
    gpu["error"] = "GPU is lost"
    machine = snapshot.loads(json.dumps(doc))
    assert machine.gpus[3].available is False and machine.gpus[3].error == "GPU is lost"


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(SnapshotError, match="no such file"):
        snapshot.resolve(str(tmp_path / "nope.json"))
    with pytest.raises(SnapshotError) as info:
        snapshot.resolve("dgx-h200")
    assert "not an example name" in info.value.message and "dgx-h100" in info.value.hint
    with pytest.raises(SnapshotError, match="is a directory"):
        snapshot.resolve(str(tmp_path) + "/")


def test_mig_mode_disabled_with_mig_devices_is_refused():
    doc = snapshot.to_dict(snapshot.resolve("mig-a100"))
    doc["gpus"][0]["mig_mode"] = "disabled"
    with pytest.raises(SnapshotError, match=r"gpus\[0\].mig_mode: 'disabled', but the GPU lists MIG devices"):
        snapshot.loads(json.dumps(doc))
