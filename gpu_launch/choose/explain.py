"""``--explain``: why this set, what each excluded GPU failed, and where the next-best sets lost.

:func:`as_json` builds the document (schema 1, keys always in the same order, so scripts and diffs
can rely on it); :func:`as_text` renders the same document for people.
"""

from __future__ import annotations

from typing import Any

from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.choose.ranking import AT, CRITERIA, Candidate, Ranked, link_rank
from gpu_launch.choose.availability import BUSY_MIN_USED, BUSY_MIN_UTIL, FULL_MIN_USED, IDLE_MAX_USED, Availability, availability
from gpu_launch.choose.select import Selection
from gpu_launch.base.units import fmt_mib

__all__ = ["SCHEMA", "as_text", "as_json"]

SCHEMA = 1


def _links(machine: Machine, gpus: tuple[Gpu, ...]) -> list[dict[str, Any]]:
    return [
        {"a": a.index, "b": b.index, "link": machine.link(a, b)}
        for i, a in enumerate(gpus) for b in gpus[i + 1:]
    ]


def _set_json(machine: Machine, candidate: Candidate, best: Candidate | None) -> dict[str, Any]:
    gpus = tuple(sorted(candidate.gpus, key=lambda g: g.index))
    links = _links(machine, gpus)
    worst = max((pair["link"] for pair in links), key=link_rank, default=None)
    out: dict[str, Any] = {
        "gpus": [g.index for g in gpus],
        "availability": max(availability(g) for g in gpus).text,
        "gpus_by_availability": {a.text.replace(" ", "_"): sum(availability(g) is a for g in gpus) for a in Availability},
        "models": sorted({g.name for g in gpus}),
        "worst_link": worst,
        "links": links,
        "pairs_at_worst_link": candidate.key[AT["pairs at the worst link"]],
        "nvlinks_inside": -candidate.key[AT["NVLinks inside"]],
        "nvswitch": machine.nvswitch,
        "numa_nodes": sorted({g.numa_node for g in gpus if g.numa_node is not None}),
        "numa_groups": candidate.key[AT["NUMA nodes spanned"]],
        "least_free_mib": -candidate.key[AT["free memory of the least-free GPU"]],
        "total_free_mib": -candidate.key[AT["total free memory"]],
    }
    if best is not None:
        out["lost_on"] = candidate.lost_on(best)
    return out


def as_json(selection: Selection, machine: Machine) -> dict[str, Any]:
    """The explanation as plain data; ``schema`` first, then the same keys in the same order."""
    ranked = selection.ranking if isinstance(selection.ranking, Ranked) else None
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "how": "auto" if ranked is not None else "explicit",
        "chosen": [d.gpu.index for d in selection.devices],
        "uuids": [d.uuid for d in selection.devices],
        "warnings": list(selection.warnings),
        "excluded": [
            {"gpu": e.gpu.index, "reason": e.reason}
            for e in (selection.eligibility.excluded if selection.eligibility else ())
        ],
        "thresholds": {
            "idle_max_memory_used_percent": round(IDLE_MAX_USED * 100),
            "busy_min_utilization_percent": BUSY_MIN_UTIL,
            "busy_min_memory_used_percent": round(BUSY_MIN_USED * 100),
            "full_min_memory_used_percent": round(FULL_MIN_USED * 100),
        },
    }
    if ranked is not None:
        best = ranked.candidates[0]
        doc["exact"] = ranked.exact
        doc["criteria"] = list(CRITERIA)
        doc["set"] = _set_json(machine, best, None)
        worst = max(availability(g) for g in best.gpus)
        eligible = selection.eligibility.eligible if selection.eligibility else ()
        doc["less_available"] = [{"gpu": g.index, "availability": availability(g).text}
                                 for g in eligible if availability(g) > worst]
        doc["next_best"] = [_set_json(machine, c, best) for c in ranked.candidates[1:]]
    return doc


def _gpus(indices: list[int]) -> str:
    return ", ".join(f"GPU {i}" for i in indices)


def _value(s: dict[str, Any], criterion: str) -> str:
    """What ``s`` scored on ``criterion``, in words (for "lost on X: theirs vs ours")."""
    values = {
        "availability": s["availability"],
        "non-idle GPUs taken": _taken(s),
        "GPU models": " + ".join(s["models"]),
        "worst link": s["worst_link"] or "unknown",
        "pairs at the worst link": str(s["pairs_at_worst_link"]),
        "NVLinks inside": str(s["nvlinks_inside"]),
        "NUMA nodes spanned": str(s["numa_groups"]),
        "free memory of the least-free GPU": fmt_mib(s["least_free_mib"]),
        "total free memory": fmt_mib(s["total_free_mib"]),
        "lower indices": ",".join(map(str, s["gpus"])),
    }
    return values[criterion]


def _taken(s: dict[str, Any]) -> str:
    """The non-idle GPUs a set takes, in words: "1 busy + 1 partly used", or "none"."""
    counts = s["gpus_by_availability"]
    parts = [f"{counts[key]} {key.replace('_', ' ')}" for key in ("full", "busy", "partly_used") if counts[key]]
    return " + ".join(parts) or "none"


_SWITCH = " through NVSwitch, each GPU's own counted once"


def _pairs(count: int) -> str:
    return f"{count} pair{'s' if count != 1 else ''}"


#: The widest line --explain writes (it once wrote 434-character lines): longer ones wrap, indented;
#: the CLI passes the terminal's width when that is narrower.
WIDTH = 100


