"""What `each` shows: each job's command as it ran, `--json`, and `each --slurm`'s honesty about what ran.

The display tests run a real local sweep on a bundled machine; the Slurm tests put a fake ``sbatch``
(and ``scontrol``) on PATH, so they run anywhere; tests/test_each_slurm.py runs the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sharing_helpers import env, gl

jsonschema = pytest.importorskip("jsonschema")

from gpu_launch.views import schemas  # noqa: E402
from test_json import check_order  # noqa: E402

ARGS = "sh -c 'echo \"$@\"' job --ngpu {n} --devices {gpus} --literal {{n}}"


def _each(tmp_path: Path, text: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(text)
    return subprocess.run(gl("--snapshot", "dgx-h100", "each", str(jobs), "--log-dir", str(tmp_path / "logs"), *args),
                          env=env(tmp_path / "locks", **extra), capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_start_lines_and_summary_show_what_each_job_ran(tmp_path: Path) -> None:
    proc = _each(tmp_path, f"{ARGS}\n", "--gpus-per-job", "2")
    assert proc.returncode == 0, proc.stderr
    ran = "sh -c 'echo \"$@\"' job --ngpu 2 --devices 0,1 --literal {n}"  # ({{n}} is the escape for a literal {n})
    assert (tmp_path / "logs" / "job-1.log").read_text() == "--ngpu 2 --devices 0,1 --literal {n}\n"
    start = next(line for line in proc.stderr.splitlines() if "job 1/1 started" in line)
    assert start.endswith(f": {ran}"), start
    assert proc.stdout.splitlines()[-1].endswith(ran), proc.stdout
    assert "'{n}'" not in proc.stderr + proc.stdout and "{gpus}" not in proc.stderr + proc.stdout


def test_each_json_is_a_summary_document(tmp_path: Path) -> None:
    proc = _each(tmp_path, f"{ARGS}\nsh -c 'exit 3'\nsh -c 'kill -9 $$'\n", "--json", "--gpus-per-job", "2")
    assert proc.returncode == 9, proc.stderr
    doc = json.loads(proc.stdout)  # stdout holds the document alone
    jsonschema.Draft202012Validator(schemas.EACH).validate(doc)
    check_order(doc, schemas.EACH)
    assert doc["schema"] == 1 and doc["slurm_job_id"] is None and doc["log_dir"] == str(tmp_path / "logs")
    assert doc["counts"] == {"done": 1, "running": 0, "queued": 0, "failed": 2, "timeout": 0, "not_started": 0}
    first, second, third = doc["jobs"]
    # The line ran through the shell (exec'd by it: one command), placeholders filled in
    assert first["argv"] == ["/bin/sh", "-c", "exec sh -c 'echo \"$@\"' job --ngpu 2 --devices 0,1 --literal {n}"]
    assert (first["job"], first["line"], first["status"], first["exit_code"], first["signal"]) == (1, 1, "done", 0, None)
    assert len(first["gpus"]) == 2 and first["log"] == str(tmp_path / "logs" / "job-1.log")
    assert first["seconds"] is not None and first["seconds"] >= 0
    assert (second["status"], second["exit_code"]) == ("failed", 3)
    assert (third["status"], third["exit_code"], third["signal"]) == ("failed", None, "SIGKILL")
    assert "gpulaunch: error: 2 of 3 jobs failed: 2, 3" in proc.stderr


def test_each_json_with_quiet_is_the_document_only(tmp_path: Path) -> None:
    proc = _each(tmp_path, "true\n", "--json", "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["jobs"][0]["status"] == "done"


def test_the_json_schema_is_listed_with_the_others() -> None:
    assert schemas.ALL["each"] is schemas.EACH
    jsonschema.Draft202012Validator.check_schema(schemas.EACH)


# ------------------------------------------------------------------------------------ each --slurm

def _bin(tmp_path: Path, **scripts: str) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("sh", "cat", "true", "dirname"):
        if not (bindir / tool).exists():
            os.symlink(shutil.which(tool) or f"/bin/{tool}", bindir / tool)
    for name, body in scripts.items():
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    return str(bindir)


def _slurm_each(tmp_path: Path, path: str, *args: str, lines: str = "true {n}\n") -> subprocess.CompletedProcess[str]:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(lines)
    return subprocess.run(gl("each", str(jobs), "--slurm", "--log-dir", str(tmp_path / "logs"), *args),
                          env=env(tmp_path / "locks", PATH=path), capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)


SUBMITS = 'echo called >> "$(dirname "$0")/../sbatch.calls"; cat > /dev/null; echo 77'


@pytest.mark.parametrize("arg, refused", [
    ("--wrap=echo hi", "--wrap"), ("--array=1-2", "--array"), ("--arr=1-2", "--array"), ("-a1-2", "--array"),
    ("-a", "--array"), ("--test-only", "--test-only"), ("--test", "--test-only"), ("-W", "--wait"),
    ("-vW", "--wait"), ("--wait", "--wait"), ("--help", "--help"),
])
def test_sbatch_args_that_would_replace_the_work_are_refused_before_sbatch(tmp_path: Path, arg: str,
                                                                          refused: str) -> None:
    proc = _slurm_each(tmp_path, _bin(tmp_path, sbatch=SUBMITS), f"--sbatch-arg={arg}", "--follow")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"gpulaunch: error: --sbatch-arg {arg!r}: gpulaunch cannot pass {refused} on to "
                                  "sbatch: "), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not (tmp_path / "sbatch.calls").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("arg", ["--account=lab", "--wait-all-nodes=1", "-vv", "-p", "--time-min=10", "-t5"])
def test_other_sbatch_args_pass(tmp_path: Path, arg: str) -> None:
    proc = _slurm_each(tmp_path, _bin(tmp_path, sbatch=SUBMITS), f"--sbatch-arg={arg}")
    assert proc.returncode == 0, proc.stderr


def test_following_without_scontrol_is_refused_before_submitting(tmp_path: Path) -> None:
    proc = _slurm_each(tmp_path, _bin(tmp_path, sbatch=SUBMITS), "--follow")
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("gpulaunch: error: Slurm is not available: no scontrol on PATH"), proc.stderr
    assert not (tmp_path / "sbatch.calls").exists()


def test_a_bad_poll_interval_is_refused_before_submitting(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    path = _bin(tmp_path, sbatch=SUBMITS, scontrol="exit 0")
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "--follow"), capture_output=True, text=True, timeout=60,
                          env=env(tmp_path / "locks", PATH=path, GPULAUNCH_POLL_INTERVAL="1e-300"), cwd=tmp_path)
    assert proc.returncode == 2 and "GPULAUNCH_POLL_INTERVAL" in proc.stderr, proc.stderr
    assert not (tmp_path / "sbatch.calls").exists()


def test_sbatch_answering_no_job_id_is_said_plainly(tmp_path: Path) -> None:
    path = _bin(tmp_path, sbatch="cat > /dev/null; echo 'sbatch: Job 3 to start at 2026-11-24T03:16:51' >&2")
    proc = _slurm_each(tmp_path, path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gpulaunch: error: sbatch answered nothing on stdout (sbatch: Job 3 to start at "
                                  "2026-11-24T03:16:51), not a job id: nothing to follow"), proc.stderr


def test_quiet_prints_the_array_id_alone(tmp_path: Path) -> None:
    proc = _slurm_each(tmp_path, _bin(tmp_path, sbatch=SUBMITS), "-q")
    assert proc.returncode == 0 and proc.stdout == "77\n" and proc.stderr == "", proc.stderr


def test_json_without_follow_is_every_job_queued_and_the_array_id(tmp_path: Path) -> None:
    proc = _slurm_each(tmp_path, _bin(tmp_path, sbatch=SUBMITS), "--json", "--gpus-per-job", "2",
                       lines="true --tp {n}\ntrue {gpus}\n")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schemas.EACH).validate(doc)
    assert doc["slurm_job_id"] == "77" and [j["status"] for j in doc["jobs"]] == ["queued", "queued"]
    assert doc["jobs"][0]["argv"] == ["true", "--tp", "{n}"]  # not run yet: as written
    # The copy the tasks read holds the lines as written, placeholders unquoted.
    assert (tmp_path / "logs" / "jobs.txt").read_text() == "true --tp {n}\ntrue {gpus}\n"


def test_sbatch_wait_in_the_environment_does_not_reach_sbatch(tmp_path: Path) -> None:
    """SBATCH_WAIT=1 is sbatch's --wait: sbatch would block until the whole array ended."""
    path = _bin(tmp_path, sbatch='cat > /dev/null; echo "${SBATCH_WAIT:-unset}" > "$(dirname "$0")/../seen"; echo 77')
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    proc = subprocess.run(gl("each", str(jobs), "--slurm", "-q"), env=env(tmp_path / "locks", PATH=path, SBATCH_WAIT="1"),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "77\n", proc.stderr
    assert (tmp_path / "seen").read_text() == "unset\n"


def test_ctrl_c_with_no_scancel_says_the_array_goes_on(tmp_path: Path) -> None:
    """The array was submitted: a missing scancel is "scancel failed", never "Slurm is not available" (exit 3)."""
    import signal
    import time as clock

    from sharing_helpers import Lines

    start = clock.strftime("%Y-%m-%dT%H:%M:%S", clock.localtime(clock.time() - 60))
    path = _bin(tmp_path, sbatch=SUBMITS, scontrol=f"echo 'JobId=78 ArrayJobId=77 ArrayTaskId=1 JobState=RUNNING "
                                                   f"Reason=None ExitCode=0:0 StartTime={start} NodeList=vm'")
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    follower = subprocess.Popen(gl("each", str(jobs), "--slurm", "--follow", "--cancel-on-interrupt"),
                                env=env(tmp_path / "locks", PATH=path, GPULAUNCH_POLL_INTERVAL="0.1"),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path)
    lines = Lines(follower.stderr)
    lines.wait("job 1/1 started on vm", timeout=60)
    follower.send_signal(signal.SIGINT)
    assert follower.wait(timeout=60) == 130
    follower.stdout.close()  # type: ignore[union-attr]
    err = lines.text()
    assert "scancel 77 failed: Slurm is not available: no scancel on PATH" in err, err
    assert "gpulaunch: error: stopped following; Slurm job array 77 goes on (squeue -j 77)" in err, err


def test_terminal_summary_names_the_log_dir_once_and_each_log_by_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """At an 80-column terminal the summary's LOG column held the whole path on every row, folded
    mid-path ("gpulaunch-logs/2026112" / "4-043920/job-1.log"); now the title names the directory."""
    import io
    import re
    from types import SimpleNamespace

    from gpu_launch.views.each_view import View

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log_dir = "gpulaunch-logs/20261124-043920"
    states = [SimpleNamespace(job=SimpleNamespace(number=n), status="done", outcome="exit 0", node="", gpus=f"{n},{n + 4}",
                              seconds=1.0, log=f"{log_dir}/job-{n}.log",
                              text=f"python train.py --lr 1e-{n} --epochs 30 --batch-size 64") for n in (1, 2, 3)]
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    view = View(io.StringIO(), out, quiet=False, total=3, log_dir=log_dir)
    view.summary(SimpleNamespace(states=states))
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[0] == f"3 done, 0 running, 0 queued, 0 failed; logs in {log_dir}/"
    for n in (1, 2, 3):
        row = next(line for line in lines[2:] if line.split()[:1] == [str(n)])
        assert f" job-{n}.log " in row, text
    assert max(len(line) for line in lines) <= 80, text
