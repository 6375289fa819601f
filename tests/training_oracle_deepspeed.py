"""The oracle of DeepSpeed ZeRO sizing: PyTorch's own count of rank 0 of a real DeepSpeed ZeRO step over 2 ranks,
on CPU (issue 34).

Two processes (``torch.multiprocessing.spawn``), one gloo process group (DeepSpeed's CPU accelerator,
``DS_ACCELERATOR=cpu``: gloo when oneCCL's bindings are absent, deepspeed/accelerator/cpu_accelerator.py
``CPU_Accelerator.__init__``). Each builds the real Hugging Face model from a config (tests/training_oracle.py
``build``) and hands it to DeepSpeed as the Trainer's ``--deepspeed ds.json`` does: the config's ``"auto"``
values filled by transformers' own HfTrainerDeepSpeedConfig (integrations/deepspeed.py
``trainer_config_process`` from the Trainer's arguments, ``trainer_config_finalize`` from the model's
hidden size: reduce_bucket_size h², stage3_prefetch_bucket_size 0.9·h², stage3_param_persistence_threshold
10·h), the Trainer's own torch AdamW passed in with ``zero_allow_untested_optimizer`` (``deepspeed_optim_sched``:
no "optimizer" section), ZeRO-3 models built under ``deepspeed.zero.Init`` (transformers builds them there
when an HfDeepSpeedConfig is alive), then ``deepspeed.initialize``, ``engine(...)``, ``engine.backward``,
``engine.step`` twice. Rank 0 counts the second step with ``torch.distributed._tools.mem_tracker.MemTracker``:
every tensor alive before it (found by the garbage collector: DeepSpeed's flat partitions, fp32 master
copies, gradient buffers live in its Python objects) is given to the tracker, whose dispatch mode then sees
every tensor the step allocates; each phase's peak is taken as tests/training_oracle.py ``measure`` takes it.

DeepSpeed's process group JIT-compiles one C++ op on CPU (deepspeed/comm/torch.py ``build_shm_op``, the
shared-memory kernel of ``inference_all_reduce``; a training step never calls it): 346 s on this machine's
2 cores, so it is skipped here (``build_shm_op`` returns None, as where the op is not compatible). The
ZeRO-Offload cases (``offload``) need DeepSpeedCPUAdam, which DeepSpeed makes from the JSON's "optimizer" under
offload and JIT-builds (deepspeed/ops/op_builder/cpu_adam.py ``CPUAdamBuilder``, ninja and g++: about 2 minutes
on 2 cores, once, cached in ``TORCH_EXTENSIONS_DIR``); the other cases use torch's own optimizer.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from training_oracle import Case, FAMILIES, Measured, _Null, _tracker, build, setup_of

WORLD = 2

# The sharded oracle's wider llama (layers of 737,792 elements, a 524,288-element head: a small
# stage3_max_reuse_distance releases some of them after forward): importing it registers llama_wide
import training_oracle_sharded  # noqa: E402,F401

#: llama_wide 6 layers deep: enough fetches for the coordinator's prefetch to run ahead of the step, and for
#: stage3_max_live_parameters and stage3_max_reuse_distance to bind part-way (memory_zero3.py)
FAMILIES.setdefault("llama_deep", dict(FAMILIES["llama_wide"], num_hidden_layers=6))
#: the deep model's limits: 2e6 live elements (of its 6.3e6), a reuse distance of 1e6
DEEP_LIMITS = (("stage3_max_live_parameters", 2_000_000), ("stage3_max_reuse_distance", 1_000_000))


@dataclass(frozen=True)
class ZeroCase:
    """A case (tests/training_oracle.py) under DeepSpeed ZeRO ``stage`` over ``world`` ranks. ``bf16``: the
    DeepSpeed config's bf16 (the Trainer's --bf16 fills "auto"); the case's precision is the checkpoint's."""

    case: Case = field(default_factory=lambda: Case("llama"))
    stage: int = 3
    bf16: bool = True
    world: int = WORLD
    zero: tuple[tuple[str, Any], ...] = ()  # more zero_optimization keys, as written
    offload: tuple[str, ...] = ()  # "optimizer", "param": offload_optimizer / offload_param to the cpu
    cpu_adam: bool = False  # an "optimizer" section (AdamW): DeepSpeed builds DeepSpeedCPUAdam under offload
    #: every rank counts its step, each phase the largest rank's (a ZeRO-1/2 rank's buffers depend on its partition:
    #: the last rank, the head's owner, reduces first); else rank 0 alone
    every_rank: bool = False

    @property
    def name(self) -> str:
        return (f"{self.case.name}-zero{self.stage}x{self.world}" + ("-bf16" if self.bf16 else "")
                + "".join(f"-{k.replace('stage3_', '')}={v}" for k, v in self.zero)
                + "".join(f"-offload_{o}" for o in self.offload) + ("-cpu_adam" if self.cpu_adam else "") + ("-every_rank" if self.every_rank else ""))

    def ds_config(self) -> dict[str, Any]:
        """The DeepSpeed JSON as a user writes it for the Trainer: "auto" wherever the HF integration fills it."""
        zero: dict[str, Any] = {"stage": self.stage, "reduce_bucket_size": "auto"}
        if self.stage == 3:
            zero.update(stage3_prefetch_bucket_size="auto", stage3_param_persistence_threshold="auto")
        zero.update(self.zero)
        for what in self.offload:
            zero[f"offload_{what}"] = {"device": "cpu", "pin_memory": True}
        out = {"bf16": {"enabled": "auto"}, "zero_optimization": zero, "gradient_clipping": "auto",
               "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
               "train_batch_size": "auto"}
        if self.offload and not self.cpu_adam:
            # the Trainer's torch AdamW on the host: DeepSpeed refuses it unless told (engine.py
            # _configure_optimizer, zero_force_ds_cpu_optimizer)
            out["zero_force_ds_cpu_optimizer"] = False
        if self.cpu_adam:
            out["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                            "weight_decay": "auto"}}
        return out


def _args(zc: ZeroCase) -> Any:
    """What trainer_config_process reads of TrainingArguments (defaults but the batch and --bf16)."""
    import types

    return types.SimpleNamespace(
        world_size=zc.world, per_device_train_batch_size=zc.case.micro_batch, gradient_accumulation_steps=1,
        max_grad_norm=1.0, learning_rate=1e-3, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        weight_decay=0.0, save_on_each_node=False, fp16=False, fp16_full_eval=False, bf16=zc.bf16,
        bf16_full_eval=False, get_warmup_steps=lambda n: 0)


def _live_tensors(torch: Any, before: frozenset[int] = frozenset()) -> list[Any]:
    """Every CPU tensor the garbage collector knows, but those whose storage was alive before the case began
    (an earlier case's engine, which DeepSpeed's hooks keep referenced in this process)."""
    import gc
    import warnings

    gc.collect()
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, torch.Tensor) and obj.device.type == "cpu" \
                        and obj.untyped_storage().data_ptr() not in before:
                    out.append(obj)
            except (ReferenceError, RuntimeError):
                continue
    return out


def _dump(engine: Any, live: list[Any]) -> None:
    names = {}
    for attr, val in vars(engine.optimizer).items():
        for i, t in enumerate(val if isinstance(val, (list, tuple)) else [val]):
            if hasattr(t, "untyped_storage"):
                names.setdefault(t.untyped_storage().data_ptr(), f"opt.{attr}[{i}]")
            elif isinstance(t, (list, tuple)):
                for j, u in enumerate(t):
                    if hasattr(u, "untyped_storage"):
                        names.setdefault(u.untyped_storage().data_ptr(), f"opt.{attr}[{i}][{j}]")
    for n, p in engine.module.named_parameters():
        names.setdefault(p.untyped_storage().data_ptr(), "param " + n)
        if hasattr(p, "ds_tensor"):
            names.setdefault(p.ds_tensor.untyped_storage().data_ptr(), "ds_tensor " + n)
    seen = {}
    for t in live:
        st = t.untyped_storage()
        seen[st.data_ptr()] = (st.nbytes(), str(t.dtype), tuple(t.shape))
    tot = 0
    for ptr, (nb, dt, sh) in sorted(seen.items(), key=lambda kv: -kv[1][0]):
        tot += nb
        if nb >= 1024:
            print(f"  {nb:9d} {dt:15s} {str(sh):20s} {names.get(ptr, '?')}", flush=True)
    print("  live total", tot, flush=True)


def _terms(snap: dict[Any, int]) -> dict[str, int]:
    s = {str(getattr(k, "value", k)): v for k, v in snap.items()}
    return {"weights": s.get("Parameter", 0) + s.get("Buffer", 0), "gradients": s.get("Gradient", 0),
            "optimizer": s.get("Optstate", 0), "other": s.get("Other", 0),
            "activations": s.get("Activation", 0) + s.get("Temp", 0), "total": s.get("Total", 0)}


def _one(zc: ZeroCase, rank: int) -> Measured | None:
    """One case on this rank: two real steps, the second counted on rank 0."""
    import torch
    import deepspeed
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

    case = zc.case
    before = frozenset(t.untyped_storage().data_ptr() for t in _live_tensors(torch))
    hf = HfTrainerDeepSpeedConfig(zc.ds_config())  # alive: from_config builds a ZeRO-3 model under zero.Init
    args = _args(zc)
    hf.trainer_config_process(args)
    try:
        model = build(case)
        hf.trainer_config_finalize(args, model, 10)
        params = [p for p in model.parameters() if p.requires_grad]
        # Trainer.create_optimizer for adamw_torch (foreach, what CUDA picks), then deepspeed_optim_sched's flag;
        # with an "optimizer" section DeepSpeed makes its own (DeepSpeedCPUAdam under offload: engine.py
        # _configure_basic_optimizer)
        opt = None if zc.cpu_adam else torch.optim.AdamW(params, lr=1e-3, foreach=True)
        config = dict(hf.config, zero_allow_untested_optimizer=True)
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config, model_parameters=params)
        opt = opt or engine.optimizer.optimizer  # the DeepSpeedCPUAdam inside ZeRO's wrapper
    finally:
        unset_hf_deepspeed_config()
    g = torch.Generator().manual_seed(1 + rank)
    ids = torch.randint(0, FAMILIES[case.family]["vocab_size"], (case.micro_batch, case.seq_len), generator=g)

    def forward() -> Any:
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if case.precision == "amp_bf16" and not zc.bf16 \
            else _Null()
        with ctx:
            return engine(input_ids=ids, labels=ids).loss

    loss = forward()
    engine.backward(loss)
    engine.step()
    del loss
    if rank != 0 and not zc.every_rank:
        loss = forward()
        engine.backward(loss)
        del loss
        _settle()
        engine.step()
        return None
    tracker = _tracker()  # MemTracker that takes frozen parameters too (LoRA's base)
    live = _live_tensors(torch, before)
    if os.environ.get("DS_ORACLE_DEBUG"):
        _dump(engine, live)
    host = _host_bytes(engine) if zc.offload else 0
    tracker.track_external(engine.module, opt, *live)
    cpu = torch.device("cpu")
    events = _watch_coordinator(engine) if zc.stage == 3 else []
    with tracker:
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        loss = forward()
        engine.backward(loss)
        del loss
        backward = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}))
        _settle()
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        engine.step()
        step = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}))
    del engine, opt, model, live
    phases = {"backward": backward, "optimizer step": step}
    if zc.offload:
        phases["host"] = {"resident": host, "total": 0}
    if events:
        phases["gathered"] = dict(_windows(events, case), total=0)
    return Measured(phases)


def _settle() -> None:
    """Between the backward and the step, on every rank. In full runs under load an offloaded ZeRO-1/2 step was at
    times counted 1 MiB over (17 %; never alone): the size of the flat copy of the gradient the epilogue reduces
    last (stage_1_and_2.py allreduce_bucket's ``flatten``, the embedding's on llama_wide), which gloo's worker thread
    may still hold after the caller's wait has returned. The ranks meet and wait a moment (the backward's count is
    taken already): 4 full runs green since, 2 of 3 red before."""
    import time

    import torch.distributed as dist

    dist.barrier()
    time.sleep(0.2)


def _host_bytes(engine: Any) -> int:
    """The bytes of what ZeRO-Offload keeps on the host, by role (on a CPU-only machine the accelerator's device
    is the cpu too, so the allocator cannot tell them apart): the fp32 master partitions and their fp32
    gradients, the optimizer's states, the 16-bit staging buffers of the partition and of a gradient
    (stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ cpu_offload paths; stage3.py _create_fp32_partitions,
    _setup_for_real_optimizer under offload_optimizer), the offloaded parameters' partitions (offload_param)."""
    import torch

    zo = engine.optimizer
    found: list[Any] = []

    def add(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            found.append(x)
            if x.grad is not None:
                found.append(x.grad)
        elif isinstance(x, (list, tuple)):
            for y in x:
                add(y)
        elif isinstance(x, dict):
            for y in x.values():
                add(y)

    for attr in ("single_partition_of_fp32_groups", "param_buffer_of_bit16_for_cpu_offload_groups",
                 "temp_grad_buffer_for_cpu_offload", "accumulated_grads_in_cpu", "fp32_partitioned_groups_flat",
                 "grad_partitions_flat_buffer"):
        add(getattr(zo, attr, None))
    inner = getattr(zo, "optimizer", None)
    if inner is not None:
        add(list(inner.state.values()))
    if getattr(zo, "offload_param", False):
        add([p.ds_tensor for p in engine.module.parameters() if hasattr(p, "ds_tensor")])
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in found
                if t.device.type == "cpu" and t.numel()}
    if os.environ.get("DS_ORACLE_DEBUG"):
        print("  host by role", sorted(storages.values(), reverse=True), flush=True)
    return sum(storages.values())


