"""The oracle of training sizing: PyTorch's own accounting of one real training step of the real Hugging Face
code (transformers, peft), on CPU, of a tiny model built from a config (random init, nothing downloaded).

``measure(case)`` builds the model (``AutoModelForCausalLM.from_config``), runs forward, backward and the
optimizer step twice (so the optimizer's states exist, as in every step after the first) under
``torch.distributed._tools.mem_tracker.MemTracker``, and returns the peak's categories (parameters,
gradients, optimizer states, activations and the backward's temporaries) and the moment it was reached.
``write_model(case, folder)`` writes the same model as config.json + a header-only safetensors file (what
gpulaunch reads), so that ``gpulaunch_peak(case, folder)`` asks gpulaunch's own rules about the same model.

The step follows the Hugging Face Trainer's (trainer.py training_step: autocast around the forward only,
``loss.backward()``, ``optimizer.step()``, ``zero_grad(set_to_none=True)``); the optimizer is torch's AdamW
with ``foreach=True``, what CUDA picks by default (torch/optim/optimizer.py _default_to_fused_or_foreach: the
for-loop is only CPU's default). The loss is transformers' own ForCausalLMLoss (labels = input_ids);
"chunked" is transformers' loss on slices of the sequence (what TRL's chunked_nll and Liger do: the head and
the loss a chunk at a time, the chunk's logits freed before the next), written here in a few lines.
TRL's own (1.16: SFTTrainer's every loss through its fused LM head, trl/trainer/utils.py add_fused_lm_head and
trl/kernels/chunked_logprob.py ChunkedLogProbFunction) is counted by tests/training_oracle_trl.py, through
TRL's own trainer, with its CPU fallback's tile folds stood in by what the Triton kernels allocate (nothing);
Liger's kernels are Triton only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

torch = None  # imported by the functions (pytest.importorskip in the tests)

#: Tiny configs per family: 2 layers, hidden 64, a vocabulary that keeps the loss comparable to the blocks
#: (Gemma-3: a sliding-window layer and a global one, the window shorter than the sequence, tied embeddings).
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
              "max_position_embeddings": 1024, "tie_word_embeddings": False},
    "qwen3": {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512,
              "max_position_embeddings": 1024, "tie_word_embeddings": True},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
              "max_position_embeddings": 1024, "tie_word_embeddings": False},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "sliding_window": None,
                "max_position_embeddings": 1024, "tie_word_embeddings": False},
    "phi3": {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "pad_token_id": 0,
             "max_position_embeddings": 1024, "tie_word_embeddings": False},
    "gemma2": {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
               "max_position_embeddings": 1024, "sliding_window": 4096, "tie_word_embeddings": True,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "gemma3": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
               "max_position_embeddings": 1024, "sliding_window": 64, "tie_word_embeddings": True,
               "layer_types": ["sliding_attention", "full_attention"]},
    "qwen2_moe": {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "num_experts": 4,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 96,
                  "max_position_embeddings": 1024, "tie_word_embeddings": False},
}


@dataclass(frozen=True)
class Case:
    family: str
    precision: str = "bf16"  # fp32, amp_bf16 (fp32 weights under autocast), bf16
    method: str = "full"  # full, lora
    lora_r: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    gradient_checkpointing: bool = False
    loss: str = "plain"  # plain, chunked
    seq_len: int = 128
    micro_batch: int = 1
    optimizer: str = "adamw_torch"  # adamw_torch (foreach), adamw_torch_fused, sgd

    @property
    def name(self) -> str:
        lora = f"{self.method}{self.lora_r}" if self.method != "full" else "full"
        return (f"{self.family}-{self.precision}-{lora}-gc{int(self.gradient_checkpointing)}-{self.loss}"
                f"-{self.micro_batch}x{self.seq_len}")


def _torch() -> Any:
    """torch, on one CPU thread: with more, CPU kernels take per-thread scratch buffers that no CUDA kernel has
    (sdpa's CPU flash attention, reductions), and a count depends on the machine's cores (an FSDP1 case measured
    1.6 % more on CI's 2 cores than on 1)."""
    global torch
    import torch as _t

    if _t.get_num_threads() != 1:
        _t.set_num_threads(1)
    torch = _t
    return _t


def config_of(case: Case) -> dict[str, Any]:
    return dict(FAMILIES[case.family])


def build(case: Case) -> Any:
    """The model as the launch would train it: from_config, random init, the case's dtype, LoRA, checkpointing."""
    t = _torch()
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = config_of(case)
    config = AutoConfig.for_model(**raw)
    t.manual_seed(0)
    attn = "eager" if case.family == "gemma2" else "sdpa"
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=t.float32)
    if case.precision in ("bf16",):
        model = model.to(t.bfloat16)
    if case.method == "qlora":
        model = _quantized(model, attn)
    if case.method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        targets = "all-linear" if case.lora_targets == ("all-linear",) else list(case.lora_targets)
        model = get_peft_model(model, LoraConfig(r=case.lora_r, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=targets))
    if case.gradient_checkpointing:
        # Trainer: model.gradient_checkpointing_enable(...), and enable_input_require_grads for PEFT models
        # (trainer.py _activate_neftune / training_args gradient_checkpointing_kwargs; peft's docs)
        model.gradient_checkpointing_enable()
        if case.method == "lora":
            model.enable_input_require_grads()
    model.train()
    return model


def _quantized(model: Any, attn: str) -> Any:
    """The same random model loaded back in 4 bits as a QLoRA launch loads it (transformers' bitsandbytes
    integration: BitsAndBytesConfig(load_in_4bit, nf4, bf16 compute), saved to and read from a temporary
    folder: nothing downloaded). bitsandbytes >= 0.46 runs its 4-bit kernels on CPU."""
    import tempfile

    t = _torch()
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return AutoModelForCausalLM.from_pretrained(
            tmp, attn_implementation=attn, dtype=t.bfloat16, device_map="cpu",
            quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                   bnb_4bit_compute_dtype=t.bfloat16))


