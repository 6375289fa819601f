"""DPO's step (``trl dpo``, TRL 1.16's DPOTrainer): two rows an example and the reference model's forward after the
policy's, in bytes. Arithmetic only: no torch.

* the rows: trl/trainer/dpo_trainer.py ``DataCollatorForPreference.torch_call`` stacks prompt + chosen and then
  prompt + rejected (``input_ids = prompt_chosen_ids + prompt_rejected_ids``), each cut to ``max_length``
  (DPOConfig's 1024) and right-padded to the longest: one forward of 2 × per_device_train_batch_size rows, so
  the activations and the fused LM head's tokens are those of twice the micro-batch (:func:`step_rows`);
* the loss: ``DPOTrainer._compute_loss`` scores the policy through TRL's fused LM head (``model(...,
  fused_lm_head=True)``, set up in ``__init__`` by ``add_fused_lm_head``: no logits, memory_fused.py), only the
  completions' positions labelled; every loss_type (sigmoid, ipo, hinge...) and beta then work on one log-prob a
  row, nothing that grows with tokens;
* the reference: ``_compute_loss`` then runs, under ``torch.no_grad()``, the frozen copy ``__init__`` loads with
  ``create_model_from_path`` in the policy's dtype (a full fine-tune, ``ref_model=None``, no
  ``precompute_ref_log_probs``), or the policy itself with its adapter disabled (``use_adapter``: PEFT, no copy).
  The policy's saved activations and its fused head's outputs are alive then; the reference's forward holds one
  layer's working tensors at a time and, at its end, its own fused head's tile (:func:`reference_forward`).
  With ``precompute_ref_log_probs`` the reference's log-probs come with the batch: no reference at the step.
  Under ZeRO-3 the reference runs under its own coordinator (trl/models/utils.py ``prepare_deepspeed``): what it
  holds gathered then is memory_zero3.reference's, added by memory.py.

Checked against PyTorch's count of TRL 1.16's own DPOTrainer steps (tests/training_oracle_dpo.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.base.records import replace
from gpu_launch.fit.training import memory_fused
from gpu_launch.fit.training.memory_activations import Saved
from gpu_launch.fit.training.setup import TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["step_rows", "reference_forward", "POLICY_OUTPUTS"]

#: The policy's fused-head outputs DPOTrainer asks for (``outputs = ("log_probs", "entropy", "mean_logits",
#: "is_top1")``), each scattered back to a (rows, positions) fp32 tensor (add_fused_lm_head: ``new_zeros(mask.shape)
#: .masked_scatter(mask, x)``), alive through the reference's forward: bytes a position.
POLICY_OUTPUTS = 4 * 4


def step_rows(setup: TrainingSetup) -> TrainingSetup:
    """The setup whose micro-batch is the rows one forward takes: chosen and rejected for DPO."""
    if setup.rows_per_example <= 1:
        return setup
    return replace(setup, micro_batch=setup.micro_batch * setup.rows_per_example, rows_per_example=1)


def reference_forward(model: ModelFacts, config: Mapping[str, Any], rows: TrainingSetup, act: Saved, *,
                      weights: int, states: int, e: int) -> dict[str, int]:
    """The moment of the reference's no-grad forward (``rows``: :func:`step_rows`'s setup): the weights and states,
    every activation the policy saved, its fused head's outputs, and the larger of

    * a layer's gated MLP (modeling_llama.py ``LlamaMLP.forward``, ``down_proj(act_fn(gate_proj(x)) *
      up_proj(x))``): the activation's, up's and the product's outputs and down_proj's, in the compute dtype
      ``e`` (3·I + h a token: PyTorch's count of the MLP alone under no_grad), beside three hidden states of the
      residual stream (the model's embedding output and the layer's input, both still held by
      ``LlamaModel.forward``'s variables, and the norm's output; the attention's sum has replaced the input on
      the first layer) and RoPE's cos and sin, one (1, sequence, head size) pair for all rows;
    * with eager attention (Gemma-2's soft-capping: modeling_gemma2.py ``eager_attention_forward``), a layer's
      attention: the scores a head and pair of positions at softmax (``softmax(..., dtype=torch.float32)``: the
      16-bit scores, their fp32 copy and the fp32 output; fp32 scores are not copied), q, k and v with k and v
      repeated to every head, beside the same hidden states and the masks the backbone made (one (rows, 1, s,
      s) tensor a kind of layer);
    * its fused head at the end: the backbone's output, its copy of the scored positions, the tile buffer and
      the per-token statistics (memory_fused.py).

    Measured through DPOTrainer: the reference forward's peak is a plain no-grad forward's, to the byte. Under
    autocast (fp32 weights, the Trainer's --bf16) the copy's parameters, which DPOTrainer never sets to
    requires_grad False, have their 16-bit casts cached to the end of the step's autocast region, as the
    policy's are (torch/csrc/autograd/autocast_mode.cpp ``cached_cast``: a leaf that requires grad): by its last
    layer every linear's; the adapter-disabled base of a PEFT model is frozen and is not cached."""
    h = model.hyper.hidden_size or model.hyper.n_heads * model.hyper.key_length
    tokens = rows.micro_batch * rows.seq_len
    inter = int(config.get("intermediate_size") or config.get("moe_intermediate_size") or 4 * h)
    stream = 4 if rows.precision in ("fp32", "amp_bf16", "amp_fp16") else 2  # the residual stream's element
    d = model.hyper.key_length or h // max(1, model.hyper.n_heads)
    mlp = (e * (3 * inter + h) + 3 * stream * h) * tokens + (2 * stream * d + 8) * rows.seq_len
    n = memory_fused.scored_tokens(rows)
    tile = min(n, memory_fused.TOKEN_TILE) * memory_fused.VOCAB_TILE * (4 if rows.precision == "fp32" else 2)
    head = stream * h * (tokens + n) + tile + 3 * 4 * n
    outputs = POLICY_OUTPUTS * rows.micro_batch * max(1, rows.seq_len - 1)
    if rows.loss != "fused":
        # trl before 1.16 (forms_trl.DPO_FUSED_SINCE) made the logits: the reference's and their shifted copy in
        # the compute dtype, beside the policy's fp32 log-softmax that autograd keeps (not measured: 1.16 is)
        vocab = model.hyper.vocab_size or 0
        head = stream * h * tokens + 2 * e * tokens * vocab
        outputs = 4 * tokens * vocab
    attn = 0
    if act.masks:  # eager attention (memory_activations.saved: its masks)
        hy = model.hyper
        q, kvd = hy.n_heads * d, (hy.kv_heads[0] if hy.kv_heads else hy.n_heads) * d
        masks = act.masks * rows.micro_batch * rows.seq_len ** 2
        attn = rows.micro_batch * hy.n_heads * rows.seq_len ** 2 * (e + 4 + (4 if e != 4 else 0)) + masks \
            + (3 * stream * h + e * (3 * q + 2 * kvd)) * tokens + (2 * stream * d + 8) * rows.seq_len
        mlp += masks
    layer = max(mlp, attn)
    if rows.method == "full" and rows.precision in ("amp_bf16", "amp_fp16"):
        layer += act.fixed - act.fixed_outside  # the layers' weight casts (memory_activations.saved's ``fixed``)
    return {"weights": weights, "gradients": 0, "optimizer": states,
            "activations": act.total(rows, model.hyper.n_layers), "loss": 0, "other": outputs + max(layer, head)}
