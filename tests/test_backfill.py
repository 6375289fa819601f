"""Backfill without starving the head (issue 36 item 1): a later waiter starts at once on GPUs the head
of the queue lends; GPUs that free up are kept for the head; once it could start but for backfilled
jobs nothing new starts on its GPUs; --no-backfill keeps strict FIFO. The policy's own code
(gpu_launch/reservations/backfill.py) under a property test over random arrivals, then real processes
in a private lock directory (a second user where the tests run as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import example as case, given, settings
from hypothesis import strategies as st

from gpu_launch.reservations.backfill import Candidate, Head, Lends, publish, read_lends
from sharing_helpers import HOLD, Lines, env, example, first_gpus, run, start, wait_for, write_snapshot
from two_users import as_nobody, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import backfill_day  # noqa: E402

UUIDS = [f"GPU-{i}" for i in range(8)]


def test_the_head_lends_what_was_free_when_it_began_to_wait_and_keeps_what_frees_up() -> None:
    head = Head(8, frozenset(UUIDS))
    assert head.look(UUIDS[2:]).lends == frozenset(UUIDS[2:])  # alice has 0 and 1; six are lent
    assert head.look(UUIDS[3:]).lends == frozenset(UUIDS[3:])  # a backfilled job took GPU 2
    lends = head.look(UUIDS[4:])  # a second one took GPU 3
    assert lends.kept == frozenset(UUIDS[:4]) and not lends.frozen
    # GPU 2's job ended: it freed up, so it is kept, never lent again
    assert head.look([UUIDS[2], *UUIDS[4:]]).lends == frozenset(UUIDS[4:])
    # alice's GPUs free: the head could start but for GPU 3 (lent): it lends nothing more
    frozen = head.look([*UUIDS[:3], *UUIDS[4:]])
    assert frozen.frozen and frozen.lends == frozenset()


def test_a_later_waiter_takes_only_lent_gpus_it_has_seen_free_and_any_the_head_never_uses() -> None:
    lends = Lends(frozenset(UUIDS[:4]), frozenset(UUIDS[2:4]))
    later = Candidate()
    later.look([UUIDS[2], *UUIDS[4:]])  # GPU 3 was taken when it looked
    assert later.usable(lends, UUIDS) == frozenset([UUIDS[2], *UUIDS[4:]])
    assert later.usable(None, UUIDS) == frozenset()  # a head that lends nothing: strict FIFO


def test_a_declared_limit_that_ends_by_the_heads_expected_start_may_use_a_kept_gpu() -> None:
    """Slurm's rule: alice's GPUs 0 and 1 end at t=3600 (declared), so the 8-GPU head expects to start then; GPU 2
    freed up (kept). A later waiter whose --time ends by 3600 may take it; one that would end later, or one without
    a limit, may not; nor any, once a GPU freed that the head has not seen yet (it may start sooner)."""
    head = Head(8, frozenset(UUIDS))
    head.look(UUIDS[3:], 0.0, {UUIDS[0]: 3600.0, UUIDS[1]: 3600.0, UUIDS[2]: 500.0})
    lends = head.look(UUIDS[2:], 1000.0, {UUIDS[0]: 3600.0, UUIDS[1]: 3600.0})
    assert lends.shadow == 3600.0 and UUIDS[2] in lends.kept
    later = Candidate()
    later.look(UUIDS[2:3])
    assert UUIDS[2] in later.usable(lends, UUIDS, ends_by=3600.0, free=UUIDS[2:])
    assert UUIDS[2] not in later.usable(lends, UUIDS, ends_by=3601.0, free=UUIDS[2:])
    # a limit that ends after the expected start takes no GPU the head may use, not even one it lends
    lent = Lends(frozenset(UUIDS[:4]), frozenset(UUIDS[3:4]), need=4, free=frozenset(UUIDS[3:4]), shadow=3600.0)
    other = Candidate()
    other.look(UUIDS[3:])
    assert other.usable(lent, UUIDS, ends_by=3601.0, free=UUIDS[3:]) == frozenset(UUIDS[4:])
    assert UUIDS[3] in other.usable(lent, UUIDS, free=UUIDS[3:])  # no limit declared: what it lends, as before
    assert UUIDS[2] not in later.usable(lends, UUIDS, free=UUIDS[2:])  # no limit declared: kept
    assert UUIDS[2] not in later.usable(lends, UUIDS, ends_by=3000.0, free=UUIDS[1:])  # GPU 1 freed since its look
    # an end nobody declared (work that is not gpulaunch's, or a launch without --time): no expected start
    assert head.look(UUIDS[2:], 1000.0, {UUIDS[0]: 3600.0}).shadow is None
    # a declared end already past counts as now: nothing ends by it
    assert head.look(UUIDS[2:], 4000.0, {UUIDS[0]: 3600.0, UUIDS[1]: 3600.0}).shadow == 4000.0


def test_a_lends_file_of_another_owner_or_a_torn_one_lends_nothing(tmp_path: Path) -> None:
    publish(str(tmp_path), "ticket-1", Lends(frozenset(UUIDS), frozenset(UUIDS[:2]), need=8), {UUIDS[0]: "GPU 0"})
    got = read_lends(str(tmp_path), "ticket-1", os.getuid())
    assert got is not None and got[0].lends == frozenset(UUIDS[:2]) and got[0].shadow is None
    publish(str(tmp_path), "ticket-4", Lends(frozenset(UUIDS), frozenset(), need=8, free=frozenset(UUIDS[2:3]),
                                             shadow=3600.0), {})
    got = read_lends(str(tmp_path), "ticket-4", os.getuid())
    assert got is not None and got[0].shadow == 3600.0 and got[0].free == frozenset(UUIDS[2:3])
    assert read_lends(str(tmp_path), "ticket-1", os.getuid() + 1) is None  # not the ticket's owner's word
    (tmp_path / "lends-ticket-2").write_text('{"relevant": ["GPU-0"], "len')
    assert read_lends(str(tmp_path), "ticket-2", os.getuid()) is None
    os.symlink(tmp_path / "lends-ticket-1", tmp_path / "lends-ticket-3")
    assert read_lends(str(tmp_path), "ticket-3", os.getuid()) is None


_small = st.tuples(st.floats(0, 5000), st.sampled_from((1, 1, 2)), st.floats(1, 3000))


@settings(max_examples=300, deadline=None)
# a job that arrives after alice's GPUs freed, on a GPU lent before and still free: it must not start
@case(small=[(1.0, 1, 500.0), (150.0, 1, 1000.0)], alice_frees=100.0, head_arrives=0.0, busy=2)
@given(st.lists(_small, max_size=40), st.floats(0, 4000), st.floats(0, 3000), st.integers(0, 7))
def test_a_stream_of_small_jobs_cannot_starve_the_head(small: list[tuple[float, int, float]], alice_frees: float,
                                                       head_arrives: float, busy: int) -> None:
    """The head's start <= the moment its GPUs freed (alice's) + the longest backfilled job; 0 overlaps."""
    head = backfill_day.Job("head", "dave", 8, head_arrives, 100.0)
    jobs = [head] + [backfill_day.Job(f"j{i}", "bob", n, head_arrives + 1e-3 + t, length)
                     for i, (t, n, length) in enumerate(small)]
    busy_until = {u: alice_frees for u in UUIDS[:busy]}
    result = backfill_day.simulate(jobs, UUIDS, busy_until)
    assert result["overlaps"] == 0 and not result["unstarted"]
    backfilled = [j.length for j in jobs if j.backfilled]
    freed = max(head_arrives, alice_frees if busy else 0.0)
    assert head.start is not None and head.start <= freed + max(backfilled, default=0.0) + 1e-6
    # with declared limits (alice's work declared to end when it does; each job's limit 1.5 times its length): the
    # head starts once its GPUs freed and the backfilled jobs ended, never later, and at most one backfilled job's
    # declared limit after its GPUs freed (one that ends before its limit may leave a job started by Slurm's rule
    # in its way, as under Slurm)
    timed = [backfill_day.Job(j.name, j.user, j.need, j.arrival, j.length, j.length * 1.5) for j in jobs]
    declared = backfill_day.simulate(timed, UUIDS, busy_until, declared=busy_until)
    assert declared["overlaps"] == 0 and not declared["unstarted"]
    lent = [j for j in timed if j.backfilled]
    assert timed[0].start is not None and timed[0].start <= max([freed, *(j.end for j in lent)]) + 1e-6
    assert timed[0].start <= freed + max((j.limit for j in lent), default=0.0) + 1e-6  # type: ignore[type-var]
    # strict FIFO: nobody starts ahead of the head
    fifo = [backfill_day.Job(j.name, j.user, j.need, j.arrival, j.length) for j in jobs]
    backfill_day.simulate(fifo, UUIDS, busy_until, backfill=False)
    assert all(j.start >= fifo[0].start for j in fifo[1:])  # type: ignore[operator]


def test_the_benchmark_day_reports_both_modes_with_no_overlap() -> None:
    doc = backfill_day.measure(seed=1, count=20)
    assert doc["backfill"]["overlaps"] == doc["fifo"]["overlaps"] == doc["limits"]["overlaps"] == 0
    assert doc["limits"]["occupancy"] >= doc["backfill"]["occupancy"]
    assert doc["fifo"]["backfilled"] == 0 and doc["backfill"]["head_delay_s"] <= doc["backfill"]["longest_backfilled_s"]
    for mode in ("limits", "backfill", "fifo"):  # the causes add up to all the idle time, and to all that was lost
        r = doc[mode]
        busy = r["of_span"] * 8 * r["span_s"]
        assert abs(sum(r["idle_gpu_s"].values()) - (8 * r["span_s"] - busy)) < 1.0
        assert abs(sum(r["lost_gpu_s"].values()) - (busy / r["occupancy"] - busy)) < 1.0
        assert r["lost_gpu_s"]["no_waiter"] == 0.0 and r["idle_gpu_s"]["before_alice"] > 0
    # no policy that never delays the head beats the bound, and this one, which never does, stays under it
    assert doc["limits"]["head_delay_s"] == 0.0 and doc["limits"]["occupancy"] <= doc["limits"]["no_delay_bound"] < 1.0


def test_the_no_delay_bound_counts_only_jobs_whose_limit_ends_before_alices_gpus_free() -> None:
    """Alice holds 1 of 2 GPUs until t=1000; the head (2 GPUs) comes at t=0; one job of 400 s that declares 500 s
    fits before alice's end, one that declares 1200 s does not: at least 1000 - 400 GPU-seconds are lost."""
    jobs = [backfill_day.Job("head", "dave", 2, 0.0, 100.0, 100.0), backfill_day.Job("a", "bob", 1, 10.0, 400.0, 500.0),
            backfill_day.Job("b", "bob", 1, 20.0, 400.0, 1200.0)]
    work = 2 * 100.0 + 400.0 + 400.0 + 1000.0
    assert backfill_day.no_delay_bound(jobs, {UUIDS[0]: 1000.0}, 2) == work / (work + 600.0)


