"""Ranking candidate GPU sets for ``--auto N``: availability, one model, links, NUMA, memory.

Sets are compared by a key, lower is better, criterion by criterion (README, "How --auto ranks"):

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.choose.availability import Availability, availability

__all__ = ["AT", "CRITERIA", "EXACT_LIMIT", "KEEP", "Candidate", "Ranked", "best_sets", "link_rank", "nvlinks"]

EXACT_LIMIT = 16  # pools up to this size are searched exactly
EXACT_BUDGET = 2_000  # search nodes the exact search may spend on a larger pool (then: heuristic)
KEEP = 4  # the best set plus three runner-ups, for --explain
_CLIQUE_BUDGET = 20_000  # search nodes the heuristic may spend proving a link class has an N-set
CRITERIA = (
    "availability", "non-idle GPUs taken", "GPU models", "worst link", "pairs at the worst link", "NVLinks inside",
    "NUMA nodes spanned",
    "free memory of the least-free GPU", "total free memory", "lower indices",
)
#: The position in a key of each criterion, for code that reads keys.
AT = {name: pos for pos, name in enumerate(CRITERIA)}
# PCIe classes after every NVLink count (NV<k> ranks -k). PSB (an old on-board switch) is PIX's
# equal; CPU and SOC are what older drivers printed for NODE and SYS.
_CLASS_RANK = {"PSB": 1000, "PIX": 1000, "PXB": 2000, "PHB": 3000, "NODE": 4000, "CPU": 4000, "SYS": 5000, "SOC": 5000}
_UNKNOWN = 5000  # a pair whose link is unknown counts as the worst (SYS)


def link_rank(code: str | None) -> int:
    """Lower is better: NV18 < NV2 < PIX < PXB < PHB < NODE < SYS; an unknown link ranks as SYS."""
    if code == "X":
        return 0
    if code is None:
        return _UNKNOWN
    if code.startswith("NV") and code[2:].isdigit():
        return -int(code[2:])
    return _CLASS_RANK.get(code, _UNKNOWN)


def nvlinks(code: str | None) -> int:
    """How many NVLinks a topo code stands for (NV12 → 12, anything else → 0)."""
    return int(code[2:]) if code is not None and code.startswith("NV") and code[2:].isdigit() else 0


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


# A search result: (sub-key over criteria 4-9, members as pool positions).
_Found = tuple[tuple, tuple[int, ...]]


class _Pool:
    """Per-GPU and per-pair numbers of one pool (GPUs in index order), so searches do integer work."""

    def __init__(self, machine: Machine, gpus: Sequence[Gpu], links: bool = True,
                 forced: Sequence[Gpu] = ()) -> None:
        self.gpus = tuple(gpus)
        self.size = len(gpus)
        uuids = {g.uuid for g in forced}
        #: Positions every set of this pool contains (the GPUs of classes better than the cutoff).
        self.fixed = [pos for pos, g in enumerate(gpus) if g.uuid in uuids]
        #: Positions a search chooses among.
        self.free_positions = [pos for pos, g in enumerate(gpus) if g.uuid not in uuids]
        where = {g.uuid: pos for pos, g in enumerate(machine.gpus)}
        cols = [where[g.uuid] for g in gpus] if links else []  # single GPUs (N = 1) need no link matrix
        codes = [[machine.links[r][c] for c in cols] if machine.links is not None else [None] * len(cols)
                 for r in cols]
        distinct = {code for row in codes for code in row}  # a handful of codes; convert each once
        ranks = {code: link_rank(code) for code in distinct}
        links_of = {code: nvlinks(code) for code in distinct}
        self.rank = [[0 if i == j else ranks[code] for j, code in enumerate(row)] for i, row in enumerate(codes)]
        self.nv = [[0 if i == j else links_of[code] for j, code in enumerate(row)] for i, row in enumerate(codes)]
        self.index = [g.index for g in gpus]
        self.free = [g.memory_free_mib or 0 for g in gpus]
        self.avail = [int(availability(g)) for g in gpus]
        self.model = [g.name for g in gpus]
        groups: dict[object, int] = {}
        self.numa = [groups.setdefault(_numa_group(g), len(groups)) for g in gpus]
        # Each GPU's NVLinked peers, most links first (bounds the exact search's NVLink criterion).
        self.nv_peers = [sorted(((v, j) for j, v in enumerate(row) if v), reverse=True) for row in self.nv]
        self.by_free = sorted(range(self.size), key=lambda i: (-self.free[i], i))
        self._better: dict[int, list[int]] = {}
        #: NVLinks through NVSwitches: count each GPU's own links, not the pairs' (module docstring).
        self.switch = machine.nvswitch

    def nvlinks(self, members: Sequence[int]) -> int:
        """The NVLinks inside a set: pairs' ``NV<k>`` added up, or on a switch fabric each member's own."""
        if self.switch:
            total = 0
            for a in members:
                row = self.nv[a]
                total += max([row[b] for b in members])  # row[a] is 0: never more than a link
            return total
        return sum(self.nv[a][b] for i, a in enumerate(members) for b in members[i + 1:])

    def better_than(self, level: int) -> list[int]:
        """How many GPUs of the pool each GPU meets over a link better than ``level`` (cached)."""
        got = self._better.get(level)
        if got is None:
            got = self._better[level] = [sum(1 for j, v in enumerate(row) if j != i and v < level)
                                         for i, row in enumerate(self.rank)]
        return got

    def peak(self, x: int, among: set[int] | frozenset[int]) -> int:
        """``x``'s most NVLinks to any GPU in ``among`` (its own links, on a switch fabric)."""
        for value, y in self.nv_peers[x]:
            if y in among:
                return value
        return 0

    def subkey(self, members: Sequence[int]) -> tuple:
        """Criteria 4-9 of a set of pool positions (1-3 are the same for every set of a pool)."""
        members = sorted(members)
        worst, at = _worst_link(self.rank, members) if len(members) > 1 else (None, 0)  # N = 1: no links
        return (
            0 if worst is None else worst,
            at,
            -self.nvlinks(members) if len(members) > 1 else 0,
            len({self.numa[m] for m in members}),
            -min(self.free[m] for m in members),
            -sum(self.free[m] for m in members),
            tuple(self.index[m] for m in members),
        )

    def key(self, members: Sequence[int]) -> tuple:
        """The full key, in ``CRITERIA`` order."""
        classes = [self.avail[m] for m in members]
        taken = tuple(classes.count(c) for c in (Availability.FULL, Availability.BUSY, Availability.PARTLY_USED))
        return (max(classes), taken, len({self.model[m] for m in members}), *self.subkey(members))


