"""The head's expected start (reservations/backfill.py shadow), which decides whether a waiter with a declared
time limit may start on a GPU kept for the head (issue 37, seed 38 mut-c)."""

from __future__ import annotations

from gpu_launch.reservations.backfill import shadow

RELEVANT = frozenset({"0", "1", "2"})


def test_with_exactly_the_gpus_it_needs_free_the_head_can_start_now():
    assert shadow(2, frozenset({"0", "1"}), RELEVANT, 100.0, {"2": 500.0}) == 100.0
    assert shadow(2, frozenset({"0", "1"}), RELEVANT, 100.0, {}) == 100.0


def test_one_short_it_starts_at_the_soonest_declared_end_and_never_before_now():
    assert shadow(3, frozenset({"0", "1"}), RELEVANT, 100.0, {"2": 500.0}) == 500.0
    assert shadow(3, frozenset({"0", "1"}), RELEVANT, 100.0, {"2": 50.0}) == 100.0
    assert shadow(3, frozenset({"0", "1"}), RELEVANT, 100.0, {}) is None