#: A job that notes when it started on which GPUs, waits for its release file, then notes its end.
# Each note is written whole, then renamed into place: a test that sees it exists reads it whole (read between
# open and write, a note was once empty in CI's clone under load)
JOB = ("import os, sys, time; open(sys.argv[1] + '.start~', 'w').write(f\"{time.time()} "
       "{os.environ['CUDA_VISIBLE_DEVICES']}\"); os.replace(sys.argv[1] + '.start~', sys.argv[1] + '.start'); "
       "print('started', flush=True); "
       "[time.sleep(0.02) for _ in iter(lambda: os.path.exists(sys.argv[1] + '.go'), True)]; "
       "open(sys.argv[1] + '.end~', 'w').write(str(time.time())); os.replace(sys.argv[1] + '.end~', sys.argv[1] + '.end')")


def _note(base: Path) -> tuple[float, set[str]]:
    when, gpus = base.with_suffix(".start").read_text().split()
    return float(when), set(gpus.split(","))


def test_a_small_waiter_starts_at_once_beside_a_big_one_which_starts_as_soon_as_its_gpus_and_the_backfilled_end(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    locks = tmp_path / "locks"
    snap = write_snapshot(tmp_path / "four.json", first_gpus(example("workstation-4x"), 4))
    environ = env(locks)
    procs: list[subprocess.Popen[str]] = []
    request.addfinalizer(lambda: [p.kill() for p in procs])

    def launch(*args: str) -> subprocess.Popen[str]:
        procs.append(start(["--snapshot", str(snap), *args], env=environ))
        return procs[-1]

    alice = launch("--gpus", "0", "--", "python3", "-c", HOLD, str(tmp_path / "alice-go"))
    Lines(alice.stdout).wait("CVD=0")
    big = launch("--auto", "4", "--wait", "--", "python3", "-c", JOB, str(tmp_path / "big"))
    wait_for(lambda: len(json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]) == 1,
             what="the big job to wait")
    b = launch("--auto", "1", "--wait", "--", "python3", "-c", JOB, str(tmp_path / "b"))
    wait_for(lambda: (tmp_path / "b.start").exists(), what="B to start at once on an idle GPU")
    c = launch("--auto", "1", "--wait", "--", "python3", "-c", JOB, str(tmp_path / "c"))
    wait_for(lambda: (tmp_path / "c.start").exists(), what="C to start too")
    assert not (tmp_path / "big.start").exists()
    _, on_b = _note(tmp_path / "b")
    _, on_c = _note(tmp_path / "c")
    assert not on_b & on_c and "0" not in on_b | on_c  # 0 overlaps; alice's GPU untouched
    listed = run(["--snapshot", str(snap), "ls"], env={**environ, "COLUMNS": "200"}).stdout
    table = listed.split("\nQUEUE")[0]  # the GPU table; the queue follows it
    rows = {line.split()[0]: line for line in table.splitlines() if line[:1].isdigit()}
    assert all("backfilled" in rows[g] for g in on_b | on_c) and "backfilled" not in rows["0"], listed
    assert f"pid {b.pid}" in rows[next(iter(on_b))]
    held = {h["gpu"]: h for h in json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["holders"]}
    assert {g: h["backfilled"] for g, h in held.items()} == {**{f"GPU {g}": True for g in on_b | on_c}, "GPU 0": False}
    assert held[f"GPU {next(iter(on_b))}"]["pid"] == b.pid
    (tmp_path / "alice-go").touch()
    assert alice.wait(timeout=60) == 0
    # GPU 0 freed up: kept for the big job, and it could start but for B and C: nothing new starts
    shown = run(["--snapshot", str(snap), "ls"], env={**environ, "COLUMNS": "200"}).stdout
    wait_for(lambda: "kept for the head: GPU 0, GPU 3; it lends no GPU" in run(["--snapshot", str(snap), "ls"],
                                                                         env=environ).stdout,
             what="the head to keep GPU 0 (freed up) and 3 (it could start but for B and C)")
    d = launch("--auto", "1", "--wait", "--", "python3", "-c", JOB, str(tmp_path / "d"))
    wait_for(lambda: len(json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]) == 2,
             what="D to wait behind the big job")
    time.sleep(1.0)
    assert not (tmp_path / "d.start").exists(), shown  # the free GPUs are kept for the head
    (tmp_path / "b.go").touch()
    assert b.wait(timeout=60) == 0
    time.sleep(0.5)
    assert not (tmp_path / "big.start").exists() and not (tmp_path / "d.start").exists()
    (tmp_path / "c.go").touch()
    assert c.wait(timeout=60) == 0
    wait_for(lambda: (tmp_path / "big.start").exists(), what="the big job to start once the backfilled ended")
    started, on_big = _note(tmp_path / "big")
    ended = max(float((tmp_path / n).read_text()) for n in ("b.end", "c.end"))
    assert on_big == {"0", "1", "2", "3"} and started >= ended  # never before, and at once after
    assert not (tmp_path / "d.start").exists()
    (tmp_path / "big.go").touch()
    assert big.wait(timeout=60) == 0
    wait_for(lambda: (tmp_path / "d.start").exists(), what="D to start after the big job")
    (tmp_path / "d.go").touch()
    assert d.wait(timeout=60) == 0
    assert "backfilled: started ahead of 1 earlier waiter" in b.stderr.read()  # type: ignore[union-attr]


