"""A detached job's supervisor stays small: it lives as long as its job, one per waiting job.

It runs as a script without ``site`` (``python -I -S .../supervisor.py``) and imports the standard
library's os, signal, sys, time and json and gpu_launch.jobs.recordfile, nothing else of gpulaunch
(a full gpulaunch process cost 17 MiB resident per waiting job; this one about 10: benchmarks/job_memory.py).
What it records and how it runs the job are the tests in tests/test_jobs.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from gpu_launch.jobs import supervisor
from gpu_launch.run import execute
from sharing_helpers import HOLD, env, example, first_gpus, run, wait_for, write_snapshot

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)\s*$")


def test_the_supervisor_imports_no_more_of_gpulaunch_than_its_record_file() -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", *supervisor.command("1", 0, 0)[1:-3]],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "started by `gpulaunch submit`" in done.stderr  # no arguments: it says so
    names = {m.group(1) for line in done.stderr.splitlines() if (m := _IMPORTED.match(line))}
    assert {n for n in names if n.startswith("gpu_launch")} == {"gpu_launch", "gpu_launch.jobs", "gpu_launch.jobs.recordfile"}
    assert not names & {"site", "subprocess", "pathlib", "typing", "dataclasses", "secrets", "random"}, names


def test_the_supervisor_tells_the_launch_the_variable_it_execs_by() -> None:
    assert supervisor.EXEC_NOTIFY == execute.EXEC_NOTIFY  # written out in the supervisor, not imported


def test_a_job_is_supervised_by_the_small_supervisor_and_recorded_as_before(tmp_path: Path) -> None:
    """Its supervisor process is the script under -I -S, and the record it leaves reads as `submit` wrote it."""
    snap = write_snapshot(tmp_path / "one.json", first_gpus(example("workstation-4x"), 1))
    box = env(tmp_path / "locks", XDG_STATE_HOME=str(tmp_path / "state"))
    release = tmp_path / "release"
    job = run(["--snapshot", str(snap), "submit", "--gpus", "0", "--", sys.executable, "-c", HOLD, str(release)], env=box)
    assert job.returncode == 0, job.stderr
    record = tmp_path / "state" / "gpulaunch" / "jobs" / "1.json"
    try:
        wait_for(lambda: json.loads(record.read_text())["state"] == "running", what="the job to run")
        pid = json.loads(record.read_text())["supervisor"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert argv[1:3] == ["-I", "-S"] and argv[3].endswith("gpu_launch/jobs/supervisor.py"), argv
    finally:
        release.touch()
    assert "CVD=0" in run(["log", "1", "-f"], env=box).stdout
    doc = json.loads(record.read_text())
    assert list(doc) == ["id", "state", "argv", "options", "cwd", "host", "boot_id", "lock_dir", "submitted",
                         "started", "ended", "pid", "supervisor", "gpus", "exit_code", "signal", "note"]
    assert (doc["state"], doc["exit_code"], doc["gpus"]) == ("done", 0, "0") and doc["started"] <= doc["ended"]
    assert record.read_text() == json.dumps(doc, indent=1) + "\n"
