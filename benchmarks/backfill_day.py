#!/usr/bin/env python3
"""A day on a shared 8-GPU server, with backfill and with strict FIFO: occupancy, waits, the head's delay.

    python benchmarks/backfill_day.py [--seed 1] [--jobs 60] [--json FILE]

The machine is the bundled ``dgx-h100``'s eight GPUs (its GPU uuids, read from the snapshot); GPUs 0
and 1 are alice's (busy with her work) until midway through the morning. Three users queue jobs with
``--wait``: bob and carol send 1- and 2-GPU jobs of random lengths (2 to 40 minutes) all day, dave
one 8-GPU job early on, which can start only once alice's GPUs are free. Each waiter follows the
policy gpulaunch's waiters follow, with the very code they run (:class:`gpu_launch.reservations.
backfill.Head` and ``Candidate``): the head of the queue takes any free GPU; a later waiter only GPUs
the head lends; with ``--no-backfill`` (strict FIFO) only the head starts. Events (an arrival, a job's
end, alice's GPUs freeing) are replayed in simulated time, so the day takes a second, not a day; the
real processes, locks and tickets are tested by tests/test_backfill.py.

Three modes: backfill with declared limits (every job declares ``--time``, its length with a 10-60 % margin
rounded up to 10 minutes, and alice her 1 h: Slurm's rule lets a job whose limit ends by the head's expected start
use a GPU kept for it), backfill without limits, strict FIFO. The day (arrivals, lengths) is the same in all three.

Reported, for each mode: occupancy (busy GPU-seconds, alice's included, / 8 GPUs × the span until the
last job ends); every job's wait; the 8-GPU job's delay (its start minus the moment alice's GPUs
freed) against the longest job that was backfilled while it waited; overlaps (two jobs on a GPU at
once: must be 0). Issue 36's goal: occupancy ≥ 95 % with backfill, the head's delay within one
backfilled job's length. Standard library and gpu_launch only.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpu_launch.reservations.backfill import Candidate, Head, Lends  # noqa: E402

TARGET_OCCUPANCY = 0.95
SNAPSHOT = "dgx-h100"

__all__ = ["Job", "simulate", "day", "main"]


class Job:
    def __init__(self, name: str, user: str, need: int, arrival: float, length: float,
                 limit: float | None = None) -> None:
        self.name, self.user, self.need, self.arrival, self.length = name, user, need, arrival, length
        self.limit = limit  # declared (--time): gpulaunch ends the job there (submit, each)
        self.start: float | None = None
        self.gpus: frozenset[str] = frozenset()
        self.backfilled = False
        self.candidate = Candidate()
        self.head: Head | None = None

    @property
    def runs(self) -> float:
        return self.length if self.limit is None else min(self.length, self.limit)

    @property
    def end(self) -> float:
        assert self.start is not None
        return self.start + self.runs


def _uuids() -> list[str]:
    from gpu_launch.hardware.snapshot import resolve

    return [g.uuid for g in resolve(SNAPSHOT).gpus][:8]


def simulate(jobs: list[Job], uuids: list[str], busy_until: dict[str, float], backfill: bool = True,
             declared: dict[str, float] | None = None) -> dict[str, Any]:
    """Replay the jobs' arrivals and ends; every waiter looks at every event, the head first. ``declared``:
    when alice's work on each of her GPUs is declared to end (her --time); jobs declare their ``limit``."""
    every = frozenset(uuids)
    held: dict[str, Job | None] = {u: None for u in uuids}  # who runs on each GPU now (None: free, or alice's)
    waiting: list[Job] = []
    running: list[Job] = []
    events = sorted({j.arrival for j in jobs} | set(busy_until.values()))
    pending = sorted(jobs, key=lambda j: j.arrival)
    overlaps = 0
    t = float("-inf")

    def free_now() -> set[str]:
        return {u for u in uuids if held[u] is None and busy_until.get(u, 0.0) <= t}

    def begin(job: Job, gpus: list[str], now: float) -> None:
        nonlocal overlaps
        for u in gpus:
            if held[u] is not None:
                overlaps += 1
            held[u] = job
        job.start, job.gpus = now, frozenset(gpus)
        running.append(job)
        waiting.remove(job)

    while pending or waiting or running:
        ends = [j.end for j in running]
        upcoming = [e for e in events if e > t] + ends
        if not upcoming and not (pending and pending[0].arrival <= t):
            break
        t = min(upcoming) if upcoming else t
        for job in [j for j in running if j.end <= t]:
            running.remove(job)
            for u in job.gpus:
                held[u] = None
        while pending and pending[0].arrival <= t:
            waiting.append(pending.pop(0))
        progress = True
        while progress and waiting:
            progress = False
            head = waiting[0]
            free = free_now()
            if len(free) >= head.need:
                begin(head, sorted(free)[:head.need], t)
                progress = True
                continue
            if head.head is None:
                head.head = Head(head.need, every)
            ends = {u: e for u, e in (declared or {}).items() if busy_until.get(u, 0.0) > t}
            ends.update((u, j.start + j.limit) for u, j in held.items()
                        if j is not None and j.limit is not None and j.start is not None)
            lends: Lends | None = head.head.look(free, t, ends) if backfill else None
            for job in waiting[1:]:
                free = free_now()
                job.candidate.look(free)
                usable = job.candidate.usable(lends, uuids, t + job.limit if job.limit is not None else None,
                                              free) & free
                if len(usable) >= job.need:
                    job.backfilled = True
                    begin(job, sorted(usable)[:job.need], t)
                    progress = True
        events = [e for e in events if e > t]
    span = max([j.end for j in jobs if j.start is not None] + list(busy_until.values()))
    busy = sum(j.runs * j.need for j in jobs if j.start is not None) + sum(busy_until.values())
    return {"occupancy": busy / _possible(jobs, busy_until, len(uuids), span), "of_span": busy / (len(uuids) * span),
            "span_s": span, "overlaps": overlaps,
            "waits": {j.name: round(j.start - j.arrival, 1) for j in jobs if j.start is not None},
            "unstarted": [j.name for j in jobs if j.start is None]}