def _alice_and_a_waiting_big_job(tmp_path: Path, request: pytest.FixtureRequest, gpus: int,
                                  flags: list[str] | None = None) -> tuple[Path, dict[str, str], subprocess.Popen[str]]:
    """A ``gpus``-GPU machine where alice holds GPU 0 and a job for all ``gpus`` waits (with ``flags``), at the
    head of the queue: (the snapshot, the environment, the big job)."""
    snap = write_snapshot(tmp_path / "machine.json", first_gpus(example("workstation-4x"), gpus))
    environ = env(tmp_path / "locks")
    alice = start(["--snapshot", str(snap), "--gpus", "0", "--", "python3", "-c", HOLD, str(tmp_path / "go")],
                  env=environ)
    request.addfinalizer(lambda: (alice.kill(), alice.wait()))
    Lines(alice.stdout).wait("CVD=0")
    big = start(["--snapshot", str(snap), *(flags or []), "--auto", str(gpus), "--wait", "--", "true"], env=environ)
    request.addfinalizer(lambda: (big.kill(), big.wait()))
    wait_for(lambda: len(json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]) == 1,
             what="the big job to wait")
    return snap, environ, big


def _holders(snap: Path, environ: dict[str, str]) -> dict[str, bool]:
    """GPU label -> backfilled, for every GPU ``ls --json`` says someone holds."""
    doc = json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)
    return {h["gpu"]: h["backfilled"] for h in doc["holders"]}


