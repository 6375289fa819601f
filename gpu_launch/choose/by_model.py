"""``--fit MODEL``: the fewest GPUs that hold the model, then the best of those by the usual ranking.

For each GPU count the engine accepts (tensor parallelism: 1, 2, 4, 8 dividing the attention
heads; llama.cpp and Transformers: any count), the ranking (:mod:`gpu_launch.choose.ranking`)
offers its best sets in order and the first one :func:`gpu_launch.fit.plan.place` says holds the
model wins. For tensor parallelism, where every GPU holds the same share, a GPU too small for its
share is left out before ranking, so the best set that holds it is found exactly. When no set
holds it whole and the engine can leave layers on the CPU (llama.cpp ``-ngl {gpu_layers}``), the
set that takes the most layers wins. Otherwise one line says the shortfall and what would fit.
"""

from __future__ import annotations

from gpu_launch.choose import select
from gpu_launch.choose.model_sets import MiB, Tried, counts, for_machine, holds, rooms
from gpu_launch.fit import plan as fit_plan
from gpu_launch.hardware.model import Device, Gpu, Machine

__all__ = ["choose_by_model", "hopeless", "rooms", "counts", "for_machine", "holds", "KEEP"]

KEEP = 12  # ranked sets tried per count before the next count


def hopeless(s: fit_plan.Sizing, usable: list[Gpu]) -> str | None:
    """Why no wait can help ``s`` on ``usable`` (model_shortfall.py, loaded only when it is asked)."""
    from gpu_launch.choose import model_shortfall

    return model_shortfall.hopeless(s, usable)


def _candidates(s: fit_plan.Sizing, eligible: tuple[Gpu, ...], n: int) -> tuple[Gpu, ...]:
    if s.engine.layout != "tensor":
        return eligible
    probe = fit_plan.place(s, rooms(eligible[:1]) * n) if eligible else None
    if probe is None or not probe.per_gpu:
        return eligible
    # the smallest share a GPU of the set holds (pipeline stages differ): a GPU without room for it is no use
    need = min(sh.weights_bytes + sh.kv_bytes + sh.allowance_bytes for sh in probe.per_gpu)
    util = s.settings.gpu_mem_util if s.settings.gpu_mem_util is not None else (
        fit_plan.VLLM_DEFAULT_UTIL if s.engine.name == "vllm" and not s.settings.util_placeholder else 0.0)
    # vLLM refuses a GPU with less than its utilisation free, whatever the share
    return tuple(g for g in eligible if (g.memory_free_mib or 0) * MiB >= need
                 and (g.memory_free_mib or 0) >= util * (g.memory_total_mib or 0))


def _search(machine: Machine, s: fit_plan.Sizing, eligible: tuple[Gpu, ...], runner_ups: int
            ) -> tuple[Tried | None, list[Tried]]:
    """The first (fewest GPUs, best ranked) set that holds ``s`` whole, and the best set tried per count."""
    from gpu_launch.choose import ranking

    best_per_count: list[Tried] = []
    for n in counts(s, len(eligible)):
        pool = _candidates(s, eligible, n)
        if len(pool) < n:
            # none of these n GPUs hold their share: still say what the best of all would lack
            ranked = ranking.best_sets(machine, eligible, n, keep=1)
            best_per_count.append(Tried(n, ranked.best, fit_plan.place(s, rooms(ranked.best))))
            continue
        ranked = ranking.best_sets(machine, pool, n, keep=max(KEEP, 1 + runner_ups))
        most: Tried | None = None  # of this count: the best-ranked set that holds the most layers
        for cand in ranked.candidates:
            tried = Tried(n, cand.gpus, fit_plan.place(s, rooms(cand.gpus)))
            if holds(s, tried.placement):
                return tried, best_per_count
            if most is None or _layers(tried) > _layers(most):
                most = tried
        if most is not None:
            best_per_count.append(most)
    return None, best_per_count


def _layers(t: Tried) -> tuple[bool, int]:
    return t.placement.fits, t.placement.gpu_layers or 0


def choose_by_model(machine: Machine, s: fit_plan.Sizing, constraints: select.Constraints,
                    runner_ups: int = 0) -> select.Selection:
    """The selection for ``s`` (the plan in ``Selection.plan``), or NotEnoughGpus in one line."""
    elig = select.eligibility(machine, constraints)
    if not elig.eligible:
        raise select._not_enough(1, machine, elig, constraints)
    s = for_machine(s, machine)
    found, tried = _search(machine, s, elig.eligible, runner_ups)
    if found is not None:
        base = select.choose_auto(machine, found.n, constraints, runner_ups) if runner_ups else None
        return _selection(s, found, elig, base)
    if s.settings.partial:
        usable = [t for t in tried if t.placement.fits]
        if usable:
            most = max(t.placement.gpu_layers or 0 for t in usable)
            pick = min((t for t in usable if (t.placement.gpu_layers or 0) == most), key=lambda t: t.n)
            return _selection(s, pick, elig, None)
    if s.engine.layout == "training":
        from gpu_launch.choose.training_shortfall import training_shortfall

        raise training_shortfall(machine, s, tried, constraints)
    from gpu_launch.choose.model_shortfall import shortfall

    raise shortfall(machine, s, tried, len(elig.eligible), constraints)


def _selection(s: fit_plan.Sizing, t: Tried, elig: select.Eligibility, base: select.Selection | None
               ) -> select.Selection:
    devices = tuple(Device(g) for g in t.gpus)
    same = base is not None and base.devices == devices  # --explain: the ranking's runner-ups, when it agrees
    return select.Selection(devices, tuple(select._load_warnings(t.gpus)), elig,
                            base.ranking if same and base else None, plan=fit_plan.Plan(s, t.placement))
