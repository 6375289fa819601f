"""The heuristic of :mod:`gpu_launch.choose.ranking` for pools too large to search exactly: the best
link class that holds a set, sets grown inside it, the best one polished by swaps."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.choose.pool import Found, Pool, insert, key_parts, key_with

__all__ = ["find_clique", "heuristic"]

_CLIQUE_BUDGET = 20_000  # search nodes the heuristic may spend proving a link class has an N-set


def _grow(p: Pool, n: int, start: Sequence[int], level: int) -> list[int] | None:
    """Grow a set from ``start`` (the forced GPUs and a seed) inside link class ``level`` (every pair
    ranks at most ``level``): most NVLinks to the set first, then a NUMA node already used, then most
    free memory."""
    members = list(start)
    if any(p.rank[a][b] > level for a in members for b in members):
        return None
    numas = {p.numa[m] for m in members}
    cand = [c for c in p.free_positions if c not in members and all(p.rank[m][c] <= level for m in members)]
    gain = [sum(p.nv[m][x] for m in members) for x in range(p.size)]
    while len(members) < n:
        if len(cand) < n - len(members):
            return None
        c = min(cand, key=lambda x: (-gain[x], p.numa[x] not in numas, -p.free[x], x))
        members.append(c)
        numas.add(p.numa[c])
        row_rank, row_nv = p.rank[c], p.nv[c]
        cand = [x for x in cand if x != c and row_rank[x] <= level]
        for x in cand:
            gain[x] += row_nv[x]
    return members


def find_clique(p: Pool, n: int, level: int) -> list[int] | None:
    """Any ``n`` GPUs, the forced ones among them, whose pairs all rank at most ``level``, or None
    (also when the budget runs out)."""
    adj = [sum(1 << j for j in range(p.size) if j != i and p.rank[i][j] <= level) for i in range(p.size)]
    budget = [_CLIQUE_BUDGET]

    def search(members: list[int], cand: int) -> list[int] | None:
        if len(members) == n:
            return members
        budget[0] -= 1
        if budget[0] < 0 or cand.bit_count() < n - len(members):
            return None
        while cand:
            c = cand.bit_length() - 1
            cand &= ~(1 << c)
            got = search(members + [c], cand & adj[c])
            if got is not None:
                return got
            if cand.bit_count() < n - len(members):
                return None
        return None

    start = sum(1 << c for c in p.free_positions)
    for c in p.fixed:
        start &= adj[c]
    return search(list(p.fixed), start)


def heuristic(p: Pool, n: int, keep: int) -> list[Found]:
    """The best link class that holds an ``n``-set, sets grown inside it from every seed, and the
    best of them improved by swaps (module docstring)."""
    levels = sorted({p.rank[i][j] for i in range(p.size) for j in range(i + 1, p.size)})
    sets: set[tuple[int, ...]] = set()
    level = levels[-1] if levels else 0
    for level in levels:
        for seed in p.free_positions:
            grown = _grow(p, n, [*p.fixed, seed], level)
            if grown is not None:
                sets.add(tuple(sorted(grown)))
        if not sets:
            clique = find_clique(p, n, level)
            if clique is not None:
                sets.add(tuple(sorted(clique)))
        if sets:
            break
    found = sorted((p.subkey(s), s) for s in sets)
    if found:
        insert(found, _polish(p, found[0], level), max(keep, 1))
    return found[:keep]


def _polish(p: Pool, start: Found, level: int) -> Found:
    """Swap one chosen member for one outsider while that improves the key (a local optimum); the
    forced GPUs stay. Each trial's key extends the key parts of the set without ``out`` by the
    outsider (:func:`_with`), the same key as :meth:`Pool.subkey` at a fraction of the cost."""
    key, members = start
    fixed = set(p.fixed)
    for _ in range(4 * len(members)):  # each round strictly improves; the cap only bounds time
        improved = False
        for out in members:
            if out in fixed:
                continue
            rest = [m for m in members if m != out]
            parts = key_parts(p, rest)
            for c in p.free_positions:
                if c in members:
                    continue
                row = p.rank[c]
                if any(row[x] > level for x in rest):
                    continue
                trial_key = key_with(p, parts, rest, c)
                if trial_key < key:
                    key, members, improved = trial_key, tuple(sorted(rest + [c])), True
                    break
            if improved:
                break
        if not improved:
            break
    return key, members


