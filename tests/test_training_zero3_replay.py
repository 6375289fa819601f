"""memory_zero3's replay of DeepSpeed's parameter coordinator against counts DeepSpeed itself made (issue 34).

The numbers below are rank 0's gathered elements (the persistent parameters left out) as DeepSpeed 0.19.8's own
coordinator counted them at its fetches and releases in a real ZeRO-3 step over 2 gloo ranks on CPU
(tests/training_oracle_deepspeed.py ``_coordinator_events``/``_windows``): early in the backward, in the first
layer's backward (late), and at the final norm's backward. Those of the cases tests/test_training_deepspeed.py runs
are checked there against a fresh run every time (``test_zero3_gathered_is_deepspeeds_coordinator_replayed``
asserts that its measurement is this table's row); the others were measured once, on 2026-12-02, with the same
oracle (a script calling ``measure_zero`` on the ZeroCase named in each row). Here the replay runs alone, no torch,
no DeepSpeed: about a millisecond a case, so the rule's every branch is held to DeepSpeed's count in the quick run
(and mutation testing can reach it).
"""

from __future__ import annotations

import pytest

from gpu_launch.fit.training import memory_sharding, memory_zero3

#: the oracle's models (tests/training_oracle.py FAMILIES; llama_wide and llama_deep: training_oracle_sharded.py and
#: training_oracle_deepspeed.py): hidden size, intermediate, heads, KV heads, head dim, vocabulary, layers, tied
MODELS = {
    "llama": (64, 176, 4, 2, 16, 512, 2, False),
    "qwen3": (64, 160, 4, 2, 32, 512, 2, True),
    "llama_wide": (256, 704, 4, 2, 64, 2048, 2, False),
    "llama_deep": (256, 704, 4, 2, 64, 2048, 6, False),
}

#: (model, gradient checkpointing, the DeepSpeed JSON's ZeRO keys beside the Trainer's "auto" ones) ->
#: DeepSpeed's (early, late, at the final norm); ``live``: checked against a fresh DeepSpeed run in
#: test_training_deepspeed.py
COORDINATOR = {
    "llama-bf16-full-gc0-plain-1x128-zero3x2-bf16": ("llama", False, (), (157696, 78848, 124928)),
    "qwen3-bf16-full-gc1-plain-1x128-zero3x2-bf16": ("qwen3", True, (), (143360, 88064, 143360)),
    "qwen3-bf16-full-gc0-plain-1x128-zero3x2-bf16": ("qwen3", False, (), (143360, 88064, 143360)),
    "llama_wide-bf16-full-gc0-plain-1x32-zero3x2-bf16-max_reuse_distance=0": (
        "llama_wide", False, (("stage3_max_reuse_distance", 0),), (2523136, 1261568, 1998848)),
    "llama_wide-bf16-full-gc1-plain-1x32-zero3x2-bf16-max_reuse_distance=200000": (
        "llama_wide", True, (("stage3_max_reuse_distance", 200_000),), (2523136, 1261568, 1998848)),
    "llama_deep-bf16-full-gc1-plain-1x16-zero3x2-bf16-max_live_parameters=2000000-max_reuse_distance=1000000": (
        "llama_deep", True, (("stage3_max_live_parameters", 2_000_000), ("stage3_max_reuse_distance", 1_000_000)),
        (2179072, 1261568, 1785856)),
    "llama_deep-bf16-full-gc0-plain-1x16-zero3x2-bf16-max_live_parameters=2000000-max_reuse_distance=1000000": (
        "llama_deep", False, (("stage3_max_live_parameters", 2_000_000), ("stage3_max_reuse_distance", 1_000_000)),
        (2179072, 1261568, 2015232)),
    "llama_deep-bf16-full-gc0-plain-1x16-zero3x2-bf16": ("llama_deep", False, (), (5472256, 1261568, 4947968)),
    "llama_deep-bf16-full-gc1-plain-1x16-zero3x2-bf16": ("llama_deep", True, (), (5472256, 1261568, 4947968)),
    "llama_deep-bf16-full-gc0-plain-1x16-zero3x2-bf16-prefetch_bucket_size=100000": (
        "llama_deep", False, (("stage3_prefetch_bucket_size", 100_000),), (5472256, 1261568, 4947968)),
    "llama_deep-bf16-full-gc0-plain-1x16-zero3x2-bf16-prefetch_bucket_size=0": (
        "llama_deep", False, (("stage3_prefetch_bucket_size", 0),), (5472256, 1261568, 4947968)),
    "llama_deep-bf16-full-gc0-plain-1x16-zero3x2-bf16-max_live_parameters=700000-max_reuse_distance=0": (
        "llama_deep", False, (("stage3_max_live_parameters", 700_000), ("stage3_max_reuse_distance", 0)),
        (737280, 1081344, 540672)),
    "llama_deep-bf16-full-gc0-plain-1x16-zero3x2-bf16-param_persistence_threshold=0": (
        "llama_deep", False, (("stage3_param_persistence_threshold", 0),), (5475584, 1262080, 4951296)),
}


def replay(model: str, checkpointing: bool, zero: tuple[tuple[str, object], ...]) -> memory_zero3.Gathered:
    """The replay as the plan asks it for the oracle's JSON (tests/training_oracle_deepspeed.py ZeroCase.ds_config:
    the prefetch bucket and the persistence threshold "auto", as the Trainer fills them)."""
    h, inter, heads, kv, hd, vocab, layers, tied = MODELS[model]
    written = (("stage3_prefetch_bucket_size", "auto"), ("stage3_param_persistence_threshold", "auto"), *zero)
    size = {k: memory_sharding.zero_bucket(written, k, h) for k in memory_sharding.ZERO_DEFAULTS}
    block = (("q_proj", h * heads * hd), ("k_proj", h * kv * hd), ("v_proj", h * kv * hd), ("o_proj", heads * hd * h),
             ("gate_proj", h * inter), ("up_proj", h * inter), ("down_proj", inter * h))
    return memory_zero3.gathered(
        block=block, layers=layers, h=h, head_dim=hd, vocab=vocab, tied=tied, checkpointing=checkpointing,
        qk_norm=model == "qwen3", prefetch=size["stage3_prefetch_bucket_size"],
        max_live=size["stage3_max_live_parameters"], reuse=size["stage3_max_reuse_distance"],
        persist=size["stage3_param_persistence_threshold"])


