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
                         "started", "ended", "pid", "supervisor", "gpus", "exit_code", "signal", "note", "limit"]
    assert (doc["state"], doc["exit_code"], doc["gpus"]) == ("done", 0, "0") and doc["started"] <= doc["ended"]
    assert doc["limit"] is None  # no --time: nothing ends it but its own end
    assert record.read_text() == json.dumps(doc, indent=1) + "\n"


def _outcome(first: bytes, later: bytes | None = None) -> tuple[bool, list[str]]:
    """What the supervisor concludes from the launch's status lines: ``first`` in one write, then (once the
    supervisor has taken the exec for under way) ``later``, then the pipe closed."""
    import os

    read_end, write_end = os.pipe()
    os.write(write_end, first)
    if later is None:
        os.close(write_end)
    seen: list[str] = []

    def on_exec(gpus: str) -> None:
        seen.append(gpus)
        if later is not None:
            os.write(write_end, later)
            os.close(write_end)

    try:
        return supervisor.exec_outcome(read_end, on_exec), seen
    finally:
        os.close(read_end)


def test_an_exec_that_fails_at_once_is_not_taken_for_a_run() -> None:
    """Issue 37: when the exec fails at once, ``E<gpus>`` and ``F`` arrive in one read; the reader kept only
    the first line, and the job was recorded "done, exit 126" (1 run in 6)."""
    assert _outcome(b"E2,3\nF\n") == (False, [])  # both lines in one write
    assert _outcome(b"E2,3\n", b"F\n") == (False, ["2,3"])  # apart: it was running, then it was not
    assert _outcome(b"E2,3\n") == (True, ["2,3"])  # the exec closed the pipe: the command runs
    assert _outcome(b"E") == (True, [""])  # the CPU fallback's empty GPU list, the line cut at end of file
    assert _outcome(b"") == (False, [])  # the launch ended before any exec
