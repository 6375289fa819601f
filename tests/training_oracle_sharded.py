"""The oracle of sharded training sizing: PyTorch's own count of one rank of an FSDP2 step over 2 ranks, on CPU.

One process plays rank 0 of 2: ``torch.distributed`` with the fake backend (``FakeStore``; the collectives
return without moving data, each tensor as large as on a real rank). The model is the real Hugging Face
model built from a config (tests/training_oracle.py ``build``), wrapped by accelerate's own FSDP2 code
(accelerate/utils/fsdp_utils.py ``fsdp2_prepare_model``: what Trainer ``--fsdp "full_shard auto_wrap"`` and
an accelerate FSDP config with ``fsdp_version: 2`` run: each decoder layer a unit, the input embedding a
unit, the final norm and the head one unit kept unsharded from forward to backward, the trainable
parameters upcast to fp32 when mixed precision is on, ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=bf16)``), and counted by ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`` over two
real steps, each phase's peak as tests/training_oracle.py ``measure`` takes it.

FSDP2 refuses parameters on the ``meta`` device (_fsdp_param_group.py ``_validate_no_meta_params``) and the
step copies out of them, so the real 8B widths cannot be measured this way: small configs only.
CPU offload (``CPUOffloadPolicy``) on a CPU-only machine keeps everything on the one device, so the host's
share is read from the tracker's categories (sharded parameters, sharded gradients, optimizer states:
what _fsdp_param.py keeps on the host under offload), not from a second device.
"""

from __future__ import annotations

import logging
import types
from dataclasses import dataclass, field, replace
from typing import Any

from training_oracle import CHUNK, Case, FAMILIES, Measured, _chunked_loss, _Null, build, setup_of

WORLD = 2

#: Wider than the loss-bound tiny configs, a short sequence: the weights and their gathered units, not the
#: logits, decide the peak (the case of a real 8B at 2 ranks); untied, so the embedding is a unit of its own.
FAMILIES.setdefault("llama_wide", {"model_type": "llama", "hidden_size": 256, "intermediate_size": 704,
                                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                   "vocab_size": 2048, "max_position_embeddings": 1024,
                                   "tie_word_embeddings": False})


@dataclass(frozen=True)
class ShardCase:
    """A case (tests/training_oracle.py) run over ``world`` ranks: FSDP2 ``strategy`` "full"
    (reshard_after_forward=True, FULL_SHARD) or "grad_op" (False, SHARD_GRAD_OP), accelerate's mixed precision
    bf16 or none, CPU offload of the sharded states."""

    case: Case = field(default_factory=lambda: Case("llama"))
    strategy: str = "full"
    mixed: bool = True
    offload: bool = False
    world: int = WORLD

    @property
    def name(self) -> str:
        return (f"{self.case.name}-{self.case.optimizer}-fsdp_{self.strategy}{self.world}"
                + ("-mp" if self.mixed else "") + ("-offload" if self.offload else ""))


def _accelerator(plugin: Any, mixed: bool, device: Any) -> Any:
    """What fsdp2_prepare_model reads of the Accelerator: its FSDP plugin, mixed precision, no device mesh."""
    return types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin),
                                 mixed_precision="bf16" if mixed else "no", is_main_process=True,
                                 torch_device_mesh=None, parallelism_config=None, device=device)


def _optimizer(case: Case, model: Any) -> Any:
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if case.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if case.optimizer == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if case.optimizer == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-3, fused=True)
    return torch.optim.AdamW(params, lr=1e-3, foreach=True)


_WEIGHTS = ("Sharded Param", "Unsharded Param", "Buffer", "All Gather")
_GRADS = ("Sharded Grad", "Unsharded Grad", "Reduce Scatter")
_HOST = ("Sharded Param", "Sharded Grad", "OptState")


def _terms(snap: dict[Any, int], offload: bool) -> dict[str, int]:
    s = {str(getattr(k, "value", k)): v for k, v in snap.items()}
    out = {"weights": sum(s.get(k, 0) for k in _WEIGHTS), "gradients": sum(s.get(k, 0) for k in _GRADS),
           "optimizer": s.get("OptState", 0), "activations": s.get("Activation", 0) + s.get("Temp", 0),
           "total": s.get("Total", 0), "host": 0}
    if offload:  # the sharded states live in host RAM (_fsdp_param.py: offload_to_cpu), the rest on the GPU
        out["host"] = sum(s.get(k, 0) for k in _HOST)
        out["weights"] -= s.get("Sharded Param", 0)
        out["gradients"] -= s.get("Sharded Grad", 0)
        out["optimizer"] = 0
        out["total"] -= out["host"]
    return out


