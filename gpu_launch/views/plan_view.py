"""``gpulaunch plan``: a model's facts and where each part of it goes, as text or JSON (schema PLAN).

Every byte count carries its kind: weights are *exact* (the files' tensor bytes), the KV cache a
*rule* (the engine's own formula, fit/kv.py), compute buffers an *allowance*.
"""

from __future__ import annotations

from gpu_launch.fit.plan import LABELS, Plan

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["as_json", "as_text"]

GiB = 1 << 30


def _gib(n: int) -> str:
    if abs(n) >= GiB:
        return f"{n / GiB:.2f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def as_json(p: Plan) -> dict[str, Any]:
    out = _as_json(p)
    if p.sizing.engine.layout == "training":  # each GPU's step, and the setup it was sized for
        from gpu_launch.views import training_view

        out["training"] = training_view.setup_json(p)
        for entry, sh in zip(out["per_gpu"], p.placement.per_gpu):
            entry["training"] = training_view.training_json(sh.training)
            entry["training"]["assumed"] = out["training"]["assumed"]
    return out


def _as_json(p: Plan) -> dict[str, Any]:
    s, pl = p.sizing, p.placement
    m, w = s.model, s.model.weights
    per_node = p.gpus_per_node or len(pl.per_gpu)
    allowance = s.settings.reserve if s.settings.reserve is not None else s.engine.allowance
    return {
        "schema": 1,
        "model": {
            "source": m.source, "format": m.format, "architecture": m.architecture, "name": m.name,
            "layers": m.hyper.n_layers, "weights_bytes": w.total,
            "weights_by_kind": {"layers": sum(w.layers), "token_embedding": w.token_embedding, "output": w.output,
                                "other": w.other, "mtp_not_loaded": w.nextn},
            "weights_by_type": dict(w.by_type),
            "kv_bytes_per_token": s.kv.per_token, "recurrent_state_bytes": s.kv.state,
        },
        "engine": s.engine.name,
        "ctx": s.settings.ctx,
        "ctx_from": s.settings.ctx_from,
        "parallel": s.settings.seqs,
        "kv_type": s.settings.kv_type,
        "flash_attn": s.settings.flash_attn,
        "swa_full": s.settings.swa_full,
        "kv_cache_bytes": s.kv.total,
        "kv_rules": list(s.kv.rules),
        "labels": dict(LABELS),
        "allowance": {"bytes_per_gpu": s.settings.reserve if s.settings.reserve is not None else s.engine.allowance,
                      "why": "--reserve" if s.settings.reserve is not None else s.engine.allowance_why},
        "gpus": [sh.gpu for sh in pl.per_gpu[:per_node]],
        "per_gpu": [{"gpu": sh.gpu, "weights_bytes": sh.weights_bytes, "kv_bytes": sh.kv_bytes,
                     "allowance_bytes": sh.allowance_bytes, "free_bytes": sh.free_bytes, "left_bytes": sh.left_bytes,
                     "layers": sh.units if s.engine.layout != "tensor" else None, "stage": sh.stage,
                     "node": i // per_node} for i, sh in enumerate(pl.per_gpu)],
        "cpu_weights_bytes": pl.cpu_weights_bytes,
        "cpu_kv_bytes": pl.cpu_kv_bytes,
        "whole": pl.whole,
        "gpu_layers": pl.gpu_layers,
        "n_cpu_moe": pl.n_cpu_moe,
        "host_bytes": pl.host_bytes,
        "tp": pl.tp,
        "pp": pl.pp if pl.stage_shares else None,
        "nodes": p.nodes,
        "gpus_per_node": per_node,
        "stages": [{"stage": st.stage, "layers": [st.first, st.end], "weights_bytes": st.weights_bytes,
                    "kv_bytes": st.kv_bytes, "allowance_bytes": allowance,
                    "nodes": sorted({i // per_node for i, sh in enumerate(pl.per_gpu) if sh.stage == st.stage})}
                   for st in pl.stage_shares],
        "placeholders": p.placeholders(),
        "notes": list(pl.notes),
    }


def as_text(p: Plan, why: str = "") -> str:
    if p.sizing.engine.layout == "training":
        from gpu_launch.views import training_view

        return training_view.as_text(p, why)
    s, pl = p.sizing, p.placement
    m, w = s.model, s.model.weights
    lines = [f"model: {m.name or m.source} ({m.format}, {m.architecture}, {m.hyper.n_layers} layers"
             + (f", {m.dtype}" if m.dtype else "") + ")",
             f"  weights {_gib(w.total)} [exact]: layers {_gib(sum(w.layers))}, token embedding "
             f"{_gib(w.token_embedding)}, output {_gib(w.output)}" + (f", other {_gib(w.other)}" if w.other else "")
             + (" (tied: the embedding doubles as the output)" if w.tied_embeddings else "")
             + (f"; MTP layers {_gib(w.nextn)} not loaded" if w.nextn else "")]
    if w.by_type:
        lines.append("  by type: " + ", ".join(f"{k} {_gib(v)}" for k, v in sorted(w.by_type.items(),
                                                                                  key=lambda kv: -kv[1])))
    lines.append(f"  KV cache {_gib(s.kv.total)} [rule] at {s.settings.ctx} tokens ({s.settings.ctx_from}), "
                 f"{s.settings.seqs} sequence{'s' if s.settings.seqs != 1 else ''}, {s.settings.kv_type}; "
                 f"{s.kv.per_token} bytes per token")
    lines += [f"    {rule}" for rule in s.kv.rules]
    allowance = s.settings.reserve if s.settings.reserve is not None else s.engine.allowance
    lines.append(f"engine: {s.engine.name}; allowance {_gib(allowance)} per GPU [allowance: "
                 f"{'--reserve' if s.settings.reserve is not None else s.engine.allowance_why}]")
    if p.nodes > 1:
        lines += _stage_table(p, allowance)
    else:
        staged = pl.pp > 1
        lines.append(f"{'GPU':>5} {'weights':>11} {'KV':>11} {'allowance':>11} {'free':>11} {'left':>11}"
                     + ("  layers" if s.engine.layout != "tensor" else "  stage" if staged else ""))
        for sh in pl.per_gpu:
            lines.append(f"{sh.gpu:>5} {_gib(sh.weights_bytes):>11} {_gib(sh.kv_bytes):>11} "
                         f"{_gib(sh.allowance_bytes):>11} {_gib(sh.free_bytes):>11} {_gib(sh.left_bytes):>11}"
                         + (f"  {sh.units}" if s.engine.layout != "tensor" else f"  {sh.stage}" if staged else ""))
    if pl.cpu_weights_bytes or pl.cpu_kv_bytes:
        lines.append(f"{'CPU':>5} {_gib(pl.cpu_weights_bytes):>11} {_gib(pl.cpu_kv_bytes):>11}"
                     + ("  (the token embedding stays on the host)" if s.engine.layout == "layers" else ""))
    lines += [f"note: {n}" for n in pl.notes]
    values = p.shown_placeholders()
    lines.append("placeholders: " + " ".join(f"{{{k}}}={v}" for k, v in values.items()))
    text = "\n".join(lines) + "\n"
    return text + (why if why else "")


def _stage_table(p: Plan, allowance: int) -> list[str]:
    """A several-node plan: the split, then one line per pipeline stage (what each of its GPUs holds)."""
    pl = p.placement
    per_node = p.gpus_per_node or len(pl.per_gpu)
    total = max((sh.free_bytes for sh in pl.per_gpu), default=0)
    lines = [f"nodes: {p.nodes} × {per_node} GPUs ({_gib(total)} each, all free), tp {pl.tp} within a node × "
             f"pp {pl.pp} across",
             f"{'stage':>5} {'layers':>9} {'nodes':>6} {'weights':>11} {'KV':>11} {'allowance':>11} {'a GPU':>11} "
             f"{'left':>11}"]
    for st in pl.stage_shares:
        nodes = sorted({i // per_node for i, sh in enumerate(pl.per_gpu) if sh.stage == st.stage})
        need = st.weights_bytes + st.kv_bytes + allowance
        room = min((b for b, sh in zip(pl.budgets, pl.per_gpu) if sh.stage == st.stage), default=total)
        layers = f"{st.first}-{st.end - 1}" if st.end > st.first else "-"
        lines.append(f"{st.stage:>5} {layers:>9} {','.join(map(str, nodes)):>6} {_gib(st.weights_bytes):>11} "
                     f"{_gib(st.kv_bytes):>11} {_gib(allowance):>11} {_gib(need):>11} {_gib(room - need):>11}")
    return lines
