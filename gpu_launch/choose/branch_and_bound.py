"""The exact search of :mod:`gpu_launch.choose.ranking`: a branch and bound over a pool's sets, with
the bounds that let it cut (module docstring of ranking, "Pools of up to EXACT_LIMIT GPUs")."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.choose.pool import Found, Pool, insert

__all__ = ["search_exactly"]


class _OutOfBudget(Exception):
    """The budgeted exact search ran out of nodes."""


def search_exactly(p: Pool, n: int, keep: int, start: list[Found],
                   budget: int | None = None) -> tuple[list[Found], bool]:
    """Branch and bound over index-ordered subsets that contain the pool's forced GPUs; ``start``
    (the heuristic's sets) seeds the incumbents, which is what makes the cuts bite from the first
    node. With a ``budget`` (search nodes) it may stop early: then it returns the best sets seen and
    False (not proven best)."""
    found: list[Found] = []
    for item in start:
        insert(found, item, keep)
    big = 1 << 62
    left = [budget if budget is not None else -1]  # never reaches 0 without a budget

    def visit(members: list[int], cand: list[int], worst: int, count: int, nv: int, gain: list[int],
              wmax: list[int], atw: list[int], numas: frozenset[int], least: int, total: int) -> None:
        # worst: the set's worst link rank so far, count: its pairs at that rank; per candidate c,
        # gain[c]: NVLinks to the set, wmax[c]: worst link rank to the set, atw[c]: pairs at wmax[c].
        r = n - len(members)
        left[0] -= 1
        if left[0] == 0:
            raise _OutOfBudget
        if r == 0:
            ordered = tuple(sorted(members))
            links = p.nvlinks(ordered) if p.switch else nv
            key = (worst, count, -links, len(numas), -least, -total, tuple(p.index[m] for m in ordered))
            if len(found) < keep or key < found[-1][0]:
                insert(found, (key, ordered), keep)
            return
        if len(found) >= keep:
            limit = found[-1][0]
            # No set may get a link worse than the incumbents' worst (criteria 1-3 are constant).
            cand = [c for c in cand if wmax[c] <= limit[0]]
            if len(cand) < r:
                return
            tied = _bound(p, limit, r, members, cand, worst, count, nv, gain, wmax, atw, numas, least, total)
            if tied is None:
                return
            # Every completion scores at least `bound` on each criterion. Where the bound already
            # ties the incumbents on the criteria before NUMA (or before free memory), a set that
            # beats them must tie there too, so no candidate may add a NUMA node (or bring less free
            # memory than the incumbents' least-free GPU): drop those before visiting them.
            if tied and numas and len(numas) == limit[3]:
                cand = [c for c in cand if p.numa[c] in numas and p.free[c] >= -limit[4]]
                if len(cand) < r:
                    return
        for pos, c in enumerate(cand):
            if len(cand) - pos < r:
                break
            rest = cand[pos + 1:]
            new_gain, new_wmax, new_atw = _joined(p, c, rest, gain, wmax, atw)
            members.append(c)
            visit(members, rest, *_worse(worst, count, wmax[c], atw[c]), nv + gain[c], new_gain, new_wmax, new_atw,
                  numas | {p.numa[c]}, min(least, p.free[c]), total + p.free[c])
            members.pop()

    low = min((min(row) for row in p.rank), default=0)
    # The forced GPUs join first, each updating every candidate (not only the later ones).
    members: list[int] = []
    worst, count, nv, gain, wmax, atw = low, 0, 0, [0] * p.size, [low] * p.size, [0] * p.size
    numas: frozenset[int] = frozenset()
    least, total = big, 0
    for c in p.fixed:
        (worst, count), nv = _worse(worst, count, wmax[c], atw[c]), nv + gain[c]
        gain, wmax, atw = _joined(p, c, range(p.size), gain, wmax, atw)
        members.append(c)
        numas, least, total = numas | {p.numa[c]}, min(least, p.free[c]), total + p.free[c]
    try:
        visit(members, list(p.free_positions), worst, count, nv, gain, wmax, atw, numas, least, total)
    except _OutOfBudget:
        return found, False
    return found, True


def _bound(p: Pool, limit: tuple, r: int, members: list[int], cand: list[int], worst: int, count: int, nv: int,
           gain: list[int], wmax: list[int], atw: list[int], numas: frozenset[int], least: int,
           total: int) -> bool | None:
    """Compare a lower bound on the key of every completion of ``members`` (``r`` more GPUs from
    ``cand``) with ``limit``, the incumbents' worst key: None when no completion can beat it (cut),
    else whether the bound ties it on the criteria before NUMA. Each criterion's bound is computed
    only when the earlier ones tie (the order is lexicographic), which keeps most nodes cheap."""
    wb = max(worst, sorted(wmax[c] for c in cand)[r - 1])
    if wb != limit[0]:
        return None if wb > limit[0] else False
    pairs = _pairs_bound(p, wb, worst, count, r, len(members), cand, wmax, atw)
    if pairs != limit[1]:
        return None if pairs > limit[1] else False
    inside = set(cand)
    if p.switch:  # each GPU counts its own links: at most its best to the set or a candidate
        reach = inside.union(members)
        most = sum(p.peak(m, reach) for m in members) + sum(
            sorted((p.peak(c, reach) for c in cand), reverse=True)[:r])
    else:
        # A candidate adds its links to the set plus at most half of its r-1 best links to
        # other candidates (each link inside the new GPUs is counted from both ends).
        pots = []
        for c in cand:
            best_rest, peers = 0, 0
            if r > 1:
                for value, x in p.nv_peers[c]:
                    if x in inside:
                        best_rest += value
                        peers += 1
                        if peers == r - 1:
                            break
            pots.append(2 * gain[c] + best_rest)
        most = nv + sum(sorted(pots, reverse=True)[:r]) // 2
    if -most != limit[2]:
        return None if -most > limit[2] else False
    frees = []
    for i in p.by_free:  # the r largest free memories among the candidates
        if i in inside:
            frees.append(p.free[i])
            if len(frees) == r:
                break
    # Every completion's indices, sorted, begin with the members below the next candidate.
    rest = (len(numas), -min(least, frees[-1]), -(total + sum(frees)),
            tuple(p.index[m] for m in sorted(members) if m < cand[0]))
    return None if rest > limit[3:] else True


def _joined(p: Pool, c: int, targets: Sequence[int], gain: list[int], wmax: list[int],
            atw: list[int]) -> tuple[list[int], list[int], list[int]]:
    """``gain`` (NVLinks to the set), ``wmax`` (worst link to the set) and ``atw`` (pairs at that
    link) of ``targets`` once ``c`` joins the set."""
    row_nv, row_rank = p.nv[c], p.rank[c]
    new_gain, new_wmax, new_atw = gain[:], wmax[:], atw[:]
    for x in targets:
        new_gain[x] += row_nv[x]
        rank = row_rank[x]
        if rank > new_wmax[x]:
            new_wmax[x], new_atw[x] = rank, 1
        elif rank == new_wmax[x]:
            new_atw[x] += 1
    return new_gain, new_wmax, new_atw


def _worse(worst: int, count: int, link: int, pairs: int) -> tuple[int, int]:
    """The set's worst link and its pairs there, once a GPU joins whose worst link to the set is
    ``link``, with ``pairs`` pairs at it."""
    if link > worst:
        return link, pairs
    if link == worst:
        return worst, count + pairs
    return worst, count


def _pairs_bound(p: Pool, wb: int, worst: int, count: int, r: int, size: int, cand: list[int],
                 wmax: list[int], atw: list[int]) -> int:
    """A lower bound on the pairs at the worst link of every completion whose worst link is ``wb``
    (the bound on the worst link; a completion with a worse link loses on the link already).

    The pairs the set has at ``worst`` stay when ``wb == worst``. Each of the ``r`` GPUs to come
    adds its own pairs to the set at ``wb``, and has at least ``r - 1 - b`` partners at ``wb`` among
    the other new GPUs, where ``b`` bounds how many candidates it meets over a better link: those in
    the pool less the ``size`` members it meets so (each pair among the new GPUs is counted from
    both ends, hence halved). Without the pairs among the new GPUs, sets that tie on everything (an
    NVSwitch box) could never be cut by the later criteria.
    """
    better = p.better_than(wb)
    r1 = r - 1
    halves = []  # twice each candidate's least contribution
    below, own = 0, []
    for c in cand:
        link = wmax[c]
        if link < wb:
            extra = r1 - better[c] + size
            halves.append(extra if extra > 0 else 0)
            below += 1
        elif link == wb:
            at = atw[c]
            extra = r1 - better[c] + size - at
            halves.append(2 * at + (extra if extra > 0 else 0))
            own.append(at)
        # a candidate with a worse link would make the worst link worse than wb
    halves.sort()
    pairs = (sum(halves[:r]) + 1) // 2
    if wb == worst:
        return count + pairs
    # The set has no pair at wb yet: at least r - (candidates below wb) new GPUs bring one.
    own.sort()
    return max(1, pairs, sum(own[:max(r - below, 0)]))