def _quant_states(model: Any) -> list[Any]:
    """The 4-bit weights' quantisation state (absmax a block): not parameters, so told to the tracker."""
    out = []
    for p in model.parameters():
        qs = getattr(p, "quant_state", None)
        if qs is not None:
            out.append(qs.absmax)
            if getattr(qs, "state2", None) is not None:
                out.append(qs.state2.absmax)
    return out


def _optimizer(case: Case, model: Any) -> Any:
    t = _torch()
    params = [p for p in model.parameters() if p.requires_grad]
    if case.optimizer == "sgd":
        return t.optim.SGD(params, lr=1e-3)
    if case.optimizer == "sgd_momentum":  # Trainer --optim sgd --optim_args momentum=0.9 (trainer_optimizer.py _get_sgd)
        return t.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if case.optimizer == "adamw_torch_fused":
        return t.optim.AdamW(params, lr=1e-3, fused=True)
    if case.optimizer == "adafactor":  # Trainer's: trainer_optimizer.py _get_adafactor
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False)
    if case.optimizer == "adamw_8bit":
        # Trainer's adamw_bnb_8bit: bitsandbytes AdamW(optim_bits=8), the embeddings' states kept in 32 bits
        # (trainer.py create_optimizer: GlobalOptimManager.register_module_override)
        import bitsandbytes

        opt = bitsandbytes.optim.AdamW(params, lr=1e-3, optim_bits=8)
        manager = bitsandbytes.optim.GlobalOptimManager.get_instance()
        for module in model.modules():
            if isinstance(module, t.nn.Embedding):
                manager.register_module_override(module, "weight", {"optim_bits": 32})
        return opt
    return t.optim.AdamW(params, lr=1e-3, foreach=True)


def _chunked_loss(model: Any, ids: Any, chunk: int) -> Any:
    """The causal-LM loss a chunk of positions at a time: the trunk once, then the head and transformers'
    own loss function on each chunk under checkpointing, so a chunk's logits live only while it runs."""
    t = _torch()
    from torch.utils.checkpoint import checkpoint

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.model(input_ids=ids).last_hidden_state
    labels = t.nn.functional.pad(ids, (0, 1), value=-100)[..., 1:]
    total = hidden.new_zeros((), dtype=t.float32)
    n = labels.numel()

    weight = base.lm_head.weight  # the module itself is called once a step only (MemTracker's rule)

    def piece(h: Any, lab: Any) -> Any:
        logits = t.nn.functional.linear(h, weight).float()
        return t.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1),
                                             reduction="sum")

    for start in range(0, hidden.shape[1], chunk):
        total = total + checkpoint(piece, hidden[:, start:start + chunk], labels[:, start:start + chunk],
                                   use_reentrant=False)
    return total / n