@pytest.mark.parametrize("who", ["later", "head"])
def test_no_backfill_keeps_first_come_first_served(tmp_path: Path, request: pytest.FixtureRequest, who: str) -> None:
    """--no-backfill on the later waiter (it never jumps) or on the head (it lends nothing): B waits."""
    snap, environ, _big = _alice_and_a_waiting_big_job(tmp_path, request, 2, ["--no-backfill"] if who == "head" else [])
    later = run(["--snapshot", str(snap), *(["--no-backfill"] if who == "later" else []), "--auto", "1", "--wait", "2s",
                 "--", "true"], env=environ)
    assert later.returncode == 5 and "1 waiter ahead" in later.stderr, later.stderr
    # and the config key does the same as the flag
    if who == "later":
        config = tmp_path / "config.toml"
        config.write_text("no-backfill = true\n")
        keyed = run(["--snapshot", str(snap), "--auto", "1", "--wait", "2s", "--", "true"],
                    env={**environ, "GPULAUNCH_CONFIG": str(config)})
        assert keyed.returncode == 5, keyed.stderr
        backfilled = run(["--snapshot", str(snap), "--auto", "1", "--wait", "10s", "--", "true"], env=environ)
        assert backfilled.returncode == 0 and "backfilled" in backfilled.stderr, backfilled.stderr


