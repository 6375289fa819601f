"""A run's directory on a filesystem another user can write: nothing that user plants there is believed.

A node task inside a Slurm step (its variables set as srun sets them; a stand-in ``scontrol`` answers the
node list and the node addresses) publishes or reads ``LOGDIR/.nodes/JOB.STEP/head.json``. The log directory
is a shared scratch (mode 1777), and the second user is ``nobody`` (tests/two_users.py: root only; the
tests that need it skip with the reason elsewhere).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharing_helpers import env, gl
from two_users import NOBODY, as_nobody, shared_dir  # noqa: F401  (shared_dir: a fixture)

JOB = "4242"
STEP = f"{JOB}.0"
SCONTROL = """#!/bin/sh
# a stand-in for Slurm's scontrol: two nodes, n1 and n2, both on this host
case "$1 $2" in
  "show hostnames") printf 'n1\\nn2\\n' ;;
  "show node") printf 'NodeName=n1 NodeAddr=127.0.0.1 State=IDLE\\nNodeName=n2 NodeAddr=127.0.0.1 State=IDLE\\n' ;;
  *) echo "scontrol: error: $*" >&2; exit 1 ;;
esac
"""


def _bin(top: Path) -> Path:
    bindir = top / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "scontrol").write_text(SCONTROL)
    (bindir / "scontrol").chmod(0o755)
    return bindir


def _node(top: Path, log_dir: Path, rank: int, timeout: str = "3s", measured: bool = False,
          **extra: str) -> subprocess.CompletedProcess[str]:
    """One node task of a two-node step, as srun starts it (rank ``rank``), running `true`; with
    ``measured``, through a stand-in parent that prints the task's peak memory (KiB) on stdout."""
    environ = env(top / f"locks-{rank}", SLURM_JOB_ID=JOB, SLURM_STEP_ID="0", SLURM_STEP_NUM_NODES="2",
                  SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NODELIST="n[1-2]", SLURM_NODEID=str(rank),
                  SLURM_STEP_GPUS="2,3",  # the step's allotment (srun --gres=gpu:2): a step with none is refused
                  GPULAUNCH_RENDEZVOUS_TIMEOUT=timeout, **extra)
    environ["PATH"] = f"{_bin(top)}:{environ['PATH']}"
    argv = gl("--snapshot", "dgx-h100", "-q", "--nodes", "2", "--gpus-per-node", "2", "--log-dir", str(log_dir),
              "--", "true")
    if measured:
        argv = [sys.executable, "-c", "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)", *argv]
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=60, cwd=top)


def _scratch(top: Path) -> Path:
    """A shared scratch directory: every user may write it, sticky (as /tmp)."""
    scratch = top / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    return scratch


def _as_nobody(*argv: str) -> None:
    subprocess.run([*as_nobody(), *argv], check=True, timeout=30)