def _step(case: Case, model: Any, opt: Any, ids: Any) -> None:
    t = _torch()
    ctx = t.autocast("cpu", dtype=t.bfloat16) if case.precision == "amp_bf16" else _Null()
    with ctx:
        if case.loss == "chunked":
            loss = _chunked_loss(model, ids, CHUNK)
        else:
            loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


#: The chunked loss's chunk, in positions.
CHUNK = 32


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None


def _tracker() -> Any:
    """MemTracker that also takes frozen parameters (it registers a gradient hook on every parameter, and
    torch refuses one on a tensor that needs no gradient: a LoRA model's base)."""
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class _Trainable:
        def __init__(self, module: Any) -> None:
            self.module = module

        def parameters(self) -> Any:
            return (p for p in self.module.parameters() if p.requires_grad)

        def buffers(self) -> Any:
            return self.module.buffers()

    class Tracker(MemTracker):
        def _track_module_params_and_buffers(self, module: Any, install_grad_hooks: bool = True) -> Any:
            for p in module.parameters():
                if not p.requires_grad:
                    self._update_and_maybe_create_winfos(p, _MemRefType.PARAM)
            return super()._track_module_params_and_buffers(_Trainable(module), install_grad_hooks)

    return Tracker()


@dataclass(frozen=True)
class Measured:
    """PyTorch's count of step 2, each phase's peak: {"backward": {...}, "optimizer step": {...}} with the
    terms weights (parameters + buffers), gradients, optimizer (states and the step's temporaries),
    activations (activations + the backward's temporaries, the loss's among them) and total."""

    phases: dict[str, dict[str, int]]

    @property
    def peak_at(self) -> str:
        return max(self.phases, key=lambda k: self.phases[k]["total"])

    @property
    def peak(self) -> int:
        return self.phases[self.peak_at]["total"]


def _terms(snap: dict[str, int]) -> dict[str, int]:
    # "Other": what track_external was given beside the model and optimizer (QLoRA's quant states)
    return {"weights": snap.get("Parameter", 0) + snap.get("Buffer", 0) + snap.get("Other", 0),
            "gradients": snap.get("Gradient", 0), "optimizer": snap.get("Optstate", 0),
            "activations": snap.get("Activation", 0) + snap.get("Temp", 0),
            "total": snap.get("Total", 0)}


def measure(case: Case) -> Measured:
    t = _torch()
    cpu = t.device("cpu")
    model = build(case)
    opt = _optimizer(case, model)
    g = t.Generator().manual_seed(1)
    ids = t.randint(0, FAMILIES[case.family]["vocab_size"], (case.micro_batch, case.seq_len), generator=g)
    # the first step outside the tracker: it creates the optimizer's states (track_external counts them). Run
    # under the tracker, the first step of a checkpointed model with a frozen base left two of its tensors
    # (4·h bytes a token in bf16) alive into the second, held by the tracker's own hooks: 2,082,504 bytes at
    # the loss's moment with the first step outside, 2,148,040 with it inside (Llama LoRA, checkpointing,
    # 256 tokens); no training run has them
    _step(case, model, opt, ids)
    tracker = _tracker()
    tracker.track_external(model, opt, *_quant_states(model))
    with tracker:
        # the second step, each phase's own peak (MemTracker keeps one running peak: restarted per phase)
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        ctx = t.autocast("cpu", dtype=t.bfloat16) if case.precision == "amp_bf16" else _Null()
        with ctx:
            loss = _chunked_loss(model, ids, CHUNK) if case.loss == "chunked" else model(input_ids=ids,
                                                                                         labels=ids).loss
        loss.backward()
        del loss
        backward = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}))
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        opt.step()
        step = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}))
        opt.zero_grad(set_to_none=True)
    return Measured({"backward": backward, "optimizer step": step})


