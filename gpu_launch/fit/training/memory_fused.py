"""TRL's fused LM head (trl >= 1.15): what SFTTrainer's loss keeps and allocates on CUDA, in bytes. Arithmetic
only: no torch.

TRL 1.16's SFTTrainer computes every loss through it (trl/trainer/sft_trainer.py ``SFTTrainer.__init__``:
``add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))``; ``compute_loss``:
``model(**inputs, fused_lm_head=True)``, the loss ``-log_probs.sum() / num_tokens``), so no logits are made.
trl/trainer/utils.py ``add_fused_lm_head._fused_forward`` runs the backbone, drops the last position
(``last_hidden_state[:, :-1]``), and on CUDA scores only the positions whose label is not -100
(``hidden_states[mask]``, ``labels[mask]``: copies) through trl/kernels/chunked_logprob.py
``ChunkedLogProbFunction``, which

* in its forward projects ``TOKEN_CHUNK_SIZE`` (4,096) tokens × ``chunk_size`` (trl/trainer/utils.py
  ``_CHUNKED_LOGPROB_CHUNK_SIZE``, 32,768) vocabulary entries at a time into one buffer (``mm_buf``, in the
  compute dtype: autocast's, else the hidden states'), folded by a Triton kernel into per-token fp32
  statistics; it saves the hidden states it was given, the targets, ``log_z`` and the entropy
  (``ctx.save_for_backward``) — the head's weight itself is a parameter, cast a tile at a time outside autograd,
  so autocast keeps no 16-bit copy of it;
* in its backward allocates the fp32 gradient of the hidden states (``grad_hidden``) and, when the head
  trains, of the head (``grad_weight``, vocabulary × hidden in fp32), the same tile buffer, recomputes each
  tile and turns it into the logits' gradient in place, accumulating both GEMMs in fp32
  (``torch.addmm(..., out_dtype=torch.float32, out=acc)``); it returns both cast to their tensors' dtypes,
  the fp32 ones still alive: that moment is its peak.

Measured with TRL's own trainer (tests/training_oracle_trl.py: SFTTrainer.train() on CPU, the Triton folds
stood in by in-place ones, as they allocate nothing).
"""

from __future__ import annotations

from gpu_launch.fit.training.setup import TrainingSetup

__all__ = ["TOKEN_TILE", "VOCAB_TILE", "SAVED_PER_TOKEN", "scored_tokens", "hidden_bytes", "saved_bytes",
           "backward_bytes"]

#: trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE: tokens a projection tile.
TOKEN_TILE = 4096
#: trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE: vocabulary entries a tile (the buffer is this wide even
#: for a smaller vocabulary: ``torch.empty((min(N, TOKEN_CHUNK_SIZE), chunk_size))``).
VOCAB_TILE = 32768
#: Saved for the backward a scored token besides its hidden state: the target (int64, ``labels[mask]``),
#: ``log_z`` and the entropy (fp32), the label mask (bool, kept by masked_scatter's backward).
SAVED_PER_TOKEN = 8 + 4 + 4 + 1


def scored_tokens(setup: TrainingSetup) -> int:
    """The positions the head scores: every one but each sequence's last (``[:, :-1]``); fewer when labels are
    masked (prompt tokens under completion_only_loss, padding), which no launch says: all of them. GRPO scores
    the completion only (grpo_trainer.py ``_get_per_token_logps_and_entropies``: ``labels[:, :-logits_to_keep] =
    -100``, logits_to_keep the completion's length)."""
    if setup.completion_len:
        return setup.micro_batch * min(setup.completion_len, max(1, setup.seq_len - 1))
    return setup.micro_batch * max(1, setup.seq_len - 1)


def hidden_bytes(setup: TrainingSetup) -> int:
    """The hidden states' element size as the head gets them: the final norm's output, fp32 under autocast
    (the residual stream stays fp32 there) and for fp32 weights, else 16-bit."""
    return 2 if setup.precision in ("bf16", "fp16") else 4


def saved_bytes(setup: TrainingSetup, hidden: int) -> int:
    """What the head keeps for its backward (its hidden states' copy and the per-token vectors), freed once
    ChunkedLogProbFunction.backward and the masking nodes before it have run (torch/csrc/autograd/node.h
    Node::release_variables): gone by the final norm's backward."""
    return scored_tokens(setup) * (hidden_bytes(setup) * hidden + SAVED_PER_TOKEN)


def _compute_bytes(setup: TrainingSetup) -> int:
    """The tile's dtype: autocast's under autocast (ChunkedLogProbFunction.forward: torch.get_autocast_dtype),
    else the hidden states'."""
    return 4 if setup.precision == "fp32" else 2


def backward_bytes(setup: TrainingSetup, hidden: int, vocab: int, head_trains: bool) -> int:
    """What ChunkedLogProbFunction.backward holds at its return beyond the saved activations and the head's
    final gradient: the tile buffer, the incoming fp32 gradient of the log-probabilities, the hidden states'
    fp32 gradient and its cast, the head's fp32 accumulator when the head trains in 16 bits (in fp32 the
    ``.to(weight.dtype)`` is the accumulator itself), and under autocast the last tile's 16-bit casts of
    the hidden states and the head's rows (``hidden[...].to(compute_dtype)``, ``weight[...].to(...)``)."""
    n = scored_tokens(setup)
    eh, ec = hidden_bytes(setup), _compute_bytes(setup)
    tile = min(n, TOKEN_TILE) * VOCAB_TILE * ec
    grad_hidden = 4 * hidden * n + (eh * hidden * n if eh != 4 else 0)
    accumulator = 4 * vocab * hidden if head_trains and setup.precision in ("bf16", "fp16") else 0
    casts = ec * hidden * (min(n, TOKEN_TILE) + min(vocab, VOCAB_TILE)) if eh != ec else 0
    return tile + 4 * n + grad_hidden + accumulator + casts
