"""A local sweep in the machine's --wait queue, and its own jobs' GPUs.

A sweep takes a queue ticket only when it must wait (or someone already waits), not one a job: it
still stands behind a waiter who came first, and keeps its place against one who comes later. A GPU
one of its jobs runs on is never given to another of its jobs (one job a GPU), even when that job
has let go of its lock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharing_helpers import HOLD, Lines, example, first_gpus, start, write_snapshot

NOTE = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"


def _one_gpu(where: Path) -> Path:
    return write_snapshot(where / "one.json", first_gpus(example("workstation-4x"), 1))


def _sweep_file(tmp_path: Path, *lines: str) -> Path:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("".join(line + "\n" for line in lines))
    return jobs


def _hold(one: Path, locks: Path, release: Path) -> object:
    holder = start(["--snapshot", str(one), "--gpus", "0", "--", "python3", "-c", HOLD, str(release)], locks)
    Lines(holder.stdout).wait("CVD=0")
    return holder


@pytest.mark.parametrize("strict", [True, False])
def test_a_sweep_stands_behind_a_waiter_who_came_first_even_with_a_gpu_free(tmp_path: Path, strict: bool) -> None:
    # GPU 0 held, GPU 1 free; a waiter wants both. The sweep's job could run on GPU 1 now: with
    # --no-backfill the waiter came first and the job runs after it; with backfill (issue 36) the job
    # runs at once on GPU 1, which the waiter lends, and the waiter starts once it has ended.
    locks, release, order = tmp_path / "locks", tmp_path / "release", tmp_path / "order.txt"
    two = write_snapshot(tmp_path / "two.json", first_gpus(example("workstation-4x"), 2))
    holder = _hold(two, locks, release)
    waiter = start(["--snapshot", str(two), "--auto", "2", "--wait", "--", "python3", "-c", NOTE, str(order), "w"],
                   locks)
    Lines(waiter.stderr).wait("waiting")
    jobs = _sweep_file(tmp_path, f"python3 -c \"{NOTE}\" {order} sweep")
    sweep = start(["--snapshot", str(two), "each", str(jobs), "--log-dir", str(tmp_path / "logs"),
                   *(["--no-backfill"] if strict else [])], locks)
    if strict:
        assert "behind 1 earlier waiter" in Lines(sweep.stderr).wait("waiting")
    else:
        assert sweep.wait(timeout=60) == 0 and order.read_text().split() == ["sweep"]
    release.touch()
    assert holder.wait(timeout=60) == 0 and waiter.wait(timeout=60) == 0 and sweep.wait(timeout=60) == 0
    assert order.read_text().split() == (["w", "sweep"] if strict else ["sweep", "w"])


def test_a_waiting_sweep_keeps_its_place_against_a_later_waiter(tmp_path: Path) -> None:
    locks, release, order = tmp_path / "locks", tmp_path / "release", tmp_path / "order.txt"
    one = _one_gpu(tmp_path)
    holder = _hold(one, locks, release)
    jobs = _sweep_file(tmp_path, f"python3 -c \"{NOTE}\" {order} sweep")
    sweep = start(["--snapshot", str(one), "each", str(jobs), "--log-dir", str(tmp_path / "logs")], locks)
    Lines(sweep.stderr).wait("waiting")
    waiter = start(["--snapshot", str(one), "--auto", "1", "--wait", "--", "python3", "-c", NOTE, str(order), "w"],
                   locks)
    assert "1 waiter" in Lines(waiter.stderr).wait("waiting")  # the sweep is ahead of it
    release.touch()
    assert holder.wait(timeout=60) == 0 and sweep.wait(timeout=60) == 0 and waiter.wait(timeout=60) == 0
    assert order.read_text().split() == ["sweep", "w"]


def test_a_gpu_stays_its_jobs_until_the_job_ends_even_without_its_lock(tmp_path: Path) -> None:
    # Job 1 closes every inherited descriptor (its reservation with them) and runs on: the sweep, which
    # looks for GPUs every 0.05 s, must not start job 2 on that GPU before job 1 has ended.
    order = tmp_path / "order.txt"
    one = _one_gpu(tmp_path)
    first = ("import os, sys, time; os.closerange(3, 65536); f = sys.argv[1]; open(f, 'a').write('start1\\n'); "
             "time.sleep(1.0); open(f, 'a').write('end1\\n')")
    jobs = _sweep_file(tmp_path, f"exec python3 -c \"{first}\" {order}", f"python3 -c \"{NOTE}\" {order} start2")
    sweep = start(["--snapshot", str(one), "each", str(jobs), "--log-dir", str(tmp_path / "logs"), "-q"],
                  tmp_path / "locks")
    assert sweep.wait(timeout=60) == 0, sweep.stderr.read() if sweep.stderr else ""
    assert order.read_text().split() == ["start1", "end1", "start2"]
