"""The oracle of ``trl grpo``: PyTorch's own count of real steps of TRL's own GRPOTrainer (trl 1.16.0), on CPU.

``measure_grpo(case, prompt, completion, ...)`` builds the tiny model from its config (tests/training_oracle.py
``build``), hands it to ``trl.GRPOTrainer`` with in-memory text prompts of ``prompt`` words (a word-level
tokenizer: one token a word), a trivial reward function and ``max_completion_length=completion``, and runs
``trainer.train()``. A callback (tests/training_oracle_trl.py ``step_counter``, the SFT oracle's) enters
``MemTracker`` at the step that generates (``steps_per_generation`` steps after the first, so that the
optimizer's states exist) and takes three peaks: the generation (the trainer's
``_generate_and_score_completions``, wrapped: ``model.generate`` of the rank's whole generation batch, the
reference model's scoring when beta > 0, the rewards), the backward (to ``on_pre_optimizer_step``) and the
optimizer step. EOS is never sampled (the tokenizer's eos lies outside the model's vocabulary, and
``generation_kwargs={"eos_token_id": None}``), so every completion runs to ``completion`` tokens, the length
gpulaunch sizes; by default the prompts are one word short, left-padded (``pad_to_multiple_of`` 8), so that the
generation and the step attend through a padding mask as a real batch does (prompts of different lengths,
completions ending at different eos).

The loss is TRL's fused LM head (grpo_trainer.py ``_get_per_token_logps_and_entropies``: ``model(...,
fused_lm_head=True)``), with the same CUDA stand-ins as the SFT oracle (tests/training_oracle_trl.py
``_cuda_folds``: the Triton folds allocate nothing, only the labelled positions are scored). The generation
runs transformers' own ``generate`` unchanged.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from training_oracle import FAMILIES, Case, Measured, _tracker, build
from training_oracle_trl import _cuda_folds, lora_config, step_counter, vocab_tile

PHASES = ("generation", "backward", "optimizer step")


def _tokenizer(vocab: int, unsampled_eos: bool = False) -> Any:
    """A word-level tokenizer of ``vocab`` entries (one token a space-separated word), with pad and eos (the last
    two). ``unsampled_eos`` (GRPO's): eos is ``vocab``, outside the model's vocabulary, never sampled, so every
    completion is as long as asked (TRL masks what follows an eos: grpo_trainer.py ``_generate_single_turn``,
    ``is_eos``); pad is then the last entry."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    first = vocab - 1 if unsampled_eos else vocab - 2
    words = {f"w{i}": i for i in range(first)}
    words.update({"<pad>": first, "</s>": first + 1})
    tok = Tokenizer(WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="w0")


def _generation_tracker() -> Any:
    """training_oracle's MemTracker, taking a model called many times (generate's decode steps): MemTracker keeps
    per-module stats of one call and refuses a second top-level one ("does not support memory tracking for
    multiple iterative calls"); its hint, ``reset_mod_stats``, is taken at each new top-level call. The counts of
    live tensors (what the peaks are) are not module stats and stay."""
    import torch

    base = type(_tracker())

    def no_leaves(hook: Any) -> Any:
        """ModTracker's forward hook, given under no_grad the leaves that need a gradient detached (sharing
        their storage): see Tracker.__init__."""
        def wrapped(module: Any, args: Any, *output: Any) -> Any:
            if not torch.is_grad_enabled():
                def bare(t: Any) -> Any:
                    leaf = isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is None
                    return t.detach() if leaf else t
                args, output = torch.utils._pytree.tree_map(bare, (args, output))
            return hook(module, args, *output)
        return wrapped

    class Tracker(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            """A checkpointed model makes each forward's embeddings a leaf that needs a gradient, under no_grad too
            (transformers/modeling_utils.py ``enable_input_require_grads``, called by
            ``activation_checkpointing_enable``): generate's 200 calls make 200 such leaves. ModTracker
            (torch/distributed/_tools/mod_tracker.py ``_fw_pre_hook``, ``_fw_post_hook``) registers a
            multi-grad hook on every tensor a module takes or gives that needs a gradient
            (torch/autograd/graph.py ``register_multi_grad_hook``: the leaf's AccumulateGrad node, which holds
            the leaf), so each leaf lives as long as the tracker: 53 kB of (2, 1, 64) bf16 embeddings through
            the rest of the step, the tracker's own (weak references to them: none alive at the optimizer step
            without the tracker, all 200 with it; test_training_memory_grpo.py). Under no_grad nothing can
            reach those hooks: ModTracker is given the leaves detached there."""
            super().__init__()
            mt = self._mod_tracker
            mt._fw_pre_hook, mt._fw_post_hook = no_leaves(mt._fw_pre_hook), no_leaves(mt._fw_post_hook)

        def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
            try:
                super()._pre_fw_hook(module, inputs)
            except NotImplementedError:
                self.reset_mod_stats()
                super()._pre_fw_hook(module, inputs)

        # a module generate called but the step does not (the LM head: the fused head uses its weight only) keeps
        # its gradient hooks from generate's calls, its stats reset away: nothing to record for it
        def _pre_bw_hook(self, module: Any, args: Any) -> None:
            if module in self.memory_tracking:
                super()._pre_bw_hook(module, args)

        def _post_bw_hook(self, module: Any, args: Any) -> None:
            if module in self.memory_tracking:
                super()._post_bw_hook(module, args)

    return Tracker()


def _reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(c)) for c in completions]


