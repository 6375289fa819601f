"""The job store's own edges (issue 33): its counter, its id space, a closed stdout, `clear` beside `submit`,
a record edited by hand, a lost job whose command still runs, and a full disk (a real tmpfs, mounted by the
test as root; skipped otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sharing_helpers import HOLD, gl, wait_for
from test_jobs import JOB, Box, box  # noqa: F401  (box: a fixture)


def _one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stderr.startswith("gpulaunch: error: ") and done.stderr.count("\n") == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def _made(box: Box) -> None:  # noqa: F811
    box.job_dir.mkdir(parents=True, mode=0o700)


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_a_seq_that_is_not_a_regular_file_is_one_line(box: Box, kind: str) -> None:  # noqa: F811
    _made(box)
    seq = box.job_dir / ".seq"
    {"symlink": lambda: seq.symlink_to(box.top / "elsewhere"), "directory": seq.mkdir,
     "fifo": lambda: os.mkfifo(seq)}[kind]()
    before = sorted(os.listdir(box.job_dir))
    done = box.gl("submit", "--auto", "1", "--", "true")
    _one_line(done, 7, ".seq is not a regular file", f"remove {box.job_dir}/.seq")
    assert sorted(os.listdir(box.job_dir)) == before and not (box.top / "elsewhere").exists()


def test_when_the_ids_are_used_up_it_says_so_and_how_to_start_again(box: Box) -> None:  # noqa: F811
    _made(box)
    (box.job_dir / ".seq").write_text("999999999\n")
    done = box.gl("submit", "--auto", "1", "--", "true")
    _one_line(done, 7, "the job ids are used up (the last is 999999999)", "remove", "ids then start again from 1")
    assert sorted(os.listdir(box.job_dir)) == [".seq"]  # nothing stray
    (box.job_dir / ".seq").unlink()
    assert box.submit("-q", "--auto", "1", "--", "true") == "1"


def test_a_job_id_with_a_newline_is_not_one(box: Box) -> None:  # noqa: F811
    _one_line(box.gl("log", "1\n"), 2, "is not a job id")


def test_submit_with_stdout_closed_exits_0_and_says_the_id_on_stderr(box: Box) -> None:  # noqa: F811
    for quiet, said in ((False, "gpulaunch: job 1 submitted"), (True, "")):
        done = subprocess.run(gl("--snapshot", str(box.snap), "submit", *(["-q"] if quiet else []), "--auto", "1",
                                 "--", "true"), env=box.env,
                              stderr=subprocess.PIPE, text=True, timeout=60, preexec_fn=lambda: os.close(1))
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith(said) and ("submitted" in done.stderr) is not quiet, done.stderr
    wait_for(lambda: all(j["state"] == "done" for j in box.jobs().values()) and len(box.jobs()) == 2,
             what="both jobs to run")


def test_submits_beside_a_clear_loop_lose_no_job(box: Box) -> None:  # noqa: F811
    """`jobs --clear` at the moment of a submit removed the new job (its record, `waiting`, was written
    before the log's lock was taken: it looked lost), and the submit failed."""
    count = int(os.environ.get("GPULAUNCH_TEST_SUBMITS", "100"))
    stop = threading.Event()
    cleared: list[str] = []

    def clear_loop() -> None:
        while not stop.is_set():
            done = box.gl("jobs", "--clear")
            assert done.returncode == 0, done.stderr
            cleared.append(done.stderr)

    loop = threading.Thread(target=clear_loop)
    loop.start()
    ids, failures = [], []
    try:
        for _ in range(count):
            done = box.gl("submit", "-q", "--auto", "1", "--", sys.executable, "-c", "import sys; sys.exit(3)")
            (ids if done.returncode == 0 else failures).append(done.stdout.strip() or done.stderr)
    finally:
        stop.set()
        loop.join()
    assert not failures and len(set(ids)) == count, failures
    assert len(cleared) > 1
    lost = [j for j in box.jobs().values() if j["state"] in ("lost", "lost at reboot", "failed to start")]
    assert not lost, lost
    wait_for(lambda: all(j["state"] == "done" and j["exit_code"] == 3 for j in box.jobs().values()), 120,
             "every job left to end with its own exit code")


def test_a_new_jobs_record_never_exists_unlooked_after(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The same race, made certain: what `jobs` (and so `jobs --clear`) would conclude at the very moment the
    new record first exists. It was `lost` (the log's lock was taken after the record was written)."""
    from gpu_launch.jobs import start, status
    from gpu_launch.jobs.store import JobDir

    seen: list[str] = []
    real = JobDir.write

    def write(self: JobDir, job: object) -> None:
        real(self, job)  # type: ignore[arg-type]
        seen.append(status.statuses(self, [self.read(job.id)])[0].state)  # type: ignore[attr-defined]

    monkeypatch.setattr(JobDir, "write", write)
    job, _ = start.submit(["--snapshot", str(box.snap), "--wait", "--auto", "1"], ["true"], str(box.locks), box.env)
    assert seen and seen[0] == "waiting", seen
    box.wait_state(job.id, "done")


def _innocent() -> subprocess.Popen[bytes]:
    """A process of this user's that is no job's."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_cancel_never_signals_a_pid_a_record_names_that_does_not_hold_the_jobs_lock(tmp_path: Path, box: Box) -> None:  # noqa: F811
    release = tmp_path / "release"
    job_id = box.submit("-q", "--auto", "1", "--", sys.executable, "-c", JOB, str(release), "0")
    box.wait_state(job_id, "running")
    innocent = _innocent()
    try:
        record = box.job_dir / f"{job_id}.json"
        doc = json.loads(record.read_text())
        real = doc["supervisor"]
        record.write_text(json.dumps({**doc, "supervisor": innocent.pid}))  # the record, edited by its user
        done = box.gl("cancel", "--grace", "0.5", job_id, timeout=120)
        assert f"names pid {innocent.pid} as its supervisor, which does not hold the job's lock" in done.stderr
        assert innocent.poll() is None  # never signalled (SIGUSR1 would have ended it)
        os.kill(real, signal.SIGUSR1)  # the real supervisor reads the request left for it
        box.wait_state(job_id, "cancelled")
    finally:
        release.touch()
        innocent.kill()
        innocent.wait()


def test_a_forged_running_record_never_gets_a_process_ended(box: Box) -> None:  # noqa: F811
    """A record of a job no supervisor looks after (`lost`), naming a live process of the user's: cancel
    cannot show the process is the job's, so it signals nothing and says how to end it by hand."""
    box.submit("-q", "--auto", "1", "--", "true")
    box.wait_state("1", "done")
    innocent = _innocent()
    try:
        doc = json.loads((box.job_dir / "1.json").read_text())
        (box.job_dir / "1.json").write_text(json.dumps({**doc, "state": "running", "pid": innocent.pid,
                                                       "supervisor": innocent.pid, "submitted": time.time() - 60}))
        assert box.jobs()["1"]["state"] == "lost"
        done = box.gl("cancel", "1")
        _one_line(done, 7, f"job 1 is lost", f"`kill {innocent.pid}`")
        time.sleep(0.3)
        assert innocent.poll() is None
    finally:
        innocent.kill()
        innocent.wait()


def test_cancel_ends_the_command_of_a_job_whose_supervisor_was_killed(tmp_path: Path, box: Box) -> None:  # noqa: F811
    """Issue 36: a `lost` job whose command still runs: cancel proves the pid is the job's (its session,
    the job's log as its output, its GPULAUNCH_JOB_ID) and ends it; it used to say "nothing to cancel"."""
    release = tmp_path / "release"
    job_id = box.submit("-q", "--auto", "1", "--", sys.executable, "-c", JOB, str(release), "0")
    doc = box.wait_state(job_id, "running")
    record = json.loads((box.job_dir / f"{job_id}.json").read_text())
    os.kill(record["supervisor"], signal.SIGKILL)
    wait_for(lambda: box.jobs()[job_id]["state"] == "lost", what="the job to be lost")
    pid = record["pid"]
    assert os.path.exists(f"/proc/{pid}")
    done = box.gl("cancel", "--grace", "2", job_id, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"cancelled (it was lost; its command, pid {pid}, was ended)" in done.stderr
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0]
             in ("Z", "X"), what="the command to end")
    assert box.jobs()[job_id]["state"] == "cancelled" and doc


# A real full disk: tmpfs mounted by the test (root only)

@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``mount(OPTIONS)``: a tmpfs of the test's own (unmounted at the end), or skip."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")
    where = tmp_path / "full"
    where.mkdir()
    mounted: list[str] = []

    def mount(options: str) -> Path:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(options)
        return where

    try:
        yield mount
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)])


