"""The oracle of ``trl dpo``: PyTorch's own count of a real step of TRL's own DPOTrainer (trl 1.16.0), on CPU.

``measure_dpo(case, prompt)`` builds the tiny model from its config (tests/training_oracle.py ``build``), saves it
to a temporary folder (DPOTrainer loads its reference model from the policy's ``config._name_or_path``:
dpo_trainer.py ``DPOTrainer.__init__``, ``create_model_from_path(get_config_model_id(...))``, in the policy's
dtype), and hands it to ``trl.DPOTrainer`` with in-memory text preferences: a ``prompt`` of words and a chosen
and a rejected completion that fill ``case.seq_len`` tokens (a word-level tokenizer, one token a word; TRL adds
the EOS), so that every row of the batch is ``max_length`` long. ``trainer.train()`` runs two steps; a
callback enters ``MemTracker`` at the second one, the reference model tracked beside the policy, and takes each
phase's peak (the forward and backward up to ``on_pre_optimizer_step``, then the optimizer step), as the SFT
oracle does (tests/training_oracle_trl.py, whose CUDA stand-ins of the fused head's folds and dropout are used).

What DPOTrainer's step is (dpo_trainer.py): ``DataCollatorForPreference`` stacks the chosen rows and then the
rejected ones, 2 × per_device_train_batch_size rows; ``_compute_loss`` runs the policy on them through TRL's
fused LM head (``fused_lm_head=True``, the labels -100 outside the completions) and then, under ``no_grad``, the
reference: the frozen copy (a full fine-tune), or the same model with its adapter disabled (PEFT); with
``precompute_ref_log_probs`` the reference's log-probs come with the batch, computed before training.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from training_oracle import FAMILIES, Case, Measured, build
from training_oracle_grpo import _generation_tracker, _tokenizer
from training_oracle_trl import _cuda_dropout, _cuda_folds, lora_config, step_counter, vocab_tile


def _preferences(vocab: int, rows: int, prompt: int, seq_len: int) -> Any:
    """``rows`` examples: a prompt of ``prompt`` words, chosen and rejected of seq_len - prompt - 1 words each."""
    import torch
    from datasets import Dataset

    g = torch.Generator().manual_seed(1)

    def words(n: int) -> str:
        return " ".join(f"w{i}" for i in torch.randint(0, vocab - 2, (n,), generator=g).tolist())

    n = seq_len - prompt - 1  # TRL appends the EOS (DPOTrainer._prepare_dataset, "Adding EOS")
    return Dataset.from_dict({"prompt": [words(prompt) for _ in range(rows)],
                              "chosen": [" " + words(n) for _ in range(rows)],
                              "rejected": [" " + words(n) for _ in range(rows)]})


def measure_dpo(case: Case, prompt: int = 1, fold: str = "cuda", lora_dropout: float = 0.0,
                **config: Any) -> Measured:
    """PyTorch's count of the second of two steps of TRL's DPOTrainer on ``case``'s model (``case.micro_batch``
    is per_device_train_batch_size, ``case.seq_len`` max_length); ``config``: more DPOConfig fields
    (``precompute_ref_log_probs=True``...)."""
    import torch
    from trl import DPOConfig, DPOTrainer

    vocab = FAMILIES[case.family]["vocab_size"]
    peft = lora_config(case, lora_dropout)
    out: dict[str, dict[str, int]] = {}
    held: dict[str, Any] = {}
    # LoRA: the same model runs again as the reference (the generation tracker takes a second call)
    count = step_counter(out, 1, _generation_tracker,
                         also=lambda: [r for r in (held["trainer"].ref_model,) if r is not None])

    with tempfile.TemporaryDirectory() as tmp:
        model = build(Case(case.family, precision=case.precision))  # DPOTrainer adds LoRA and checkpointing
        model.save_pretrained(f"{tmp}/model")
        model.config._name_or_path = f"{tmp}/model"  # where the reference model is loaded from
        args = DPOConfig(output_dir=f"{tmp}/out", per_device_train_batch_size=case.micro_batch,
                         max_length=case.seq_len, gradient_checkpointing=case.gradient_checkpointing,
                         bf16=case.precision != "fp32", max_steps=2, use_cpu=True, report_to=[], save_strategy="no",
                         logging_steps=1, dataloader_num_workers=0, disable_tqdm=True, **config)
        data = _preferences(vocab, 2 * case.micro_batch, prompt, case.seq_len)
        trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=_tokenizer(vocab),
                             peft_config=peft, callbacks=[count])
        held["trainer"] = trainer
        # foreach AdamW, CUDA's default (Trainer.create_optimizer reads the attribute)
        trainer.optimizer_cls_and_kwargs = (torch.optim.AdamW, {"lr": 1e-4, "foreach": True})
        with _cuda_folds() if fold == "cuda" else contextlib.nullcontext(), \
                _cuda_dropout() if fold == "cuda" else contextlib.nullcontext():
            trainer.train()
    return Measured(out)


def setup_dpo(case: Case, lora_dropout: float = 0.0, precompute: bool = False) -> Any:
    """gpulaunch's setup of the same step: ``trl dpo``, two rows an example, the reference, TRL's fused head."""
    from training_oracle import setup_of

    return replace(setup_of(case), launcher="trl dpo", loss="fused", loss_chunk_tokens=None, lora_dropout=lora_dropout,
                   mixed_precision=case.precision != "fp32", rows_per_example=2, reference_model=not precompute)


def compare_dpo(case: Case, folder: Path, prompt: int = 1, tile: int | None = 512, lora_dropout: float = 0.0,
                **config: Any) -> dict[str, Any]:
    """gpulaunch's peak and phases beside the count of DPOTrainer's step: {"peak": (ours, torch), "peak_at":
    (...), "moment": gpulaunch's own moment, phase: {"weights"|"gradients"|"total": (ours, torch)}}."""
    from gpu_launch.fit.training.memory import peak, phases
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config_json = json.loads((folder / "config.json").read_text())
    setup = setup_dpo(case, lora_dropout, bool(config.get("precompute_ref_log_probs")))
    with vocab_tile(tile):
        got = peak(facts, config_json, setup, 1)
        ph = phases(facts, config_json, setup, 1)
        m = measure_dpo(case, prompt, lora_dropout=lora_dropout, **config)
    at = "backward" if got.peak_at in ("end of backward", "reference forward") else got.peak_at
    out: dict[str, Any] = {"peak": (got.peak_bytes, m.peak), "peak_at": (at, m.peak_at), "moment": got.peak_at}
    for name in ("backward", "optimizer step"):
        p = ph[name]
        mine = {"weights": p["weights"], "gradients": p["gradients"], "total": sum(p.values())}
        out[name] = {k: (mine[k], m.phases[name][k]) for k in mine}
    return out


__all__ = ["measure_dpo", "setup_dpo", "compare_dpo"]