@pytest.mark.parametrize("name", list(COORDINATOR))
def test_the_replay_gathers_what_deepspeeds_coordinator_gathered(name: str) -> None:
    model, checkpointing, zero, theirs = COORDINATOR[name]
    got = replay(model, checkpointing, zero)
    assert (got.early - got.persistent, got.late - got.persistent, got.at_norm - got.persistent) == theirs


def test_the_persistent_parameters_are_the_norms_under_the_threshold() -> None:
    """Whole all step: every norm (2 a layer, the final one; Qwen3's q_norm and k_norm too) at "auto"'s 10·h; none
    at a threshold of 0, where the norms are gathered and released as the layers are (the row above: 3,328 more
    early than at "auto", the 13 norms of 256)."""
    assert replay("llama", False, ()).persistent == (2 * 2 + 1) * 64
    assert replay("qwen3", False, ()).persistent == (2 * 2 + 1) * 64 + 2 * 2 * 32
    assert replay("llama_deep", False, (("stage3_param_persistence_threshold", 0),)).persistent == 0


#: a full fine-tune's reference model under DPO (trl/models/utils.py prepare_deepspeed: its own engine, its config
#: copied before the Trainer fills "auto", so DeepSpeed's defaults there): the most its coordinator held gathered in
#: its no-grad forward and its persistent elements, the persistent ones included, as DeepSpeed counted them on rank 0
#: (tests/training_oracle_dpo_zero.py, 2026-12-02; the first two rows checked against a fresh run in
#: tests/test_training_dpo_zero.py). The tiny llama is whole for good (every tensor under 1e5 elements); the wider one
#: gathers every parameter at its first fetch (the 5e7 prefetch) and keeps the head (the fused head's weight, the
#: root's external parameter) to the end.
REFERENCE = {
    "llama": ("llama", (), (158016, 158016)),
    "llama_wide": ("llama_wide", (), (2524416, 394496)),
    "llama_wide-prefetch=200000-persistence=1000": (
        "llama_wide", (("stage3_prefetch_bucket_size", 200_000), ("stage3_param_persistence_threshold", 1000)),
        (2000128, 1280)),
    "qwen3": ("qwen3", (), (143808, 143808)),
}


def reference_replay(model: str, zero: tuple[tuple[str, object], ...]) -> tuple[int, int]:
    """memory_sharding.zero3's reference as the plan asks it for the oracle's JSON ("auto" where the Trainer fills)."""
    h, inter, heads, kv, hd, vocab, layers, tied = MODELS[model]
    written = (("reduce_bucket_size", "auto"), ("stage3_prefetch_bucket_size", "auto"),
               ("stage3_param_persistence_threshold", "auto"), *zero)
    block = (("q_proj", h * heads * hd), ("k_proj", h * kv * hd), ("v_proj", h * kv * hd), ("o_proj", heads * hd * h),
             ("gate_proj", h * inter), ("up_proj", h * inter), ("down_proj", inter * h))
    ref = {k: memory_sharding.ZERO_DEFAULTS[k] if dict(written).get(k) == "auto"
           else memory_sharding.zero_bucket(written, k, h) for k in memory_sharding.ZERO_DEFAULTS}
    counted, _, persistent = memory_zero3.reference(
        block=block, layers=layers, h=h, head_dim=hd, vocab=vocab, tied=tied, qk_norm=model == "qwen3",
        prefetch=ref["stage3_prefetch_bucket_size"], max_live=ref["stage3_max_live_parameters"],
        reuse=ref["stage3_max_reuse_distance"], persist=ref["stage3_param_persistence_threshold"])
    return counted, persistent


def test_the_reference_runs_with_deepspeeds_defaults_where_the_json_says_auto() -> None:
    """The reference's engine takes the config before the Trainer fills "auto" (memory_sharding.zero3): the wider
    model's 65,536-element q_proj is persistent at DeepSpeed's 1e5, not at the Trainer's 10·h (2,560); and the
    plan holds, beside the coordinator's count, the flat buffer of its one 5e7 prefetch (1,605,632 elements)."""
    h, inter, heads, kv, hd, vocab, layers, tied = MODELS["llama_wide"]
    block = (("q_proj", h * heads * hd), ("k_proj", h * kv * hd), ("v_proj", h * kv * hd), ("o_proj", heads * hd * h),
             ("gate_proj", h * inter), ("up_proj", h * inter), ("down_proj", inter * h))
    z = memory_sharding.zero3(divisor=2, e=2, trainable=0, block=block, layers=layers, head=vocab * h, tied=tied, h=h,
                              head_dim=hd, qk_norm=False, checkpointing=False,
                              written=(("stage3_prefetch_bucket_size", "auto"),
                                       ("stage3_param_persistence_threshold", "auto")))
    assert (z.ref_gathered, z.ref_persistent) == (2 * (2524416 + 1605632), 2 * 394496)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_the_reference_gathers_what_its_own_coordinator_gathered(name: str) -> None:
    model, zero, theirs = REFERENCE[name]
    assert reference_replay(model, zero) == theirs
