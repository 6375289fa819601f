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
    version: int = 2  # 1: FullyShardedDataParallel as accelerate's FSDP1 plugin wraps it (measure_fsdp1)
    # FSDP1's use_orig_params (accelerate launch's and the Trainer's default: True; the plugin's own: False)
    orig_params: bool = False

    @property
    def name(self) -> str:
        return (f"{self.case.name}-{self.case.optimizer}-fsdp{'1' if self.version == 1 else ''}_{self.strategy}"
                f"{self.world}" + ("-mp" if self.mixed else "") + ("-offload" if self.offload else "")
                + ("-orig" if self.orig_params else ""))


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


def _collect() -> None:
    """An earlier case's garbage collected before this one is counted, not freed inside its counted regions. A
    guard, not a proven cure: one loaded CI run counted an FSDP1 case's weights at half (qwen3, 8 ranks, after
    the TRL oracles in the same process), which neither that file alone nor the training files together did."""
    import gc

    gc.collect()


def measure_sharded(sc: ShardCase) -> Measured:
    """Rank 0's count of step 2 over ``sc.world`` fake ranks, each phase's peak (tests/training_oracle.py
    Measured; with offload, "host" is the host's share at that moment and "total" the GPU's)."""
    if sc.version == 1:
        return measure_fsdp1(sc)
    import torch
    import torch.distributed as dist
    from accelerate.utils import FullyShardedDataParallelPlugin
    import accelerate.utils.fsdp_utils as fsdp_utils
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # accelerate's logger insists on an initialised Accelerator; the wrapping code itself does not need one
    fsdp_utils.logger = logging.getLogger("accelerate.utils.fsdp_utils")
    case = sc.case
    _collect()
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


def _live(model: Any, opt: Any) -> dict[str, int]:
    """The bytes of what outlives a step's phases: parameters and buffers, gradients, optimizer states."""
    import torch

    seen: set[int] = set()

    def size(ts: Any) -> int:
        n = 0
        for t in ts:
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                n += st.nbytes()
        return n

    return {"weights": size(list(model.parameters()) + list(model.buffers())),
            "gradients": size(p.grad for p in model.parameters() if p.grad is not None),
            "optimizer": size(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))}


def _allocated_peak(prof: Any) -> int:
    """The highest the CPU allocator's running count rose over a profiled region (its [memory] events, read
    from the trace, which names each block's address). A free counts only when its block was allocated within
    the region: the CPU allocator's reporter remembers the sizes of blocks allocated under an earlier profile
    (c10/core/CPUAllocator.cpp ProfiledCPUMemoryReporter), so a later block at the same address was once
    reported freed with the old size, and the same case counted up to 7 % less after other cases had run."""
    import json
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            events = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    finally:
        os.unlink(path)
    run = best = 0
    held: dict[int, int] = {}
    for ev in sorted(events, key=lambda a: a["Ev Idx"]):
        nbytes, addr = int(ev["Bytes"]), int(ev["Addr"])
        if nbytes > 0:
            held[addr] = held.get(addr, 0) + nbytes
        elif addr in held:
            nbytes = -min(-nbytes, held.pop(addr))
        else:
            continue
        run += nbytes
        best = max(best, run)
    return best