def _one_line(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.startswith("gpulaunch: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_the_heads_file_is_a_private_regular_file_in_a_private_directory(tmp_path: Path) -> None:
    proc = _node(tmp_path, tmp_path / "logs", 0)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "logs" / ".nodes" / STEP
    for directory in (run_dir.parent, run_dir):
        st = os.lstat(directory)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    st = os.lstat(run_dir / "head.json")
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o600
    record = json.loads((run_dir / "head.json").read_text())
    assert record["node"] == "n1" and record["job"] == STEP and 1 <= record["port"] <= 65535
    assert sorted(os.listdir(run_dir)) == ["head.json"]  # no temporary file left


def test_a_team_directory_is_the_groups_to_read_when_asked(tmp_path: Path) -> None:
    logs = tmp_path / "team"
    logs.mkdir()
    logs.chmod(0o2770)  # a team's directory: the group writes it
    proc = _node(tmp_path, logs, 0, GPULAUNCH_TEAM_DIR="1")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.lstat(logs / ".nodes" / STEP).st_mode) & 0o777 == 0o750  # (setgid kept: the group stays)
    assert stat.S_IMODE(os.lstat(logs / ".nodes" / STEP / "head.json").st_mode) == 0o640


def test_a_group_writable_log_directory_needs_the_teams_choice(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the directory to a group of other users")
    logs = tmp_path / "team"
    logs.mkdir()
    logs.chmod(0o770)
    os.chown(logs, -1, NOBODY)  # a group of others (the user's own private group would be theirs alone)
    _one_line(_node(tmp_path, logs, 0), 11, f"{logs}: its group can write it", "GPULAUNCH_TEAM_DIR=1")
    assert not (logs / ".nodes").exists()


def test_a_world_writable_log_directory_that_is_not_sticky_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "open"
    logs.mkdir()
    logs.chmod(0o777)
    _one_line(_node(tmp_path, logs, 1), 11, f"{logs}: every user can write it and it is not sticky")


@pytest.mark.parametrize("record, why", [
    ({}, "its address 'None' is not an IP address"),
    ({"addr": "127.0.0.1", "port": "http", "node": "n1", "job": STEP}, "its port 'http' is not between 1 and 65535"),
    ({"addr": "127.0.0.1", "port": 0, "node": "n1", "job": STEP}, "its port '0' is not between 1 and 65535"),
    ({"addr": "127.0.0.1", "port": 70000, "node": "n1", "job": STEP}, "is not between 1 and 65535"),
    ({"addr": "evil.example", "port": 4444, "node": "n1", "job": STEP}, "'evil.example' is not an IP address"),
    ({"addr": "127.0.0.1", "port": 4444, "node": "n9", "job": STEP}, "it names the node 'n9', not 'n1'"),
    ({"addr": "127.0.0.1", "port": 4444, "node": "n1", "job": "4241.0"}, "it is for job '4241.0', not this step's 4242.0"),
    ([1, 2], "not a JSON object"),
])
def test_every_field_of_the_heads_file_is_checked(tmp_path: Path, record: object, why: str) -> None:
    run_dir = tmp_path / "logs" / ".nodes" / STEP
    run_dir.mkdir(parents=True, mode=0o700)
    (run_dir / "head.json").write_text(json.dumps(record))
    _one_line(_node(tmp_path, tmp_path / "logs", 1), 11, f"{run_dir}/head.json: ", why)


def test_a_300_mb_heads_file_is_refused_from_its_size(tmp_path: Path) -> None:
    run_dir = tmp_path / "logs" / ".nodes" / STEP
    run_dir.mkdir(parents=True, mode=0o700)
    with open(run_dir / "head.json", "wb") as fh:
        fh.write(b'{"addr": "')
        fh.truncate(300 << 20)  # sparse: 300 MB to read, none of it on the disk
    began = time.monotonic()
    proc = _node(tmp_path, tmp_path / "logs", 1, measured=True)
    took = time.monotonic() - began
    _one_line(proc, 11, f"head.json: is {300 << 20} bytes, more than a rendezvous file's 65536")
    assert int(proc.stdout.split()[-1]) < 50 << 10, proc.stdout  # KiB: the whole launch's peak
    assert took < 30, took  # the whole launch on a shared CI machine; the file is never read


def test_a_heads_file_written_by_another_user_is_not_believed(shared_dir: Path) -> None:  # noqa: F811
    """The forged row of issue 33: another user pre-creates the run's directory in a shared scratch, with a
    head.json naming their own address; the worker refuses (exit 11) and joins nobody."""
    scratch = _scratch(shared_dir)
    run_dir = scratch / ".nodes" / STEP
    forged = json.dumps({"addr": "127.0.0.1", "port": 4444, "host": os.uname().nodename, "node": "n1", "job": STEP})
    _as_nobody("sh", "-c", f"mkdir -p -m 777 {run_dir} && printf '%s' '{forged}' > {run_dir}/head.json")
    proc = _node(shared_dir, scratch, 1)
    _one_line(proc, 11, f"{scratch}/.nodes: was made by nobody, not by you")
    assert "worker" not in proc.stderr and "4444" not in proc.stderr


def test_only_the_file_is_another_users_in_a_directory_of_the_runs_user(shared_dir: Path) -> None:  # noqa: F811
    """A group-writable team directory (the choice made): a teammate's head.json in it is still refused."""
    as_nobody()  # skips first, with the reason, where no second user can be run (the chown below needs root too)
    logs = shared_dir / "team"
    run_dir = logs / ".nodes" / STEP
    run_dir.mkdir(parents=True)
    for d in (logs, logs / ".nodes", run_dir):
        os.chmod(d, 0o770)
        os.chown(d, os.getuid(), NOBODY)
    forged = json.dumps({"addr": "127.0.0.1", "port": 4444, "node": "n1", "job": STEP})
    _as_nobody("sh", "-c", f"printf '%s' '{forged}' > {run_dir}/head.json")
    _one_line(_node(shared_dir, logs, 1, GPULAUNCH_TEAM_DIR="1"), 11, f"{run_dir}/head.json: was written by nobody")


def test_a_planted_symlink_is_never_written_through(shared_dir: Path) -> None:  # noqa: F811
    """The symlink row of issue 33: another user plants the run's directory with head.json (and every
    predictable temporary name) pointing at a file of the run's user; the head refuses the directory, the
    file is unchanged, and no head.json of theirs is believed."""
    scratch = _scratch(shared_dir)
    victim = shared_dir / "victim.txt"
    victim.write_text("mine\n")
    run_dir = scratch / ".nodes" / STEP
    _as_nobody("sh", "-c", f"mkdir -p -m 777 {run_dir} && ln -s {victim} {run_dir}/head.json")
    proc = _node(shared_dir, scratch, 0)
    _one_line(proc, 11, "was made by nobody, not by you")
    assert victim.read_text() == "mine\n" and os.path.islink(run_dir / "head.json")


def test_a_symlink_for_the_run_directory_is_refused(shared_dir: Path) -> None:  # noqa: F811
    scratch = _scratch(shared_dir)
    (scratch / ".nodes").mkdir(mode=0o700)
    elsewhere = shared_dir / "elsewhere"
    elsewhere.mkdir()
    (scratch / ".nodes" / STEP).symlink_to(elsewhere)
    _one_line(_node(shared_dir, scratch, 0), 11, f"{scratch}/.nodes/{STEP}: is a symlink")
    assert os.listdir(elsewhere) == []


def test_a_head_in_a_shared_scratch_of_its_own_works(shared_dir: Path) -> None:  # noqa: F811
    """What docs/several-nodes.md asks for: the scratch is 1777; the run's own directories in it are the
    user's alone, and a worker meets its head there."""
    scratch = _scratch(shared_dir)
    assert _node(shared_dir, scratch, 0).returncode == 0
    proc = _node(shared_dir, scratch, 1)
    assert proc.returncode == 0, proc.stderr
