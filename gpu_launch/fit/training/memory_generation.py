"""GRPO's generation on the training GPU (``trl grpo``, trl 1.16): what ``model.generate`` holds beside the
training state, in bytes. Arithmetic only: no torch.

Read from trl 1.16.0 and transformers 5.24.0:

* trl/trainer/grpo_trainer.py ``GRPOTrainer._prepare_inputs``: once every ``steps_per_generation`` (default
  ``gradient_accumulation_steps``, trl/trainer/grpo_config.py ``GRPOConfig.__post_init__``) steps, the
  rank's whole generation batch is generated at once: ``per_device_train_batch_size × steps_per_generation``
  completions (``get_train_dataloader``: that batch size; ``RepeatSampler`` repeats each prompt
  ``num_generations`` times across it, so num_generations sizes nothing by itself). It happens in
  ``training_step`` before the forward: the weights and the optimizer's states are there, the gradients
  are not (the Trainer's ``zero_grad`` set them to None after the last step).
* ``_generate_single_turn`` (no vLLM): ``unwrapped_model.generate(...)`` under ``torch.no_grad()``, outside
  autocast, gradient checkpointing switched off (trl/models/utils.py ``_unwrap_model_for_generation``), the
  prompts left-padded to the longest, ``max_new_tokens = max_completion_length``; ``cache_implementation``
  None: transformers' ``DynamicCache``.
* transformers/cache_utils.py ``DynamicLayer.update``: each layer keeps K and V of every token so far in the
  model's dtype, grown by ``torch.cat`` (the old tensor lives until the new one is made);
  ``DynamicSlidingWindowLayer`` keeps a sliding layer's last ``sliding_window - 1`` tokens (the window with
  the new one). The last decode step feeds the last token but one: the cache then holds prompt + completion - 1.
* transformers/generation/utils.py ``_sample``: the last position's logits (``logits_to_keep=1``), copied to
  fp32 (``.to(copy=True, dtype=torch.float32)``), softmax'd (fp32) and sampled.

The two moments: the prefill (every prompt at once: the cache at the prompt's length, one layer's MLP of
the whole prompt batch) and the last decode step (the cache at its longest, one layer's K concatenated).
Prompts are data-dependent: their length is an assumption the plan states (``--train-seq`` sets prompt +
completion). With vLLM (``use_vllm``) generate does not run here: in ``server`` mode on another GPU, in
``colocate`` mode inside vLLM's own reservation of the GPU (``vllm_gpu_memory_utilization`` of its memory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.fit.training import memory_fused
from gpu_launch.fit.training.setup import TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["kv_bytes_per_token", "generation_bytes", "cache_bytes", "rows", "DEFAULT_PROMPT", "rule", "vllm_reserved",
           "vllm_notes"]

GiB = 1 << 30
#: The prompt length assumed where nothing says (trl's GRPOConfig.max_prompt_length before it was removed).
DEFAULT_PROMPT = 512


def _element(setup: TrainingSetup) -> int:
    """The cache's element size: the model's dtype as generate runs it (outside the Trainer's autocast: an fp32
    model caches fp32; a 4-bit base computes in its bf16 compute dtype)."""
    return 4 if setup.precision in ("fp32", "amp_bf16", "amp_fp16") else 2


def _layers(model: ModelFacts) -> list[tuple[int, int, bool]]:
    """(K values a token, V values a token, sliding) of each layer that keeps its own cache."""
    h = model.hyper
    last = h.kv_layers if h.kv_layers is not None else h.n_layers
    out = []
    for il in range(min(h.n_layers, last)):
        if not h.has_attention(il):
            continue
        heads = h.kv_heads[il] if il < len(h.kv_heads) else 0
        out.append((h.key_len(il) * heads, h.value_len(il) * heads, h.is_sliding(il) and bool(h.sliding_window)))
    return out


def kv_bytes_per_token(model: ModelFacts, setup: TrainingSetup) -> int:
    """The DynamicCache's bytes a token over every full-attention layer (the sliding ones stop at the window)."""
    e = _element(setup)
    return sum((k + v) * e for k, v, sliding in _layers(model) if not sliding)


def cache_bytes(model: ModelFacts, setup: TrainingSetup, tokens: int, seqs: int) -> int:
    """The cache of ``seqs`` sequences of ``tokens`` tokens: full layers every token, sliding ones the window."""
    e = _element(setup)
    window = model.hyper.sliding_window or 0
    return seqs * sum((k + v) * e * (min(tokens, window) if sliding else tokens) for k, v, sliding in _layers(model))


