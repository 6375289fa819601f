"""Outcomes users can script (issue 36 item 2): `gpulaunch wait ID...` and `log ID -f` end with the job's
own exit code (tsp -w's habit), and `jobs` says failed (exit 3), killed (SIGTERM), cancelled, lost, counts
them apart and colours them only on a terminal. Real jobs in a private lock dir and job dir."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from gpu_launch.jobs.status import LOST_CODE, Status, exit_status
from gpu_launch.jobs.store import Job
from gpu_launch.views import jobs_table
from sharing_helpers import start, wait_for
from terminal import Terminal
from test_jobs import Box, box  # noqa: F401  (a fixture)


def _job(job_id: str, state: str, exit_code: int | None = None, sig: str | None = None) -> Job:
    return Job(job_id, state, ("python3", "t.py"), ("--auto", "1"), "/tmp", "h", "", "/locks", 1.0e9,
               started=1.0e9 + 1, ended=1.0e9 + 2, exit_code=exit_code, signal=sig)


@pytest.mark.parametrize(("state", "code", "sig", "label", "status"), [
    ("done", 0, None, "done", 0),
    ("done", 3, None, "failed (exit 3)", 3),
    ("done", None, "SIGTERM", "killed (SIGTERM)", 143),
    ("done", None, "SIGKILL", "killed (SIGKILL)", 137),
    ("failed", 5, None, "failed to start", 5),
    ("cancelled", None, None, "cancelled", 143),  # cancelled while waiting: it never ran, and it is not a success
    ("cancelled", None, "SIGKILL", "cancelled", 137),
    ("cancelled", 0, None, "cancelled", 143),  # its command caught SIGTERM and exited 0: still not a success
])
def test_each_outcome_has_its_label_and_its_exit_code(state: str, code: int | None, sig: str | None, label: str,
                                                      status: int) -> None:
    s = Status(_job("1", state, code, sig), {"failed": "failed to start"}.get(state, state))
    assert (s.label, exit_status(s)) == (label, status)


def test_a_lost_job_exits_9_and_one_not_over_has_no_exit_code() -> None:
    assert exit_status(Status(_job("1", "running"), "lost")) == LOST_CODE == 9
    assert exit_status(Status(_job("1", "running"), "lost at reboot")) == 9
    assert exit_status(Status(_job("1", "running"), "running")) is None


def test_the_count_line_counts_failures_apart_and_colour_is_only_asked_for() -> None:
    found = [Status(_job(str(i), "done", 0), "done") for i in range(1, 11)]
    found += [Status(_job("11", "done", 3), "done"), Status(_job("12", "done", None, "SIGTERM"), "done")]
    plain = jobs_table.table(found, 80)
    assert plain.splitlines()[-1] == "12 jobs: 10 done, 1 failed, 1 killed"
    assert "\033" not in plain and "failed (exit 3)" in plain and "killed (SIGTERM)" in plain
    coloured = jobs_table.table(found, 80, colour=True)
    assert "\033[31mfailed (exit 3)\033[0m" in coloured and "\033[32mdone\033[0m" in coloured
    # the colour codes do not move the columns: without them, the same text
    assert coloured.replace("\033[31m", "").replace("\033[32m", "").replace("\033[0m", "") == plain


def _outcomes(box: Box, tmp_path: Path) -> dict[str, str]:
    """Five ended jobs: exit 0, exit 3, killed by SIGTERM, cancelled while running, lost."""
    ids = {"ok": box.submit("--gpus", "0", "--", "true"),
           "three": box.submit("--gpus", "0", "--wait", "--", "sh", "-c", "exit 3"),
           "signal": box.submit("--gpus", "1", "--", "sh", "-c", "kill -TERM $$")}
    for name in ids:
        assert box.gl("wait", "-q", ids[name]).returncode in (0, 3, 143)
    ids["cancel"] = box.submit("--gpus", "0", "--", "sleep", "300")
    box.wait_state(ids["cancel"], "running")
    assert box.gl("cancel", ids["cancel"], "--grace", "1").returncode == 0
    ids["lost"] = box.submit("--gpus", "1", "--", "sleep", "300")
    record = box.wait_state(ids["lost"], "running")
    os.killpg(record["pid"], signal.SIGKILL)  # the command and its supervisor die: nobody records how it ended
    import json

    supervisor = json.loads((box.job_dir / f"{ids['lost']}.json").read_text())["supervisor"]
    os.kill(supervisor, signal.SIGKILL)
    box.wait_state(ids["lost"], "lost")
    return ids


def test_wait_and_log_follow_end_with_the_jobs_own_exit_codes_and_jobs_says_each_outcome(tmp_path: Path,
                                                                                          box: Box) -> None:
    ids = _outcomes(box, tmp_path)
    want = {"ok": 0, "three": 3, "signal": 143, "cancel": 143, "lost": 9}
    for name, code in want.items():
        waited = box.gl("wait", ids[name])
        assert waited.returncode == code, (name, waited.stderr)
        followed = box.gl("log", ids[name], "-f")
        assert followed.returncode == code, (name, followed.stderr)
        assert box.gl("log", ids[name]).returncode == 0  # without -f: the log, and success
    said = box.gl("wait", ids["three"]).stderr
    assert said == f"gpulaunch: job {ids['three']}: failed (exit 3)\n"
    # several: the first failing one, in the order named; all succeeding: 0
    assert box.gl("wait", ids["ok"], ids["signal"], ids["three"]).returncode == 143
    assert box.gl("wait", ids["ok"], ids["ok"]).returncode == 0
    table = box.gl("jobs", env={**box.env, "COLUMNS": "120"}).stdout
    rows = {line.split()[0]: line for line in table.splitlines()[1:-1]}
    assert "failed (exit 3)" in rows[ids["three"]] and "killed (SIGTERM)" in rows[ids["signal"]]
    assert " cancelled " in rows[ids["cancel"]] and " lost " in rows[ids["lost"]] and " done " in rows[ids["ok"]]
    assert table.splitlines()[-1] == "5 jobs: 1 done, 1 failed, 1 killed, 1 cancelled, 1 lost"
    assert "\033" not in table  # a pipe: no colour
    outcomes = {j["id"]: j["outcome"] for j in box.jobs().values()}
    assert outcomes == {ids["ok"]: "done", ids["three"]: "failed", ids["signal"]: "killed",
                        ids["cancel"]: "cancelled", ids["lost"]: "lost"}


def test_wait_blocks_until_the_job_ends_and_ctrl_c_exits_130_leaving_it_running(tmp_path: Path, box: Box) -> None:
    release = tmp_path / "release"
    job = box.submit("--gpus", "0", "--", "sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done; exit 4")
    box.wait_state(job, "running")
    waiter = start(["--snapshot", str(box.snap), "wait", job], env=box.env)
    time.sleep(0.5)
    assert waiter.poll() is None  # it waits
    release.touch()
    assert waiter.wait(timeout=60) == 4
    again = box.submit("--gpus", "0", "--", "sleep", "300")
    box.wait_state(again, "running")
    waiter = start(["--snapshot", str(box.snap), "wait", again], env=box.env)
    time.sleep(0.5)
    waiter.send_signal(signal.SIGINT)
    assert waiter.wait(timeout=60) == 130 and "gpulaunch: interrupted" in waiter.stderr.read()  # type: ignore[union-attr]
    assert box.jobs()[again]["state"] == "running"  # Ctrl-C on wait cancels nothing


def test_wait_refuses_what_is_not_a_job_of_yours(box: Box) -> None:
    assert box.gl("wait").returncode == 2
    nothing = box.gl("wait", "7")
    assert nothing.returncode == 2 and "there is no job 7" in nothing.stderr and "Traceback" not in nothing.stderr
    assert box.gl("wait", "x1").returncode == 2


def test_jobs_colours_states_on_a_terminal_never_under_no_color_or_json(box: Box) -> None:
    three = box.submit("--gpus", "0", "--", "sh", "-c", "exit 3")
    box.gl("wait", "-q", three)
    gl = shlex.join([sys.executable, "-m", "gpu_launch", "--snapshot", str(box.snap)])
    for extra, coloured in (({}, True), ({"NO_COLOR": "1"}, False)):
        env = {k: v for k, v in box.env.items() if k != "NO_COLOR"}
        term = Terminal(["/bin/sh", "-c", f"{gl} jobs; {gl} jobs --json; echo END"], {**env, "TERM": "xterm", **extra},
                        columns=120, program=True)
        term.wait_for("END")
        term.finish()
        seen = term.out.decode(errors="replace")
        assert ("\033[31mfailed (exit 3)\033[0m" in seen) is coloured, seen
        assert "\033[" not in seen.split('"schema"', 1)[1]  # --json: never
