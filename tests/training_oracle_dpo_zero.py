"""The oracle of ``trl dpo`` under DeepSpeed ZeRO-3: PyTorch's count of rank 0 of a DPO step over 2 gloo ranks on
CPU, the reference model wrapped by TRL 1.16's own ``prepare_deepspeed`` (issue 34).

An emulation of what DPOTrainer does (a real DPOTrainer under accelerate + DeepSpeed on 2 CPU ranks is not run),
each step from TRL's source:

* ``DPOTrainer.__init__`` (trl/trainer/dpo_trainer.py) loads the reference while the Trainer's
  HfTrainerDeepSpeedConfig is alive (``create_model_from_path``: from_pretrained builds it under ``zero.Init``,
  partitioned), adds TRL's fused LM head to it (``add_fused_lm_head``) and wraps it with
  ``prepare_deepspeed(self.ref_model, self.accelerator)`` (trl/models/utils.py): a deep copy of the plugin's
  DeepSpeed config as it stands then (TrainingArguments' ``trainer_config_process`` has filled the batch sizes;
  the hidden-size "auto" values are filled by ``trainer_config_finalize`` only at ``train()``), TRL's
  ``"zero_optimization.reduce_bucket_size"``-style keys added at the top level, the "optimizer" and
  offload_optimizer dropped, then ``deepspeed.initialize(model=..., config=...)`` with no optimizer (a
  parameter-offload engine: a coordinator, no gradient buffer, no bucket) and ``model.eval()``;
* the policy is then wrapped as the ZeRO oracle does (tests/training_oracle_deepspeed.py), config finalized;
* ``_compute_loss``: the policy on the 2 × micro-batch rows through the fused head, then under ``no_grad`` the
  reference the same way, the sigmoid DPO loss on the rows' summed log-probs, ``engine.backward``, ``engine.step``.

Rank 0 counts step 2 with MemTracker (the reference's module and partitions tracked too); phases: the policy's
forward, the reference forward (the peak from its call to its return), the backward, the optimizer step.
"""

from __future__ import annotations

import copy
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from training_oracle import FAMILIES, Case, Measured, build
from training_oracle_deepspeed import ZeroCase, _args, _live_tensors, _terms, _tracker, _free_port


@dataclass(frozen=True)
class DpoZeroCase:
    """``zc``'s launch as ``trl dpo``: ``zc.case.micro_batch`` examples, two rows each; TRL's tile ``tile`` wide."""

    zc: ZeroCase = field(default_factory=ZeroCase)
    tile: int = 512

    @property
    def name(self) -> str:
        return f"dpo-{self.zc.name}-tile{self.tile}"