def _numa_group(gpu: Gpu) -> object:
    if gpu.numa_node is not None:
        return ("numa", gpu.numa_node)
    if gpu.cpu_affinity is not None:
        return ("cpus", gpu.cpu_affinity)
    return ("unknown",)


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
        p = _Pool(machine, sorted(forced + group, key=lambda g: g.index), links=n > 1, forced=forced)
        results: list[tuple[tuple, tuple[int, ...]]]
        if n == 1:
            singles: list[tuple[tuple, tuple[int, ...]]] = [(p.subkey([i]), (i,)) for i in range(p.size)]
            results = sorted(singles)[:keep]
        else:
            budget = None if p.size <= EXACT_LIMIT else EXACT_BUDGET
            results, proven = _exact(p, n, keep, _heuristic(p, n, keep), budget)
            exact = exact and proven
        for _, members in results:
            candidate = Candidate(tuple(p.gpus[m] for m in sorted(members)), p.key(members))
            found[tuple(g.index for g in candidate.gpus)] = candidate
    ranked = sorted(found.values(), key=lambda c: c.key)[:keep]
    return Ranked(ranked[0].gpus, tuple(ranked), exact)


class _OutOfBudget(Exception):
    """The budgeted exact search ran out of nodes."""


def _insert(found: list[_Found], item: _Found, keep: int) -> None:
    if any(item[1] == members for _, members in found):
        return
    found.append(item)
    found.sort()
    del found[keep:]


