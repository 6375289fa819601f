"""Backfill behind the head of the queue, without starving it (as Slurm's backfill with a reservation
for the top job, ``src/plugins/sched/backfill/backfill.c``, does on a cluster; here on one machine).

The head of line (:mod:`gpu_launch.reservations.waitqueue`) alone may take any GPU; a later waiter may
start at once on GPUs the head *lends*, and only on those. What the head lends (:class:`Head`):

* the GPUs that were free for it when it began to wait, as long as they stay free: a GPU that frees
  up after that (another user's work ends, a backfilled job ends) is **kept** for the head, and
  nobody else starts on it; so a lendable GPU, once taken, is never lent again, and a stream of
  small jobs can start at most as many times as GPUs were free when the head began to wait;
* nothing at all once the head *could* start but for GPUs lent to backfilled jobs (the GPUs free for
  it plus those lent and still taken are enough): from then on it waits at most until the
  backfilled jobs end, and no new job starts on a GPU it may use;
* every GPU it may never use (``--gpus`` names others; ``--exclude``), always;
* with declared limits (``--time``), as Slurm's backfill does (``src/plugins/sched/backfill/backfill.c``,
  ``_attempt_backfill``: a lower job starts early only if it ends by the top job's reserved start, which
  comes from the running jobs' time limits): the head works out when it can expect to start (its
  *shadow*: the moment enough of its GPUs are expected free, each held GPU at its holder's declared
  end; a GPU busy with work that declared none never) and a later waiter whose own limit ends by
  then may take any GPU free for the head at its last look, kept ones included (it is off them again
  before the head could start: submit and each end a job at its limit); one whose declared limit ends
  later takes no GPU the head may use, lent ones neither (it would delay the head: Slurm does not start it).
  A launch that does not wait is held to the same rule on kept GPUs (:func:`by_shadow`): with a ``--time``
  that ends by the head's expected start it may take one, without (or with a later one) it is refused;
* nothing, to anyone, when the head waits strictly first come, first served (``--no-backfill``: ``strict``):
  it keeps every GPU it may use, from later waiters and from launches that do not wait alike, as Slurm's
  FIFO scheduler (``sched/builtin``) starts no job while one ahead of it in its partition cannot start and
  refuses ``srun --immediate`` then (``src/slurmctld/job_mgr.c``, ``job_allocate``: ``ESLURM_NOT_TOP_PRIORITY``
  when ``_top_priority`` is false), and task-spooler runs every job from its one queue, in order.

The head writes what it lends to a file of its own beside its ticket (``lends-<ticket>``: a JSON line,
replaced atomically), which a later waiter believes only when its owner is the ticket's owner (the
kernel's word); a file that is missing, foreign or unreadable lends nothing, so a head that writes none
(an older gpulaunch) keeps the queue strictly first come, first served for later waiters. A
later waiter also takes only GPUs it has seen free since it began to wait (:class:`Candidate`), so a
GPU that freed up an instant before the head said so is not taken for one the head lends.
A ticket is never rewritten: its ``ctime`` is its place in the queue.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping

from gpu_launch.base.records import dataclass, field
from gpu_launch.choose import select as _select

__all__ = ["Head", "Candidate", "Lends", "by_shadow", "lends_path", "publish", "read_lends", "KEPT"]

#: How a GPU kept for the head of the queue is described to a later waiter (acquire.attempt's ``own``).
KEPT = _select.KEPT
_PREFIX = "lends-"
_MAX = 8192  # bytes of a lends file that are read


@dataclass(frozen=True)
class Lends:
    """What the head of the queue lends: ``lends`` of its ``relevant`` GPUs (the others are always free
    to use); ``frozen``: it could start but for backfilled jobs, and lends nothing more."""

    relevant: frozenset[str]
    lends: frozenset[str]
    frozen: bool = False
    need: int = 1
    free: frozenset[str] = frozenset()  # the relevant GPUs free for the head at its last look
    #: when the head expects to start (seconds since the epoch) from the holders' declared limits; None: not
    #: known (a GPU it needs is busy with work that declared no limit)
    shadow: float | None = None
    #: it waits strictly first come, first served (--no-backfill): it lends nothing and keeps every relevant GPU
    strict: bool = False

    @property
    def kept(self) -> frozenset[str]:
        """What later waiters may not take (the GPUs free now among them are what ``ls`` shows as kept)."""
        return self.relevant - self.lends


def by_shadow(lends: Lends, ends_by: float | None, free: Iterable[str]) -> frozenset[str]:
    """The GPUs kept for the head that a job whose declared limit ends at ``ends_by`` may take now (Slurm's rule,
    ``_attempt_backfill``: it ends by the head's expected start): the ones free for the head at its last look;
    none without a limit, with one that ends later, when the head has no expected start or is strict, or when
    one of its GPUs freed since its last look (``free``: the GPUs free now; it may start sooner: wait for its
    next look)."""
    if lends.strict or ends_by is None or lends.shadow is None or ends_by > lends.shadow:
        return frozenset()
    return lends.free if frozenset(free) & lends.relevant <= lends.free | lends.lends else frozenset()


@dataclass
class Head:
    """The head's side: what it lends, from what it sees free for it at each look (pure: no I/O)."""

    need: int
    relevant: frozenset[str]
    first: frozenset[str] | None = None  # free for it at its first look
    lendable: set[str] = field(default_factory=set)  # of those, the ones free at every look since
    frozen: bool = False

    def look(self, free: Iterable[str], now: float = 0.0, ends: Mapping[str, float] | None = None) -> Lends:
        """``free``: the relevant GPUs free for the head now (eligible, nobody's reservation); ``ends``: for
        GPUs held by a job that declared a limit, when it ends (``now`` and ``ends``: seconds, one clock)."""
        free = frozenset(free) & self.relevant
        if self.first is None:
            self.first = free
            self.lendable = set(free)
        self.lendable &= free
        lent_out = self.first - free  # lent and still taken (by a backfilled job, or anyone)
        if len(free) + len(lent_out) >= self.need:
            self.frozen = True  # it could start but for lent GPUs: lend nothing more, ever
        return Lends(self.relevant, frozenset() if self.frozen else frozenset(self.lendable), self.frozen, self.need,
                     free, shadow(self.need, free, self.relevant, now, ends or {}))


def shadow(need: int, free: frozenset[str], relevant: frozenset[str], now: float,
           ends: Mapping[str, float]) -> float | None:
    """When ``need`` of the ``relevant`` GPUs are expected free: the ``need - len(free)``-th soonest
    declared end among the held ones (an end already past counts as now); None when too few declared one."""
    if len(free) >= need:
        return now
    soon = sorted(max(now, ends[u]) for u in relevant - free if u in ends)
    missing = need - len(free)
    return soon[missing - 1] if len(soon) >= missing else None


@dataclass
class Candidate:
    """A later waiter's side: which GPUs it may take on the head's word (pure: no I/O)."""

    seen_free: set[str] | None = None  # free at every one of its looks since it began to wait

    def look(self, free: Iterable[str]) -> None:
        free = set(free)
        self.seen_free = free if self.seen_free is None else self.seen_free & free

    def usable(self, lends: Lends | None, every: Iterable[str], ends_by: float | None = None,
               free: Iterable[str] | None = None) -> frozenset[str]:
        """Of ``every`` GPU, the ones this waiter may take: none when the head lends nothing. ``ends_by``:
        when this waiter's declared limit would end it, were it to start now: by the head's shadow, the GPUs
        free for the head at its last look are usable too, unless one of its GPUs freed since (``free``:
        the GPUs free now; the head may then start sooner: wait for its next look); after it, only the GPUs
        the head never uses."""
        if lends is None or lends.strict:  # strict first come, first served: nobody starts ahead of the head
            return frozenset()
        seen = self.seen_free or set()
        late = ends_by is not None and lends.shadow is not None and ends_by > lends.shadow
        if late:  # it declared a limit that would still run when the head expects to start: as Slurm, not ahead of it
            return frozenset(u for u in every if u not in lends.relevant)
        early = by_shadow(lends, ends_by, free if free is not None else seen)
        # A kept GPU it takes by the shadow need not have been free at each of its own looks: the head saw it
        # free, and nothing freed since that the head has not seen.
        return frozenset(u for u in every if u not in lends.relevant or (u in lends.lends and u in seen) or u in early)


def lends_path(queue_dir: str, ticket_name: str) -> str:
    return os.path.join(queue_dir, _PREFIX + ticket_name)


def publish(queue_dir: str, ticket_name: str, lends: Lends, shown: dict[str, str]) -> None:
    """Replace the head's lends file (a new file renamed over the old one: a reader sees one or the other).

    ``shown``: uuid -> label (``GPU 3``), for ``ls``. Best effort: a head that cannot write lends nothing.
    """
    doc = {"relevant": sorted(lends.relevant), "lends": sorted(lends.lends), "frozen": lends.frozen,
           "need": lends.need, "free": sorted(lends.free), "shadow": lends.shadow, "strict": lends.strict,
           "kept": [shown.get(u, u) for u in sorted(lends.free - lends.lends, key=lambda u: shown.get(u, u))]}
    path = lends_path(queue_dir, ticket_name)
    temp = os.path.join(queue_dir, f".{_PREFIX}{ticket_name}-{os.urandom(4).hex()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.write(fd, json.dumps(doc).encode() + b"\n")
        os.fchmod(fd, 0o644)
        os.close(fd)
        os.rename(temp, path)
    except OSError:
        try:
            os.close(fd)
        except OSError:
            pass
        forget(temp)


def forget(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read_lends(queue_dir: str, ticket_name: str, owner: int) -> tuple[Lends, list[str]] | None:
    """The head's lends, and the labels of the GPUs it keeps; None when there is no lends file of the
    ticket's ``owner`` (another user's file, a symlink, a torn or damaged one lends nothing)."""
    try:
        fd = os.open(lends_path(queue_dir, ticket_name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
            return None
        doc = json.loads(os.read(fd, _MAX).split(b"\n", 1)[0])
        when = doc.get("shadow")
        when = float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) and when < 1e11 else None
        lends = Lends(frozenset(map(str, doc["relevant"])), frozenset(map(str, doc["lends"])), bool(doc["frozen"]),
                      int(doc["need"]), frozenset(map(str, doc.get("free", []))), when, doc.get("strict") is True)
        return lends, [str(k) for k in doc.get("kept", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(fd)
