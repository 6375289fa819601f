"""``--explain``: why this set, what each excluded GPU failed, and where the next-best sets lost."""

from __future__ import annotations

from typing import Any

from gpu_launch.model import Gpu, Machine
from gpu_launch.ranking import Candidate, Ranked
from gpu_launch.select import Selection, availability
from gpu_launch.units import fmt_mib

__all__ = ["as_text", "as_json"]


def _links(machine: Machine, gpus: tuple[Gpu, ...]) -> list[dict[str, Any]]:
    return [
        {"a": a.index, "b": b.index, "link": machine.link(a, b)}
        for i, a in enumerate(gpus) for b in gpus[i + 1:]
    ]


def _set_json(machine: Machine, candidate: Candidate, best: Candidate | None) -> dict[str, Any]:
    gpus = candidate.gpus
    out: dict[str, Any] = {
        "gpus": sorted(g.index for g in gpus),
        "availability": max(availability(g) for g in gpus).text,
        "models": sorted({g.name for g in gpus}),
        "links": _links(machine, gpus),
        "nvlinks_inside": -candidate.key[3],
        "numa_nodes": sorted({g.numa_node for g in gpus if g.numa_node is not None}),
        "least_free_mib": -candidate.key[5],
        "total_free_mib": -candidate.key[6],
    }
    if best is not None:
        out["lost_on"] = candidate.lost_on(best)
    return out


def as_json(selection: Selection, machine: Machine) -> dict[str, Any]:
    ranked = selection.ranking if isinstance(selection.ranking, Ranked) else None
    doc: dict[str, Any] = {
        "schema": 1,
        "chosen": [d.gpu.index for d in selection.devices],
        "uuids": [d.uuid for d in selection.devices],
        "how": "auto" if ranked is not None else "explicit",
        "warnings": list(selection.warnings),
        "excluded": [
            {"gpu": e.gpu.index, "reason": e.reason}
            for e in (selection.eligibility.excluded if selection.eligibility else ())
        ],
    }
    if ranked is not None:
        best = ranked.candidates[0]
        doc["exact"] = ranked.exact
        doc["criteria"] = [
            "availability", "one GPU model", "worst link", "NVLinks inside", "NUMA nodes spanned",
            "least free memory", "total free memory", "utilisation", "processes", "lower indices",
        ]
        doc["set"] = _set_json(machine, best, None)
        doc["next_best"] = [_set_json(machine, c, best) for c in ranked.candidates[1:]]
    return doc


def _gpus(indices: list[int]) -> str:
    return ", ".join(f"GPU {i}" for i in indices)


def _describe(s: dict[str, Any]) -> list[str]:
    links = ", ".join(f"{l['a']}–{l['b']} {l['link'] or '?'}" for l in s["links"]) or "single GPU"
    numa = ",".join(map(str, s["numa_nodes"])) or "unknown"
    return [
        f"availability: {s['availability']}; model: {' + '.join(s['models'])}",
        f"links: {links}" + (f" ({s['nvlinks_inside']} NVLinks inside)" if s["nvlinks_inside"] else ""),
        f"NUMA node(s): {numa}; free memory: least {fmt_mib(s['least_free_mib'])}, "
        f"total {fmt_mib(s['total_free_mib'])}",
    ]


def as_text(selection: Selection, machine: Machine) -> str:
    doc = as_json(selection, machine)
    lines = [f"chosen: {_gpus(doc['chosen'])} ({doc['how']})"]
    if "set" in doc:
        lines += [f"  {line}" for line in _describe(doc["set"])]
        if not doc["exact"]:
            lines.append("  (more than 16 candidates: greedy search within the best link class)")
    lines += [f"warning: {w}" for w in doc["warnings"]]
    if doc["excluded"]:
        lines.append("excluded:")
        lines += [f"  GPU {e['gpu']}: {e['reason']}" for e in doc["excluded"]]
    if doc.get("next_best"):
        lines.append("next best:")
        for s in doc["next_best"]:
            lines.append(f"  {_gpus(s['gpus'])}: lost on {s['lost_on']}")
            lines += [f"      {line}" for line in _describe(s)]
    return "\n".join(lines) + "\n"