def measure_sharded(sc: ShardCase) -> Measured:
    """Rank 0's count of step 2 over ``sc.world`` fake ranks, each phase's peak (tests/training_oracle.py
    Measured; with offload, "host" is the host's share at that moment and "total" the GPU's)."""
    import torch
    import torch.distributed as dist
    from accelerate.utils import FullyShardedDataParallelPlugin
    import accelerate.utils.fsdp_utils as fsdp_utils
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # accelerate's logger insists on an initialised Accelerator; the wrapping code itself does not need one
    fsdp_utils.logger = logging.getLogger("accelerate.utils.fsdp_utils")
    case = sc.case
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=sc.world)
    try:
        model = build(case)
        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                reshard_after_forward=sc.strategy == "full",
                                                cpu_offload=sc.offload)
        if sc.offload:  # pinned host memory needs CUDA; the policy is otherwise the same
            from torch.distributed.fsdp import CPUOffloadPolicy

            plugin.cpu_offload = CPUOffloadPolicy(pin_memory=False)
        if sc.mixed:
            plugin.set_mixed_precision("bf16")
        model = fsdp_utils.fsdp2_prepare_model(_accelerator(plugin, sc.mixed, torch.device("cpu")), model)
        opt = _optimizer(case, model)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, FAMILIES[case.family]["vocab_size"], (case.micro_batch, case.seq_len), generator=g)
        tracker = FSDPMemTracker(model, opt)

        def forward() -> Any:
            # accelerate's native_amp: the forward under autocast when mixed precision is on (accelerator.py
            # prepare_model), as Trainer runs it
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if sc.mixed or case.precision == "amp_bf16" \
                else _Null()
            with ctx:
                if case.loss == "chunked":
                    return _chunked_loss(model, ids, CHUNK)
                return model(input_ids=ids, labels=ids).loss

        cpu = torch.device("cpu")
        # the first step outside the tracker, as tests/training_oracle.py measure runs it: under it, the tracker's
        # own hooks kept two of a checkpointed step's tensors alive into the second
        loss = forward()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        with tracker:
            tracker._peak_mem, tracker._peak_mem_snap = {}, {}
            loss = forward()
            loss.backward()
            del loss
            backward = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}), sc.offload)
            tracker._peak_mem, tracker._peak_mem_snap = {}, {}
            opt.step()
            step = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}), sc.offload)
            opt.zero_grad(set_to_none=True)
    finally:
        dist.destroy_process_group()
    return Measured({"backward": backward, "optimizer step": step})


def sharded_setup(sc: ShardCase) -> Any:
    """gpulaunch's setup for the same launch: Trainer ``--fsdp "full_shard auto_wrap" [--bf16]`` (or
    shard_grad_op, offload), ``sc.world`` processes."""
    return replace(setup_of(sc.case), sharding="fsdp_full" if sc.strategy == "full" else "fsdp_grad_op",
                   offload_optimizer=sc.offload, offload_params=sc.offload, mixed_precision=sc.mixed,
                   nproc=sc.world)


def compare_sharded(sc: ShardCase, folder: Any) -> dict[str, Any]:
    """Both answers side by side, as tests/training_oracle.py compare: {"peak": (gpulaunch, pytorch),
    "peak_at": ..., "host": ..., phase: {term: (gpulaunch, pytorch)}}."""
    import json

    from gpu_launch.fit.training.memory import peak, phases
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config = json.loads((folder / "config.json").read_text())
    setup = sharded_setup(sc)
    got = peak(facts, config, setup, sc.world)
    ph = phases(facts, config, setup, sc.world)
    m = measure_sharded(sc)
    out: dict[str, Any] = {"peak": (got.peak_bytes, m.peak), "peak_at": (got.peak_at, m.peak_at),
                           "host": (got.host_bytes, max(p["host"] for p in m.phases.values()))}
    for name in ("backward", "optimizer step"):
        p = ph[name]
        mine = {"weights": p["weights"], "gradients": p["gradients"],
                "optimizer": p["optimizer"] + (p["other"] if name != "backward" else 0),
                "activations": p["activations"] + p["loss"] + (p["other"] if name == "backward" else 0),
                "total": sum(p.values())}
        out[name] = {k: (mine[k], m.phases[name][k]) for k in mine}
    return out


def sharded_matrix() -> list[ShardCase]:
    """The cases benchmarks/training_sizing.py --sharded checks: FULL_SHARD and SHARD_GRAD_OP × mixed precision
    or not × checkpointing off/on over the families, autocast weights, the wide model at 2 and 8 ranks, the
    other optimizers, CPU offload. (Chunked losses are left out: the oracle's chunked loss calls the head's
    weight outside its FSDP unit, which FSDP refuses.)"""
    out = []
    for strategy in ("full", "grad_op"):
        for mixed in (True, False):
            for gc in (False, True):
                out.append(ShardCase(Case("llama", gradient_checkpointing=gc), strategy=strategy, mixed=mixed))
    for fam in ("qwen3", "qwen2", "mistral", "phi3", "gemma2", "qwen2_moe"):
        out.append(ShardCase(Case(fam)))
        out.append(ShardCase(Case(fam, gradient_checkpointing=True)))
    out.append(ShardCase(Case("llama", precision="amp_bf16")))
    out.append(ShardCase(Case("llama", seq_len=256)))
    for world in (2, 8):
        for gc in (False, True):
            out.append(ShardCase(Case("llama_wide", gradient_checkpointing=gc, seq_len=32), world=world))
        out.append(ShardCase(Case("llama_wide", seq_len=32, optimizer="sgd"), world=world))
        out.append(ShardCase(Case("llama_wide", seq_len=64, gradient_checkpointing=True,
                                  optimizer="adamw_torch_fused"), world=world))
    out.append(ShardCase(Case("qwen3", gradient_checkpointing=True, optimizer="sgd"), world=8))
    for gc in (False, True):  # peft's adapters gathered in bf16 (param_dtype): no fp32 casts of their inputs
        out.append(ShardCase(Case("llama", method="lora", gradient_checkpointing=gc)))
    out.append(ShardCase(Case("llama", optimizer="sgd_momentum")))
    out.append(ShardCase(Case("llama", optimizer="adamw_torch_fused")))
    for gc in (False, True):
        out.append(ShardCase(Case("llama", gradient_checkpointing=gc), offload=True))
        out.append(ShardCase(Case("llama_wide", gradient_checkpointing=gc, seq_len=32), offload=True))
    return out


__all__ = ["ShardCase", "measure_sharded", "sharded_setup", "compare_sharded", "sharded_matrix", "WORLD"]
