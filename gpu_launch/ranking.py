"""Ranking candidate GPU sets for ``--auto N``: availability, one model, links, NUMA, memory.

Sets are compared by a key, lower is better, criterion by criterion (README, "How --auto ranks"):

1. availability of the least available GPU (idle < partly used < busy);
2. the number of GPU models in the set (one model; a slower card holds the others back);
3. the worst link inside the set (NV<more> < NV<fewer> < PIX < PXB < PHB < NODE < SYS);
4. the total NVLinks inside the set (more is better);
5. NUMA nodes spanned (fewer is better; unknown NUMA falls back to CPU-affinity groups);
6. free memory of the least-free GPU, then total free memory (more is better);
7. the highest utilisation and the number of processes (lower is better);
8. lower indices, so the result is deterministic.

Criterion 1 is settled exactly before searching (only the n least-used classes can be in the best
set). The search is an exact branch and bound for pools of up to :data:`EXACT_LIMIT` GPUs; beyond
that a greedy search from every seed GPU, which keeps each step inside the best link class it can.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from gpu_launch.model import Gpu, Machine
from gpu_launch.select import availability

__all__ = ["CRITERIA", "EXACT_LIMIT", "Candidate", "Ranked", "best_sets", "link_rank", "nvlinks"]

EXACT_LIMIT = 16
KEEP = 4  # the best set plus runner-ups for --explain
CRITERIA = (
    "availability", "GPU models", "worst link", "NVLinks inside", "NUMA nodes spanned",
    "free memory of the least-free GPU", "total free memory", "utilisation", "processes", "lower indices",
)
_CLASS_RANK = {"PSB": 1000, "PIX": 1000, "PXB": 2000, "PHB": 3000, "NODE": 4000, "SYS": 5000}


def link_rank(code: str | None) -> int:
    """Lower is better: NV18 < NV2 < PIX < PXB < PHB < NODE < SYS; unknown ranks as nothing (0)."""
    if code is None or code == "X":
        return 0
    if code.startswith("NV"):
        return -int(code[2:])
    return _CLASS_RANK.get(code, 5000)


def nvlinks(code: str | None) -> int:
    return int(code[2:]) if code is not None and code.startswith("NV") else 0


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
        return "lower indices"


@dataclass(frozen=True)
class Ranked:
    best: tuple[Gpu, ...]
    candidates: tuple[Candidate, ...]  # best first
    exact: bool


class _Pool:
    """Precomputed per-GPU and per-pair numbers, so the search does only integer work."""

    def __init__(self, machine: Machine, gpus: list[Gpu]) -> None:
        self.gpus = gpus
        n = len(gpus)
        links = [[machine.link(a, b) for b in gpus] for a in gpus]
        self.rank = [[link_rank(links[i][j]) for j in range(n)] for i in range(n)]
        self.nv = [[nvlinks(links[i][j]) for j in range(n)] for i in range(n)]
        self.max_nv = max((max(row) for row in self.nv), default=0)
        self.avail = [int(availability(g)) for g in gpus]
        self.free = [g.memory_free_mib or 0 for g in gpus]
        self.util = [g.utilization_gpu or 0 for g in gpus]
        self.procs = [len(g.processes) for g in gpus]
        models = {name: i for i, name in enumerate(sorted({g.name for g in gpus}))}
        self.model = [models[g.name] for g in gpus]
        groups: dict[object, int] = {}
        self.numa = [groups.setdefault(_numa_group(g), len(groups)) for g in gpus]

    def key(self, members: list[int]) -> tuple:
        worst = max((self.rank[a][b] for i, a in enumerate(members) for b in members[i + 1:]), default=0)
        total_nv = sum(self.nv[a][b] for i, a in enumerate(members) for b in members[i + 1:])
        return (
            max(self.avail[m] for m in members),
            len({self.model[m] for m in members}),
            worst,
            -total_nv,
            len({self.numa[m] for m in members}),
            -min(self.free[m] for m in members),
            -sum(self.free[m] for m in members),
            max(self.util[m] for m in members),
            sum(self.procs[m] for m in members),
            tuple(sorted(self.gpus[m].index for m in members)),
        )


def _numa_group(gpu: Gpu) -> object:
    if gpu.numa_node is not None:
        return ("numa", gpu.numa_node)
    if gpu.cpu_affinity is not None:
        return ("cpus", gpu.cpu_affinity)
    return ("unknown",)


def best_sets(machine: Machine, eligible: tuple[Gpu, ...], n: int) -> Ranked:
    """The best ``n``-set of ``eligible`` GPUs (``len(eligible) >= n``) and a few runner-ups."""
    classes = sorted(int(availability(g)) for g in eligible)
    cutoff = classes[n - 1]
    pool = [g for g in sorted(eligible, key=lambda g: g.index) if int(availability(g)) <= cutoff]
    # Prefer one model: search each model that has enough GPUs on its own; mix only if none has.
    by_model: dict[str, list[Gpu]] = {}
    for gpu in pool:
        by_model.setdefault(gpu.name, []).append(gpu)
    pools = [group for group in by_model.values() if len(group) >= n] or [pool]
    found: list[Candidate] = []
    exact = True
    for group in pools:
        p = _Pool(machine, group)
        if len(group) <= EXACT_LIMIT:
            keys = _exact(p, n)
        else:
            keys = _greedy(p, n)
            exact = False
        found.extend(Candidate(tuple(p.gpus[m] for m in members), key) for key, members in keys)
    found.sort(key=lambda c: c.key)
    best = found[0]
    return Ranked(tuple(sorted(best.gpus, key=lambda g: g.index)), tuple(found[:KEEP]), exact)


def _exact(p: _Pool, n: int) -> list[tuple[tuple, list[int]]]:
    """Branch and bound over index-ordered subsets, keeping the ``KEEP`` best keys."""
    m = len(p.gpus)
    heap: list[tuple[tuple, list[int]]] = []  # max-heap by key via negation is awkward; keep sorted list

    def threshold() -> tuple | None:
        return heap[-1][0] if len(heap) >= KEEP else None

    def bound(members: list[int], worst: int, total_nv: int, start: int) -> tuple:
        r = n - len(members)
        pairs = r * len(members) + r * (r - 1) // 2
        rest = sorted((p.free[i] for i in range(start, m)), reverse=True)[:r]
        return (
            max(p.avail[x] for x in members),
            len({p.model[x] for x in members}),
            worst,
            -(total_nv + pairs * p.max_nv),
            len({p.numa[x] for x in members}),
            -min(p.free[x] for x in members),
            -(sum(p.free[x] for x in members) + sum(rest)),
            max(p.util[x] for x in members),
            sum(p.procs[x] for x in members),
            tuple(sorted(p.gpus[x].index for x in members)),
        )

    def visit(members: list[int], worst: int, total_nv: int, start: int) -> None:
        if len(members) == n:
            key = p.key(members)
            limit = threshold()
            if limit is None or key < limit:
                heap.append((key, list(members)))
                heap.sort(key=lambda kv: kv[0])
                del heap[KEEP:]
            return
        limit = threshold()
        if members and limit is not None and bound(members, worst, total_nv, start) > limit:
            return
        for nxt in range(start, m - (n - len(members)) + 1):
            w, t = worst, total_nv
            for x in members:
                w = max(w, p.rank[x][nxt])
                t += p.nv[x][nxt]
            members.append(nxt)
            visit(members, w, t, nxt + 1)
            members.pop()

    visit([], 0 if n > 1 else 0, 0, 0)
    return heap


def _greedy(p: _Pool, n: int) -> list[tuple[tuple, list[int]]]:
    """From every seed, add the GPU that keeps the partial key lowest; keep the best results."""
    results: dict[tuple[int, ...], tuple] = {}
    m = len(p.gpus)
    for seed in range(m):
        members = [seed]
        while len(members) < n:
            best_key: tuple | None = None
            best_c = -1
            for c in range(m):
                if c in members:
                    continue
                worst = max(p.rank[x][c] for x in members)
                gain = sum(p.nv[x][c] for x in members)
                k = (worst, -gain, p.numa[c] != p.numa[seed], p.model[c] != p.model[seed], -p.free[c], c)
                if best_key is None or k < best_key:
                    best_key, best_c = k, c
            members.append(best_c)
        ordered = tuple(sorted(members))
        if ordered not in results:
            results[ordered] = p.key(list(ordered))
    return heapq.nsmallest(KEEP, ((key, list(members)) for members, key in results.items()), key=lambda kv: kv[0])
