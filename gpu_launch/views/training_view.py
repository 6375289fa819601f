"""A training launch's plan, as text and as the ``training`` object of each GPU's JSON entry: the step's
per-GPU peak term by term, each labelled [exact]/[rule]/[allowance] as inference plans label theirs, the
moment of the peak and the term that dominates, what was assumed, and what each GPU has left."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

    from gpu_launch.fit.plan import Plan

__all__ = ["training_json", "setup_json", "as_text", "TERMS"]

GiB = 1 << 30
TERMS = ("weights", "gradients", "optimizer", "activations", "loss")


def _gib(n: int) -> str:
    if abs(n) >= GiB:
        return f"{n / GiB:.2f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def training_json(peak: Any) -> dict[str, Any]:
    """The ``training`` object of one GPU's entry (docs/json.md)."""
    return {"peak_bytes": peak.peak_bytes, "peak_at": peak.peak_at, "weights_bytes": peak.weights_bytes,
            "gradients_bytes": peak.gradients_bytes, "optimizer_bytes": peak.optimizer_bytes,
            "activations_bytes": peak.activations_bytes, "loss_bytes": peak.loss_bytes,
            "other_bytes": peak.other_bytes, "allowance_bytes": peak.allowance_bytes, "host_bytes": peak.host_bytes,
            "dominant": peak.dominant, "labels": dict(peak.labels), "rules": list(peak.rules)}


def setup_json(p: Plan) -> dict[str, Any]:
    setup = p.sizing.settings.training.setup
    return {"launcher": setup.launcher, "method": setup.method, "precision": setup.precision,
            "micro_batch": setup.micro_batch, "seq_len": setup.seq_len, "grad_accum": setup.grad_accum,
            "gradient_checkpointing": setup.gradient_checkpointing, "optimizer": setup.optimizer,
            "mixed_precision": setup.mixed_precision, "loss": setup.loss, "lora_r": setup.lora_r,
            "lora_dropout": setup.lora_dropout, "lora_targets": list(setup.lora_targets),
            "quant_bits": setup.quant_bits, "sharding": setup.sharding, "offload_optimizer": setup.offload_optimizer,
            "offload_params": setup.offload_params, "assumed": list(setup.assumed), "sources": list(setup.sources)}


def _how(p: Plan) -> str:
    from gpu_launch.fit.training.steps import SHOWN, sharding_at

    run = p.sizing.settings.training
    s = run.setup
    n = len(p.placement.per_gpu)
    method = {"full": "full fine-tune", "lora": "LoRA", "qlora": f"QLoRA ({s.quant_bits or 4}-bit base)"}[s.method]
    if s.lora_r:
        method += f" r{s.lora_r}" + (f" on {','.join(s.lora_targets)}" if s.lora_targets else "")
    micro = "{micro_batch}=" + str(s.micro_batch) if run.micro_open else str(s.micro_batch)
    shard = SHOWN[sharding_at(s, n)]  # every rank: a several-node placement lists them all
    if s.fsdp_version == 1 and shard.startswith("FSDP "):
        shard = "FSDP1" + shard[4:]  # FullyShardedDataParallel: its root unit sized as it holds it
    return (f"training: {s.launcher}, {method}, {s.precision}, micro-batch {micro} × {s.seq_len} tokens, gradient "
            f"checkpointing {'on' if s.gradient_checkpointing else 'off'}, {s.optimizer}, {s.loss} loss"
            + (", packed" if s.packing else "") + f", {shard}"
            + (f" over {n} GPUs" if n > 1 else "")
            + (", optimizer offloaded to the host" if s.offload_optimizer else ""))


def as_text(p: Plan, why: str = "") -> str:
    m, w = p.sizing.model, p.sizing.model.weights
    s = p.sizing.settings.training.setup
    lines = [f"model: {m.name or m.source} ({m.format}, {m.architecture}, {m.hyper.n_layers} layers"
             + (f", {m.dtype}" if m.dtype else "") + f"): weights {_gib(w.total)} in its files [exact]", _how(p)]
    lines += [f"  assumed: {a}" for a in s.assumed]
    if s.sources:
        lines.append("  read: " + ", ".join(s.sources))
    shares = p.placement.per_gpu
    if p.nodes > 1:
        lines.append(f"nodes: {p.nodes} × {p.gpus_per_node} GPUs, every rank the same share (below: one node)")
        shares = shares[:p.gpus_per_node or len(shares)]
    peak = shares[0].training if shares else None
    if peak is not None:
        lines.append(f"a GPU at the step's peak ({peak.moment}; {peak.dominant} the largest term):")
        for term in TERMS:
            lines.append(f"  {term:<12} {_gib(getattr(peak, term + '_bytes')):>11} [{peak.labels.get(term, 'rule')}]")
        if peak.other_bytes:
            lines.append(f"  {'other':<12} {_gib(peak.other_bytes):>11} [rule] (temporaries no other term names)")
        lines.append(f"  {'peak':<12} {_gib(peak.peak_bytes):>11} (what torch.cuda.max_memory_allocated counts)")
        lines.append(f"  {'allowance':<12} {_gib(peak.allowance_bytes):>11} [allowance] (CUDA context, workspaces, "
                     "NCCL, allocator)")
        if peak.host_bytes:
            lines.append(f"  {'host':<12} {_gib(peak.host_bytes):>11} a process in host memory (offloaded)")
        lines += [f"    {rule}" for rule in peak.rules]
    lines.append(f"{'GPU':>5} {'peak':>11} {'allowance':>11} {'free':>11} {'left':>11}")
    for sh in shares:
        lines.append(f"{sh.gpu:>5} {_gib(sh.weights_bytes + sh.kv_bytes):>11} {_gib(sh.allowance_bytes):>11} "
                     f"{_gib(sh.free_bytes):>11} {_gib(sh.left_bytes):>11}")
    lines += [f"note: {n}" for n in p.placement.notes]
    lines.append("placeholders: " + " ".join(f"{{{k}}}={v}" for k, v in p.shown_placeholders().items()))
    return "\n".join(lines) + "\n" + (why or "")
