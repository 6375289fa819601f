"""The weights as the engine holds them (fit/weights_dtype.py as_run) on small layouts: the bytes by type a
plan shows (`by type:` and JSON's weights_by_type) count the MTP layers too, a recurrent layer that is not
Mamba-1 is scaled whole, and the note's GiB are GiB (issue 37, seed 38 mut-c)."""

from __future__ import annotations

from dataclasses import replace

from gpu_launch.fit.weights_dtype import as_run

from test_training_memory_rules import llama8b

GiB = 1 << 30


def _f32(**hyper):  # noqa: ANN003, ANN202
    model = llama8b()
    w = replace(model.weights, layers=(4 * GiB,) * 4, token_embedding=GiB, output=GiB, other=0, nextn=2 * GiB,
                by_type={"F32": 20 * GiB})
    return replace(model, weights=w, hyper=replace(model.hyper, dtype_bytes=4, **hyper))


def test_a_float32_model_under_auto_is_held_in_bf16_its_mtp_layers_too():
    model, note = as_run(_f32(), "auto")
    assert model.weights.layers == (2 * GiB,) * 4 and model.weights.nextn == GiB
    assert model.weights.by_type == {"BF16": 9 * GiB + GiB}  # 9 GiB of the model and 1 GiB of MTP layers
    assert note.endswith(": 18.00 GiB in the files, 9.00 GiB on the GPUs")


def test_a_mamba2_layer_in_float32_is_halved_whole():
    hybrid = _f32(n_layers=4, kv_heads=(8, 0, 8, 0), ssm={"inner_size": 64, "state_size": 16}, state_kind="mamba2")
    model, _ = as_run(hybrid, "auto")
    assert model.weights.layers == (2 * GiB,) * 4  # no float32 A kept: that is Mamba-1's