def _fill(where: Path) -> Path:
    """Fill ``where`` up: no byte left."""
    filler = where / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
        except OSError:
            pass
    return filler


def _starve(where: Path) -> list[Path]:
    made = []
    try:
        for n in range(100000):
            path = where / f"i{n}"
            path.touch()
            made.append(path)
    except OSError:
        pass
    return made


@pytest.mark.parametrize("how", ["bytes", "inodes"])
def test_submit_on_a_full_disk_is_one_line_and_leaves_nothing(tmpfs: Callable[[str], Path], box: Box,  # noqa: F811
                                                              how: str) -> None:
    full = tmpfs("size=2m,nr_inodes=64" if how == "inodes" else "size=1m")
    job_dir = full / "gpulaunch" / "jobs"
    job_dir.mkdir(parents=True, mode=0o700)
    environ = {**box.env, "XDG_STATE_HOME": str(full)}
    assert box.gl("submit", "-q", "--auto", "1", "--", "true", env=environ).returncode == 0  # room yet: .seq, job 1
    wait_for(lambda: json.loads((job_dir / "1.json").read_text())["state"] == "done", what="job 1 to end")
    _fill(full) if how == "bytes" else _starve(full)
    before = sorted(os.listdir(job_dir))
    done = box.gl("submit", "--auto", "1", "--", "true", env=environ)
    _one_line(done, 7, f"job dir {job_dir}: the disk is full (No space left on device)", "free some space")
    assert "Traceback" not in done.stderr
    assert sorted(os.listdir(job_dir)) == before


