"""A pool of GPUs as integers, for the searches of :mod:`gpu_launch.choose.ranking`: each GPU's and
each pair's numbers (link ranks, NVLinks, free memory, NUMA group, availability class), and a set's
key, whole or in parts that one more member extends."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_launch.hardware.model import Gpu, Machine
from gpu_launch.choose.availability import Availability, availability

__all__ = ["Found", "Pool", "insert", "key_parts", "key_with", "link_rank", "nvlinks", "worst_link"]

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


# A search result: (sub-key over criteria 4-9, members as pool positions).
Found = tuple[tuple, tuple[int, ...]]


class Pool:
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
        worst, at = worst_link(self.rank, members) if len(members) > 1 else (None, 0)  # N = 1: no links
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


def insert(found: list[Found], item: Found, keep: int) -> None:
    if any(item[1] == members for _, members in found):
        return
    found.append(item)
    found.sort()
    del found[keep:]


def worst_link(rank: Sequence[Sequence[int]], members: Sequence[int]) -> tuple[int | None, int]:
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


def key_parts(p: Pool, members: list[int]) -> tuple:
    """The key parts of a set that a new member extends: worst link and its pairs, NVLinks (pairs'
    sum, and each member's best for a switch fabric), NUMA groups, least and total free memory."""
    worst, at = worst_link(p.rank, members)
    nv = sum(p.nv[a][b] for i, a in enumerate(members) for b in members[i + 1:])
    best = [max([p.nv[a][b] for b in members]) for a in members]
    return (worst, at, nv, best, {p.numa[m] for m in members}, min(p.free[m] for m in members),
            sum(p.free[m] for m in members))


def key_with(p: Pool, parts: tuple, members: list[int], c: int) -> tuple:
    """``p.subkey(members + [c])`` from ``key_parts(p, members)``."""
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
