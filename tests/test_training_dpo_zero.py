"""``trl dpo`` (a full fine-tune) under DeepSpeed ZeRO-3: the reference model as TRL 1.16's ``prepare_deepspeed``
wraps it, sized as rank 0 of the step holds it (issue 34).

Rank 0 of an emulated DPOTrainer step over 2 gloo ranks on CPU (tests/training_oracle_dpo_zero.py: TRL's own
``prepare_deepspeed`` and ``add_fused_lm_head``, the policy's forward on 2 × micro-batch rows, the reference's
no-grad forward, the DPO loss, backward, step; MemTracker over every tensor alive), against gpulaunch's plan for
``trl dpo ... --deepspeed ds.json``. The reference's engine takes its config before the Trainer fills "auto": it
runs with DeepSpeed's defaults (prefetch 5e7, persistence 1e5), gathers for good every tensor under 1e5 elements
and, on the wider model, every parameter at its forward's first fetch. Before the plan counted that (the reference
divided like the weights, nothing gathered), llama_wide's step was 0.854 of PyTorch's count (its reference forward
0.775), its optimizer step 0.977, the tiny llama's 0.882 and 0.866.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the oracle runs real PyTorch steps: pip install torch==2.13.0")
pytest.importorskip("trl", reason="TRL's own prepare_deepspeed and fused head: pip install -e '.[test,oracle]'")
pytest.importorskip("deepspeed", reason="DeepSpeed's own ZeRO step: pip install deepspeed==0.19.8 (after torch==2.13.0)")

from training_oracle import Case, write_model  # noqa: E402
from training_oracle_deepspeed import ZeroCase  # noqa: E402
from training_oracle_dpo_zero import DpoZeroCase, compare_dpo_zero, measure_dpo_zero  # noqa: E402

SMALL_PREFETCH = (("stage3_prefetch_bucket_size", 200_000), ("stage3_param_persistence_threshold", 1000))

#: (case, the step's peak within the issue's bounds). Known gap, allowed in bytes: at the reference forward's first
#: fetches a second copy of its persistent parameters (all but the root's, the fused head's weight) is allocated and
#: kept to the final norm's fetch (the tiny llama: 250,496 bytes; llama_wide: 788,992), where in DeepSpeed is not
#: found yet. The small prefetch is 1.071 over: the plan adds the most gathered, with every batch's flat buffer, at
#: the forward's start, to a layer's working tensors, later.
CASES = [
    (DpoZeroCase(ZeroCase(Case("llama", seq_len=64))), True),
    (DpoZeroCase(ZeroCase(Case("llama_wide", seq_len=32))), True),
    (DpoZeroCase(ZeroCase(Case("llama_wide", seq_len=32), zero=SMALL_PREFETCH)), False),
]


@pytest.fixture(scope="module")
def measured():
    cases = [c for c, _ in CASES]
    return dict(zip(cases, measure_dpo_zero(cases)))


@pytest.mark.parametrize("dc,bounded", [pytest.param(c, b, id=c.name) for c, b in CASES])
def test_dpo_zero3_reference_is_pytorchs_count(dc, bounded, measured, tmp_path, request):
    r = compare_dpo_zero(dc, write_model(dc.zc.case, tmp_path), measured[dc])
    # the reference's own coordinator: the most it gathered in its forward (memory_zero3.reference), as the quick
    # table says (tests/test_training_zero3_replay.py REFERENCE)
    from test_training_zero3_replay import REFERENCE

    key = {"llama": "llama", "llama_wide": "llama_wide"}.get(dc.zc.case.family)
    if dc.zc.zero == SMALL_PREFETCH:
        key = "llama_wide-prefetch=200000-persistence=1000"
    assert r["settings"]["ref_max"] == REFERENCE[key][2][0], r["settings"]
    assert r["settings"]["ref_persistent"] == REFERENCE[key][2][1], r["settings"]
    assert r["settings"]["ref_prefetch"] == 50_000_000 or dc.zc.zero == SMALL_PREFETCH, r["settings"]
    # the optimizer step: the reference's partition and its persistent parameters, whole, beside the policy's
    ours, torch_count = r["optimizer step"]
    assert 0.99 * torch_count <= ours <= 1.03 * torch_count, (ours / torch_count, r)
    from training_oracle import FAMILIES

    fam = FAMILIES[dc.zc.case.family]
    head = fam["vocab_size"] * fam["hidden_size"]
    copy = 2 * (r["settings"]["ref_persistent"] - (head if head <= 100_000 else 0))  # the known gap, bytes
    ours, torch_count = r["reference forward"]
    if not bounded:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"known gap: {ours / torch_count:.3f}"))
    # the reference forward's moment (the measured step's peak), the known copy added
    assert r["peak_at"][1] == "reference forward", r
    assert 0.99 * torch_count <= ours + copy <= 1.03 * torch_count, ((ours + copy) / torch_count, r)
    # the step's peak: never more than 1 % under but for the copy, within 3 % over
    ours, torch_count = r["peak"]
    assert 0.99 * torch_count <= ours + copy and ours <= 1.03 * torch_count, (ours / torch_count, r)