def measure_fsdp1(sc: ShardCase) -> Measured:
    """Rank 0 of an FSDP1 step: FullyShardedDataParallel as accelerate's prepare_model builds it from its FSDP1
    plugin (accelerate/accelerator.py prepare_model: the plugin's sharding strategy, auto wrap policy by the
    decoder layer class, mixed precision, limit_all_gathers, then each unit's flat parameter upcast to fp32
    under mixed precision), ``device_id`` the CPU (FSDP1 refuses a CPU-only machine otherwise:
    torch/distributed/fsdp/_init_utils.py _init_device_handle "FSDP needs a non-CPU accelerator device"),
    ``use_orig_params`` as the case says (MemTracker and FSDPMemTracker cannot count it with True: the original
    parameters are views, and MemTracker registers a post-accumulate-grad hook on each, which raises on non-leaf
    tensors; True and False hold the same bytes within 100 B). Counted by the profiler's allocator events: what lives between phases plus the running count's peak.
    Per term only the total is PyTorch's; weights, gradients and states are what lives at each phase's start."""
    import torch
    import torch.distributed as dist
    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.testing._internal.distributed.fake_pg import FakeStore

    pin = torch.Tensor.pin_memory
    case = sc.case
    _collect()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=sc.world)
    try:
        model = build(case)
        # prepare_model passes the plugin's ``sharding_strategy`` (FULL_SHARD by default, SHARD_GRAD_OP as the
        # config's fsdp_sharding_strategy says) and its ``cpu_offload`` (set_cpu_offload: CPUOffload(offload_params))
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=1, auto_wrap_policy="transformer_based_wrap", use_orig_params=sc.orig_params,
            sharding_strategy="FULL_SHARD" if sc.strategy == "full" else "SHARD_GRAD_OP", cpu_offload=sc.offload)
        if sc.mixed:
            plugin.set_mixed_precision("bf16")
        if case.method != "full":
            # a PEFT model under the Trainer's --fsdp: transformers/distributed/fsdp.py update_fsdp_plugin_peft sets
            # peft's policy (peft/utils/other.py fsdp_auto_wrap_policy: each leaf module whose weight trains, the
            # adapters' lora_A and lora_B, a unit of its own, beside the decoder layers)
            from peft.utils.other import fsdp_auto_wrap_policy

            plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)
        else:
            plugin.set_auto_wrap_policy(model)
        if sc.offload:
            # _flat_param.py init_flat_param_attributes pins the host shard and its gradient (pin_memory needs an
            # accelerator); on a CPU-only machine the same tensors unpinned
            torch.Tensor.pin_memory = lambda self, *a, **k: self  # type: ignore[method-assign]
            # and _runtime_utils.py _post_backward_final_callback waits on the device's stream for the gradients'
            # copies to the host; torch.cpu's stream, where every copy is done already, has nothing to wait on
            torch.cpu.Stream.synchronize = lambda self: None  # type: ignore[attr-defined]
        model = FSDP(model, sharding_strategy=plugin.sharding_strategy,
                     cpu_offload=plugin.cpu_offload, auto_wrap_policy=plugin.auto_wrap_policy,
                     mixed_precision=plugin.mixed_precision_policy, backward_prefetch=plugin.backward_prefetch,
                     forward_prefetch=plugin.forward_prefetch, use_orig_params=sc.orig_params,
                     limit_all_gathers=plugin.limit_all_gathers, device_id=torch.device("cpu"))
        if sc.mixed:  # accelerate's "FSDP upcast of low precision parameters"
            for unit in FSDP.fsdp_modules(model):
                flat = unit._flat_param if unit._has_params else None
                if flat is not None and flat.requires_grad and flat.dtype != torch.float32:
                    flat.data = flat.data.to(torch.float32)
                    unit._handle._orig_param_dtype = torch.float32
        opt = _optimizer(case, model)
        ids = torch.randint(0, FAMILIES[case.family]["vocab_size"], (case.micro_batch, case.seq_len),
                            generator=torch.Generator().manual_seed(1))

        def forward() -> Any:
            with torch.autocast("cpu", dtype=torch.bfloat16) if sc.mixed else _Null():
                return model(input_ids=ids, labels=ids).loss

        loss = forward()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        phases = {}
        for name in ("backward", "optimizer step"):
            live = _live(model, opt)
            held = _fsdp1_host(model, opt) if sc.offload else {}
            host = sum(held.values())
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as p:
                if name == "backward":
                    loss = forward()
                    loss.backward()
                    del loss
                else:
                    opt.step()
            rise = _allocated_peak(p)
            total = sum(live.values()) + rise
            if sc.offload:
                # the device's share: what is not the host's (one allocator on a CPU-only machine). The host's
                # gradient is there with no .grad set (zero_grad drops the view, not _cpu_grad); the optimizer steps
                # the host's shards, so its temporaries are the host's too
                total += max(0, held["grads"] - live["gradients"])
                if name == "optimizer step":
                    host += rise
                live = {"weights": live["weights"] - held["shards"], "gradients": 0, "optimizer": 0}
                total -= host
            phases[name] = {**live, "activations": total - sum(live.values()), "total": total, "host": host}
        opt.zero_grad(set_to_none=True)
    finally:
        torch.Tensor.pin_memory = pin  # type: ignore[method-assign]
        dist.destroy_process_group()
    return Measured(phases)