def test_a_job_whose_log_fills_the_disk_keeps_its_exit_code(tmpfs: Callable[[str], Path], tmp_path: Path,
                                                            box: Box) -> None:  # noqa: F811
    full = tmpfs("size=1m")
    environ = {**box.env, "XDG_STATE_HOME": str(full)}
    release = tmp_path / "release"
    fill = ("import os, sys, time\n[time.sleep(0.02) for _ in iter(lambda: os.path.exists(sys.argv[1]), True)]\n"
            "try:\n    [sys.stdout.write('x' * 65536) for _ in range(64)]; sys.stdout.flush()\n"
            "except OSError:\n    pass\nos._exit(5)\n")
    done = box.gl("submit", "-q", "--auto", "1", "--", sys.executable, "-c", fill, str(release), env=environ)
    assert done.returncode == 0, done.stderr
    job_dir = full / "gpulaunch" / "jobs"
    wait_for(lambda: json.loads((job_dir / "1.json").read_text())["state"] == "running", what="the job to run")
    release.touch()  # it fills the disk with its log, then exits 5
    jobs = lambda: json.loads(box.gl("jobs", "--json", env=environ).stdout)["jobs"][0]  # noqa: E731
    wait_for(lambda: jobs()["state"] == "done", 60, "the job to be over")
    assert (jobs()["state"], jobs()["exit_code"]) == ("done", 5)  # while the disk is still full
    assert json.loads((job_dir / "1.json").read_text())["state"] == "running"  # the record could not be written
    os.truncate(job_dir / "1.log", 0)  # space is back
    wait_for(lambda: json.loads((job_dir / "1.json").read_text())["state"] == "done", 90, "the record to be written")
    assert json.loads((job_dir / "1.json").read_text())["exit_code"] == 5
    assert not (job_dir / ".1.outcome").exists()
    assert (jobs()["state"], jobs()["exit_code"]) == ("done", 5)