def _ref_events(ref: Any, now: Any = None) -> list[tuple[str, str, int]]:
    """The reference coordinator's gathered elements after each fetch and release (persistent ones included)."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    coordinator = ref.parameter_offload.get_param_coordinator() if hasattr(ref, "parameter_offload") \
        else ref.optimizer.get_param_coordinator()
    names = {id(m): n for n, m in ref.module.named_modules()}
    params = list(ref.module.parameters())
    out: list[tuple[str, str, int]] = []
    fetch, release = coordinator.fetch_sub_module, coordinator.release_sub_module

    def gathered() -> int:
        return sum(p.ds_numel for p in params if p.ds_status != ZeroParamStatus.NOT_AVAILABLE)

    def watched_fetch(module: Any, forward: bool) -> None:
        fetch(module, forward)
        out.append(("F", names.get(id(module), ""), gathered(), now() if now else 0))

    def watched_release(module: Any, forward: bool = False) -> None:
        release(module, forward)
        out.append(("R", names.get(id(module), ""), gathered(), now() if now else 0))

    coordinator.fetch_sub_module, coordinator.release_sub_module = watched_fetch, watched_release
    return out


def _one(dc: DpoZeroCase, rank: int) -> dict[str, Any] | None:
    import torch
    import deepspeed
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config
    from trl.models.utils import prepare_deepspeed
    from trl.trainer.utils import add_fused_lm_head

    zc, case = dc.zc, dc.zc.case
    before = frozenset(t.untyped_storage().data_ptr() for t in _live_tensors(torch))
    hf = HfTrainerDeepSpeedConfig(zc.ds_config())  # alive all step, as under the Trainer (the fused head reads it)
    args = _args(zc)
    hf.trainer_config_process(args)
    at_init = copy.deepcopy(hf.config)  # the plugin's config when DPOTrainer.__init__ wraps the reference
    ref_model = build(case)
    add_fused_lm_head(ref_model)
    accelerator = types.SimpleNamespace(state=types.SimpleNamespace(
        deepspeed_plugin=types.SimpleNamespace(deepspeed_config=at_init)))
    ref = prepare_deepspeed(ref_model, accelerator)
    model = build(case)
    add_fused_lm_head(model)
    hf.trainer_config_finalize(args, model, 10)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=dict(hf.config, zero_allow_untested_optimizer=True),
                                      model_parameters=params)
    g = torch.Generator().manual_seed(1 + rank)
    rows = 2 * case.micro_batch
    ids = torch.randint(0, FAMILIES[case.family]["vocab_size"], (rows, case.seq_len), generator=g)
    labels = ids.clone()
    labels[:, 0] = -100  # a one-token prompt, as tests/training_oracle_dpo.py's

    def policy() -> Any:
        return engine(input_ids=ids, labels=labels, fused_lm_head=True, use_cache=False)

    def reference() -> Any:
        with torch.no_grad():
            return ref(input_ids=ids, labels=labels, fused_lm_head=True, use_cache=False)

    def loss_of(out: Any, ref_out: Any) -> Any:
        logps, ref_logps = out.log_probs.sum(1), ref_out.log_probs.sum(1)
        c, r = logps.chunk(2)
        rc, rr = ref_logps.chunk(2)
        return -torch.nn.functional.logsigmoid(0.1 * ((c - rc) - (r - rr))).mean()

    def step() -> None:
        out = policy()
        loss = loss_of(out, reference())
        del out
        engine.backward(loss)
        del loss
        engine.step()

    step()
    if rank != 0:
        step()
        unset_hf_deepspeed_config()
        return None
    tracker = _tracker()
    live = _live_tensors(torch, before)
    tracker.track_external(engine.module, ref.module, opt, *live)
    cpu = torch.device("cpu")
    events = _ref_events(ref, lambda: tracker.get_tracker_snapshot("current").get(cpu, {}).get("Total", 0))
    coord = ref.parameter_offload if hasattr(ref, "parameter_offload") else ref.optimizer
    settings = {"ref_prefetch": int(coord.get_param_coordinator()._PartitionedParameterCoordinator__prefetch_bucket_sz)
                if hasattr(coord.get_param_coordinator(), "_PartitionedParameterCoordinator__prefetch_bucket_sz") else -1,
                "ref_persistent": sum(p.ds_numel for p in ref.module.parameters() if p.ds_persist),
                "ref_engine": type(ref.optimizer).__name__}
    phases: dict[str, Any] = {}

    def snap(name: str) -> None:
        phases[name] = _terms(tracker.get_tracker_snapshot("peak").get(cpu, {}))
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}

    with tracker:
        tracker._peak_mem, tracker._peak_mem_snap = {}, {}
        out = policy()
        snap("policy forward")
        ref_out = reference()
        snap("reference forward")
        loss = loss_of(out, ref_out)
        del out, ref_out
        engine.backward(loss)
        del loss
        snap("backward")
        engine.step()
        snap("optimizer step")
    unset_hf_deepspeed_config()
    phases["gathered"] = {"ref_max": max((e[2] for e in events), default=0), "total": 0, **settings}
    phases["events"] = {"n": len(events), "total": 0, "log": [list(e) for e in events]}
    if os.environ.get("DS_ORACLE_DEBUG"):
        for e in events:
            print("  ref", e, flush=True)
    return phases


def _worker(rank: int, world: int, cases: list[DpoZeroCase], port: int, out: str) -> None:
    import json
    import logging

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed
    from training_oracle_trl import _cuda_folds, vocab_tile

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # as tests/training_oracle_deepspeed.py
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    deepspeed.utils.logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    results = []
    for dc in cases:
        with vocab_tile(dc.tile), _cuda_folds():
            results.append(_one(dc, rank))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def measure_dpo_zero(cases: list[DpoZeroCase]) -> list[Measured]:
    """Rank 0's count of step 2 of each case, in one pair of processes."""
    import json
    import tempfile

    import torch.multiprocessing as mp

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        mp.spawn(_worker, args=(cases[0].zc.world, cases, _free_port(), out), nprocs=cases[0].zc.world, join=True)
        with open(out) as f:
            return [Measured(p) for p in json.load(f)]


def compare_dpo_zero(dc: DpoZeroCase, folder: Any, measured: Measured) -> dict[str, Any]:
    """The plan's moments beside rank 0's count: {"peak": (ours, torch), "peak_at": ..., "reference forward":
    (ours, torch), phase: (ours, torch)}."""
    import json
    from dataclasses import replace

    from gpu_launch.fit.training.memory import peak, phases
    from gpu_launch.modelfile.read import read_model
    from training_oracle_deepspeed import zero_setup
    from training_oracle_trl import vocab_tile

    facts = read_model(str(folder))
    config = json.loads((folder / "config.json").read_text())
    setup = replace(zero_setup(dc.zc), launcher="trl dpo", loss="fused", loss_chunk_tokens=None, rows_per_example=2,
                    reference_model=True)
    with vocab_tile(dc.tile):
        got = peak(facts, config, setup, dc.zc.world)
        ph = phases(facts, config, setup, dc.zc.world)
    m = measured.phases
    steps = ("policy forward", "reference forward", "backward", "optimizer step")
    m_at = max(steps, key=lambda k: m[k]["total"])
    out: dict[str, Any] = {"peak": (got.peak_bytes, m[m_at]["total"]), "peak_at": (got.peak_at, m_at),
                           "settings": m["gathered"]}
    for name in ("reference forward", "backward", "optimizer step"):
        if name in ph:
            out[name] = (sum(ph[name].values()), m[name]["total"])
            out[name + " terms"] = {"ours": dict(ph[name]), "torch": m[name]}
    return out


__all__ = ["DpoZeroCase", "measure_dpo_zero", "compare_dpo_zero"]