def _fsdp1_host(model: Any, opt: Any) -> dict[str, int]:
    """What FSDP1's CPU offload keeps in host RAM, by role (torch/distributed/fsdp/_flat_param.py
    ``init_flat_param_attributes``: each unit's sharded flat parameter, ``_local_shard``, and its sharded gradient,
    ``_cpu_grad``, allocated once on the CPU; the optimizer's states, made beside the CPU shards it steps)."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def nbytes(t: Any) -> int:
        return t.untyped_storage().nbytes() if torch.is_tensor(t) else 0

    units = [u for u in FSDP.fsdp_modules(model) if u._has_params]
    return {"shards": sum(nbytes(u._flat_param._local_shard) for u in units),
            "grads": sum(nbytes(getattr(u._flat_param, "_cpu_grad", None)) for u in units),
            "states": sum(nbytes(v) for st in opt.state.values() for v in st.values())}


def sharded_setup(sc: ShardCase) -> Any:
    """gpulaunch's setup for the same launch: Trainer ``--fsdp "full_shard auto_wrap" [--bf16]`` (or
    shard_grad_op, offload), ``sc.world`` processes."""
    return replace(setup_of(sc.case), sharding="fsdp_full" if sc.strategy == "full" else "fsdp_grad_op",
                   offload_optimizer=sc.offload, offload_params=sc.offload, mixed_precision=sc.mixed,
                   nproc=sc.world, fsdp_version=sc.version)


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


#: FSDP1 (accelerate's FullyShardedDataParallel): its root unit holds the untied embedding with the head; 2 and 8
#: ranks, untied and tied, checkpointing off and on, use_orig_params False (the plugin's default) and True
#: (accelerate launch's and the Trainer's), the wide model late in backward and at its root's end
FSDP1 = [ShardCase(Case(fam, gradient_checkpointing=gc), world=world, version=1, orig_params=orig)
         for fam in ("llama", "qwen3") for world in (2, 8) for gc in (False, True) for orig in (False, True)] + [
    ShardCase(Case("llama_wide", seq_len=32), version=1, orig_params=orig) for orig in (False, True)] + [
    ShardCase(Case("llama_wide", seq_len=32, optimizer="sgd"), world=8, version=1, orig_params=orig)
    for orig in (False, True)]

#: FSDP1's other forms: CPU offload (CPUOffload(offload_params=True), the small model and the wide one, which peaks at
#: its root's end), LoRA (peft's fsdp_auto_wrap_policy; use_orig_params True, the Trainer's default: with False
#: peft reads the adapters' 16-bit unsharded dtype and casts nothing, 2.4 % below the plan; checkpointing off and
#: on; offloaded), SHARD_GRAD_OP (offloaded too)
FSDP1_FORMS = [ShardCase(Case("llama"), offload=True, version=1),
               ShardCase(Case("llama_wide", seq_len=32), offload=True, version=1),
               ShardCase(Case("llama", method="lora"), version=1, orig_params=True),
               ShardCase(Case("llama", method="lora", gradient_checkpointing=True), version=1, orig_params=True),
               ShardCase(Case("llama"), strategy="grad_op", version=1),
               ShardCase(Case("llama_wide", seq_len=32), strategy="grad_op", version=1),
               ShardCase(Case("llama_wide", seq_len=32), strategy="grad_op", offload=True, version=1),
               ShardCase(Case("llama", method="lora"), offload=True, version=1, orig_params=True)]


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
    for sc in FSDP1 + FSDP1_FORMS:
        out.append(sc)
    out.append(ShardCase(Case("llama", optimizer="adamw_torch_fused")))
    for gc in (False, True):
        out.append(ShardCase(Case("llama", gradient_checkpointing=gc), offload=True))
        out.append(ShardCase(Case("llama_wide", gradient_checkpointing=gc, seq_len=32), offload=True))
    return out


__all__ = ["ShardCase", "measure_sharded", "measure_fsdp1", "sharded_setup", "compare_sharded", "sharded_matrix",
           "WORLD", "FSDP1", "FSDP1_FORMS"]
