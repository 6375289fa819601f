"""The --gpus grammar: indices, ranges, all, UUIDs and prefixes, order kept, clear errors."""

from __future__ import annotations

import pytest

from gpu_launch.hardware import snapshot

from gpu_launch.choose import spec
from gpu_launch.errors import UsageError


@pytest.fixture(scope="module")
def dgx():
    return snapshot.resolve("dgx-h100")


def indices(text, machine):
    return [d.gpu.index for d in spec.resolve(spec.parse(text), machine)]


@pytest.mark.parametrize("text, expected", [
    ("4-7", [4, 5, 6, 7]),
    ("0,2,5", [0, 2, 5]),
    ("4-7,1", [4, 5, 6, 7, 1]),
    ("3,1", [3, 1]),
    ("all", list(range(8))),
    ("ALL", list(range(8))),
    (" 1 , 2 ", [1, 2]),
    ("5", [5]),
    ("6-6", [6]),
])
def test_indices_in_the_order_written(dgx, text, expected):
    assert indices(text, dgx) == expected


def test_full_uuid_and_unambiguous_prefix(dgx):
    gpu = dgx.gpus[6]
    assert indices(gpu.uuid, dgx) == [6]
    assert indices(gpu.uuid[:12], dgx) == [6]
    assert indices(f"{gpu.uuid[:12]},0", dgx) == [6, 0]
    assert indices(gpu.uuid.lower().replace("gpu-", "gpu-"), dgx) == [6]


@pytest.mark.parametrize("text, fragment", [
    ("", "empty GPU list"),
    ("   ", "empty GPU list"),
    ("1,,2", "empty item"),
    ("7-4", "runs backwards"),
    ("-1", "not a GPU index"),
    ("abc", "not a GPU index, range or UUID"),
    ("0,all", "cannot be combined"),
    ("99999999", "not a plausible GPU index"),
])
def test_syntax_errors(text, fragment):
    with pytest.raises(UsageError) as info:
        spec.parse(text)
    assert fragment in info.value.message


@pytest.mark.parametrize("text, fragment", [
    ("9", "there is no GPU 9; this machine has GPU 0-7"),
    ("6-9", "there is no GPU 8"),
    ("0,0", "GPU 0 is named twice"),
    ("0-2,1", "GPU 1 is named twice"),
    ("GPU-", "ambiguous"),
    ("GPU-zzzz", "no GPU has a UUID starting with"),
])
def test_resolution_errors(dgx, text, fragment):
    with pytest.raises(UsageError) as info:
        spec.resolve(spec.parse(text), dgx)
    assert fragment in info.value.message


def test_format_round_trips():
    for text in ["0", "4-7", "3,1,4-5", "all", "GPU-abc,2"]:
        items = spec.parse(text)
        assert spec.parse(spec.format_items(items)) == items


def test_mig_uuid_resolves_to_the_mig_device():
    machine = snapshot.resolve("mig-a100")
    mig = machine.gpus[0].mig_devices[1]
    (device,) = spec.resolve(spec.parse(mig.uuid), machine)
    assert device.mig == mig and device.gpu.index == 0 and device.uuid == mig.uuid