def measure_grpo(case: Case, prompt: int = 32, completion: int = 32, num_generations: int = 2,
                 steps_per_generation: int = 1, fold: str = "cuda", padded: bool = True, **config: Any) -> Measured:
    """PyTorch's count of a generating step of TRL's GRPOTrainer on ``case``'s model (``case.micro_batch`` is
    per_device_train_batch_size); ``config``: more GRPOConfig fields (``beta=0.04``...).

    ``padded`` (the default): prompts of ``prompt - 1`` words left-padded to ``prompt`` (GRPOConfig
    ``pad_to_multiple_of`` 8: ``prompt`` and ``completion`` multiples of 8), so that the generation and the step
    run with a padding mask, as a real batch of prompts of different lengths and completions ending at
    different eos does; False: every row ``prompt`` tokens, no mask. With ``beta`` above 0 the reference model is
    loaded from the policy saved to a temporary folder (grpo_trainer.py GRPOTrainer.__init__:
    ``create_model_from_path(get_config_model_id(model.config))``, in the policy's dtype)."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    if padded and (prompt % 8 or completion % 8):
        raise ValueError(f"a padded case pads to multiples of 8: prompt {prompt}, completion {completion}")
    model = build(Case(case.family, precision=case.precision))
    vocab = FAMILIES[case.family]["vocab_size"]
    # every eos the model declares ends a completion too (grpo_trainer.py GRPOTrainer.__init__: eos_token_ids from
    # generation_config.eos_token_id; LlamaConfig's default is token 2, sampled now and then): the tokenizer's only
    model.config.eos_token_id = model.generation_config.eos_token_id = vocab
    g = torch.Generator().manual_seed(1)
    rows = 4 * case.micro_batch * steps_per_generation
    words = prompt - 1 if padded else prompt
    prompts = [" ".join(f"w{i}" for i in torch.randint(0, vocab - 1, (words,), generator=g).tolist())
               for _ in range(rows)]
    data = Dataset.from_dict({"prompt": prompts})
    peft = lora_config(case, 0.0)
    out: dict[str, dict[str, int]] = {}
    # the first step that generates after step 1 (so that the optimizer's states exist)
    count = step_counter(out, steps_per_generation, _generation_tracker)
    with tempfile.TemporaryDirectory() as tmp:
        if float(config.get("beta", 0.0)) > 0:
            model.save_pretrained(f"{tmp}/policy")
            model.config._name_or_path = f"{tmp}/policy"
        args = GRPOConfig(output_dir=tmp, per_device_train_batch_size=case.micro_batch,
                          num_generations=num_generations, max_completion_length=completion,
                          steps_per_generation=steps_per_generation,
                          gradient_checkpointing=case.gradient_checkpointing, bf16=case.precision != "fp32",
                          max_steps=steps_per_generation + 1, use_cpu=True, report_to=[], save_strategy="no",
                          logging_steps=1, dataloader_num_workers=0, disable_tqdm=True,
                          pad_to_multiple_of=8 if padded else None, generation_kwargs={"eos_token_id": None},
                          **config)
        trainer = GRPOTrainer(model=model, reward_funcs=_reward, args=args, train_dataset=data,
                              processing_class=_tokenizer(vocab, unsampled_eos=True), peft_config=peft,
                              callbacks=[count])
        # foreach AdamW, CUDA's default (GRPOTrainer takes no optimizer_cls_and_kwargs; Trainer.create_optimizer
        # reads the attribute)
        trainer.optimizer_cls_and_kwargs = (torch.optim.AdamW, {"lr": 1e-4, "foreach": True})
        original = trainer._generate_and_score_completions

        def generate(*a: Any, **kw: Any) -> Any:
            result = original(*a, **kw)
            if count.tracker is not None:
                count.take("generation")
            return result

        trainer._generate_and_score_completions = generate
        with _cuda_folds() if fold == "cuda" else contextlib.nullcontext():
            trainer.train()
    return Measured(out)


def setup_grpo(case: Case, prompt: int, completion: int, steps_per_generation: int = 1, beta: float = 0.0) -> Any:
    """gpulaunch's setup of the same step: ``trl grpo``, TRL's fused head, the Trainer's autocast (--bf16)."""
    from training_oracle import setup_of

    return replace(setup_of(case), launcher="trl grpo", loss="fused", loss_chunk_tokens=None,
                   mixed_precision=case.precision != "fp32", seq_len=prompt + completion, completion_len=completion,
                   generation_steps=steps_per_generation,
                   reference_model=beta > 0 and case.method == "full")


def compare_grpo(case: Case, folder: Path, prompt: int = 32, completion: int = 32, tile: int | None = 512,
                 steps_per_generation: int = 1, **config: Any) -> dict[str, Any]:
    """gpulaunch's peak and phases beside the count of GRPOTrainer's step: {"peak": (ours, torch), "peak_at":
    (...), phase: {"weights"|"total": (ours, torch)}}."""
    from gpu_launch.fit.training.memory import peak, phases
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config_json = json.loads((folder / "config.json").read_text())
    setup = setup_grpo(case, prompt, completion, steps_per_generation, float(config.get("beta", 0.0)))
    with vocab_tile(tile):
        got = peak(facts, config_json, setup, 1)
        ph = phases(facts, config_json, setup, 1)
        m = measure_grpo(case, prompt, completion, steps_per_generation=steps_per_generation, **config)
    at = "backward" if got.peak_at == "end of backward" else got.peak_at
    out: dict[str, Any] = {"peak": (got.peak_bytes, m.peak), "peak_at": (at, m.peak_at)}
    for name in PHASES:
        p = ph[name]
        out[name] = {"weights": (p["weights"], m.phases[name]["weights"]), "total": (sum(p.values()),
                                                                                    m.phases[name]["total"])}
    return out


__all__ = ["measure_grpo", "setup_grpo", "compare_grpo", "PHASES"]