def rows(setup: TrainingSetup, world: int = 1) -> int:
    """The completions one GPU generates at once: per_device_train_batch_size × steps_per_generation, or
    generation_batch_size shared by the ranks (grpo_config.py GRPOConfig.__post_init__; the dataloader's batch,
    grpo_trainer.py get_train_dataloader); 0 when the launch generates nothing here."""
    if not setup.completion_len or setup.vllm:
        return 0
    if setup.generation_batch:
        return -(-setup.generation_batch // max(1, world))
    return setup.micro_batch * max(1, setup.generation_steps)


def generation_bytes(model: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup,
                     world: int = 1) -> dict[str, int]:
    """{"prefill": bytes, "decode": bytes[, "reference": bytes]}: what generate (and the reference model's scoring
    after it) holds beyond the weights and states at each moment."""
    n, completion = rows(setup, world), setup.completion_len
    if n <= 0:
        return {"prefill": 0, "decode": 0}
    prompt = max(1, setup.seq_len - completion)
    e = _element(setup)
    h = model.hyper.hidden_size or 0
    vocab = model.hyper.vocab_size or 0
    inter = int(config.get("intermediate_size") or config.get("moe_intermediate_size") or 4 * h)
    d = model.hyper.key_length or 0
    # the prefill's widest moment, its last layer's MLP (measured tensor by tensor, tests/training_oracle_grpo.py):
    # act(gate), up and their product (no autograd: gate dies once act is made), four of the hidden size (the
    # model's embeddings output, kept by LlamaModel.forward to its end; the layer's input; the residual; the
    # normed input), RoPE's cos and sin (a head each), the ids, mask and positions (int64) and the padded
    # prompts' boolean mask (masking_utils.py sdpa_mask: n × 1 × prompt × prompt, made once prompts differ in
    # length); every layer's cache at the prompt's length
    prefill = (cache_bytes(model, setup, prompt, n) + n * prompt * e * (3 * inter + 4 * h + 2 * d)
               + n * prompt * (32 + prompt))
    # the last decode step: the cache at prompt + completion - 1 and, while a layer's V is concatenated, its old V
    # (cache_utils.py DynamicLayer.update: torch.cat, then the old one freed), or later the step's logits in the
    # model's dtype (logits_to_keep=1); the step before's fp32 scores and softmax (generation/utils.py _sample:
    # alive until the new ones replace them); the growing ids and attention mask and the step's masks (int64)
    widest = max((max(k, v) for k, v, _ in _layers(model)), default=0)
    longest = prompt + completion
    decode = (cache_bytes(model, setup, longest - 1, n) + n * max(longest * widest * e, vocab * e)
              + 2 * n * vocab * 4 + 3 * n * longest * 8)
    out = {"prefill": prefill, "decode": decode}
    if setup.reference_model and setup.method == "full":
        # the prefill's widest moment, for a micro-batch of whole sequences and no cache (the reference's scoring)
        tokens = setup.micro_batch * setup.seq_len
        mlp = tokens * (e * (3 * inter + 4 * h + 2 * d) + 32 + setup.seq_len)
        out["reference"] = max(_reference_head(setup, h), mlp)
    return out


def _reference_head(setup: TrainingSetup, h: int) -> int:
    """The reference model's scoring after generate (beta > 0, grpo_trainer.py ``_generate_and_score_completions``:
    ``_get_per_token_logps_and_entropies(self.ref_model, ...)`` a micro-batch at a time, under no_grad, no cache,
    through its own fused head: trl/trainer/utils.py ``add_fused_lm_head``): at its last layer's MLP (as the
    prefill's), or at the head: the backbone's last hidden states, their copy at the scored positions, one
    projection tile and the per-token fp32 outputs (measured: tests/training_oracle_grpo.py with beta 0.04)."""
    n = memory_fused.scored_tokens(setup)
    eh, ec = memory_fused.hidden_bytes(setup), 4 if setup.precision == "fp32" else 2
    return (setup.micro_batch * setup.seq_len * eh * h + n * eh * h
            + min(n, memory_fused.TOKEN_TILE) * memory_fused.VOCAB_TILE * ec + 3 * 4 * n)


def rule(model: ModelFacts, setup: TrainingSetup, world: int = 1, term: int = 0, moment: int = 0) -> str:
    """The plan's line for the generation's term (``term`` its bytes, ``moment`` all that moment holds)."""
    if setup.vllm == "server":
        return "generation: vLLM server mode (use_vllm, vllm_mode server): completions made on another GPU"
    if setup.vllm == "colocate":
        return (f"generation: vLLM colocate mode reserves {setup.vllm_share:.0%} of each GPU's memory "
                "(vllm_gpu_memory_utilization) beside the training step")
    prompt = max(1, setup.seq_len - setup.completion_len)
    how = "generation_batch_size over the ranks" if setup.generation_batch else "per-device batch × steps_per_generation"
    return (f"generation: model.generate of {rows(setup, world)} completions at once ({how}), "
            f"{prompt} + {setup.completion_len} tokens, transformers' DynamicCache "
            f"{kv_bytes_per_token(model, setup):,} bytes a token (K and V, every layer, the model's dtype): "
            f"{term / GiB:.2f} GiB with generate's temporaries, {moment / GiB:.2f} GiB in all then")


def vllm_reserved(setup: TrainingSetup, total: int) -> int:
    """What a colocated vLLM takes of a GPU of ``total`` bytes beside the training step: its
    ``gpu_memory_utilization`` (trl's vllm_gpu_memory_utilization, 0.3) of the GPU's whole memory, the budget vLLM
    holds its weights, KV cache and activations in (vllm/config/cache.py CacheConfig.gpu_memory_utilization: "the
    fraction of GPU memory to be used for the model executor"); trl/generation/vllm_generation.py starts it in
    the training process."""
    return int(setup.vllm_share * total) if setup.vllm == "colocate" else 0


def vllm_notes(setup: TrainingSetup, rooms: Sequence[Any], reserved: Sequence[int]) -> tuple[str, ...]:
    """The plan's note per GPU (``rooms``: fit/plan.py Room) a colocated vLLM takes ``reserved`` bytes of."""
    return tuple(f"vLLM (colocate) reserves {v / GiB:.1f} GiB of GPU {r.gpu} (vllm_gpu_memory_utilization "
                 f"{setup.vllm_share:g} of its memory), counted with its allowance"
                 for r, v in zip(rooms, reserved) if v)