def _watch_coordinator(engine: Any) -> list[tuple[str, str, int]]:
    """(fetch or release, the module, the elements gathered after it) at each of the parameter coordinator's
    fetches and releases (partitioned_param_coordinator.py fetch_sub_module, release_sub_module) of the next
    forward and backward; the persistent parameters left out (always gathered)."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    coordinator = engine.optimizer.parameter_offload.get_param_coordinator()
    names = {id(m): n for n, m in engine.module.named_modules()}
    params = [p for p in engine.module.parameters() if not p.ds_persist]
    out: list[tuple[str, str, int]] = []
    fetch, release = coordinator.fetch_sub_module, coordinator.release_sub_module

    def gathered() -> int:
        return sum(p.ds_numel for p in params if p.ds_status != ZeroParamStatus.NOT_AVAILABLE)

    def watched_fetch(module: Any, forward: bool) -> None:
        fetch(module, forward)
        if len(out) < 100_000:
            out.append(("F" if forward else "B", names.get(id(module), ""), gathered()))

    def watched_release(module: Any, forward: bool = False) -> None:
        release(module, forward)
        if len(out) < 100_000:
            out.append(("R", names.get(id(module), ""), gathered()))

    coordinator.fetch_sub_module, coordinator.release_sub_module = watched_fetch, watched_release
    return out


def _windows(events: list[tuple[str, str, int]], case: Case) -> dict[str, int]:
    """The most gathered from the loss (the head's forward returned) to the last layer's first backward release
    ("early"), in the first layer's backward ("late"), and after the final norm's backward fetch ("at_norm"), as
    memory_zero3.py reports them (a PEFT model's modules named under base_model.model)."""
    layers = FAMILIES[case.family]["num_hidden_layers"]
    backward = next(i for i, e in enumerate(events) if e[0] == "B")
    start = next(i for i, e in enumerate(events) if e[0] == "R" and e[1].split(".")[-1] == "lm_head")
    last = next(i for i, e in enumerate(events) if i > backward and e[0] == "R" and f"layers.{layers - 1}." in e[1])
    first = [i for i, e in enumerate(events) if i > backward and "layers.0." in e[1]]
    norm = next(e for i, e in enumerate(events) if i > backward and e[0] == "B" and e[1].endswith("model.norm"))
    return {"early": max(e[2] for e in events[start:last + 1]),
            "late": max(e[2] for e in events[first[0]:first[-1] + 1]), "at_norm": norm[2]}


def _worker(rank: int, world: int, cases: list[ZeroCase], port: int, out: str) -> None:
    import json
    import logging

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed

    # (``import deepspeed.comm.torch`` would give torch itself: deepspeed.comm re-exports a ``torch`` name)
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # the inference all-reduce's C++ kernel: never used by a training step
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    deepspeed.utils.logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    results = []
    for zc in cases:
        m = _one(zc, rank)
        results.append(m.phases if m else None)
    out = out if rank == 0 else f"{out}.{rank}"
    if rank == 0 or any(results):
        with open(out, "w") as f:
            json.dump(results, f)
    # Leave without the interpreter's teardown: a rank once died there of SIGABRT ("terminate called without an
    # active exception": a communication thread still joinable as its C++ object was destroyed), after its work
    # was done, and failed the whole run. Both ranks meet first, so neither leaves while the other still talks.
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_zero(cases: list[ZeroCase]) -> list[Measured]:
    """Rank 0's count of step 2 of each case, all in one pair of processes (one start-up of DeepSpeed)."""
    import json
    import tempfile

    import torch.multiprocessing as mp

    world = {zc.world for zc in cases}
    assert len(world) == 1, "one world size a run"
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # the JIT build of DeepSpeedCPUAdam runs ``ninja`` by name: the one pip put beside this interpreter, where the
    # README's test command runs it from an unactivated venv (PATH without .venv/bin)
    here = os.path.dirname(sys.executable)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        mp.spawn(_worker, args=(world.pop(), cases, _free_port(), out), nprocs=cases[0].world, join=True)
        with open(out) as f:
            results = json.load(f)
        for rank in range(1, cases[0].world):
            if os.path.exists(f"{out}.{rank}"):
                with open(f"{out}.{rank}") as f:
                    results = [_largest(a, b) for a, b in zip(results, json.load(f))]
        return [Measured(p) for p in results]


def _largest(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two ranks' counts of one case, each phase the larger's (every_rank); None: the rank did not count."""
    if not a or not b:
        return a or b
    out = dict(a)
    for name, phase in b.items():
        if name not in ("host", "gathered") and phase.get("total", 0) > a.get(name, {}).get("total", 0):
            out[name] = phase
    return out


def zero_setup(zc: ZeroCase) -> Any:
    """gpulaunch's setup for the same launch: Trainer ``--deepspeed ds.json [--bf16]`` over ``zc.world`` ranks."""
    precision = zc.case.precision
    if zc.bf16 and precision == "fp32":
        precision = "amp_bf16"
    zero = zc.ds_config()["zero_optimization"]
    buckets = tuple((k, v) for k, v in zero.items()
                    if k in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_reuse_distance",
                             "stage3_max_live_parameters", "stage3_param_persistence_threshold"))
    return replace(setup_of(replace(zc.case, precision=precision)), sharding=f"zero{zc.stage}",
                   mixed_precision=zc.bf16, nproc=zc.world, zero_buckets=buckets,
                   offload_optimizer="optimizer" in zc.offload, offload_params="param" in zc.offload)


def compare_zero(zc: ZeroCase, folder: Any, measured: Measured) -> dict[str, Any]:
    """Both answers side by side, as tests/training_oracle.py compare: {"peak": (gpulaunch, pytorch),
    "peak_at": ..., phase: {term: (gpulaunch, pytorch)}}."""
    import json

    from gpu_launch.fit.training.memory import peak, phases
    from gpu_launch.modelfile.read import read_model

    facts = read_model(str(folder))
    config = json.loads((folder / "config.json").read_text())
    setup = zero_setup(zc)
    got = peak(facts, config, setup, zc.world)
    ph = phases(facts, config, setup, zc.world)
    m = measured
    # offload: on a CPU-only machine the host's bytes are in every phase's count; they are counted by role
    # (_host_bytes) and taken out, which leaves what the device holds
    host = m.phases.get("host", {}).get("resident", 0)
    gpu = {name: m.phases[name]["total"] - host for name in ("backward", "optimizer step")}
    at = "backward" if got.peak_at == "end of backward" else got.peak_at
    m_at = max(gpu, key=lambda k: gpu[k])
    # ZeRO-3 offload: the plan's copy of a gradient's partition back to the device, which CUDA makes and the cpu
    # does not (memory_sharding.zero_offload), in the backward's bytes where it counts
    out: dict[str, Any] = {"peak": (got.peak_bytes, gpu[m_at]), "peak_at": (at, m_at),
                           "host": (got.host_bytes, host), "cuda_copy": ph["info"]["cuda_copy"]}
    for name in ("backward", "optimizer step"):
        p = ph[name]
        out[name] = {"total": (sum(p.values()), gpu[name])}
        out[name + " terms"] = {"ours": dict(p), "torch": m.phases[name]}
    return out


def zero_matrix() -> list[ZeroCase]:
    """The cases benchmarks/training_sizing.py --deepspeed checks."""
    out = []
    for stage in (3, 2, 1):
        for gc in (False, True):
            out.append(ZeroCase(Case("llama", gradient_checkpointing=gc), stage=stage))
    for gc in (False, True):
        out.append(ZeroCase(Case("qwen3", gradient_checkpointing=gc)))
    out.append(ZeroCase(Case("llama", precision="fp32"), bf16=False))
    out.append(ZeroCase(Case("llama", precision="fp32"), bf16=True))
    out.append(ZeroCase(Case("llama", precision="fp32"), stage=2, bf16=False))
    for gc in (False, True):
        out.append(ZeroCase(Case("llama", method="lora", gradient_checkpointing=gc)))
    out.append(ZeroCase(Case("mistral")))
    for reuse in (0, 2_000_000):  # the head alone / the head and part of the last layer kept after forward
        for gc in (False, True):
            out.append(ZeroCase(Case("llama_wide", seq_len=32, gradient_checkpointing=gc),
                                zero=(("stage3_max_reuse_distance", reuse),)))
    out.append(ZeroCase(Case("llama_wide", seq_len=32)))
    for gc in (False, True):
        out.append(ZeroCase(Case("llama_deep", seq_len=16, gradient_checkpointing=gc), zero=DEEP_LIMITS))
    out.append(ZeroCase(Case("llama_deep", seq_len=16)))
    # ZeRO-1/2 on the wide model, each rank counted (a rank's gradient buffer is its partition's)
    for stage, gc in ((2, False), (2, True), (1, False)):
        out.append(ZeroCase(Case("llama_wide", seq_len=32, gradient_checkpointing=gc), stage=stage, every_rank=True))
    return out


# DS_ORACLE_DEBUG=1: rank 0 prints every live tensor of 1 KiB and more before step 2 (what DeepSpeed keeps)


__all__ = ["ZeroCase", "DEEP_LIMITS", "measure_zero", "zero_setup", "compare_zero", "zero_matrix", "WORLD"]