def test_a_strict_head_keeps_every_gpu_it_may_use_from_launches_that_do_not_wait(tmp_path: Path,
                                                                                 request: pytest.FixtureRequest) -> None:
    """--no-backfill is strict first come, first served for everyone, as Slurm's FIFO scheduler (srun --immediate is
    refused while a job ahead pends) and task-spooler (one queue): alice holds GPU 0, a strict head waits for GPUs
    0-2; a plain launch is refused GPU 1 and 2 though they are free (2 GPUs: exit 4; --gpus: 6), --time or not;
    GPU 3, which the head never uses (--gpus 0-2), stays free for it."""
    snap = write_snapshot(tmp_path / "machine.json", first_gpus(example("workstation-4x"), 4))
    environ = env(tmp_path / "locks")
    alice = start(["--snapshot", str(snap), "--gpus", "0", "--", "python3", "-c", HOLD, str(tmp_path / "go")],
                  env=environ)
    request.addfinalizer(lambda: (alice.kill(), alice.wait()))
    Lines(alice.stdout).wait("CVD=0")
    big = start(["--snapshot", str(snap), "--no-backfill", "--gpus", "0-2", "--wait", "--", "true"], env=environ)
    request.addfinalizer(lambda: (big.kill(), big.wait()))

    def head() -> dict[str, object]:
        queue = json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]
        return queue[0] if queue else {}

    wait_for(lambda: head().get("strict") is True and head().get("kept") == ["GPU 1", "GPU 2"],
             what="the strict head to say it keeps GPUs 1 and 2")
    assert head()["lends"] == []
    assert "kept for the head: GPU 1, GPU 2; it lends no GPU (strict first come, first served: --no-backfill)" in \
        run(["--snapshot", str(snap), "ls"], env={**environ, "COLUMNS": "200"}).stdout
    for args, code in ((["--auto", "2"], 4), (["--time", "1m", "--auto", "2"], 4), (["--gpus", "1"], 6),
                       (["--time", "1m", "--gpus", "2"], 6)):
        refused = run(["--snapshot", str(snap), *args, "--", "true"], env=environ)
        assert refused.returncode == code and refused.stderr.count("\n") == 1, (args, refused.stderr)
        assert f"(pid {big.pid}) is first in the queue and keeps them: it waits strictly first come, first served " \
               "(--no-backfill)" in refused.stderr, refused.stderr
    other = run(["--snapshot", str(snap), "-q", "--auto", "1", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
                env=environ)
    assert other.returncode == 0 and other.stdout.strip() == "3", other.stderr
    assert big.poll() is None
    (tmp_path / "go").touch()
    assert alice.wait(timeout=60) == 0 and big.wait(timeout=60) == 0


@pytest.mark.parametrize("per_gpu", ["1", "2"])
def test_a_sweep_behind_a_waiting_big_job_backfills_on_the_gpus_it_lends(tmp_path: Path, request: pytest.FixtureRequest,
                                                                          per_gpu: str) -> None:
    snap, environ, big = _alice_and_a_waiting_big_job(tmp_path, request, 3)
    jobs = tmp_path / "jobs.txt"
    # As many jobs as the head lends GPUs (1 and 2): a lent GPU that frees up between two of the sweep's jobs is
    # kept for the head from then on (the rule), so a third job could wait for alice, i.e. for ever.
    # Each job runs until the test has seen who holds what (`ls --json`: the sweep's reservations say backfilled).
    jobs.write_text("".join(f"echo $CUDA_VISIBLE_DEVICES > {tmp_path}/job{i}; while [ ! -e {tmp_path}/seen ]; do "
                            "sleep 0.02; done\n" for i in range(2)))
    sweep = start(["--snapshot", str(snap), "each", str(jobs), "--gpus-per-job", "1", "--jobs-per-gpu", per_gpu,
                   "--log-dir", str(tmp_path / "logs")], env=environ)
    request.addfinalizer(lambda: (sweep.kill(), sweep.wait()))
    wait_for(lambda: all((tmp_path / f"job{i}").exists() for i in range(2)), what="both jobs to start")
    held = _holders(snap, environ)
    assert held.pop("GPU 0") is False and held and all(held.values()), held  # alice's is not; the sweep's are
    (tmp_path / "seen").touch()
    assert sweep.wait(timeout=120) == 0, sweep.stderr.read()  # type: ignore[union-attr]
    on = {(tmp_path / f"job{i}").read_text().strip() for i in range(2)}
    assert on <= {"1", "2"}  # on the lent GPUs only, never alice's
    assert big.poll() is None  # the big job still waits for alice's GPU
    (tmp_path / "go").touch()
    assert big.wait(timeout=60) == 0


def test_in_a_hardened_lock_dir_another_user_backfills_and_cannot_forge_what_the_head_lends(shared_dir: Path) -> None:
    """root waits for 3 GPUs; nobody's 1-GPU waiter starts at once beside it on a lent one; behind a head that
    lends nothing (--no-backfill), a lends file nobody planted for it is not believed: nobody waits."""
    prefix = as_nobody()
    python = python_for_nobody(prefix, shared_dir)
    snap = write_snapshot(shared_dir / "three.json", first_gpus(example("workstation-4x"), 3))
    snap.chmod(0o644)
    hardened = shared_dir / "hardened"
    init = run(["--snapshot", str(snap), "locks", "init", str(hardened)])
    assert init.returncode == 0, init.stderr
    environ = env(hardened)
    procs: list[subprocess.Popen[str]] = []

    def gl(*args: str, nobody: bool = False) -> subprocess.Popen[str]:
        argv = [*prefix, python, "-m", "gpu_launch"] if nobody else [sys.executable, "-m", "gpu_launch"]
        procs.append(subprocess.Popen([*argv, "--snapshot", str(snap), *args], env=environ, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=shared_dir))
        return procs[-1]

    def queue() -> list[dict[str, object]]:
        return json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]

    try:
        alice = gl("--gpus", "0", "--", python, "-c", HOLD, str(shared_dir / "go"))
        Lines(alice.stdout).wait("CVD=0")
        strict = gl("--no-backfill", "--auto", "3", "--wait", "--", "true")
        wait_for(lambda: len(queue()) == 1, what="root's strict head to wait")
        ticket = next(p.name for p in (hardened / "queue").iterdir() if p.name.startswith("ticket-"))
        wait_for(lambda: queue()[0].get("strict") is True, what="root's strict head to say so")
        forged = json.dumps({"relevant": [], "lends": [], "frozen": False, "need": 1, "kept": []})
        plant = subprocess.run([*prefix, python, "-c", f"open({str(hardened / 'queue' / ('lends-' + ticket))!r}, 'w')"
                                f".write({forged!r} + '\\n')"], capture_output=True, text=True)
        assert plant.returncode != 0  # the queue is 1777 and the head's file root's: nobody can replace it
        assert queue()[0]["strict"] is True
        waited = gl("--auto", "1", "--wait", "2s", "--", "true", nobody=True)
        assert waited.wait(timeout=60) == 5, waited.stderr.read()  # type: ignore[union-attr]
        strict.kill()
        strict.wait()
        wait_for(lambda: queue() == [], what="the strict head to leave")
        head = gl("--auto", "3", "--wait", "--", "true")
        wait_for(lambda: len(queue()) == 1 and queue()[0]["kept"] is not None, what="root's head to lend")
        later = gl("--auto", "1", "--wait", "--", python, "-c", HOLD, str(shared_dir / "go"), nobody=True)
        on = Lines(later.stdout).wait("CVD=").strip()
        assert on in ("CVD=1", "CVD=2")  # at once, on a GPU the head lends: never alice's
        assert head.poll() is None
        (shared_dir / "go").touch()
        assert alice.wait(timeout=60) == 0 and later.wait(timeout=60) == 0 and head.wait(timeout=60) == 0
    finally:
        for p in procs:
            p.kill()