def _exact(p: _Pool, n: int, keep: int, start: list[_Found], budget: int | None = None) -> tuple[list[_Found], bool]:
    """Branch and bound over index-ordered subsets that contain the pool's forced GPUs; ``start``
    (the heuristic's sets) seeds the incumbents, which is what makes the cuts bite from the first
    node. With a ``budget`` (search nodes) it may stop early: then it returns the best sets seen and
    False (not proven best)."""
    found: list[_Found] = []
    for item in start:
        _insert(found, item, keep)
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
                _insert(found, (key, ordered), keep)
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


def _bound(p: _Pool, limit: tuple, r: int, members: list[int], cand: list[int], worst: int, count: int, nv: int,
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


def _joined(p: _Pool, c: int, targets: Sequence[int], gain: list[int], wmax: list[int],
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


def _pairs_bound(p: _Pool, wb: int, worst: int, count: int, r: int, size: int, cand: list[int],
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


def _grow(p: _Pool, n: int, start: Sequence[int], level: int) -> list[int] | None:
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


def _clique(p: _Pool, n: int, level: int) -> list[int] | None:
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


def _heuristic(p: _Pool, n: int, keep: int) -> list[_Found]:
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
            clique = _clique(p, n, level)
            if clique is not None:
                sets.add(tuple(sorted(clique)))
        if sets:
            break
    found = sorted((p.subkey(s), s) for s in sets)
    if found:
        _insert(found, _polish(p, found[0], level), max(keep, 1))
    return found[:keep]


def _polish(p: _Pool, start: _Found, level: int) -> _Found:
    """Swap one chosen member for one outsider while that improves the key (a local optimum); the
    forced GPUs stay. Each trial's key extends the key parts of the set without ``out`` by the
    outsider (:func:`_with`), the same key as :meth:`_Pool.subkey` at a fraction of the cost."""
    key, members = start
    fixed = set(p.fixed)
    for _ in range(4 * len(members)):  # each round strictly improves; the cap only bounds time
        improved = False
        for out in members:
            if out in fixed:
                continue
            rest = [m for m in members if m != out]
            parts = _parts(p, rest)
            for c in p.free_positions:
                if c in members:
                    continue
                row = p.rank[c]
                if any(row[x] > level for x in rest):
                    continue
                trial_key = _with(p, parts, rest, c)
                if trial_key < key:
                    key, members, improved = trial_key, tuple(sorted(rest + [c])), True
                    break
            if improved:
                break
        if not improved:
            break
    return key, members


def _worst_link(rank: Sequence[Sequence[int]], members: Sequence[int]) -> tuple[int | None, int]:
    """The worst link rank among ``members`` and how many pairs are across it."""
    worst, at = None, 0
    for i, a in enumerate(members):
        row = rank[a]
        for b in members[i + 1:]:
            link = row[b]
            if worst is None or link > worst:
                worst, at = link, 1
            elif link == worst:
                at += 1
    return worst, at


def _parts(p: _Pool, members: list[int]) -> tuple:
    """The key parts of a set that a new member extends: worst link and its pairs, NVLinks (pairs'
    sum, and each member's best for a switch fabric), NUMA groups, least and total free memory."""
    worst, at = _worst_link(p.rank, members)
    nv = sum(p.nv[a][b] for i, a in enumerate(members) for b in members[i + 1:])
    best = [max([p.nv[a][b] for b in members]) for a in members]
    return (worst, at, nv, best, {p.numa[m] for m in members}, min(p.free[m] for m in members),
            sum(p.free[m] for m in members))


def _with(p: _Pool, parts: tuple, members: list[int], c: int) -> tuple:
    """``p.subkey(members + [c])`` from ``_parts(p, members)``."""
    worst, at, nv, best, numas, least, total = parts
    row, links = p.rank[c], p.nv[c]
    for x in members:
        link = row[x]
        if worst is None or link > worst:
            worst, at = link, 1
        elif link == worst:
            at += 1
    if p.switch:
        mine = [links[x] for x in members]
        nvl = max(mine) + sum(b if b > v else v for b, v in zip(best, mine))
    else:
        nvl = nv + sum(links[x] for x in members)
    return (worst, at, -nvl, len(numas | {p.numa[c]}), -min(least, p.free[c]), -(total + p.free[c]),
            tuple(p.index[m] for m in sorted(members + [c])))