_ST_DTYPES = {"torch.float32": ("F32", 4), "torch.bfloat16": ("BF16", 2), "torch.float16": ("F16", 2)}


def _header_only(folder: Path, model: Any, config: dict[str, Any]) -> Path:
    """``model``'s parameters as a header-only model.safetensors (tests/model_fixtures.safetensors_header, the
    file truncated up to its full size) beside ``config`` as config.json: what gpulaunch reads, no weights."""
    from model_fixtures import safetensors_header

    params = list(model.named_parameters(remove_duplicate=True))  # tied weights once, as the file holds them
    raw = safetensors_header({name: (_ST_DTYPES[str(p.dtype)][0], tuple(p.shape)) for name, p in params},
                             dict(_ST_DTYPES.values()))
    path = folder / "model.safetensors"
    path.write_bytes(raw)
    os.truncate(path, len(raw) + sum(p.numel() * _ST_DTYPES[str(p.dtype)][1] for _, p in params))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_model(case: Case, folder: Path) -> Path:
    """config.json + a header-only model.safetensors of the case's model as save_pretrained would write it
    (tied weights once; the checkpoint's dtype: bf16 for a bf16 case, else fp32). The data is a hole."""
    t = _torch()
    from transformers import AutoConfig, AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    raw = config_of(case)
    config = AutoConfig.for_model(**raw)
    with t.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=t.bfloat16 if case.precision == "bf16" else t.float32)
    return _header_only(folder, model, {**config.to_dict(),
                                        "torch_dtype": "bfloat16" if case.precision == "bf16" else "float32"})


def setup_of(case: Case) -> Any:
    from gpu_launch.fit.training.setup import TrainingSetup

    return TrainingSetup(model="m", launcher="trainer", method=case.method, precision=case.precision,
                         quant_bits=4 if case.method == "qlora" else None,
                         micro_batch=case.micro_batch, seq_len=case.seq_len,
                         gradient_checkpointing=case.gradient_checkpointing, optimizer=case.optimizer,
                         loss=case.loss, lora_r=case.lora_r if case.method != "full" else None,
                         lora_targets=case.lora_targets if case.method != "full" else (),
                         loss_chunk_tokens=CHUNK)


def gpulaunch_peak(case: Case, folder: Path) -> Any:
    """gpulaunch's own answer for the model in ``folder`` (read from its headers) and the case's setup."""
    from gpu_launch.fit.training.memory import peak
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config = json.loads((folder / "config.json").read_text())
    return peak(facts, config, setup_of(case), 1)


def ours(case: Case, folder: Path) -> dict[str, dict[str, int]]:
    """gpulaunch's phases for the model in ``folder``, in the oracle's terms."""
    from gpu_launch.fit.training.memory import phases
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config = json.loads((folder / "config.json").read_text())
    ph = phases(facts, config, setup_of(case), 1)
    out = {}
    for name in ("backward", "optimizer step"):
        p = ph[name]
        act = p["activations"] + p["loss"] + (p["other"] if name == "backward" else 0)
        opt_ = p["optimizer"] + (p["other"] if name != "backward" else 0)
        out[name] = {"weights": p["weights"], "gradients": p["gradients"], "optimizer": opt_, "activations": act,
                     "total": sum(p.values())}
    return out


def compare(case: Case, folder: Path) -> dict[str, Any]:
    """Both answers side by side: {"peak": (gpulaunch, pytorch), "peak_at": (...), phase: {term: (g, p)}}."""
    got = gpulaunch_peak(case, folder)
    mine = ours(case, folder)
    m = measure(case)
    # PyTorch's backward phase is the whole of it: gpulaunch's "end of backward" is a moment of that phase
    at = "backward" if got.peak_at == "end of backward" else got.peak_at
    out: dict[str, Any] = {"peak": (got.peak_bytes, m.peak), "peak_at": (at, m.peak_at)}
    for name in ("backward", "optimizer step"):
        out[name] = {k: (mine[name][k], m.phases[name][k]) for k in mine[name]}
    return out


__all__ = ["Case", "FAMILIES", "measure", "write_model", "gpulaunch_peak", "compare", "replace"]


