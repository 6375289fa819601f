"""`gpulaunch each --slurm`: one job array on a real one-node Slurm, gpulaunch's placement in each task.

The Slurm tests start munged, slurmctld and slurmd (tests/slurm_cluster.py) once per session and skip,
with the reason, where that cannot be done (not root, not Debian, packages missing). The error paths
that need no Slurm (no sbatch, a refusing sbatch, bad options) always run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurm_cluster
from gpu_launch.hardware import snapshot
from gpu_launch import cluster as slurm
from sharing_helpers import env, gl

PROBE = r'''
import json, os, sys, time
start = time.time()
time.sleep(float(sys.argv[1]))
print("PROBE " + json.dumps({"task": os.environ.get("SLURM_ARRAY_TASK_ID"), "gpus": os.environ.get("GPULAUNCH_GPUS"),
      "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "job_gpus": os.environ.get("SLURM_JOB_GPUS"),
      "n": sys.argv[2], "start": start, "end": time.time()}), flush=True)
'''


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    reason = slurm_cluster.why_not()
    if reason:
        pytest.skip(reason)
    started = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    print(f"\nslurm fixture: munged + slurmctld + slurmd up, node idle in {started.started_in:.1f} s", file=sys.stderr)
    try:
        yield started
    finally:
        started.stop()


def _env(cluster: slurm_cluster.Cluster | None, tmp_path: Path, **extra: str) -> dict[str, str]:
    out = env(tmp_path / "locks", GPULAUNCH_SNAPSHOT="dgx-h100", GPULAUNCH_POLL_INTERVAL="0.3", **extra)
    if cluster is not None:
        out.update(cluster.env)
    return out


def _sweep(tmp_path: Path, lines: list[str]) -> Path:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# a sweep on Slurm\n" + "\n".join(
        line.replace("PROBE", f"{sys.executable} {probe}") for line in lines) + "\n")
    return jobs


def _probes(log_dir: Path) -> dict[int, dict]:
    out = {}
    for n in range(1, 100):
        log = log_dir / f"job-{n}.log"
        if not log.exists():
            break
        text = log.read_text()
        for line in text.splitlines():
            if line.startswith("PROBE "):
                out[n] = {**json.loads(line[6:]), "log": text}
    return out


def test_a_sweep_runs_as_one_array_each_job_inside_its_own_allocation(
        cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, [*("PROBE 2 {n}" for _ in range(3)), "sh -c 'echo broken >&2; exit 3'",
                             *("PROBE 2 {n}" for _ in range(2))])
    logs = tmp_path / "logs"
    t0 = time.monotonic()
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--gpus-per-job", "2", "--max-running", "3", "--follow",
                             "--log-dir", str(logs)), env=_env(cluster, tmp_path), capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    took = time.monotonic() - t0
    assert proc.returncode == 9, proc.stderr
    m = re.search(r"submitted 6 jobs from \S+ as Slurm job array (\d+) \(tasks 1-6, 2 GPUs each, at most 3 at once\)",
                  proc.stderr)
    assert m, proc.stderr
    job_id = m.group(1)
    assert "gpulaunch: error: 1 of 6 jobs failed: 4" in proc.stderr
    assert "job 4/6 failed: exit 3" in proc.stderr

    # The summary: the same table as a local `each`, with the node.
    summary = proc.stdout.splitlines()
    assert summary[0] == "5 done, 0 running, 0 queued, 1 failed (1 exit 3)"
    assert summary[1].split() == ["JOB", "STATUS", "RESULT", "NODE", "GPUS", "TIME", "LOG", "COMMAND"]
    rows = {int(line.split()[0]): line.split() for line in summary[2:]}
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    for n, row in rows.items():
        assert row[1:4] == (["failed", "exit", "3"] if n == 4 else ["done", "exit", "0"])
        assert row[4] == cluster.node and row[7] == str(logs / f"job-{n}.log")

    # Every job ran through `gpulaunch --auto 2` inside its own step's CUDA_VISIBLE_DEVICES.
    machine = snapshot.resolve("dgx-h100")
    uuid = {gpu.index: gpu.uuid for gpu in machine.gpus}
    probes = _probes(logs)
    assert sorted(probes) == [1, 2, 3, 5, 6]
    for n, p in probes.items():
        parent = re.search(r"the parent's CUDA_VISIBLE_DEVICES=([\d,]+) allows \(Slurm job (\d+)", p["log"])
        assert parent, p["log"]
        step_cvd = parent.group(1).split(",")
        assert len(step_cvd) == 2 and p["job_gpus"] == parent.group(1)
        assert p["gpus"].split(",") == step_cvd or sorted(p["gpus"].split(",")) == sorted(step_cvd)
        assert p["cvd"].split(",") == [uuid[int(i)] for i in p["gpus"].split(",")]  # UUIDs: the parent narrowed
        assert p["n"] == "2" and p["task"] == str(n)
        assert f"as Slurm job {job_id}_{n} on {cluster.node}" in p["log"]
        assert rows[n][5] == parent.group(1)

    # No two jobs that ran at the same time shared a GPU; at most 3 ran at once, and some did together.
    spans = [(p["start"], p["end"], set(p["gpus"].split(","))) for p in probes.values()]
    most = 0
    for i, (s1, e1, g1) in enumerate(spans):
        together = [g2 for s2, e2, g2 in spans if s2 < e1 and s1 < e2]
        most = max(most, len(together))
        for j, (s2, e2, g2) in enumerate(spans):
            if i != j and s2 < e1 and s1 < e2:
                assert not g1 & g2, (spans[i], spans[j])
    assert 2 <= most <= 3
    # The job lines never went through a shell: the copy holds them, the batch script only the copy's path.
    assert (logs / "jobs.txt").read_text().splitlines()[3] == "sh -c 'echo broken >&2; exit 3'"
    script = cluster.scontrol("write", "batch_script", f"{job_id}_4", "-")
    assert "__slurm-task" in script and "broken" not in script and "exit 3" not in script, script
    print(f"\nsweep of 6 (2 GPUs each, 3 at once) submitted and followed in {took:.1f} s", file=sys.stderr)


def test_all_succeeded_is_exit_0_logs_are_never_overwritten_and_constraint_defaults_stay_out(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, ["PROBE 0 {n}", "PROBE 0 {n}"])
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job-1.log").write_text("an older run\n")
    config = tmp_path / "config.toml"  # defaults for choosing on a shared machine do not reach the tasks
    config.write_text('exclude = "0-7"\nidle = true\n')
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--wait", "--log-dir", str(logs)),
                          env=_env(cluster, tmp_path, GPULAUNCH_CONFIG=str(config), GPULAUNCH_MIN_FREE="100GiB"),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "2 done, 0 running, 0 queued, 0 failed"
    assert (logs / "job-1.log").read_text() == "an older run\n"
    assert "PROBE " in (logs / "job-1.1.log").read_text() and "PROBE " in (logs / "job-2.log").read_text()
    assert str(logs / "job-1.1.log") in proc.stdout


def test_without_follow_it_prints_the_job_id_and_how_to_follow(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, ["true"])
    environ = _env(cluster, tmp_path)
    del environ["GPULAUNCH_SNAPSHOT"]  # given as a flag instead: it must reach the task all the same
    proc = subprocess.run(gl("--snapshot", "pcie-8x", "each", str(jobs), "--slurm", "--log-dir", str(tmp_path / "logs")),
                          env=environ, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id = re.search(r"as Slurm job array (\d+)", proc.stderr).group(1)  # type: ignore[union-attr]
    assert f"squeue -j {job_id}" in proc.stderr and f"scancel {job_id}" in proc.stderr
    deadline = time.monotonic() + 60
    while not slurm.read_record(str(tmp_path / "logs"), job_id, 1).get("ended") and time.monotonic() < deadline:
        time.sleep(0.2)
    log = (tmp_path / "logs" / "job-1.log").read_text()
    assert "RTX A6000" in log and "cuda:0 → GPU" in log, log


def _follow_then_ctrl_c(cluster: slurm_cluster.Cluster, tmp_path: Path, lines: list[str],
                        *options: str) -> tuple[subprocess.Popen[str], str, str]:
    """Submit ``lines`` and follow them (no terminal); Ctrl-C once the first job has started."""
    jobs = _sweep(tmp_path, lines)
    follower = subprocess.Popen(gl("each", str(jobs), "--slurm", *options, "--follow", "--log-dir", str(tmp_path / "logs")),
                                env=_env(cluster, tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (tmp_path / "logs" / "job-1.log").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    follower.send_signal(signal.SIGINT)
    out, err = follower.communicate(timeout=120)
    return follower, out, err


def test_ctrl_c_with_cancel_on_interrupt_cancels_the_array(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    follower, out, err = _follow_then_ctrl_c(cluster, tmp_path, ["PROBE 60 {n}", "PROBE 60 {n}", "PROBE 60 {n}"],
                                             "--max-running", "1", "--cancel-on-interrupt")
    assert follower.returncode == 130, err
    job_id = re.search(r"as Slurm job array (\d+)", err).group(1)  # type: ignore[union-attr]
    assert f"gpulaunch: error: interrupted: cancelled Slurm job array {job_id}: 2 jobs not started" in err
    assert re.search(r"^1 +failed +cancelled ", out, re.M), out
    states = slurm.parse_scontrol(cluster.scontrol("show", "job", "-o", job_id))
    assert {s.state for s in states.values()} == {"CANCELLED"}


def test_ctrl_c_without_a_terminal_stops_following_and_leaves_the_jobs(cluster: slurm_cluster.Cluster,
                                                                        tmp_path: Path) -> None:
    follower, out, err = _follow_then_ctrl_c(cluster, tmp_path, ["PROBE 60 {n}"])
    job_id = re.search(r"as Slurm job array (\d+)", err).group(1)  # type: ignore[union-attr]
    try:
        assert follower.returncode == 130, err
        assert f"gpulaunch: error: stopped following; Slurm job array {job_id} goes on (squeue -j {job_id})" in err
        assert slurm.parse_scontrol(cluster.scontrol("show", "job", "-o", job_id))[1].state == "RUNNING"
    finally:
        subprocess.run(["scancel", job_id], env={**os.environ, **cluster.env}, timeout=60)


def test_follow_json_shows_what_each_task_ran_and_quiet_prints_the_id(cluster: slurm_cluster.Cluster,
                                                                       tmp_path: Path) -> None:
    """{n}/{gpus} as the task's launch replaced them (not '{n}' quoted), in the live lines and --json; -q: the id."""
    jobs = _sweep(tmp_path, ["PROBE 0 {n} --devices {gpus}", "sh -c 'exit 4'"])
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--gpus-per-job", "2", "--follow", "--json",
                             "--log-dir", str(logs)), env=_env(cluster, tmp_path), capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 9, proc.stderr
    doc = json.loads(proc.stdout)
    job_id = doc["slurm_job_id"]
    assert re.search(rf"as Slurm job array {job_id} ", proc.stderr)
    first, second = doc["jobs"]
    assert first["argv"][:2] == ["/bin/sh", "-c"]  # the line through the shell, after the task's gpulaunch
    assert first["argv"][2].endswith(" 0 2 --devices 0,1")  # PROBE 0 {n} --devices {gpus}
    assert (first["status"], first["exit_code"], first["node"]) == ("done", 0, cluster.node)
    assert len(first["gpus"]) == 2 and first["log"] == str(logs / "job-1.log")
    assert (second["status"], second["exit_code"]) == ("failed", 4)
    assert "'{n}'" not in proc.stderr and "--devices 0,1" in proc.stderr
    assert (logs / "jobs.txt").read_text().splitlines()[0].endswith(" 0 {n} --devices {gpus}")
    assert "--devices 0,1" in (logs / "job-1.log").read_text()  # the task's own line says what it ran

    quiet = subprocess.run(gl("each", str(jobs), "--slurm", "-q", "--log-dir", str(tmp_path / "q")),
                           env=_env(cluster, tmp_path), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert re.fullmatch(r"\d+\n", quiet.stdout), quiet.stdout
    subprocess.run(["scancel", quiet.stdout.strip()], env={**os.environ, **cluster.env}, timeout=60)


def test_each_task_runs_its_line_through_the_shell_after_gpulaunch(cluster: slurm_cluster.Cluster,
                                                                   tmp_path: Path) -> None:
    """Issue 26 item 3 on Slurm: `gpulaunch --auto N -- /bin/sh -c LINE`, LINE filled in for N GPUs; --no-shell: words."""
    (tmp_path / "sub dir").mkdir()
    jobs = _sweep(tmp_path, ["cd 'sub dir' && NPROC={n} PROBE 0 {n} > probe.txt; echo '{{n}}' {gpus} >> probe.txt",
                             "echo {n} > out.txt"])
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--gpus-per-job", "2", "--follow", "--log-dir", str(logs)),
                          env=_env(cluster, tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    probe, literal = (tmp_path / "sub dir" / "probe.txt").read_text().splitlines()
    assert json.loads(probe[6:])["n"] == "2" and literal == "{n} 0,1"
    assert (tmp_path / "out.txt").read_text() == "2\n"
    assert "gpulaunch: CUDA_VISIBLE_DEVICES=" in (logs / "job-1.log").read_text()  # gpulaunch chose, then the shell ran

    (tmp_path / "direct.txt").write_text("echo {n} > out.txt\n")
    direct = subprocess.run(gl("each", "direct.txt", "--slurm", "--no-shell", "--follow", "--log-dir", str(tmp_path / "d")),
                            env=_env(cluster, tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert direct.returncode == 0, direct.stderr
    assert "1 > out.txt" in (tmp_path / "d" / "job-1.log").read_text()  # the words, exec'd: no redirection


def test_index_is_the_array_task_id_less_one(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """Issue 36 item 3 on Slurm: job N is array task N; {index} is N-1, {index1} N, with and without the shell."""
    (tmp_path / "jobs.txt").write_text("echo first {index} {index1}\n# a comment\necho second {index} {index1}\n")
    for shell, logs in ((True, tmp_path / "logs"), (False, tmp_path / "logs-words")):
        proc = subprocess.run(gl("each", "jobs.txt", "--slurm", "--follow", "--log-dir", str(logs),
                                 *([] if shell else ["--no-shell"])),
                              env=_env(cluster, tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert (logs / "job-1.log").read_text().splitlines()[-1] == "first 0 1"
        assert (logs / "job-2.log").read_text().splitlines()[-1] == "second 1 2"


def test_sbatch_args_that_replace_the_work_never_reach_slurm(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """--wrap ran instead of the tasks and was reported "done, exit 0"; --test-only was "'' is not a job id"."""
    jobs = _sweep(tmp_path, ["sh -c 'exit 5'"])
    for arg in ("--wrap=true", "--array=1", "--test-only"):
        proc = subprocess.run(gl("each", str(jobs), "--slurm", f"--sbatch-arg={arg}", "--follow", "--log-dir",
                                 str(tmp_path / "l")), env=_env(cluster, tmp_path), capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert proc.returncode == 2 and "gpulaunch cannot pass" in proc.stderr, proc.stderr
        assert "done" not in proc.stdout and not (tmp_path / "l").exists()


def test_sbatch_refusing_is_its_message_on_one_line(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, ["true"])
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--partition", "nosuch", "--log-dir", str(tmp_path / "l")),
                          env=_env(cluster, tmp_path), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulaunch: error: sbatch refused the job array: ") and proc.stderr.count("\n") == 1
    assert "partition" in proc.stderr.lower() and not (tmp_path / "l").exists()


#: A job that says it is ready, then waits: on SIGUSR1 it says so and exits 0 (``usr1``), dies of SIGTERM (``term``)
#: or ignores it, to be SIGKILLed after KillWait (``stubborn``).
WAITER = r"""
import signal, sys, time
kind = sys.argv[1]
if kind == "usr1":
    signal.signal(signal.SIGUSR1, lambda *a: (print("got SIGUSR1", flush=True), sys.exit(0)))
if kind == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
for _ in range(600):
    time.sleep(0.5)
"""


def _until_records(logs: Path, tasks: int) -> str:
    """The array's id, once its ``tasks`` tasks have each written their start record."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = sorted(p.name for p in (logs / ".slurm").glob("*_*.json")) if (logs / ".slurm").is_dir() else []
        if len(found) == tasks:
            return found[0].split("_")[0]
        time.sleep(0.2)
    raise AssertionError(f"{tasks} tasks did not start within 60 s in {logs}")


def test_a_job_slurm_ends_at_its_time_limit_is_a_timeout_counted_apart(cluster: slurm_cluster.Cluster,
                                                                        tmp_path: Path) -> None:
    """Slurm's TIMEOUT is `timeout`, as a local `each` counts it (status, summary, error line); --time 1m reaches
    sbatch as 00:01:00. The shortest real way: Slurm's least limit is a minute and slurmctld checks limits every
    30 s or so, so the test moves the running tasks' EndTime to 2 s from now (`scontrol update`, as an
    operator can): they end at its next check, by the same path as at --time (state TIMEOUT, SIGTERM, SIGKILL
    after KillWait). The hint of `--grace --slurm` is tried alongside: --signal=B:USR1@50 reaches the command."""
    waiter = tmp_path / "waiter.py"
    waiter.write_text(WAITER)
    (tmp_path / "limits.txt").write_text(f"{sys.executable} {waiter} term\n{sys.executable} {waiter} stubborn\n")
    (tmp_path / "warned.txt").write_text(f"{sys.executable} {waiter} usr1\n")
    logs, warned_logs = tmp_path / "logs", tmp_path / "warned"
    environ = _env(cluster, tmp_path)
    procs = [subprocess.Popen(gl("each", name, "--slurm", "--time", "1m", *extra, "--follow", "--log-dir", str(d)),
                              env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path)
             for name, d, extra in (("limits.txt", logs, ()),
                                    ("warned.txt", warned_logs, ("--sbatch-arg=--signal=B:USR1@50",)))]
    try:
        job_id = _until_records(logs, 2)
        _until_records(warned_logs, 1)
        for task in (1, 2):
            shown = cluster.scontrol("show", "job", "-o", f"{job_id}_{task}")
            assert "TimeLimit=00:01:00 " in shown, shown  # --time 1m: sbatch --time=00:01:00
            soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 2))
            moved = subprocess.run(["scontrol", "update", f"JobId={job_id}_{task}", f"EndTime={soon}"],
                                   env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=60)
            assert moved.returncode == 0, moved.stderr
        (out, err), (warned_out, warned_err) = (proc.communicate(timeout=150) for proc in procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert procs[0].returncode == 9, err
    summary = out.splitlines()
    assert summary[0] == "0 done, 0 running, 0 queued, 0 failed, 2 timeout (1 SIGTERM, 1 SIGKILL)", out
    rows = {int(line.split()[0]): line.split() for line in summary[2:]}
    assert rows[1][1:4] == ["timeout", "timeout", "(SIGTERM)"] and rows[2][1:4] == ["timeout", "timeout", "(SIGKILL)"]
    assert re.search(r"job 1/2 timeout \(SIGTERM\) after \S+: ended at its --time \(log ", err), err
    assert re.search(r"job 2/2 timeout \(SIGKILL\) after \S+: ended at its --time \(log ", err), err
    assert "gpulaunch: error: 2 of 2 jobs failed: 1 (timeout), 2 (timeout)" in err
    assert " failed:" not in err.replace("jobs failed:", "")  # never said to have failed
    # --grace's hint: sbatch's --signal=B:USR1@SECONDS before the limit reaches the command, which exits 0
    assert procs[1].returncode == 0, warned_err
    assert warned_out.splitlines()[0] == "1 done, 0 running, 0 queued, 0 failed", warned_out
    assert "got SIGUSR1" in (warned_logs / "job-1.log").read_text()


# ------------------------------------------------------------------------------- no Slurm needed

def _bin(tmp_path: Path, **scripts: str) -> str:
    """A PATH of only ``sh``, ``cat`` and the given fake commands."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sh", "cat"):
        os.symlink(f"/bin/{tool}", bindir / tool)
    for name, body in scripts.items():
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    return str(bindir)


def test_no_sbatch_on_path_is_exit_3_with_a_hint(tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, ["sh -c true"])
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--log-dir", str(tmp_path / "logs")),
                          env=_env(None, tmp_path, PATH=_bin(tmp_path)), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stderr == ("gpulaunch: error: Slurm is not available: no sbatch on PATH (hint: run it on a Slurm login "
                           "node (or `module load slurm`); without --slurm, `each` runs the jobs on this machine)\n")
    assert not (tmp_path / "logs").exists()


def test_a_refusing_sbatch_gives_its_last_error_line(tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, ["sh -c true"])
    path = _bin(tmp_path, sbatch="cat >/dev/null; echo 'sbatch: error: Batch job submission failed: "
                                 "Invalid generic resource (gres) specification' >&2; exit 1")
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--gpus-per-job", "16"),
                          env=_env(None, tmp_path, PATH=path), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulaunch: error: sbatch refused the job array: Batch job submission failed: "
                                  "Invalid generic resource (gres) specification (hint: ")


def test_what_sbatch_is_given(tmp_path: Path) -> None:
    """The array, the GPUs, the options; the batch script on stdin execs the task entry and holds no job line."""
    jobs = _sweep(tmp_path, ["sh -c 'echo $HOME; exit 1'", "sh -c true"])
    seen = tmp_path / "seen"
    path = _bin(tmp_path, sbatch=f'printf "%s\\n" "$@" > {seen}.argv; cat > {seen}.script; echo 77')
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--gpus-per-job", "2", "--max-running", "1", "--time", "90m",
                             "--partition", "gpu", "--sbatch-arg=--account=lab", "--sbatch-arg", "--qos=high",
                             "--log-dir", str(logs)),
                          env=_env(None, tmp_path, PATH=path), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "as Slurm job array 77 (tasks 1-2, 2 GPUs each, at most 1 at once)" in proc.stderr
    assert Path(f"{seen}.argv").read_text().splitlines() == [
        "--parsable", "--array=1-2%1", "--gres=gpu:2", "--job-name=gpulaunch-each",
        f"--output={logs}/slurm-%A_%a.out", "--partition=gpu", "--time=01:30:00", "--account=lab", "--qos=high"]
    script = Path(f"{seen}.script").read_text()
    assert script.startswith("#!/bin/sh\n") and "$HOME" not in script and "echo" not in script
    assert f"-m gpu_launch __slurm-task {logs}/jobs.txt {logs} 2\n" in script
    assert (logs / "jobs.txt").read_text() == "sh -c 'echo $HOME; exit 1'\nsh -c true\n"


def test_one_job_of_one_gpu_is_said_in_the_singular(tmp_path: Path) -> None:
    jobs = _sweep(tmp_path, ["sh -c true"])
    path = _bin(tmp_path, sbatch="cat >/dev/null; echo 78")
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--log-dir", str(logs)), env=_env(None, tmp_path, PATH=path),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == (f"gpulaunch each: submitted 1 job from {jobs} as Slurm job array 78 "
                                           f"(tasks 1-1, 1 GPU each); logs in {logs}")


def test_following_an_array_whose_tasks_all_ended_well_exits_0_with_the_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`each --slurm --follow` to the end: every task COMPLETED (as scontrol says, here answered in
    process) is exit 0 and the summary, not an interruption or a failure."""
    from gpu_launch import cli
    from gpu_launch.cluster import following

    jobs = _sweep(tmp_path, ["sh -c true", "sh -c true"])
    for name, value in _env(None, tmp_path, PATH=_bin(tmp_path, sbatch="cat >/dev/null; echo 79",
                                                         scontrol="exit 0", sacct="exit 0")).items():
        monkeypatch.setenv(name, value)
    now = time.time()
    monkeypatch.setattr(following, "query", lambda job_id, environ, missing=(): {
        n: following.TaskStatus(n, "COMPLETED", exit_code=0, node="n1", start=now - 5, end=now - 1) for n in (1, 2)})
    with pytest.raises(SystemExit) as exit_:
        cli.main(["each", str(jobs), "--slurm", "--follow", "--log-dir", str(tmp_path / "logs")])
    out, err = capsys.readouterr()
    assert exit_.value.code in (0, None), err
    assert out.splitlines()[0] == "2 done, 0 running, 0 queued, 0 failed"


@pytest.mark.parametrize("args, message", [
    (["--partition", "gpu"], "--partition is for `each --slurm` (hint: add --slurm"),
    (["--follow"], "--follow is for `each --slurm`"),
    (["--wait"], "--wait is for `each --slurm`"),
    (["--slurm", "--min-free", "20GiB"], "--min-free does not apply to `each --slurm`: Slurm allocates the GPUs"),
    (["--slurm", "--time", "90"], "--time: '90' is ambiguous"),
    (["--slurm", "--max-running", "0"], "--max-running: must be 1 or more, got 0"),
])
def test_options_that_do_not_fit_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    jobs = _sweep(tmp_path, ["sh -c true"])
    proc = subprocess.run(gl("each", str(jobs), *args), env=_env(None, tmp_path), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_an_empty_job_file_is_refused_before_slurm_is_asked(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# nothing yet\n\n")
    proc = subprocess.run(gl("each", str(jobs), "--slurm"), env=_env(None, tmp_path, PATH=_bin(tmp_path)),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and f"gpulaunch: error: {jobs}: no commands in it" in proc.stderr


@pytest.mark.parametrize("text, want", [("30m", "00:30:00"), ("90s", "00:02:00"), ("1d2h", "1-02:00:00"),
                                        ("1-12:00:00", "1-12:00:00"), ("2:00:00", "2:00:00")])
def test_time_limits(text: str, want: str) -> None:
    assert slurm.parse_time(text) == want


def test_scontrol_lines_become_task_states() -> None:
    out = ("JobId=2 ArrayJobId=1 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 "
           "StartTime=2026-11-23T04:00:57 EndTime=2026-11-23T04:00:59 NodeList=vm Command=/x y\n"
           "JobId=1 ArrayJobId=1 ArrayTaskId=4-6%3 JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0 "
           "StartTime=Unknown EndTime=Unknown NodeList=\n"
           "JobId=3 ArrayJobId=1 ArrayTaskId=2 JobState=CANCELLED Reason=None ExitCode=0:15 NodeList=vm\n")
    states = slurm.parse_scontrol(out)
    assert sorted(states) == [1, 2, 4, 5, 6]
    assert (states[1].state, states[1].exit_code, states[1].node) == ("FAILED", 3, "vm")
    assert states[1].end is not None and states[1].start is not None and states[1].end - states[1].start == 2
    assert states[5].state == "PENDING" and states[5].node == ""
    assert states[2].signal == 15


def test_grace_is_refused_with_slurm_and_a_config_grace_does_not_apply(tmp_path: Path) -> None:
    """Slurm has no grace of a job's own (KillWait is the cluster's): an explicit --grace is a usage error naming
    what to do instead, before sbatch runs; `grace` in the config file (for local jobs) is not used and not refused."""
    jobs = _sweep(tmp_path, ["sh -c true"])
    seen = tmp_path / "seen"
    path = _bin(tmp_path, sbatch=f'printf "%s\\n" "$@" > {seen}; cat >/dev/null; echo 80')
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--time", "1h", "--grace", "60", "--log-dir",
                             str(tmp_path / "l")), env=_env(None, tmp_path, PATH=path), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and not seen.exists() and not (tmp_path / "l").exists(), proc.stderr
    assert proc.stderr == (
        "gpulaunch: error: --grace does not apply to `each --slurm`: at a job's time limit Slurm sends SIGTERM, then "
        "SIGKILL after the cluster's KillWait (hint: `scontrol show config | grep KillWait` shows it; to warn a job "
        "before its limit, --sbatch-arg=--signal=B:USR1@SECONDS: the command gets SIGUSR1 about that long before it)\n")
    config = tmp_path / "config.toml"
    config.write_text("grace = 60\n")
    for extra in ({"GPULAUNCH_CONFIG": str(config)}, {"GPULAUNCH_GRACE": "60"}):
        ok = subprocess.run(gl("each", str(jobs), "--slurm", "--time", "1h", "--log-dir", str(tmp_path / "l")),
                            env=_env(None, tmp_path, PATH=path, **extra), capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
        assert ok.returncode == 0, ok.stderr
        assert "--time=01:00:00" in seen.read_text().splitlines() and "signal" not in seen.read_text()
