"""The slips in following a Slurm job array a user would suffer (issue 37): a task's exit code and
signal as scontrol/sacct report them, which tasks a range names, and what `each --slurm` shows for
each task (done, failed with the command's own status, killed by a signal, ended by Slurm, cancelled
before it started, forgotten by Slurm). Unit-level: Slurm's own output lines, a fake view; no cluster."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_launch.cluster import following, task
from gpu_launch.cluster.following import Follower, TaskStatus, parse_sacct, parse_scontrol
from gpu_launch.cluster.submitting import ArrayRequest, Submitted
from gpu_launch.errors import UsageError
from gpu_launch.sweeps.jobfile import Job


def scontrol_line(task_id: str, state: str, exit_code: str = "0:0", node: str = "n1", start: str = "Unknown",
                  end: str = "Unknown", reason: str = "None") -> str:
    return (f"JobId=43 ArrayJobId=42 ArrayTaskId={task_id} JobName=gpulaunch-each JobState={state} "
            f"Reason={reason} ExitCode={exit_code} StartTime={start} EndTime={end} NodeList={node}")


def test_scontrol_gives_each_tasks_state_exit_code_and_signal() -> None:
    out = "\n".join([scontrol_line("1", "COMPLETED", "0:0", start="2026-01-02T03:04:05", end="2026-01-02T03:05:05"),
                     scontrol_line("2", "FAILED", "3:0"),
                     scontrol_line("3", "CANCELLED", "0:9", node="(null)"),
                     scontrol_line("4-6%2", "PENDING", "0:0", node="", reason="Resources"),
                     "JobId=44 JobState=RUNNING"])  # not an array task: ignored
    found = parse_scontrol(out)
    assert sorted(found) == [1, 2, 3, 4, 5, 6]
    assert (found[1].state, found[1].exit_code, found[1].signal, found[1].node) == ("COMPLETED", 0, None, "n1")
    assert found[1].end - found[1].start == 60
    assert found[1].start == time.mktime(time.strptime("2026-01-02T03:04:05", "%Y-%m-%dT%H:%M:%S"))
    assert (found[2].exit_code, found[2].signal) == (3, None)
    assert (found[3].exit_code, found[3].signal, found[3].node) == (0, 9, "")
    assert found[1].start is not None and found[2].start is None
    assert (found[5].state, found[5].reason) == ("PENDING", "Resources")


def test_task_ranges_name_every_task_once() -> None:
    assert following._task_ids("3") == [3]
    assert following._task_ids("4-6%3") == [4, 5, 6]
    assert following._task_ids("1,3-5") == [1, 3, 4, 5]
    assert following._task_ids("x,2") == [2]


def test_an_exit_field_is_code_and_signal() -> None:
    assert following._exit("0:0") == (0, None)
    assert following._exit("137:0") == (137, None)
    assert following._exit("0:15") == (0, 15)
    assert following._exit("") == (None, None)


def test_sacct_fills_in_the_tasks_slurm_forgot_of_this_array_only() -> None:
    out = ("42_1|COMPLETED|0:0|n1|2026-01-02T03:04:05|2026-01-02T03:04:06\n"
           "42_2|CANCELLED by 1000|0:15|None assigned|Unknown|Unknown\n"
           "42_[3-4]|PENDING|0:0|None assigned|Unknown|Unknown\n"
           "420_1|FAILED|1:0|n2|Unknown|Unknown\n"
           "42_5|FAILED|1:0\n")
    found = parse_sacct(out, "42")
    assert sorted(found) == [1, 2, 3, 4]
    assert (found[1].state, found[1].node, found[1].end - found[1].start) == ("COMPLETED", "n1", 1)
    assert (found[2].state, found[2].signal, found[2].node) == ("CANCELLED", 15, "")


# --- what each task is shown as ----------------------------------------------------------------------------------------

class View:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def started(self, follower: Any, state: Any) -> None:
        self.events.append(("started", state.job.number))

    def finished(self, follower: Any, state: Any) -> None:
        self.events.append(("finished", state.job.number))

    def refresh(self, follower: Any) -> None:
        pass


def follower(tmp_path: Path, count: int = 1) -> Follower:
    jobs = [Job(n, n, ("train", "--gpus", "{n}"), "train --gpus {n}") for n in range(1, count + 1)]
    request = ArrayRequest(str(tmp_path / "jobs.txt"), str(tmp_path), count, 2)
    return Follower(Submitted("42", request), jobs, View(), {}, 1.0)


def test_a_task_that_ended_shows_the_commands_own_exit_code_from_its_record(tmp_path: Path) -> None:
    f = follower(tmp_path)
    state = f.states[0]
    f._update(state, TaskStatus(1, "FAILED", exit_code=1, start=time.time() - 30), {"returncode": 7, "node": "n3",
                                                                                 "gpus": "4,5", "log": "job-1.log"})
    assert (state.status, state.returncode, state.node, state.gpus, state.log) == ("failed", 7, "n3", "4,5", "job-1.log")
    assert state.argv == ("train", "--gpus", "2")  # what it ran: {n} filled in for the task's GPUs
    assert f.view.events == [("started", 1), ("finished", 1)] and f.running == []


def test_a_task_killed_by_a_signal_is_failed_with_the_signal_not_done(tmp_path: Path) -> None:
    f = follower(tmp_path)
    state = f.states[0]
    f._update(state, TaskStatus(1, "FAILED", exit_code=0, signal=9), {})
    assert (state.status, state.returncode) == ("failed", -9)
    g = follower(tmp_path)
    g._update(g.states[0], TaskStatus(1, "COMPLETED", exit_code=0), {})
    assert (g.states[0].status, g.states[0].returncode) == ("done", 0)
    h = follower(tmp_path)
    h._update(h.states[0], TaskStatus(1, "FAILED", exit_code=None), {})
    assert (h.states[0].status, h.states[0].returncode) == ("failed", 1)  # no code known: failed, not done
    k = follower(tmp_path)
    k._update(k.states[0], TaskStatus(1, "COMPLETED", exit_code=0), {"returncode": -15})
    assert (k.states[0].status, k.states[0].returncode) == ("failed", -15)


def test_a_task_slurm_ended_at_its_time_limit_is_a_timeout_counted_apart_as_a_local_each_counts_it(
        tmp_path: Path) -> None:
    """Slurm's TIMEOUT: status `timeout`, the command's own end from its record (else Slurm's signal), the local
    words (`timeout (SIGTERM)`, the summary's tally, counts.timeout and "signal" in --json), whatever it exited."""
    from gpu_launch.views.each_view import _counts_text, summary_doc

    f = follower(tmp_path, 4)
    for state in f.states:
        state.status, state.started = "running", time.monotonic() - 5
        f.running.append(state)
    a, b, c, d = f.states
    f._update(a, TaskStatus(1, "TIMEOUT", exit_code=0, signal=15, limit="00:01:00"), {"returncode": -15})
    f._update(b, TaskStatus(2, "TIMEOUT", exit_code=0, signal=9, limit="00:01:00"), {"started": time.time() - 65})
    f._update(c, TaskStatus(3, "TIMEOUT", exit_code=0, signal=15), {"returncode": 0})  # it exited 0 on the SIGTERM
    f._update(d, TaskStatus(4, "COMPLETED", exit_code=0), {"returncode": 0})
    assert [s.status for s in f.states] == ["timeout", "timeout", "timeout", "done"] and f.running == [] and f.finished
    assert (a.outcome, b.outcome, c.outcome) == ("timeout (SIGTERM)", "timeout (SIGKILL)", "timeout (exit 0)")
    assert a.note == "timeout: Slurm ended it at its time limit (00:01:00): SIGTERM, then it ended"
    assert b.note == "timeout: Slurm ended it at its time limit (00:01:00): SIGTERM, then SIGKILL after the " \
                     "cluster's KillWait"
    assert c.note.startswith("timeout: Slurm ended it at its time limit: SIGTERM")  # (no --time: the partition's)
    assert _counts_text(f) == "1 done, 0 running, 0 queued, 0 failed, 3 timeout (1 SIGTERM, 1 SIGKILL, 1 exit 0)"
    doc = summary_doc(f, str(tmp_path))
    assert doc["counts"]["timeout"] == 3 and doc["counts"]["failed"] == 0 and doc["counts"]["done"] == 1
    assert [(j["status"], j["signal"], j["exit_code"]) for j in doc["jobs"]] == [
        ("timeout", "SIGTERM", None), ("timeout", "SIGKILL", None), ("timeout", None, 0), ("done", None, 0)]


def test_a_task_slurm_ended_says_why(tmp_path: Path) -> None:
    for slurm, why in (("OUT_OF_MEMORY", "out of memory"), ("NODE_FAIL", "a node failed"), ("CANCELLED", "cancelled")):
        f = follower(tmp_path)
        state = f.states[0]
        state.status, state.started = "running", time.monotonic() - 5
        f.running.append(state)
        f._update(state, TaskStatus(1, slurm, exit_code=0, signal=15), {"returncode": 0, "started": time.time() - 5})
        assert (state.status, state.returncode, state.note) == ("failed", None, why)
        assert f.running == []
    f = follower(tmp_path)
    f._update(f.states[0], TaskStatus(1, "UNKNOWN", reason="Slurm no longer knows this task"), {})
    assert (f.states[0].status, f.states[0].note) == ("failed", "Slurm no longer knows this task")


def test_a_task_cancelled_while_queued_is_not_started(tmp_path: Path) -> None:
    f = follower(tmp_path)
    state = f.states[0]
    f._update(state, TaskStatus(1, "CANCELLED", exit_code=0), {})
    assert (state.status, state.note, state.started) == ("not started", "cancelled before it started", None)
    assert f.view.events == [("finished", 1)]


def test_a_pending_task_stays_queued_and_a_running_one_is_announced_once(tmp_path: Path) -> None:
    f = follower(tmp_path)
    state = f.states[0]
    f._update(state, TaskStatus(1, "PENDING", start=time.time() + 100, node="n9"), {})
    assert (state.status, state.started, state.node) == ("queued", None, "n9")
    # running, but its record not yet written: within the grace it waits for the record (its log and GPUs)
    f._update(state, TaskStatus(1, "RUNNING", start=time.time() - 1), {})
    assert state.status == "queued"
    f._update(state, TaskStatus(1, "RUNNING", start=time.time() - 60), {})
    assert state.status == "running" and f.view.events == [("started", 1)]
    f._update(state, TaskStatus(1, "RUNNING", start=time.time() - 60), {"started": time.time() - 60, "gpus": "1"})
    assert f.view.events == [("started", 1)] and f.running == [state] and state.gpus == "1"
    assert 55 < time.monotonic() - state.started < 65  # it started a minute ago, by the record


def test_a_task_that_ran_and_ended_shows_how_long_it_ran(tmp_path: Path) -> None:
    f = follower(tmp_path)
    state = f.states[0]
    now = time.time()
    f._update(state, TaskStatus(1, "COMPLETED", exit_code=0, start=now - 100, end=now - 40), {})
    assert 59 < state.ended - state.started < 61


class Slurm:
    """`query` answers in turn, for Follower.poll."""

    def __init__(self, answers: list[dict[int, TaskStatus] | None]) -> None:
        self.answers = answers

    def __call__(self, job_id: str, environ: Any, missing: Any = ()) -> dict[int, TaskStatus] | None:
        return self.answers.pop(0)


def test_a_task_slurm_forgot_is_failed_only_after_three_polls_and_its_record_wins(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    f = follower(tmp_path, 2)
    os.makedirs(tmp_path / task.RECORDS)
    (tmp_path / task.RECORDS / "42_1.json").write_text(json.dumps({"returncode": 0, "node": "n1"}))
    monkeypatch.setattr(following, "query", Slurm([None, {}, {}, {}]))
    f.poll()  # slurmctld did not answer: nothing concluded
    assert [s.status for s in f.states] == ["queued", "queued"]
    f.poll()
    assert [s.status for s in f.states] == ["done", "queued"]  # by its record
    f.poll()
    assert f.states[1].status == "queued" and not f.finished
    f.poll()
    assert (f.states[1].status, f.states[1].note) == ("failed", "Slurm no longer knows this task") and f.finished


def test_the_array_task_refuses_what_is_not_its_own(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    for argv in (["c", "l"], ["c", "l", "x"], ["c", "l", "1", "--shell"], ["c", "l", "²"], ["c", "l", "1234567890"]):
        with pytest.raises(UsageError, match="needs JOBFILE LOGDIR GPUS"):
            task.task_main(argv, {"SLURM_ARRAY_TASK_ID": "1"})
    for tid in ("", "x", "²"):
        with pytest.raises(UsageError, match="inside a Slurm job array task"):
            task.task_main([str(jobs), str(tmp_path), "1"], {"SLURM_ARRAY_TASK_ID": tid})
    for tid in ("0", "2"):
        with pytest.raises(UsageError, match=r"no job \d \(it has 1\)"):
            task.task_main([str(jobs), str(tmp_path), "1"], {"SLURM_ARRAY_TASK_ID": tid})
    assert task._small_number("123456789") == 123456789 and task._small_number("1234567890") is None


def test_a_tasks_record_is_read_back_and_a_damaged_one_is_none(tmp_path: Path) -> None:
    os.makedirs(tmp_path / task.RECORDS)
    task._write_record(task.record_path(str(tmp_path), "42", 3), {"returncode": 2}, {})
    assert task.read_record(str(tmp_path), "42", 3) == {"returncode": 2}
    assert task.record_path(str(tmp_path), "42", 3) == str(tmp_path / ".slurm" / "42_3.json")
    (tmp_path / task.RECORDS / "42_4.json").write_text("[1]")
    assert task.read_record(str(tmp_path), "42", 4) == {}
    assert task.read_record(str(tmp_path), "42", 5) == {}


# --- a several-node job (--nodes N --slurm): what it passes on, how its end is told -----------------------------------

def node_job(tmp_path: Path) -> Any:
    from gpu_launch.cluster.nodejob import NodeJob

    return NodeJob(2, 4, ("torchrun", "train.py"), str(tmp_path))


def ended(tmp_path: Path, fields: dict[str, str], out: str = "", cancelled: bool = False) -> int:
    from gpu_launch.cluster import nodejob

    if out:
        (tmp_path / "slurm-7.out").write_text(out)
    return nodejob._ended(node_job(tmp_path), "7", fields, cancelled, True)


def test_a_node_jobs_exit_status_is_its_own_or_128_plus_its_signal(tmp_path: Path) -> None:
    assert ended(tmp_path, {"JobState": "COMPLETED", "ExitCode": "0:0"}) == 0
    assert ended(tmp_path, {"JobState": "FAILED", "ExitCode": "3:0"}) == 3
    assert ended(tmp_path, {"JobState": "FAILED", "ExitCode": "0:9"}) == 137  # killed by SIGKILL: not "exit 0"
    assert ended(tmp_path, {"JobState": "FAILED", "ExitCode": "0:15"}) == 143


def test_a_node_job_slurm_ended_fails_with_why(tmp_path: Path) -> None:
    from gpu_launch.errors import Interrupted, JobsFailed

    with pytest.raises(JobsFailed, match="ended: time limit reached"):
        ended(tmp_path, {"JobState": "TIMEOUT", "ExitCode": "0:15"})
    with pytest.raises(JobsFailed, match="ended: weird"):
        ended(tmp_path, {"JobState": "WEIRD", "ExitCode": ""})
    with pytest.raises(Interrupted, match="cancelled Slurm job 7"):
        ended(tmp_path, {"JobState": "CANCELLED", "ExitCode": "0:15"}, cancelled=True)


def test_the_node_that_failed_first_gives_the_status(tmp_path: Path) -> None:
    out = ("srun: error: node2: task 1: Exited with exit code 143\n"[:0]
           + "srun: error: node3: task 2: Exited with exit code 5\nsrun: error: node1: tasks 0,1: Exited with exit code 143\n")
    assert ended(tmp_path, {"JobState": "FAILED", "ExitCode": "143:0"}, out) == 5
    from gpu_launch.cluster import nodejob

    assert nodejob._first_failure(str(tmp_path / "slurm-7.out")) == ("node3", 5)
    assert nodejob._first_failure(str(tmp_path / "nothing.out")) is None


def test_a_node_task_gets_the_launch_options_that_matter_on_a_node_and_no_others(tmp_path: Path) -> None:
    from gpu_launch.cluster import nodejob
    from gpu_launch.options import args

    inv = args.parse(["--nodes", "2", "--gpus-per-node", "4", "--slurm", "--snapshot", "dgx-h100", "--lock-dir",
                      str(tmp_path / "l"), "--bind", "off", "--quiet", "--log-dir", str(tmp_path), "--partition", "p",
                      "--time", "1:00:00", "--", "python", "train.py"])
    job = nodejob.job_of(inv)
    assert job.task_options == ("--snapshot", "dgx-h100", "--lock-dir", str(tmp_path / "l"), "--bind", "off", "--quiet")
    assert (job.nnodes, job.gpus_per_node, job.partition, job.time, job.log_dir) == (2, 4, "p", "1:00:00", str(tmp_path))
    task = nodejob.task_argv(job, "py")
    assert task == ["py", "-m", "gpu_launch", "--nodes", "2", "--gpus-per-node", "4", "--log-dir", str(tmp_path),
                    *job.task_options, "--", "python", "train.py"]
    plain = nodejob.job_of(args.parse(["--nodes", "2", "--gpus-per-node", "4", "--slurm", "--", "python", "t.py"]))
    assert plain.task_options == ()


@pytest.mark.parametrize("flag", [["--gpus", "0"], ["--auto", "2"], ["--min-free", "10G"], ["--exclude", "0"]])
def test_a_node_job_refuses_the_options_of_choosing_on_one_machine(flag: list[str]) -> None:
    from gpu_launch.cluster import nodejob
    from gpu_launch.options import args

    with pytest.raises(UsageError, match="--nodes --slurm"):
        nodejob.job_of(args.parse(["--nodes", "2", "--gpus-per-node", "4", "--slurm", *flag, "--", "python", "t.py"]))


@pytest.mark.parametrize("arg", ["--nodes=3", "-N2", "--ntasks=4", "-n4", "--ntasks-per-node=2"])
def test_a_node_job_refuses_sbatch_args_that_change_its_shape(arg: str) -> None:
    from gpu_launch.cluster import nodejob

    with pytest.raises(UsageError, match="--sbatch-arg"):
        nodejob._check_extra([arg])
    nodejob._check_extra(["--constraint=a100", "--mem=10G"])


def test_the_node_script_asks_for_the_shape_and_runs_one_step(tmp_path: Path) -> None:
    from dataclasses import replace

    from gpu_launch.cluster import nodejob

    job = replace(node_job(tmp_path / "a%b"), partition="gpu", time="2:00")
    text = nodejob.script_text(job, "py")
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("#SBATCH")] == [
        "#SBATCH --job-name=gpulaunch-nodes", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gres=gpu:4", "#SBATCH --partition=gpu", "#SBATCH --time=2:00"]
    assert f"--output={tmp_path}/a%%b/job-%j.node-%n.log" in text and "--kill-on-bad-exit=1" in text
    assert lines[-1] == "    -- torchrun train.py"
    assert nodejob.sbatch_argv(job, "s.sh")[:2] == ["sbatch", "--parsable"]
    assert nodejob.sbatch_argv(replace(job, extra=("--mem=1G",)), "s.sh")[-2:] == ["--mem=1G", "s.sh"]


# --- the head's address and port ----------------------------------------------------------------------------------------

def test_loopback_addresses_are_known_as_such() -> None:
    from gpu_launch.cluster.rendezvous import is_loopback

    assert all(is_loopback(a) for a in ("127.0.0.1", "127.0.1.1", "::1", "0:0:0:0:0:0:0:1"))
    assert not any(is_loopback(a) for a in ("10.0.0.1", "128.0.0.1", "::2", "1.127.0.0", ""))


def test_the_head_is_never_named_by_a_loopback_address_when_another_node_is_away(monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's `127.0.1.1 HOSTNAME`: the head's name resolves to loopback on the head, which the other
    nodes cannot reach; its address on the route to them is used instead."""
    from gpu_launch.cluster import rendezvous

    table = {"head": "127.0.1.1", "n2": "10.0.0.2", "n3": "127.0.0.1", "h-addr": "10.0.0.9"}
    monkeypatch.setattr(rendezvous, "resolve", lambda host: table[host])
    monkeypatch.setattr(rendezvous, "route_to", lambda addr: f"route to {addr}")
    assert rendezvous.head_address(["head", "n3", "n2"], {}) == "route to 10.0.0.2"
    assert rendezvous.head_address(["head", "n3"], {}) == "127.0.1.1"  # every node on loopback: one host
    assert rendezvous.head_address(["head"], {}) == "127.0.1.1"
    assert rendezvous.head_address(["head", "n2"], {"head": "h-addr"}) == "10.0.0.9"  # its NodeAddr first
    assert rendezvous.head_address(["n2", "head"], {}) == "10.0.0.2"


def test_a_port_given_by_hand_must_be_free_here_and_a_port(tmp_path: Path) -> None:
    import socket

    from gpu_launch.cluster import rendezvous
    from gpu_launch.errors import RendezvousFailed

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RendezvousFailed, match=f"port {port} is in use"):
            rendezvous.check_port(port)
        rendezvous.probe("127.0.0.1", port, time.monotonic() + 5, listening=True)  # it accepts: returns
    rendezvous.check_port(port)  # free again
    rendezvous.probe("127.0.0.1", port, time.monotonic() + 5)  # refused: the host answered
    for bad in (0, 65536, -1):
        with pytest.raises(UsageError, match="is not a port"):
            rendezvous.probe("127.0.0.1", bad, time.monotonic() + 5)
    assert 0 < rendezvous.free_port("127.0.0.1") < 65536


def test_the_wait_for_the_head_is_a_duration(tmp_path: Path) -> None:
    from gpu_launch.cluster import rendezvous
    from gpu_launch.errors import RendezvousFailed

    assert rendezvous.timeout({}) == 300.0 and rendezvous.timeout({rendezvous.TIMEOUT_ENV: "2m"}) == 120.0
    rendezvous.publish(str(tmp_path / "d" / "head.json"), {"port": 5})
    assert rendezvous.wait_for(str(tmp_path / "d" / "head.json"), time.monotonic(), "the head") == {"port": 5}
    with pytest.raises(RendezvousFailed, match="the head did not appear in"):
        rendezvous.wait_for(str(tmp_path / "none.json"), time.monotonic() + 0.05, "the head")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(RendezvousFailed, match="not JSON"):
        rendezvous.wait_for(str(tmp_path / "bad.json"), time.monotonic() + 5, "the head")


# --- the array task itself (what runs inside each Slurm task), without Slurm: its environment given by hand --------------

def run_task(tmp_path: Path, lines: list[str], task_id: int, *extra: str) -> tuple[int, str, dict[str, Any]]:
    import subprocess
    import sys

    from sharing_helpers import env, example, first_gpus, write_snapshot

    (tmp_path / "jobs.txt").write_text("".join(line + "\n" for line in lines))
    snap = write_snapshot(tmp_path / "two.json", first_gpus(example("workstation-4x"), 2))
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    box = env(tmp_path / "locks", GPULAUNCH_SNAPSHOT=str(snap), SLURM_ARRAY_TASK_ID=str(task_id),
              SLURM_ARRAY_JOB_ID="42", SLURMD_NODENAME="node7", SLURM_JOB_GPUS="0,1")
    done = subprocess.run([sys.executable, "-m", "gpu_launch", "__slurm-task", str(tmp_path / "jobs.txt"), str(logs),
                           "1", *extra], env=box, capture_output=True, text=True, timeout=120)
    log = (logs / f"job-{task_id}.log").read_text()
    return done.returncode, log, task.read_record(str(logs), "42", task_id)


def test_the_array_task_runs_its_own_line_on_its_gpus_and_records_how_it_ended(tmp_path: Path) -> None:
    argv = "python -c 'import json, os, sys; print(\"ARGV\", json.dumps(sys.argv[1:]), os.environ[\"CUDA_VISIBLE_DEVICES\"])'"
    lines = ["exit 5", f"{argv} {{n}} '{{{{n}}}}' x; exit 3", "kill -KILL $$", "kill -TERM $$"]
    code, log, rec = run_task(tmp_path, lines, 2)
    assert code == 3, log
    assert 'ARGV ["1", "{n}", "x"] ' in log  # its own line (the second), {n} for its 1 GPU, {{n}} a literal
    assert "job 2/4 as Slurm job 42_2 on node7, allocation GPUs 0,1" in log
    assert (rec["job"], rec["returncode"], rec["node"], rec["gpus"]) == (2, 3, "node7", "0,1")
    assert rec["started"] <= rec["ended"] and rec["log"].endswith("job-2.log")
    code, log, rec = run_task(tmp_path, lines, 1)
    assert (code, rec["returncode"]) == (5, 5)
    code, log, rec = run_task(tmp_path, lines, 3)
    assert (code, rec["returncode"]) == (-9, -9)  # killed: the task dies of the same signal, for Slurm to see
    code, log, rec = run_task(tmp_path, lines, 4)
    assert (code, rec["returncode"]) == (-15, -15)  # (SIGTERM, which the task itself outlives to record)


def test_a_running_task_without_its_record_waits_out_the_whole_grace(tmp_path: Path) -> None:
    f = follower(tmp_path)
    f._update(f.states[0], TaskStatus(1, "RUNNING", start=time.time() - 9.5), {})
    assert f.states[0].status == "queued"  # 9.5 s: within the 10 s a task has to write its record
    f._update(f.states[0], TaskStatus(1, "RUNNING", start=time.time() - 10.5), {})
    assert f.states[0].status == "running"


def fake_tool(folder: Path, name: str, out: str, err: str = "", code: int = 0) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.out").write_text(out)
    (folder / f"{name}.err").write_text(err)
    script = folder / name
    script.write_text(f"#!/bin/sh\ncat '{folder}/{name}.out'; cat '{folder}/{name}.err' >&2; exit {code}\n")
    script.chmod(0o755)


def test_query_reads_scontrol_and_asks_sacct_only_for_what_scontrol_forgot(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    fake_tool(bin_dir, "scontrol", scontrol_line("1", "RUNNING") + "\n")
    fake_tool(bin_dir, "sacct", "42_2|COMPLETED|0:0|n1|Unknown|Unknown\n42_1|FAILED|1:0|n1|Unknown|Unknown\n")
    found = following.query("42", environ, missing=[1, 2])
    assert found is not None and found[1].state == "RUNNING" and found[2].state == "COMPLETED"  # scontrol's first
    fake_tool(bin_dir, "scontrol", "", "slurm_load_jobs error: Invalid job id specified\n", 1)
    found = following.query("42", environ, missing=[2])
    assert found is not None and (found[1].state, found[2].state) == ("FAILED", "COMPLETED")  # Slurm forgot it: sacct
    fake_tool(bin_dir, "scontrol", "", "slurm_load_jobs error: Unable to contact slurm controller\n", 1)
    assert following.query("42", environ, missing=[2]) is None  # no answer: ask again later


def test_ctrl_c_asks_whether_to_cancel_a_node_job_and_sigterm_does_not(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from gpu_launch.cluster import nodejob
    from gpu_launch.errors import Interrupted

    for sig, asked in ((signal.SIGINT, ["7"]), (signal.SIGTERM, [])):
        questions: list[str] = []
        monkeypatch.setattr(nodejob, "_ask", lambda job_id: questions.append(job_id) or False)
        monkeypatch.setattr(nodejob, "state_of", lambda job_id, environ: os.kill(os.getpid(), sig) or
                            {"JobState": "RUNNING", "NodeList": "n[1-2]"})
        with pytest.raises(Interrupted, match="stopped following; Slurm job 7 goes on"):
            nodejob._follow(node_job(tmp_path), "7", {}, 0.01, None, False, True, True)
        assert questions == asked


def test_the_node_script_is_written_executable_and_never_over_another(tmp_path: Path) -> None:
    import stat

    from gpu_launch.cluster import nodejob

    old = os.umask(0o022)
    try:
        first = nodejob._write_script(str(tmp_path), "#!/bin/sh\n")
        second = nodejob._write_script(str(tmp_path), "#!/bin/sh\necho 2\n")
    finally:
        os.umask(old)
    assert (os.path.basename(first), os.path.basename(second)) == ("nodes.sh", "nodes.1.sh")
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o755 and Path(first).read_text() == "#!/bin/sh\n"


def test_a_wait_for_the_head_already_past_its_deadline_says_0_s(tmp_path: Path) -> None:
    from gpu_launch.cluster import rendezvous
    from gpu_launch.errors import RendezvousFailed

    with pytest.raises(RendezvousFailed, match=r"the head did not appear in .* within 0 s"):
        rendezvous.wait_for(str(tmp_path / "none.json"), time.monotonic() - 5, "the head")
    with pytest.raises(RendezvousFailed, match=r"within 2 s"):
        rendezvous.wait_for(str(tmp_path / "none.json"), time.monotonic() + 1.6, "the head")


def test_a_slurm_time_limit_is_taken_up_to_a_year_in_each_of_slurms_forms() -> None:
    """Slurm's own forms are passed on as written, but only up to gpulaunch's bound (Slurm wraps beyond):
    each form is counted in minutes, seconds rounded up as Slurm does."""
    from gpu_launch.cluster.submitting import MAX_MINUTES, parse_time

    top_h, top_m = divmod(MAX_MINUTES, 60)
    days, rest = divmod(MAX_MINUTES, 1440)
    taken = [f"{top_h}:{top_m}:00", f"{MAX_MINUTES - 30}:59", f"{days}-{rest // 60}:{rest % 60}:00", "0:0:1",
             f"{days}-{rest // 60}", f"{days}-{rest // 60}:{rest % 60}"]  # D-H, D-H:M: what is left out is 0
    over = [f"{top_h}:{top_m}:01", f"{MAX_MINUTES}:01", f"{MAX_MINUTES + 1}:00", f"{days}-{rest // 60}:{rest % 60}:01",
            f"{days + 1}-0"]
    for text in taken:
        assert parse_time(text) == text
    for text in over:
        with pytest.raises(UsageError, match="out of range"):
            parse_time(text)


# --- a node joining the run (cluster/nodes.py): the head's port, the peers' ports, the first command ---------------------

class Net:
    """The network calls of a node's rendezvous, recorded (no socket is opened)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from gpu_launch.cluster import rendezvous

        self.calls: list[tuple[str, Any]] = []
        for name, answer in (("check_port", None), ("free_port", 29500), ("resolve", "10.0.0.1"),
                             ("route_to", "10.0.0.2"), ("probe", None), ("publish", None)):
            monkeypatch.setattr(rendezvous, name, self._record(name, answer))

    def _record(self, name: str, answer: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            self.calls.append((name, args))
            return answer
        return call

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


def test_a_head_given_its_port_by_hand_checks_it_and_one_without_picks_a_free_one(monkeypatch: pytest.MonkeyPatch,
                                                                                 tmp_path: Path) -> None:
    from gpu_launch.cluster.nodes import Place, join

    net = Net(monkeypatch)
    world = join(Place(2, 0, ("h", "w"), "", None, "10.0.0.1", 6000), 4, {})
    assert ("check_port", (6000,)) in net.calls and "free_port" not in net.names() and world.head_port == 6000
    net.calls.clear()
    world = join(Place(2, 0, ("h", "w"), "", None, "10.0.0.1", None), 4, {})
    assert "check_port" not in net.names() and world.head_port == 29500
    net.calls.clear()
    world = join(Place(2, 0, ("h", "w"), "", None, "10.0.0.1", 6000), 4, {}, informing=True)  # --dry-run, plan
    assert net.calls == [] and world.head_port == 6000


def test_a_llama_cpp_worker_serves_its_own_port_and_publishes_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpu_launch.cluster.nodes import Place, join

    net = Net(monkeypatch)
    here = Place(2, 1, ("h", "w"), "7.0", str(tmp_path), "10.0.0.1", 6000, slurm=True, engine="llama.cpp")
    world = join(here, 4, {})
    assert ("free_port", ("10.0.0.2",)) in net.calls and world.port == 29500
    published = [args for name, args in net.calls if name == "publish"]
    assert [(path, {k: record[k] for k in ("addr", "port")}) for path, record, *_ in published] == \
        [(str(tmp_path / "rank-1.json"), {"addr": "10.0.0.2", "port": 29500})]
    net.calls.clear()
    world = join(here, 4, {}, informing=True)
    assert "free_port" not in net.names() and "publish" not in net.names() and world.port == 0


def test_a_worker_by_hand_warns_of_a_loopback_head_and_inside_slurm_does_not(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_launch.cluster import rendezvous
    from gpu_launch.cluster.nodes import Place, join

    Net(monkeypatch)
    monkeypatch.setattr(rendezvous, "resolve", lambda host: "127.0.0.1")
    join(Place(2, 1, ("h", "w"), "", None, "127.0.0.1", 6000), 4, {})
    assert "is this machine's own loopback address" in capsys.readouterr().err
    join(Place(2, 0, ("h", "w"), "", None, "127.0.0.1", 6000), 4, {})  # the head itself: nothing to warn of
    assert "loopback" not in capsys.readouterr().err


def test_a_nodes_first_command_must_succeed(tmp_path: Path) -> None:
    from gpu_launch.cluster.nodes import prepare
    from gpu_launch.errors import GpuLaunchError
    from gpu_launch.fit.cmdline.node_flags import NodeCommand

    prepare(NodeCommand(("x",), "head", first=("/bin/sh", "-c", "exit 0"), files=((str(tmp_path / "f"), "hi"),)),
            dict(os.environ))
    assert (tmp_path / "f").read_text() == "hi"
    with pytest.raises(GpuLaunchError, match=r"failed \(exit 3\): nothing was started"):
        prepare(NodeCommand(("x",), "head", first=("/bin/sh", "-c", "exit 3")), dict(os.environ))


def test_a_node_task_refuses_a_slurm_step_of_another_shape(tmp_path: Path) -> None:
    from gpu_launch.cluster import nodes

    step = {"SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "n[1-3]"}
    with pytest.raises(UsageError, match=r"--nodes 2, but this Slurm step runs on 3 nodes \(n\[1-3\]\)"):
        nodes._from_slurm(2, step, None, str(tmp_path))
    with pytest.raises(UsageError, match="runs 6 tasks on 3 nodes: --nodes needs one a node"):
        nodes._from_slurm(3, {**step, "SLURM_STEP_NUM_TASKS": "6"}, None, str(tmp_path))


# --- following an array: a task cancelled once it ran, Ctrl-C and SIGTERM, the waits (on a fake clock) -----------------

def test_a_task_cancelled_after_it_was_shown_running_failed_it_did_not_never_start(tmp_path: Path) -> None:
    """Shown running (Slurm said RUNNING past the grace, its record not yet written), then scancelled: it ran."""
    f = follower(tmp_path)
    state = f.states[0]
    f._update(state, TaskStatus(1, "RUNNING", start=time.time() - 60), {})
    f._update(state, TaskStatus(1, "CANCELLED", exit_code=0, signal=15), {})
    assert (state.status, state.returncode, state.note) == ("failed", None, "cancelled")
    assert state.started is not None and f.view.events == [("started", 1), ("finished", 1)]


class Clock:
    """time.monotonic and time.sleep on a clock that moves only when slept on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(following.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(following.time, "sleep", self.sleep)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class AskingView(View):
    def __init__(self, answer: bool) -> None:
        super().__init__()
        self.answer, self.asked, self.said = answer, [], []  # type: list[str]

    def ask(self, question: str) -> bool:
        self.asked.append(question)
        return self.answer

    def say(self, line: str) -> None:
        self.said.append(line)


def _signalled_follower(tmp_path: Path, sig: int | None, view: View) -> Follower:
    """A follower of an array that never ends; its first poll gets ``sig`` (Ctrl-C, a kill)."""
    f = follower(tmp_path)
    f.view = view
    polls: list[int] = []

    def poll() -> None:
        polls.append(1)
        if sig is not None and len(polls) == 1:
            os.kill(os.getpid(), sig)

    f.poll = poll  # type: ignore[method-assign]
    return f


def test_ctrl_c_on_a_terminal_asks_whether_to_cancel_the_array_and_sigterm_detaches(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    Clock(monkeypatch)
    monkeypatch.setattr(following, "cancel", lambda job_id, environ: pytest.fail("nothing may be cancelled"))
    asked = AskingView(False)
    assert following.follow(_signalled_follower(tmp_path, signal.SIGINT, asked), None, False, True) == "detached"
    assert asked.asked == ["cancel Slurm job array 42 (1 job not finished)? [y/N] "]
    killed = AskingView(True)  # a kill (a shutdown, a batch system) is never a question, nor a cancel
    assert following.follow(_signalled_follower(tmp_path, signal.SIGTERM, killed), None, False, True) == "detached"
    assert killed.asked == []


def test_a_cancelled_array_is_waited_for_90_s_and_wait_timeout_is_its_seconds(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    clock = Clock(monkeypatch)
    cancelled: list[str] = []
    monkeypatch.setattr(following, "cancel", lambda job_id, environ: cancelled.append(job_id))
    view = AskingView(True)
    began = clock.now
    assert following.follow(_signalled_follower(tmp_path, signal.SIGINT, view), None, True, True) == "cancelled"
    assert cancelled == ["42"] and view.asked == []  # --cancel-on-interrupt: no question
    assert 90 <= clock.now - began <= 92  # Slurm is given 90 s to end the tasks, then the follower stops
    began = clock.now
    assert following.follow(_signalled_follower(tmp_path, None, view), 30.0, False, True) == "timeout"
    assert 30 <= clock.now - began <= 32  # --wait 30


# --- a run's directories on a shared filesystem (cluster/rundir.py) ----------------------------------------------------

def test_a_run_directory_its_group_can_write_is_refused_unless_a_team_asked_for_it(tmp_path: Path) -> None:
    from gpu_launch.cluster import rundir
    from gpu_launch.errors import RendezvousFailed

    made = tmp_path / ".slurm"
    made.mkdir()
    made.chmod(0o770)
    with pytest.raises(RendezvousFailed, match=r"others can write it \(mode 770\); set GPULAUNCH_TEAM_DIR=1"):
        rundir.check_dir(str(made), is_team=False)
    rundir.check_dir(str(made), is_team=True)  # the team's choice
    made.chmod(0o707)
    with pytest.raises(RendezvousFailed, match=r"others can write it \(mode 707\): another user"):
        rundir.check_dir(str(made), is_team=True)  # every user: never
    assert rundir.make_dirs(str(tmp_path / "logs"), (".nodes", "1.0"), {}) == str(tmp_path / "logs" / ".nodes" / "1.0")
    assert stat_mode(tmp_path / "logs" / ".nodes") == stat_mode(tmp_path / "logs" / ".nodes" / "1.0") == 0o700


def stat_mode(path: Path) -> int:
    import stat

    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_log_directory_of_another_user_is_refused_unless_it_is_the_teams(tmp_path: Path) -> None:
    from gpu_launch.cluster import rundir
    from gpu_launch.errors import RendezvousFailed

    if os.getuid() != 0:
        pytest.skip("a directory of another user's is made by root only")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 4321, 4321)
    with pytest.raises(RendezvousFailed, match=r"belongs to (uid 4321|\w+): another user could forge"):
        rundir.check_top(str(theirs), is_team=False)
    rundir.check_top(str(theirs), is_team=True)
    rundir.check_top("/", is_team=False)  # root's: as trusted as the system


@pytest.mark.parametrize(("name", "members", "ok"), [("me", [], True), ("staff", [], False), ("me", ["bob"], False)])
def test_a_group_writable_log_directory_is_yours_only_in_your_private_group(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch, name: str,
                                                                            members: list[str], ok: bool) -> None:
    """Debian's umask 002 makes a directory 0775 for the user's private group (named as the user, nobody else
    in it): that is the user's own; a group with another name or another member is other users."""
    import grp
    import pwd

    from gpu_launch.cluster import rundir
    from gpu_launch.errors import RendezvousFailed

    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(0o775)
    try:
        user = pwd.getpwuid(os.getuid())
    except KeyError:
        pytest.skip("this user has no passwd entry (a container's): no private group to name")
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: type(user)(("me", *user[1:])))
    monkeypatch.setattr(grp, "getgrgid", lambda gid: grp.struct_group((name, "x", gid, members)))
    if ok:
        rundir.check_top(str(logs), is_team=False)
    else:
        with pytest.raises(RendezvousFailed, match="its group can write it"):
            rundir.check_top(str(logs), is_team=False)


def test_a_rendezvous_file_one_byte_over_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    from gpu_launch.cluster import rundir
    from gpu_launch.errors import RendezvousFailed

    at = tmp_path / "head.json"
    at.write_text('{"port": 1}'.ljust(rundir.MAX_FILE))
    assert rundir.read_own(str(at)) == {"port": 1}
    at.write_text('{"port": 1}'.ljust(rundir.MAX_FILE + 1))
    with pytest.raises(RendezvousFailed, match=rf"is {rundir.MAX_FILE + 1} bytes, more than a rendezvous file's"):
        rundir.read_own(str(at))


# --- following a several-node job (--nodes N --slurm): Slurm's silences, Ctrl-C, --wait (on a fake clock) ---------------

def _follow_node_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Any], limit: float | None = None,
                     cancel_on_interrupt: bool = False) -> tuple[Any, Clock, list[str]]:
    """nodejob._follow over scontrol's ``answers`` in turn (a dict, {} for "not known", None for no answer,
    or a signal to receive first, then RUNNING); (its status or the error raised, the clock, the cancels)."""
    import signal

    from gpu_launch.cluster import nodejob, submitting
    from gpu_launch.errors import GpuLaunchError

    clock = Clock(monkeypatch)
    monkeypatch.setattr(nodejob.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(nodejob.time, "sleep", clock.sleep)
    cancels: list[str] = []
    monkeypatch.setattr(submitting, "cancel", lambda job_id, environ: cancels.append(job_id))

    def state_of(job_id: str, environ: Any) -> dict[str, str] | None:
        answer = answers.pop(0) if answers else {"JobState": "RUNNING", "NodeList": "n[1-2]"}
        if isinstance(answer, signal.Signals):
            os.kill(os.getpid(), answer)
            return {"JobState": "RUNNING", "NodeList": "n[1-2]"}
        return answer

    monkeypatch.setattr(nodejob, "state_of", state_of)
    try:
        return nodejob._follow(node_job(tmp_path), "7", {}, 1.0, limit, cancel_on_interrupt, False, True), clock, cancels
    except GpuLaunchError as exc:
        return exc, clock, cancels


def test_a_node_job_slurm_forgets_fails_after_three_silences_in_a_row_not_one(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_launch.errors import JobsFailed

    running, done = {"JobState": "RUNNING", "NodeList": "n1"}, {"JobState": "COMPLETED", "ExitCode": "0:0"}
    status, _, _ = _follow_node_job(tmp_path, monkeypatch, [{}, {}, running, None, {}, {}, done])
    assert status == 0  # two silences, then it was known again: the count starts again
    failed, _, _ = _follow_node_job(tmp_path, monkeypatch, [running, {}, {}, {}])
    assert isinstance(failed, JobsFailed) and "Slurm job 7: Slurm no longer knows it" in failed.message


def test_a_cancelled_node_job_is_waited_for_90_s_and_wait_says_pending_or_running(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from gpu_launch.errors import Interrupted, WaitTimeout

    stopped, clock, cancels = _follow_node_job(tmp_path, monkeypatch, [signal.SIGINT], cancel_on_interrupt=True)
    assert isinstance(stopped, Interrupted) and stopped.message == "interrupted: cancelled Slurm job 7"
    assert cancels == ["7"] and 90 <= clock.now - 1000.0 <= 92  # Slurm is given 90 s to end it
    pending = {"JobState": "PENDING", "Reason": "Resources"}
    waited, clock, _ = _follow_node_job(tmp_path, monkeypatch, [pending] * 100, limit=30.0)
    assert isinstance(waited, WaitTimeout) and "Slurm job 7 is still pending after 30s (it goes on" in waited.message
    assert 30 <= clock.now - 1000.0 <= 32
    waited, _, _ = _follow_node_job(tmp_path, monkeypatch, [], limit=30.0)
    assert isinstance(waited, WaitTimeout) and "is still running after 30s" in waited.message


def test_a_node_job_that_completed_says_no_nodes_error_and_one_that_failed_says_the_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_launch.cluster import nodejob

    (tmp_path / "job-7.node-1.log").write_text("gpulaunch: error: NVML unavailable (hint: check the driver)\n")
    (tmp_path / "job-7.node-0.log").write_text("gpulaunch: error: an error it got over (retried)\n")
    assert nodejob._ended(node_job(tmp_path), "7", {"JobState": "COMPLETED", "ExitCode": "0:0"}, False, False) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"gpulaunch: job 7 completed: exit 0; logs in {tmp_path} (job-7.node-*.log, slurm-7.out)"]
    assert nodejob._ended(node_job(tmp_path), "7", {"JobState": "FAILED", "ExitCode": "1:0"}, False, False) == 1
    assert capsys.readouterr().err.splitlines()[1] == "gpulaunch: job 7 node 0: an error it got over (retried)"


# --- reaching the head (cluster/rendezvous.py): IPv4 first, a silent host retried to the deadline ---------------------

def test_the_heads_name_resolves_to_its_ipv4_address_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from gpu_launch.cluster import rendezvous

    answers = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::5", 0, 0, 0)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", 0))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: list(answers))
    assert rendezvous.resolve("head") == "10.0.0.5"


class FakeSocket:
    """socket.socket for rendezvous.probe: each connect raises the next of ``errors`` (None: connected)."""

    errors: list[BaseException | None] = []
    timeouts: list[float] = []

    def __init__(self, *_args: object) -> None:
        pass

    def __enter__(self) -> FakeSocket:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def settimeout(self, seconds: float) -> None:
        FakeSocket.timeouts.append(seconds)

    def connect(self, _where: object) -> None:
        error = FakeSocket.errors.pop(0) if FakeSocket.errors else OSError(113, "No route to host")
        if error is not None:
            raise error


def _probe(monkeypatch: pytest.MonkeyPatch, errors: list[BaseException | None], wait: float) -> tuple[object, int]:
    """rendezvous.probe of a head ``wait`` s before the deadline on a fake clock: (what it raised or None, tries)."""
    import socket

    from gpu_launch.cluster import rendezvous
    from gpu_launch.errors import RendezvousFailed

    clock = Clock(monkeypatch)
    monkeypatch.setattr(rendezvous.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(socket, "socket", FakeSocket)
    FakeSocket.errors, FakeSocket.timeouts = list(errors), []
    try:
        rendezvous.probe("10.0.0.5", 29500, clock.now + wait)
    except RendezvousFailed as exc:
        return exc, len(FakeSocket.timeouts)
    return None, len(FakeSocket.timeouts)


def test_a_head_that_does_not_answer_yet_is_tried_again_until_the_deadline_each_try_at_most_5_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import socket

    raised, tries = _probe(monkeypatch, [OSError(errno.EHOSTUNREACH, "No route to host"), socket.timeout(), None], 60)
    assert raised is None and tries == 3 and FakeSocket.timeouts[0] == 5.0  # it came up: the run goes on
    raised, tries = _probe(monkeypatch, [], 2.0)  # never reached: tried every 0.2 s for the 2 s left, then one line
    assert tries >= 5 and FakeSocket.timeouts[0] == 2.0 and min(FakeSocket.timeouts) >= 0.2
    assert "the head 10.0.0.5:29500 cannot be reached from" in str(raised) and "No route to host" in str(raised)
    raised, tries = _probe(monkeypatch, [PermissionError(errno.EPERM, "Operation not permitted")], 60)
    assert tries == 1 and "Operation not permitted" in str(raised)  # not a silence: said at once


# --- a node task's place in a Slurm step, a head's record, a node job's scontrol answer ----------------------------------

def test_only_rank_0_of_a_slurm_step_is_the_head_and_knows_its_address(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_launch.cluster import nodes, rendezvous

    monkeypatch.setattr(rendezvous, "hostnames", lambda nodelist, environ: ("n1", "n2"))
    monkeypatch.setattr(rendezvous, "node_addresses", lambda nodelist, environ: {"n1": "10.0.0.1", "n2": "10.0.0.2"})
    monkeypatch.setattr(rendezvous, "head_address", lambda names, addresses: addresses[names[0]])
    step = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NODELIST": "n[1-2]"}
    head = nodes._from_slurm(2, {**step, "SLURM_NODEID": "0"}, None, str(tmp_path))
    other = nodes._from_slurm(2, {**step, "SLURM_NODEID": "1"}, None, str(tmp_path))
    assert (head.rank, head.head_addr, head.job) == (0, "10.0.0.1", "42.0")
    assert (other.rank, other.head_addr) == (1, None)  # it reads the head's record from the run's directory
    assert head.run_dir == other.run_dir == os.path.join(str(tmp_path), ".nodes", "42.0")


def test_a_heads_record_whose_address_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    from gpu_launch.cluster import nodes
    from gpu_launch.errors import RendezvousFailed

    here = nodes.Place(2, 1, ("n1", "n2"), "42.0", str(tmp_path))
    good = {"addr": "10.0.0.1", "port": 29500, "node": "n1", "job": "42.0", "host": "n1"}
    assert nodes.head_record(good, "head.json", here) == ("10.0.0.1", 29500, "n1")
    assert nodes.head_record({**good, "addr": "fd00::1"}, "head.json", here)[0] == "fd00::1"
    for addr in ("10.0.0.1\0", "n1", "10.0.0.256", 7):
        with pytest.raises(RendezvousFailed, match="is not an IP address"):
            nodes.head_record({**good, "addr": addr}, "head.json", here)


def test_a_node_jobs_state_is_unknown_to_slurm_only_when_scontrol_says_so(tmp_path: Path) -> None:
    """`scontrol show job` failing: "Invalid job id" is Slurm forgetting the job ({}: three in a row fail
    it); any other failure (slurmctld restarting) is no answer (None: ask again), never the job's end."""
    from gpu_launch.cluster import nodejob

    bin_dir = tmp_path / "bin"
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    fake_tool(bin_dir, "scontrol", "JobId=7 JobState=RUNNING NodeList=n[1-2]\n")
    assert nodejob.state_of("7", environ) == {"JobId": "7", "JobState": "RUNNING", "NodeList": "n[1-2]"}
    fake_tool(bin_dir, "scontrol", "", "slurm_load_jobs error: Invalid job id specified\n", 1)
    assert nodejob.state_of("7", environ) == {}
    fake_tool(bin_dir, "scontrol", "", "slurm_load_jobs error: Unable to contact slurm controller\n", 1)
    assert nodejob.state_of("7", environ) is None
    fake_tool(bin_dir, "scontrol", "", "scontrol: error: something else\n", 2)
    assert nodejob.state_of("7", environ) is None


def test_a_dry_run_shows_the_first_nodes_commands_and_the_last(tmp_path: Path) -> None:
    from gpu_launch.cluster.nodejob import NodeJob
    from gpu_launch.cluster.nodeview import node_commands

    lines = node_commands(NodeJob(6, 4, ("torchrun", "--nproc-per-node", "{n}", "train.py"), str(tmp_path)))
    assert [line.split(":")[0] for line in lines[:-1]] == ["node 0 (head)", "node 1 (worker)", "node 2 (worker)",
                                                           "node 3 (worker)", "node 5 (worker)"]
    assert "--nnodes 6 " in lines[0] and "--rdzv-endpoint HEAD:PORT" in lines[0] and "--local-addr NODE5" in lines[4]
    assert lines[-1] == "HEAD: the first node's address; PORT: a free port the head picks when the job starts"
    assert node_commands(NodeJob(2, 4, ("python", "t.py", "--rank", "{node_rank}"), str(tmp_path)))[:2] == [
        "node 0: python t.py --rank 0", "node 1: python t.py --rank 1"]


def test_the_reason_a_node_failed_is_its_logs_last_error_line_the_lowest_node_first(tmp_path: Path) -> None:
    from gpu_launch.cluster.nodeview import last_error

    (tmp_path / "job-7.node-10.log").write_text("gpulaunch: error: the tenth\n")
    (tmp_path / "job-7.node-2.log").write_text("gpulaunch: error: first said\nout\ngpulaunch: error: last said\n")
    (tmp_path / "job-7.node-1.log").write_text("no error here\n")
    assert last_error(str(tmp_path), "7") == ("2", "last said")
    (tmp_path / "job-7.node-2.log").unlink()
    assert last_error(str(tmp_path), "7") == ("10", "the tenth")  # one error line: it (10 > 2 as numbers, not text)
    assert last_error(str(tmp_path), "8") is None


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGUSR2"])
def test_the_array_task_passes_sbatch_signal_usr1_on_to_its_command(tmp_path: Path, name: str) -> None:
    """`sbatch --signal=B:USR1@60` (or `scancel --batch --signal=USR1`) reaches only the batch step's process,
    the task: it passes the signal on, so that a training script that checkpoints on SIGUSR1 gets it."""
    import signal
    import subprocess
    import sys

    from sharing_helpers import env, example, first_gpus, write_snapshot

    ready, got = tmp_path / "ready", tmp_path / "got"
    sig = name.removeprefix("SIG")
    (tmp_path / "jobs.txt").write_text(f"trap 'echo {sig} > {got}; exit 0' {sig}; touch {ready}; "
                                       "while :; do sleep 0.05; done\n")
    snap = write_snapshot(tmp_path / "two.json", first_gpus(example("workstation-4x"), 2))
    (tmp_path / "logs").mkdir()
    box = env(tmp_path / "locks", GPULAUNCH_SNAPSHOT=str(snap), SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_JOB_ID="42",
              SLURMD_NODENAME="node7", SLURM_JOB_GPUS="0,1")
    proc = subprocess.Popen([sys.executable, "-m", "gpu_launch", "__slurm-task", str(tmp_path / "jobs.txt"),
                             str(tmp_path / "logs"), "1"], env=box, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(getattr(signal, name))
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert got.read_text() == f"{sig}\n"
    assert task.read_record(str(tmp_path / "logs"), "42", 1)["returncode"] == 0


def test_scancel_that_worked_says_nothing_and_one_that_failed_says_why_in_one_line(tmp_path: Path) -> None:
    from gpu_launch.cluster import submitting

    bin_dir = tmp_path / "bin"
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    fake_tool(bin_dir, "scancel", "")
    assert submitting.cancel("42", environ) is None
    fake_tool(bin_dir, "scancel", "", "scancel: error: Kill job error on job id 42: Access/permission denied\n", 1)
    assert submitting.cancel("42", environ) == "Kill job error on job id 42: Access/permission denied"