def test_a_submitted_job_that_backfilled_says_so_in_jobs(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from test_jobs import Box

    box = Box(tmp_path)
    request.addfinalizer(box.clean_up)
    box.hold("0", tmp_path / "go")
    big = start(["--snapshot", str(box.snap), "--auto", "2", "--wait", "--", "true"], env=box.env)
    request.addfinalizer(lambda: (big.kill(), big.wait()))
    wait_for(lambda: len(box.queue()) == 1, what="the big job to wait")
    job = box.submit("--auto", "1", "--", "true")
    assert box.gl("wait", job).returncode == 0  # it ran at once, beside the waiting big job, on GPU 1
    assert box.jobs()[job]["gpus"] == "1" and big.poll() is None
    assert "  backfill   started ahead of 1 earlier waiter" in box.gl("jobs", job).stdout
    row = next(line for line in box.gl("jobs").stdout.splitlines() if line.split()[:1] == [job])
    assert " 1 (backfilled) " in row, row
    assert json.loads(box.gl("jobs", "--json").stdout)["jobs"][-1]["backfilled"] is True
    ahead = box.submit("--no-backfill", "--auto", "1", "--wait", "1s", "--", "true")
    assert box.gl("wait", ahead).returncode == 5  # --no-backfill: it waited its turn, and timed out
    assert "  backfill   " not in box.gl("jobs", ahead).stdout
    assert [j["backfilled"] for j in json.loads(box.gl("jobs", "--json").stdout)["jobs"]] == [True, False]


def _seen_taken(snap: Path | str, environ: dict[str, str], index: int) -> None:
    """Wait until the head of the queue has looked while GPU ``index`` was taken: a GPU taken and freed
    between two of its looks is still one it lends, never one it keeps (backfill.Head.look)."""
    uuid = json.loads(Path(snap).read_text())["gpus"][index]["uuid"]

    def seen() -> bool:
        queue = json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]
        return bool(queue) and queue[0].get("lends") is not None and uuid not in queue[0]["lends"]

    wait_for(seen, what=f"the head to see GPU {index} taken")


