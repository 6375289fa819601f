"""The Python API sized by a model: gpu_launch.plan(), reserve(model=...), use(model=...)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("gguf")

import gpu_launch  # noqa: E402
from tests.model_fixtures import llama_pair  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return llama_pair(tmp_path_factory.mktemp("api-models"))


def test_plan_of_a_model_path(models: dict[str, Path]) -> None:
    p = gpu_launch.plan(models["8b"], ctx=8192, snapshot="dgx-h100")
    assert p.placeholders()["gpu_layers"] == "33"
    assert [sh.gpu for sh in p.placement.per_gpu][0] in (2, 3, 4, 6, 7)
    assert p.sizing.kv.total == 32 * 8192 * 2 * 8 * 128 * 2


def test_plan_of_a_command(models: dict[str, Path]) -> None:
    p = gpu_launch.plan(command=["vllm", "serve", str(models["70b"]), "--max-model-len", "32768",
                                 "--tensor-parallel-size", "{tp}"], snapshot="workstation-4x")
    assert p.sizing.engine.name == "vllm" and p.placement.tp == 2 and p.placeholders()["tp"] == "2"


def test_plan_on_given_gpus(models: dict[str, Path]) -> None:
    p = gpu_launch.plan(models["70b"], ctx=8192, gpus=[5, 1], snapshot="pcie-8x")
    assert [sh.gpu for sh in p.placement.per_gpu] == [5, 1]


def test_plan_errors_are_raised_as_they_are(models: dict[str, Path]) -> None:
    with pytest.raises(gpu_launch.UsageError):
        gpu_launch.plan()
    with pytest.raises(gpu_launch.NotEnoughGpus) as info:
        gpu_launch.plan(models["70b"], ctx=131072, kv_type="f32", reserve="40GiB", snapshot="workstation-4x")
    assert "tokens" in info.value.message


def test_reserve_model_holds_the_fewest_gpus_that_hold_it(models: dict[str, Path]) -> None:
    with gpu_launch.reserve(model=models["70b"], ctx=32768, snapshot="workstation-4x", quiet=True) as r:
        assert len(r.devices) == 2 and r.held
        assert r.env["CUDA_VISIBLE_DEVICES"].count(",") == 1
    with pytest.raises(gpu_launch.UsageError):
        gpu_launch.reserve(model=models["70b"], fit="10GiB", snapshot="workstation-4x")


def test_use_model_sets_the_variables(models: dict[str, Path]) -> None:
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        devices = gpu_launch.use(model=str(models["8b"]), ctx=4096, snapshot="dgx-h100", quiet=True)
        assert len(devices) == 1
        assert os.environ["CUDA_VISIBLE_DEVICES"] == str(devices[0].index)
    finally:
        gpu_launch.release()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before