def _link_text(pairs: list[dict[str, Any]]) -> str:
    """``2–3 NV18, 2–4 PXB``; grouped by link when that is shorter: ``all 28 pairs NV18``, ``NV4: 0–1, 2–3; SYS: …``."""
    if not pairs:
        return "single GPU"
    each = ", ".join(f"{pair['a']}–{pair['b']} {pair['link'] or '?'}" for pair in pairs)
    by_link: dict[str, list[str]] = {}
    for pair in pairs:
        by_link.setdefault(pair["link"] or "?", []).append(f"{pair['a']}–{pair['b']}")
    if len(by_link) == 1 and len(pairs) > 1:
        return f"all {_pairs(len(pairs))} {next(iter(by_link))}"
    grouped = "; ".join(f"{link}: {', '.join(members)}" for link, members in by_link.items())
    return grouped if len(grouped) < len(each) else each


def _versus(theirs: str, ours: str, s: dict[str, Any], best: dict[str, Any], criterion: str) -> tuple[str, str]:
    """Memory values that round to the same text but differ are shown in MiB ("8090 MiB vs 8092 MiB",
    not "7.9 GiB vs 7.9 GiB"): the difference is the point of the line."""
    keys = {"free memory of the least-free GPU": "least_free_mib", "total free memory": "total_free_mib"}
    key = keys.get(criterion)
    if key is not None and theirs == ours and s[key] != best[key]:
        return f"{s[key]} MiB", f"{best[key]} MiB"
    return theirs, ours


#: Stands for a space that must not break a line (inside a parenthesis kept whole); a line that starts
#: with it is never wrapped: an exclusion's reason that holds a file path, which must stay whole.
_AS_IS = "\x00"


def _wrap(line: str, width: int = WIDTH) -> list[str]:
    """``line`` in lines of at most ``width`` columns, continued four columns further in; a parenthesis
    (``(worst SYS on 4 pairs, 0 NVLinks inside)``) is kept on one line where it fits one."""
    if line.startswith(_AS_IS):
        return [line[1:]]
    if len(line) <= width:
        return [line]
    import re
    import textwrap

    indent = " " * (len(line) - len(line.lstrip(" ")))
    room = width - len(indent) - 4
    glued = re.sub(r"\([^()]*\)", lambda m: m.group(0).replace(" ", _AS_IS) if len(m.group(0)) <= room
                   else m.group(0), line)
    return [part.replace(_AS_IS, " ") for part in
            textwrap.wrap(glued, width, initial_indent="", subsequent_indent=indent + "    ",
                          break_on_hyphens=False, break_long_words=False)]


def _describe(s: dict[str, Any]) -> list[str]:
    links = _link_text(s["links"])
    numa = ",".join(map(str, s["numa_nodes"])) or "unknown"
    return [
        f"availability: {s['availability']} (non-idle GPUs: {_taken(s)}); model: {' + '.join(s['models'])}",
        f"links: {links}" + (f" (worst {s['worst_link']} on {_pairs(s['pairs_at_worst_link'])}, "
                             f"{s['nvlinks_inside']} NVLinks inside{_SWITCH if s['nvswitch'] else ''})" if len(s["links"]) > 1 or s["nvlinks_inside"] else ""),
        f"NUMA node(s): {numa}; free memory: least {fmt_mib(s['least_free_mib'])}, "
        f"total {fmt_mib(s['total_free_mib'])}",
    ]


def as_text(selection: Selection, machine: Machine, width: int = WIDTH) -> str:
    """The explanation for people: the set and why, exclusions, and the next-best sets, wrapped to
    ``width`` columns (at most WIDTH)."""
    doc = as_json(selection, machine)
    lines = [f"chosen: {_gpus(doc['chosen'])} ({doc['how']})"]
    if "set" in doc:
        lines += [f"  {line}" for line in _describe(doc["set"])]
        lines.append("  ranked by: " + " > ".join(doc["criteria"]))
        t = doc["thresholds"]
        lines.append(f"  idle: no compute process and ≤ {t['idle_max_memory_used_percent']}% memory used; "
                     f"busy: ≥ {t['busy_min_utilization_percent']}% utilisation or "
                     f"≥ {t['busy_min_memory_used_percent']}% memory used;")
        lines.append(f"  full: ≥ {t['full_min_memory_used_percent']}% memory used or none free; partly used: in between "
                     "(or processes unknown)")
        if not doc["exact"]:
            lines.append("  (large pool: the best set the heuristic and a bounded exact search found; "
                         "it keeps the best link class)")
    lines += [f"warning: {w}" for w in doc["warnings"]]
    if doc["excluded"]:
        lines.append("excluded:")
        # A reason that names a file (`exclude = … in FILE:LINE`, a lock file) stays on one line; others wrap.
        lines += [f"{_AS_IS if '/' in e['reason'] else ''}  GPU {e['gpu']}: {e['reason']}" for e in doc["excluded"]]
    if doc.get("less_available"):
        lines.append(f"left out (less available than {doc['set']['availability']}, and enough {doc['set']['availability']} GPUs exist):")
        lines += [f"  GPU {g['gpu']}: {g['availability']}" for g in doc["less_available"]]
    if doc.get("next_best"):
        lines.append("next best:")
        for s in doc["next_best"]:
            lost = s["lost_on"]
            theirs, ours = _versus(_value(s, lost), _value(doc["set"], lost), s, doc["set"], lost)
            lines.append(f"  {_gpus(s['gpus'])}: lost on {lost} ({theirs} vs {ours})")
            lines += [f"      {line}" for line in _describe(s)]
    width = min(width, WIDTH)
    return "\n".join(wrapped for line in lines for wrapped in _wrap(line, width)) + "\n"
