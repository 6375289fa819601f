"""The oracle of ``trl sft``: PyTorch's own count of a real step of TRL's own SFTTrainer (trl 1.16.0), on CPU.

``measure_sft(case)`` builds the tiny model from its config (tests/training_oracle.py ``build``, no LoRA, no
checkpointing: SFTTrainer adds them itself, from ``peft_config`` and ``gradient_checkpointing``), hands it to
``trl.SFTTrainer`` with a pre-tokenized dataset of full-length rows, and runs ``trainer.train()`` for two
steps; a callback enters ``MemTracker`` at the second step and takes each phase's peak (the backward up to
``on_pre_optimizer_step``, then the optimizer step), as training_oracle.measure does. The loss is TRL's:
SFTTrainer.compute_loss calls ``model(**inputs, fused_lm_head=True)``, the forward that
trl/trainer/utils.py ``add_fused_lm_head`` puts on the model, which runs the backbone and then
trl/kernels/chunked_logprob.py ``ChunkedLogProbFunction`` on the hidden states: no logits.

Off CUDA that Function folds each (tokens × 32,768) tile with torch ops (``_forward_tile``, ``_backward_tile``:
"for devices without Triton") where CUDA runs its Triton kernels (``_forward_kernel``, ``_backward_kernel``),
and ``_addmm_fp32`` upcasts both operands (``acc.addmm_(a.float(), b.float())``) where CUDA calls
``torch.addmm(..., out_dtype=torch.float32, out=acc)``. The Triton kernels allocate nothing (they load and
store through pointers into the tile and the per-token vectors; the backward overwrites the tile in place),
nor does the out_dtype addmm. So ``fold="cuda"`` swaps those three for stand-ins that allocate what CUDA's
allocate (nothing: the tile is overwritten in place, the fp32 accumulators added to in place), leaving every
other line of TRL's Function, trainer and model patching as it runs: what the count then holds is what a
CUDA step holds. ``fold="cpu"`` keeps TRL's torch fallback as it is. The numbers of a "cuda" step are not a
training step's (the stand-ins compute nothing useful): only its memory is.

The optimizer is torch's AdamW with ``foreach=True`` (what CUDA picks by default, as in training_oracle), given
to SFTTrainer through ``optimizer_cls_and_kwargs``. Needs trl (pip install trl==1.16.0: it pulls datasets,
pandas and pyarrow).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from training_oracle import FAMILIES, Case, Measured, _terms, _tracker, build

TRL_VERSION = "1.16.0"


def _tokenizer(vocab: int) -> Any:
    """A word-level tokenizer of ``vocab`` entries built in memory (nothing downloaded), with pad and eos."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab - 2)}
    words.update({"<pad>": vocab - 2, "</s>": vocab - 1})
    tok = Tokenizer(WordLevel(words, unk_token="w0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="w0")


@contextlib.contextmanager
def _cuda_dropout() -> Any:
    """Dropout as CUDA runs it: torch's F.dropout takes the fused ``native_dropout`` on CUDA only
    (aten/src/ATen/native/Dropout.cpp ``is_fused_kernel_acceptable``: its backward keeps a boolean mask);
    on CPU it multiplies by a noise tensor of the input's dtype, which the product keeps. native_dropout has a
    CPU kernel: peft's LoRA dropout (an nn.Dropout) is routed to it."""
    import torch

    original = torch.nn.Dropout.forward

    def forward(self: Any, x: Any) -> Any:
        if not self.training or self.p == 0:
            return original(self, x)
        return torch.native_dropout(x, self.p, True)[0]

    torch.nn.Dropout.forward = forward
    try:
        yield
    finally:
        torch.nn.Dropout.forward = original


@contextlib.contextmanager
def _cuda_folds() -> Any:
    """TRL's tile folds and fp32 accumulate as the Triton kernels and CUDA's out_dtype addmm allocate: nothing."""
    from trl.kernels import chunked_logprob as k
    from trl.trainer import utils as u

    def fold(tile: Any, *args: Any, **kwargs: Any) -> None:  # _forward_kernel / _backward_kernel: in place
        return None

    def addmm(acc: Any, a: Any, b: Any) -> None:  # torch.addmm(acc, a, b, out_dtype=fp32, out=acc): in place
        acc.add_(0)

    saved = k._forward_tile, k._backward_tile, k._addmm_fp32, u._use_triton
    # and the head scores only the labelled positions, as on CUDA (add_fused_lm_head: ``compact =
    # _use_triton(hidden_states.device)``; elsewhere every position, ``hidden_states.reshape``)
    k._forward_tile, k._backward_tile, k._addmm_fp32, u._use_triton = fold, fold, addmm, lambda device: True
    try:
        yield
    finally:
        k._forward_tile, k._backward_tile, k._addmm_fp32, u._use_triton = saved


@contextlib.contextmanager
def vocab_tile(width: int | None) -> Any:
    """TRL's vocabulary tile (trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE, read at each call) and
    gpulaunch's (memory_fused.VOCAB_TILE) set to ``width``: a tiny model's 32,768-wide buffer outweighs
    everything else it holds, so a narrow tile lets the other terms show."""
    if width is None:
        yield
        return
    from trl.trainer import utils as u

    from gpu_launch.fit.training import memory_fused

    saved = u._CHUNKED_LOGPROB_CHUNK_SIZE, memory_fused.VOCAB_TILE
    u._CHUNKED_LOGPROB_CHUNK_SIZE = memory_fused.VOCAB_TILE = width
    try:
        yield
    finally:
        u._CHUNKED_LOGPROB_CHUNK_SIZE, memory_fused.VOCAB_TILE = saved


def lora_config(case: Case, lora_dropout: float) -> Any:
    """peft's LoraConfig for ``case`` (None for a full fine-tune), as the trainers' ``peft_config``."""
    from peft import LoraConfig

    if case.method != "lora":
        return None
    targets = "all-linear" if case.lora_targets == ("all-linear",) else list(case.lora_targets)
    return LoraConfig(r=case.lora_r, lora_alpha=16, lora_dropout=lora_dropout, target_modules=targets,
                      task_type="CAUSAL_LM")


def step_counter(out: dict[str, dict[str, int]], step: int, make_tracker: Any = None,
                 also: Any = None) -> Any:
    """A TrainerCallback that enters a MemTracker (``make_tracker()``, training_oracle's by default) as step
    ``step`` (the Trainer's ``global_step`` then) begins and writes each phase's own peak into ``out``: the
    "backward" up to ``on_pre_optimizer_step``, then the "optimizer step" (restarted per phase, as
    training_oracle.measure does). ``also()``: more modules to track beside the model (DPO's reference).
    Its ``tracker`` is the one entered, None outside the step, for a phase of the caller's own (``take``)."""
    import torch
    from transformers import TrainerCallback

    class Count(TrainerCallback):  # type: ignore[misc]
        tracker: Any = None

        def take(self, phase: str) -> None:
            """``phase``'s peak so far into ``out``, and the peak restarted."""
            out[phase] = _terms(self.tracker.get_tracker_snapshot("peak").get(torch.device("cpu"), {}))
            self.tracker._peak_mem, self.tracker._peak_mem_snap = {}, {}

        def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                          **kw: Any) -> None:
            if state.global_step != step:
                return
            self.tracker = (make_tracker or _tracker)()
            self.tracker.track_external(model, optimizer, *(also() if also else ()))
            self.tracker.__enter__()
            self.tracker._peak_mem, self.tracker._peak_mem_snap = {}, {}

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.tracker is not None:
                self.take("backward")

        def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.tracker is not None:
                self.take("optimizer step")
                self.tracker.__exit__(None, None, None)
                self.tracker = None

    return Count()


def measure_sft(case: Case, fold: str = "cuda", lora_dropout: float = 0.0, **config: Any) -> Measured:
    """PyTorch's count of the second of two steps of TRL's SFTTrainer on ``case``'s model; ``config``: more
    SFTConfig fields (``loss_type="dft"``, ``use_liger_kernel``...)."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model = build(Case(case.family, precision=case.precision))  # SFTTrainer adds LoRA and checkpointing
    vocab = FAMILIES[case.family]["vocab_size"]
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(0, vocab - 2, (case.seq_len,), generator=g).tolist() for _ in range(2 * case.micro_batch)]
    data = Dataset.from_dict({"input_ids": rows})
    peft = lora_config(case, lora_dropout)
    out: dict[str, dict[str, int]] = {}

    with tempfile.TemporaryDirectory() as tmp:
        args = SFTConfig(output_dir=tmp, per_device_train_batch_size=case.micro_batch, max_length=case.seq_len,
                         gradient_checkpointing=case.gradient_checkpointing, bf16=case.precision != "fp32",
                         max_steps=2, use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
                         dataset_kwargs={"skip_prepare_dataset": True}, dataloader_num_workers=0,
                         disable_tqdm=True, **config)
        trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=_tokenizer(vocab),
                             peft_config=peft, callbacks=[step_counter(out, 1, _tracker)],
                             optimizer_cls_and_kwargs=(torch.optim.AdamW, {"lr": 1e-4, "foreach": True}))
        with _cuda_folds() if fold == "cuda" else contextlib.nullcontext(), \
                _cuda_dropout() if fold == "cuda" else contextlib.nullcontext():
            trainer.train()
    return Measured(out)


def setup_sft(case: Case, lora_dropout: float = 0.0) -> Any:
    """gpulaunch's setup of the same step: ``trl sft``, TRL's fused head, the Trainer's autocast (--bf16)."""
    from training_oracle import setup_of

    return replace(setup_of(case), launcher="trl sft", loss="fused", loss_chunk_tokens=None, lora_dropout=lora_dropout,
                   mixed_precision=case.precision != "fp32")


def compare_sft(case: Case, folder: Path, fold: str = "cuda", tile: int | None = None, lora_dropout: float = 0.0,
                **config: Any) -> dict[str, Any]:
    """gpulaunch's peak for the model in ``folder`` beside the count of TRL's step: {"peak": (ours, torch),
    "peak_at": (...), phase: {term: (ours, torch)}} as training_oracle.compare gives them; ``tile``: both
    vocabulary tiles that wide (:func:`vocab_tile`)."""
    from gpu_launch.fit.training.memory import peak, phases
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config_json = json.loads((folder / "config.json").read_text())
    setup = setup_sft(case, lora_dropout)
    with vocab_tile(tile):
        got = peak(facts, config_json, setup, 1)
        ph = phases(facts, config_json, setup, 1)
        m = measure_sft(case, fold, lora_dropout, **config)
    at = "backward" if got.peak_at == "end of backward" else got.peak_at
    out: dict[str, Any] = {"peak": (got.peak_bytes, m.peak), "peak_at": (at, m.peak_at)}
    for name in ("backward", "optimizer step"):
        p = ph[name]
        mine = {"weights": p["weights"], "gradients": p["gradients"], "total": sum(p.values())}
        out[name] = {k: (mine[k], m.phases[name][k]) for k in mine}
    return out


__all__ = ["measure_sft", "setup_sft", "compare_sft", "step_counter", "TRL_VERSION"]