def _possible(jobs: list[Job], busy_until: dict[str, float], gpus: int, span: float) -> float:
    """The GPU-seconds that could have been busy: at each moment min(GPUs, what the jobs that have
    arrived and not yet ended, and alice, ask for); a GPU idle while nobody asks for it is no loss."""
    cuts = sorted({0.0, span, *busy_until.values(), *(j.arrival for j in jobs),
                   *(j.end for j in jobs if j.start is not None)})
    total = 0.0
    for a, b in zip(cuts, cuts[1:]):
        mid = (a + b) / 2
        asked = sum(1 for t in busy_until.values() if mid < t)
        asked += sum(j.need for j in jobs if j.arrival <= mid and (j.start is None or mid < j.end))
        total += min(gpus, asked) * (b - a)
    return total


def day(seed: int, count: int, limits: bool = False) -> tuple[list[Job], dict[str, float]]:
    """The day: alice's GPUs 0 and 1 free at 1 h; dave's 8-GPU job at 1 min; bob's and carol's stream.
    ``limits``: every job declares ``--time``, as people do: its length with a margin (10 to 60 % more),
    rounded up to 10 minutes; alice's work declared 1 h. The same day (lengths, arrivals) either way."""
    rng, margins = random.Random(seed), random.Random(-seed)  # the margins apart: the same day with or without
    uuids = _uuids()
    busy_until = {uuids[0]: 3600.0, uuids[1]: 3600.0}
    jobs = [Job("dave-8gpu", "dave", 8, 60.0, 1800.0, 1800.0 if limits else None)]
    t = 0.0
    for i in range(count):
        t += rng.uniform(20, 200)
        user = ("bob", "carol")[i % 2]
        need, length, margin = rng.choice((1, 1, 2)), rng.uniform(120, 2400), margins.uniform(1.1, 1.6)
        limit = math.ceil(length * margin / 600) * 600 if limits else None
        jobs.append(Job(f"{user}-{i}", user, need, t, length, limit))
    return jobs, busy_until


def measure(seed: int = 1, count: int = 60) -> dict[str, Any]:
    out: dict[str, Any] = {"seed": seed, "jobs": count + 1}
    for mode, backfill, limits in (("limits", True, True), ("backfill", True, False), ("fifo", False, False)):
        jobs, busy_until = day(seed, count, limits)
        result = simulate(jobs, _uuids(), busy_until, backfill, busy_until if limits else None)
        big = jobs[0]
        freed = max(busy_until.values())
        lengths = [j.length for j in jobs if j.backfilled and j.start is not None and big.start is not None
                   and big.arrival <= j.start < big.start]
        result["head_delay_s"] = round((big.start or 0) - max(freed, big.arrival), 1)
        result["longest_backfilled_s"] = round(max(lengths, default=0.0), 1)
        result["backfilled"] = sum(j.backfilled for j in jobs)
        out[mode] = result
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    doc = measure(args.seed, args.jobs)
    for mode in ("limits", "backfill", "fifo"):
        r = doc[mode]
        waits = sorted(r["waits"].values())
        print(f"{mode:8}  occupancy {100 * r['occupancy']:5.1f} % ({100 * r['of_span']:5.1f} % of 8 GPUs x span)  "
              f"span {r['span_s'] / 3600:4.1f} h  overlaps {r['overlaps']}  backfilled {r['backfilled']:2}  "
              f"median wait {waits[len(waits) // 2] / 60:5.1f} min  max wait {waits[-1] / 60:5.1f} min  "
              f"8-GPU job's delay {r['head_delay_s'] / 60:5.1f} min (longest backfilled job "
              f"{r['longest_backfilled_s'] / 60:.1f} min)")
    print("every job's wait (min), backfill with declared limits / without / fifo:")
    for name in doc["backfill"]["waits"]:
        print(f"  {name:10} {doc['limits']['waits'].get(name, 0) / 60:6.1f} / {doc['backfill']['waits'][name] / 60:6.1f}"
              f" / {doc['fifo']['waits'].get(name, 0) / 60:6.1f}")
    for mode in ("limits", "backfill"):
        b = doc[mode]
        ok = b["occupancy"] >= TARGET_OCCUPANCY and b["head_delay_s"] <= b["longest_backfilled_s"] and b["overlaps"] == 0
        print(f"goal, {mode} (occupancy >= {100 * TARGET_OCCUPANCY:.0f} %, head's delay <= one backfilled job, "
              f"0 overlaps): {'met' if ok else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