def matrix() -> list[Case]:
    """The cases the tests and benchmarks/training_sizing.py check: Llama over the whole matrix (fp32,
    autocast, bf16 full, LoRA × checkpointing off/on × plain/chunked loss × 128 and 256 tokens), every
    other family over bf16 full and LoRA × checkpointing off/on, a chunked loss and the longer sequence."""
    out = []
    for prec, meth in (("fp32", "full"), ("amp_bf16", "full"), ("bf16", "full"), ("bf16", "lora")):
        for gc in (False, True):
            for loss in ("plain", "chunked"):
                for seq in (128, 256):
                    out.append(Case("llama", precision=prec, method=meth, gradient_checkpointing=gc, loss=loss,
                                    seq_len=seq))
    for fam in ("qwen3", "qwen2", "mistral", "phi3", "gemma2", "gemma3", "qwen2_moe"):
        targets = ("qkv_proj",) if fam == "phi3" else ("q_proj", "v_proj")  # phi3 fuses q, k and v
        for meth in ("full", "lora"):
            for gc in (False, True):
                out.append(Case(fam, method=meth, gradient_checkpointing=gc, lora_targets=targets))
        out.append(Case(fam, loss="chunked"))
        out.append(Case(fam, seq_len=256))
        out.append(Case(fam, precision="amp_bf16"))
    for fam in ("llama", "qwen3", "gemma2"):
        for gc in (False, True):
            out.append(Case(fam, method="qlora", gradient_checkpointing=gc))
    out.append(Case("llama", method="lora", lora_targets=("all-linear",)))
    out.append(Case("llama", method="lora", lora_targets=("all-linear",), gradient_checkpointing=True))
    out.append(Case("llama", optimizer="adamw_torch_fused"))
    out.append(Case("llama", optimizer="sgd"))
    for opt in ("sgd_momentum", "adafactor", "adamw_8bit"):
        out.append(Case("llama", optimizer=opt))
        out.append(Case("qwen3", optimizer=opt, gradient_checkpointing=True))
    out.append(Case("llama", precision="fp32", optimizer="adafactor"))
    out.append(Case("llama", micro_batch=2))
    return out


#: Real widths (Llama-3.1-8B's config.json), a few layers: the same step on the ``meta`` device.
LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "max_position_embeddings": 8192, "tie_word_embeddings": False}


def _cuda_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: Any = None,
                    dropout: float = 0.0, **kwargs: Any) -> Any:
    """The kernel CUDA's sdpa picks for a bf16 causal step without a mask (flash), called directly so that its
    meta kernel gives what it saves (the math fallback a meta or CPU sdpa would take keeps s² scores)."""
    t = _torch()
    n_rep = query.shape[1] // key.shape[1]
    if n_rep > 1:  # flash takes as many k/v heads as q heads (sdpa's enable_gqa expands them the same way)
        key, value = key.repeat_interleave(n_rep, dim=1), value.repeat_interleave(n_rep, dim=1)
    out = t.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, True, False, scale=scaling)[0]
    return out.transpose(1, 2).contiguous(), None


def measure_meta(raw: dict[str, Any], case: Case) -> Measured:
    """PyTorch's count of two steps of the real model at real widths, on the meta device (shapes, no data)."""
    t = _torch()
    from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM

    AttentionInterface.register("cuda_sdpa_meta", _cuda_attention)
    with t.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**raw), attn_implementation="cuda_sdpa_meta",
                                                 dtype=t.bfloat16)
    if case.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    opt = t.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = t.zeros((case.micro_batch, case.seq_len), dtype=t.long, device="meta")
    tracker = _tracker()
    tracker.track_external(model, opt)
    meta = t.device("meta")
    with tracker:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tracker.reset_mod_stats()
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        backward = _terms(tracker.get_tracker_snapshot("peak").get(meta, {}))
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        opt.step()
        step = _terms(tracker.get_tracker_snapshot("peak").get(meta, {}))
    return Measured({"backward": backward, "optimizer step": step})


def write_config_model(raw: dict[str, Any], folder: Path) -> Path:
    """config.json + header-only bf16 safetensors for a raw config (as write_model does for a case)."""
    t = _torch()
    from transformers import AutoConfig, AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.for_model(**raw)
    with t.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=t.bfloat16)
    return _header_only(folder, model, {**config.to_dict(), "torch_dtype": "bfloat16"})
