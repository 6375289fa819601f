"""Ranking candidate GPU sets for ``--auto N``: availability, one model, links, NUMA, memory.

Sets are compared by a key, lower is better, criterion by criterion (docs/choosing-gpus.md, "How --auto ranks"):

1. availability of the least available GPU (idle < partly used < busy < full): the slowest GPU
   sets the pace of a synchronous job;
2. the non-idle GPUs the set takes, class by class (fewest full, then fewest busy, then fewest
   partly used): every extra shared GPU slows one more person;
3. the number of GPU models in the set (one model; a slower card holds the others back);
4. the worst link inside the set (NV<more> < NV<fewer> < PIX < PXB < PHB < NODE < SYS);
5. the pairs across that worst link (fewer is better: 4+1 GPUs over two sockets, not 3+2);
6. the total NVLinks inside the set (more is better): the pairs' ``NV<k>`` added up where GPUs are
   linked directly; on an NVSwitch fabric, where every pair's ``NV<k>`` is the same k links of each
   GPU, each GPU's own links (its best ``NV<k>`` to another member) added up instead;
7. NUMA nodes spanned (fewer is better; unknown NUMA falls back to CPU-affinity groups);
8. free memory of the least-free GPU, then total free memory (more is better);
9. lower indices, so the result is deterministic.

Criteria 1-3 are settled before any search. Sort the eligible GPUs by class and let the n-th be of
class C: the best sets take *every* GPU of a better class than C (they are *forced*) and the rest
from class C, since that multiset of classes has the fewest GPUs at or above every class at once.
Among the class-C GPUs, only those of the forced GPUs' models, plus the fewest other models that
make up the count, can join (each such *pool* gives every set the same model count). Each pool is
then searched for criteria 4-9, always with its forced GPUs in the set:

* N = 1 has no links: the pool is sorted by the key (exact for any size).
* Pools of up to :data:`EXACT_LIMIT` GPUs: an exact branch and bound. It starts from the heuristic's
  sets as incumbents, never extends a partial set by a GPU whose link to it is worse than the
  incumbents' worst link (nor, once the bound ties them up to NUMA, by one that adds a NUMA node or
  has less free memory than their least-free GPU), and cuts any partial set whose lower bound on the
  key (best remaining links, pairs already at the worst link, NVLinks to the remaining candidates,
  free memory) cannot beat them.
* Larger pools: the heuristic. It first finds the best link class that holds an N-set (greedy from
  every GPU, then a bounded clique search), then grows a set from every seed GPU inside that class,
  each step taking the GPU with the most NVLinks to the set, then one on a NUMA node already used,
  then the most free memory; the best grown set is polished by single swaps that improve the key.
  The same branch and bound then runs with a budget of :data:`EXACT_BUDGET` search nodes: when it
  finishes inside it (it usually does, up to 64 GPUs), the answer is proven best after all, and
  ``Ranked.exact`` says so; when not, the best set seen so far (never worse than the heuristic's) wins.
  Node counts, not clocks, bound the work, so the same snapshot always gives the same answer.

The pool's numbers and the key's parts are in :mod:`~gpu_launch.choose.pool`, the exact search in
:mod:`~gpu_launch.choose.branch_and_bound`, the heuristic in :mod:`~gpu_launch.choose.heuristic`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from gpu_launch.base.records import dataclass
from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.choose.availability import availability
from gpu_launch.choose.pool import Pool, link_rank, nvlinks

__all__ = ["AT", "CRITERIA", "EXACT_LIMIT", "KEEP", "Candidate", "Ranked", "best_sets", "link_rank", "nvlinks"]

EXACT_LIMIT = 16  # pools up to this size are searched exactly
EXACT_BUDGET = 2_000  # search nodes the exact search may spend on a larger pool (then: heuristic)
KEEP = 4  # the best set plus three runner-ups, for --explain
CRITERIA = (
    "availability", "non-idle GPUs taken", "GPU models", "worst link", "pairs at the worst link", "NVLinks inside",
    "NUMA nodes spanned",
    "free memory of the least-free GPU", "total free memory", "lower indices",
)
#: The position in a key of each criterion, for code that reads keys.
AT = {name: pos for pos, name in enumerate(CRITERIA)}


@dataclass(frozen=True)
class Candidate:
    """A ranked set and its key (``CRITERIA`` order, lower is better)."""

    gpus: tuple[Gpu, ...]
    key: tuple

    def lost_on(self, best: "Candidate") -> str:
        """The first criterion where this set is worse than ``best``."""
        for name, mine, theirs in zip(CRITERIA, self.key, best.key):
            if mine != theirs:
                return name
        return CRITERIA[-1]


@dataclass(frozen=True)
class Ranked:
    best: tuple[Gpu, ...]
    candidates: tuple[Candidate, ...]  # best first
    exact: bool


def _pools(forced: list[Gpu], rest: list[Gpu], k: int) -> list[list[Gpu]]:
    """The pools of class-C GPUs (``rest``) that settle criterion 3 for ``k`` more GPUs beside the
    ``forced`` ones: those of the forced GPUs' models, plus every union of the fewest other models
    that together make up ``k`` (so each set of a pool has the same model count)."""
    base = {g.name for g in forced}
    same = [g for g in rest if g.name in base]
    if len(same) >= k:
        return [same]
    by_model: dict[str, list[Gpu]] = {}
    for gpu in rest:
        if gpu.name not in base:
            by_model.setdefault(gpu.name, []).append(gpu)
    sizes = sorted((len(group) for group in by_model.values()), reverse=True)
    fewest = next(e for e in range(1, len(sizes) + 1) if len(same) + sum(sizes[:e]) >= k)
    pools = []
    for names in combinations(sorted(by_model), fewest):
        members = same + [g for name in names for g in by_model[name]]
        if len(members) >= k:
            pools.append(sorted(members, key=lambda g: g.index))
    return pools


def best_sets(machine: Machine, eligible: Sequence[Gpu], n: int, keep: int = 1) -> Ranked:
    """The best ``n``-set of ``eligible`` GPUs (``len(eligible) >= n``) and up to ``keep - 1``
    runner-ups that tie it on criteria 1-3 (availability, non-idle GPUs taken, models)."""
    if n < 1 or len(eligible) < n:
        raise ValueError(f"cannot choose {n} of {len(eligible)} GPUs")
    classes = {g.uuid: availability(g) for g in eligible}
    cutoff = sorted(classes.values())[n - 1]  # criteria 1 and 2, settled exactly (module docstring)
    forced = sorted((g for g in eligible if classes[g.uuid] < cutoff), key=lambda g: g.index)
    rest = sorted((g for g in eligible if classes[g.uuid] == cutoff), key=lambda g: g.index)
    found: dict[tuple[int, ...], Candidate] = {}
    exact = True
    for group in _pools(forced, rest, n - len(forced)):
        p = Pool(machine, sorted(forced + group, key=lambda g: g.index), links=n > 1, forced=forced)
        results: list[tuple[tuple, tuple[int, ...]]]
        if n == 1:
            singles: list[tuple[tuple, tuple[int, ...]]] = [(p.subkey([i]), (i,)) for i in range(p.size)]
            results = sorted(singles)[:keep]
        else:
            # Imported here: `--auto 1`, the common launch, needs neither search.
            from gpu_launch.choose.branch_and_bound import search_exactly
            from gpu_launch.choose.heuristic import heuristic

            budget = None if p.size <= EXACT_LIMIT else EXACT_BUDGET
            results, proven = search_exactly(p, n, keep, heuristic(p, n, keep), budget)
            exact = exact and proven
        for _, members in results:
            candidate = Candidate(tuple(p.gpus[m] for m in sorted(members)), p.key(members))
            found[tuple(g.index for g in candidate.gpus)] = candidate
    ranked = sorted(found.values(), key=lambda c: c.key)[:keep]
    return Ranked(ranked[0].gpus, tuple(ranked), exact)