def test_a_launch_that_does_not_wait_never_starts_on_a_gpu_kept_for_the_head(tmp_path: Path,
                                                                            request: pytest.FixtureRequest) -> None:
    """alice holds GPU 0 and bob GPU 1; a job for all 3 waits (it lends GPU 2, free when it began to wait); bob's job
    ends: GPU 1 is kept for the head, and a plain launch (no --wait) is refused on it, naming the waiter."""
    snap, environ, big = _alice_and_a_waiting_big_job(tmp_path, request, 3)
    bob = start(["--snapshot", str(snap), "--gpus", "1", "--", "python3", "-c", HOLD, str(tmp_path / "bob-go")],
                env=environ)
    request.addfinalizer(lambda: (bob.kill(), bob.wait()))
    Lines(bob.stdout).wait("CVD=1")
    _seen_taken(snap, environ, 1)
    (tmp_path / "bob-go").touch()
    assert bob.wait(timeout=60) == 0
    wait_for(lambda: json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"][0]["kept"]
             == ["GPU 1"], what="the head to keep GPU 1, which freed up")
    named = run(["--snapshot", str(snap), "--gpus", "1", "--", "true"], env=environ)
    assert named.returncode == 6, named.stderr
    assert f"GPU 1 is kept for the head of the queue" in named.stderr and f"(pid {big.pid})" in named.stderr
    assert "queue behind it with --wait" in named.stderr and named.stderr.count("\n") == 1
    two = run(["--snapshot", str(snap), "--auto", "2", "--", "true"], env=environ)
    assert two.returncode == 4 and f"(pid {big.pid}) is first in the queue and keeps them" in two.stderr, two.stderr
    lent = run(["--snapshot", str(snap), "-q", "--auto", "1", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
               env=environ)
    assert lent.returncode == 0 and lent.stdout.strip() == "2", lent.stderr  # the GPU it lends: taken at once
    assert big.poll() is None
    (tmp_path / "go").touch()
    assert big.wait(timeout=60) == 0  # the head got GPU 1 back: it starts once alice's ends


def _gpu_1_kept_until_alices_declared_hour(tmp_path: Path, request: pytest.FixtureRequest
                                           ) -> tuple[Path, dict[str, str], subprocess.Popen[str], subprocess.Popen[str]]:
    """alice holds GPU 0 with --time 1h, bob GPU 1; a job for both waits; bob's ends: GPU 1 is kept for the head,
    which expects to start when alice's hour is up. (The snapshot, the environment, alice, the big job.)"""
    snap = write_snapshot(tmp_path / "two.json", first_gpus(example("workstation-4x"), 2))
    environ = env(tmp_path / "locks")
    procs: list[subprocess.Popen[str]] = []
    request.addfinalizer(lambda: [(p.kill(), p.wait()) for p in procs])

    def launch(*args: str) -> subprocess.Popen[str]:
        procs.append(start(["--snapshot", str(snap), *args], env=environ))
        return procs[-1]

    alice = launch("--gpus", "0", "--time", "1h", "--", "python3", "-c", HOLD, str(tmp_path / "alice-go"))
    Lines(alice.stdout).wait("CVD=0")
    bob = launch("--gpus", "1", "--", "python3", "-c", HOLD, str(tmp_path / "bob-go"))
    Lines(bob.stdout).wait("CVD=1")
    big = launch("--auto", "2", "--wait", "--", "true")
    wait_for(lambda: len(json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"]) == 1,
             what="the big job to wait")
    _seen_taken(snap, environ, 1)
    (tmp_path / "bob-go").touch()
    assert bob.wait(timeout=60) == 0
    wait_for(lambda: json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"][0]["kept"]
             == ["GPU 1"], what="the head to keep GPU 1")
    return snap, environ, alice, big


def test_a_plain_launch_whose_time_limit_ends_before_the_heads_expected_start_may_use_a_kept_gpu(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Slurm's rule for a launch that does not wait: with --time 10m it starts at once on GPU 1 (kept for the head,
    which expects to start in about an hour); without --time, or with --time 2h, it is refused as before (exit 4;
    --gpus: exit 6), the hint naming --time and the head's expected start."""
    snap, environ, alice, big = _gpu_1_kept_until_alices_declared_hour(tmp_path, request)
    bare = run(["--snapshot", str(snap), "--auto", "1", "--", "true"], env=environ)
    assert bare.returncode == 4 and bare.stderr.count("\n") == 1, bare.stderr
    assert f"(pid {big.pid}) is first in the queue and keeps them: it expects to start in " in bare.stderr
    assert "(declared limits): declare a --time that ends within " in bare.stderr, bare.stderr
    late = run(["--snapshot", str(snap), "--gpus", "1", "--time", "2h", "--", "true"], env=environ)
    assert late.returncode == 6 and "GPU 1 is kept for the head of the queue" in late.stderr, late.stderr
    assert "(yours, 2h00m, ends after it)" in late.stderr, late.stderr
    early = run(["--snapshot", str(snap), "-q", "--time", "10m", "--auto", "1", "--", "sh", "-c",
                 "echo $CUDA_VISIBLE_DEVICES"], env=environ)
    assert early.returncode == 0 and early.stdout.strip() == "1", early.stderr
    named = run(["--snapshot", str(snap), "-q", "--time", "10m", "--gpus", "1", "--", "true"], env=environ)
    assert named.returncode == 0, named.stderr
    assert big.poll() is None  # the head still waits for alice's GPU: nobody took it
    (tmp_path / "alice-go").touch()
    assert alice.wait(timeout=60) == 0 and big.wait(timeout=60) == 0


def test_a_waiter_whose_time_limit_ends_before_the_heads_expected_start_starts_on_a_kept_gpu(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Slurm's rule, with real processes: alice holds GPU 0 with --time 1h, bob GPU 1; a job for both waits. Bob's
    ends: GPU 1 is kept for the head, which expects to start when alice's hour is up. A waiter with --time 10m
    starts on it; one without a limit, or with --time 2h (it would still run then), waits."""
    snap, environ, alice, big = _gpu_1_kept_until_alices_declared_hour(tmp_path, request)
    head = json.loads(run(["--snapshot", str(snap), "ls", "--json"], env=environ).stdout)["queue"][0]
    assert 3500 < head["expected_start"] - time.time() <= 3600  # alice's declared hour
    import re

    # (within the first second of alice's hour the time left rounds to 1h00m)
    assert re.search(r"; expected to start in (5\dm\d+s|1h00m) \(declared limits\)",
                     run(["--snapshot", str(snap), "ls"], env=environ).stdout)
    for limit in ([], ["--time", "2h"]):
        late = run(["--snapshot", str(snap), *limit, "--auto", "1", "--wait", "2s", "--", "true"], env=environ)
        assert late.returncode == 5 and "1 waiter ahead" in late.stderr, (limit, late.stderr)
    early = run(["--snapshot", str(snap), "--time", "10m", "--auto", "1", "--wait", "30s", "--",
                 "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], env=environ)
    assert early.returncode == 0 and early.stdout.strip() == "1", early.stderr
    assert "backfilled: started ahead of 1 earlier waiter" in early.stderr
    assert big.poll() is None
    (tmp_path / "alice-go").touch()
    assert alice.wait(timeout=60) == 0 and big.wait(timeout=60) == 0
