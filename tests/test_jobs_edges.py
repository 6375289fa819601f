"""The slips in detached jobs a user would suffer (issue 37): what `gpulaunch jobs` concludes from a
record (over, lost, lost at reboot, another host's), what its table and its detail show (state, exit,
signal, time), and the job directory's files. Unit-level: a real job directory under tmp_path, records
written by the store, the views' text as the user reads it; no job is started."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from gpu_launch.errors import JobError, UsageError
from gpu_launch.jobs import recordfile, status
from gpu_launch.jobs.store import Job, JobDir, check_id, job_dir_path
from gpu_launch.views import jobs_table

NOW = 1_800_000_000.0
HERE = "here-host"
BOOT = "boot-1"


def job(**changes: object) -> Job:
    base = dict(id="1", state="running", argv=("python", "train.py"), options=("--auto", "1"), cwd="/w",
                host=HERE, boot_id=BOOT, lock_dir="/tmp/l", submitted=NOW - 100)
    base.update(changes)
    return Job(**base)  # type: ignore[arg-type]


@pytest.fixture
def jobs(tmp_path: Path) -> JobDir:
    d = JobDir.open({"XDG_STATE_HOME": str(tmp_path / "state")}, create=True)
    assert d is not None
    return d


def hold_log(jobs: JobDir, job_id: str) -> int:
    """Act as the job's live supervisor: a lock on its log."""
    fd = os.open(os.path.join(jobs.path, f"{job_id}.log"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


# --- what a record means now ------------------------------------------------------------------------------------------

def test_an_ended_record_is_shown_as_recorded_whatever_else_holds(jobs: JobDir) -> None:
    for state, shown in (("done", "done"), ("failed", "failed to start"), ("cancelled", "cancelled")):
        s = status.status_of(job(state=state, host="elsewhere", boot_id="old", note="n"), jobs, BOOT, HERE, {})
        assert (s.state, s.note, s.over) == (shown, "n", True)


def test_another_hosts_job_is_shown_as_recorded_never_lost(jobs: JobDir) -> None:
    """A shared home over NFS: no supervisor lock can be seen from here, so nothing is concluded (and
    `jobs --clear` must not take it for ended)."""
    s = status.status_of(job(host="other-node"), jobs, BOOT, HERE, {})
    assert (s.state, s.over) == ("running", False)
    assert s.note == "on other-node: not checked from here"


def test_a_record_of_an_earlier_boot_is_lost_at_reboot(jobs: JobDir) -> None:
    s = status.status_of(job(boot_id="boot-0", state="waiting"), jobs, BOOT, HERE, {})
    assert (s.state, s.note, s.over) == ("lost at reboot", "the machine restarted while it was waiting", True)
    # where the kernel says no boot id, a record is never taken for one of an earlier boot
    jobs.write(job(boot_id="boot-0"))
    assert status.status_of(job(boot_id="boot-0"), jobs, "", HERE, {}).state == "lost"
    assert status.status_of(job(boot_id=""), jobs, BOOT, HERE, {}).state == "lost"


def test_a_job_whose_supervisor_holds_its_log_is_running_and_one_without_is_lost(jobs: JobDir) -> None:
    j = job(pid=4242)
    jobs.write(j)
    fd = hold_log(jobs, "1")
    try:
        assert jobs.alive("1")
        s = status.status_of(j, jobs, BOOT, HERE, {})
        assert (s.state, s.over, s.note) == ("running", False, None)
    finally:
        os.close(fd)
    assert not jobs.alive("1")
    s = status.status_of(j, jobs, BOOT, HERE, {})
    assert (s.state, s.over) == ("lost", True)
    assert s.note == ("its supervisor ended while the job was running, without recording how it ended; "
                      "its command may still run as pid 4242")
    waiting = status.status_of(job(state="waiting", pid=4242), jobs, BOOT, HERE, {})
    assert waiting.note == "its supervisor ended while the job was waiting, without recording how it ended"


def test_a_job_that_ended_between_the_two_looks_is_shown_ended_not_lost(jobs: JobDir) -> None:
    jobs.write(job(state="done", exit_code=3, note="fine"))
    s = status.status_of(job(), jobs, BOOT, HERE, {})
    assert (s.state, s.job.exit_code, s.note) == ("done", 3, "fine")


def test_a_waiting_jobs_queue_position_is_its_own(jobs: JobDir) -> None:
    j = job(state="waiting", pid=77)
    jobs.write(j)
    fd = hold_log(jobs, "1")
    try:
        positions = {("/tmp/l", 77): 2, ("/tmp/l", 78): 1, ("/other", 77): 1}
        assert status.status_of(j, jobs, BOOT, HERE, positions).position == 2
        assert status.status_of(job(state="running", pid=77), jobs, BOOT, HERE, positions).position is None
    finally:
        os.close(fd)


def test_a_lost_job_may_still_run_only_as_a_live_process_of_yours_started_after_it(jobs: JobDir) -> None:
    submitted = time.time()
    command = subprocess.Popen(["sleep", "60"])  # the lost job's command, started after it was submitted
    try:
        assert status.may_still_run(status.Status(job(pid=command.pid, submitted=submitted), "lost"))
    finally:
        command.kill()
        command.wait()
    me = os.getpid()
    # a process older than the job is a pid used again, not its command
    assert not status.may_still_run(status.Status(job(pid=me, submitted=time.time() + 3600), "lost"))
    assert not status.may_still_run(status.Status(job(pid=me, submitted=time.time() - 5), "done"))
    assert not status.may_still_run(status.Status(job(pid=None), "lost"))
    assert not status.may_still_run(status.Status(job(pid=1, submitted=time.time()), "lost"))  # init: not yours, or older


# --- what the table and the detail show -------------------------------------------------------------------------------

def test_the_table_shows_exit_code_signal_and_state_of_each_job() -> None:
    rows = [status.Status(job(id="1", state="done", exit_code=0, started=NOW - 90, ended=NOW - 30, gpus="0,1"), "done"),
            status.Status(job(id="2", state="done", signal="SIGKILL", exit_code=None, started=NOW - 90, ended=NOW - 30,
                              gpus=""), "done"),
            status.Status(job(id="3", state="waiting"), "waiting", position=2),
            status.Status(job(id="4", state="failed", exit_code=2), "failed to start"),
            status.Status(job(id="10", state="running", started=NOW - 3700), "running")]
    lines = jobs_table.table(rows, None, now=NOW).splitlines()
    cells = [line.split("  ") for line in lines[1:-1]]
    assert [c for c in lines[1].split(" ") if c][:4] == ["1", "done", "0", "0,1"]
    assert [c for c in lines[2].split(" ") if c][:5] == ["2", "killed", "(SIGKILL)", "SIGKILL", "cpu"]  # issue 36
    assert [c for c in lines[3].split(" ") if c][:5] == ["3", "waiting", "#2", "–", "–"]
    assert [c for c in lines[4].split(" ") if c][:7] == ["4", "failed", "to", "start", "2", "–", lines[4].split()[6]]
    assert lines[1].split()[-3:] == ["1m00s", "python", "train.py"]  # ran 60 s
    assert lines[3].split()[-3] == "1m40s"  # has waited 100 s
    assert lines[4].split()[-3] == "–"  # never started, not waiting: no time
    assert lines[5].split()[-3] == "1h01m"  # still running: until now
    assert lines[5].startswith("10  ") and lines[1].startswith(" 1  ")  # ids right-aligned
    assert lines[-1] == "5 jobs: 1 waiting, 1 running, 1 done, 1 killed, 1 failed to start"  # counted apart
    assert len(cells) == 5


def test_the_table_is_cut_to_the_terminal_width_and_counts_one_job_in_the_singular() -> None:
    rows = [status.Status(job(argv=("python", "x" * 200)), "running")]
    text = jobs_table.table(rows, 60, now=NOW)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines) and lines[1].endswith("…") and len(lines[1]) == 60
    assert lines[-1] == "1 job: 1 running"
    full = jobs_table.table(rows, None, now=NOW).splitlines()[1]
    assert full.endswith("x" * 200)
    assert jobs_table.table(rows, len(full), now=NOW).splitlines()[1] == full  # exactly as wide: not cut


def test_the_day_is_shown_for_a_job_submitted_on_an_earlier_day() -> None:
    today = jobs_table._when(NOW - 5, NOW)
    assert today == time.strftime("%H:%M:%S", time.localtime(NOW - 5))
    assert jobs_table._when(NOW - 3 * 86400, NOW) == time.strftime("%b %d %H:%M", time.localtime(NOW - 3 * 86400))


def test_the_detail_says_the_exit_or_the_signal_and_how_long_it_waited_and_ran() -> None:
    done = status.Status(job(state="done", exit_code=126, started=NOW - 40, ended=NOW - 10, pid=9, gpus="3"), "done",
                         note="why")
    text = jobs_table.detail(done, "/j/1.log", now=NOW)
    assert text.splitlines()[0] == "job 1: failed (exit 126)"
    assert "(waited 1m00s)" in text and "(ran 30s)" in text and "  pid        9\n" in text
    assert "  gpus       3\n" in text and "  note       why\n" in text
    assert "  launch     gpulaunch --auto 1 -- COMMAND\n" in text
    killed = status.Status(job(state="done", signal="SIGKILL", started=NOW - 40, ended=NOW - 10), "done")
    assert jobs_table.detail(killed, "l", now=NOW).splitlines()[0] == "job 1: killed (SIGKILL)"
    cancelled = status.Status(job(state="cancelled", exit_code=None), "cancelled")
    assert jobs_table.detail(cancelled, "l", now=NOW).splitlines()[0] == "job 1: cancelled"
    lost = status.Status(job(state="running", started=NOW - 30, exit_code=1), "lost")
    head, *rest = jobs_table.detail(lost, "l", now=NOW).splitlines()
    assert head == "job 1: lost" and "  pid        –" in rest
    running = status.Status(job(state="running", started=NOW - 30), "running")
    assert "  for        30s" in jobs_table.detail(running, "l", now=NOW)
    waiting = status.Status(job(state="waiting"), "waiting", position=1)
    text = jobs_table.detail(waiting, "l", now=NOW)
    assert text.splitlines()[0] == "job 1: waiting #1" and "  for        1m40s" in text and "  gpus       –" in text


def test_json_says_the_state_now_and_the_recorded_exit() -> None:
    s = status.Status(job(state="running", exit_code=None, signal=None), "lost", note="n")
    doc = jobs_table.as_json([s], "/jd", ["/jd/1.log"])
    one = doc["jobs"][0]
    assert (doc["schema"], doc["job_dir"], one["state"], one["note"], one["log"]) == (1, "/jd", "lost", "n", "/jd/1.log")


# --- the job directory and its files ------------------------------------------------------------------------------------

def test_the_job_dir_follows_xdg_only_when_absolute(tmp_path: Path) -> None:
    assert job_dir_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == "/s/gpulaunch/jobs"
    assert job_dir_path({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == "/h/.local/state/gpulaunch/jobs"
    assert job_dir_path({"HOME": "/h"}) == "/h/.local/state/gpulaunch/jobs"


def test_job_dir_log_and_record_are_private(jobs: JobDir, tmp_path: Path) -> None:
    assert stat.S_IMODE(os.stat(jobs.path).st_mode) == 0o700
    job_id, log = jobs.new_id()
    os.close(log)
    jobs.write(job(id=job_id))
    for name in (f"{job_id}.log", f"{job_id}.json", ".seq"):
        assert stat.S_IMODE(os.stat(os.path.join(jobs.path, name)).st_mode) == 0o600, name
    os.chmod(jobs.path, 0o755)
    again = JobDir.open({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert again is not None and stat.S_IMODE(os.stat(jobs.path).st_mode) == 0o700  # private again


def test_ids_count_up_and_never_reuse_one_in_use(jobs: JobDir) -> None:
    ids = []
    for _ in range(3):
        job_id, log = jobs.new_id()
        os.close(log)
        jobs.write(job(id=job_id))
        ids.append(job_id)
    assert ids == ["1", "2", "3"]
    os.close(os.open(os.path.join(jobs.path, "4.log"), os.O_CREAT | os.O_WRONLY, 0o600))  # a log without its record
    job_id, log = jobs.new_id()
    os.close(log)
    assert job_id == "5"
    jobs.remove("3")
    assert jobs.ids() == [1, 2]
    job_id, log = jobs.new_id()
    os.close(log)
    assert job_id == "6"  # the counter goes on: a removed job's id is not given again


def test_a_job_id_is_digits_only(jobs: JobDir) -> None:
    assert check_id("#12") == "12" and check_id("123456789") == "123456789"
    for bad in ("0", "01", "1234567890", "../1", "1.json", "", "#"):
        with pytest.raises(UsageError):
            check_id(bad)
    with pytest.raises(UsageError, match="there is no job 9"):
        jobs.read("9")


def test_a_damaged_or_foreign_record_is_refused_with_a_hint(jobs: JobDir) -> None:
    jobs.write(job(id="2"))
    os.replace(os.path.join(jobs.path, "2.json"), os.path.join(jobs.path, "3.json"))
    with pytest.raises(JobError, match="its record is that of job 2"):
        jobs.read("3")
    Path(jobs.path, "4.json").write_text('{"id": "4", "state": "lost"}')
    with pytest.raises(JobError, match="damaged"):
        jobs.read("4")
    found, problems = jobs.all()
    assert found == [] and len(problems) == 2


def test_a_record_round_trips_and_a_wrong_type_is_refused() -> None:
    j = job(started=NOW, ended=NOW + 1, pid=3, supervisor=4, gpus="0", exit_code=0, signal="SIGTERM", note="x")
    assert Job.from_json(j.to_json()) == j
    for key, value in (("pid", True), ("submitted", "1"), ("argv", ["a", 1]), ("state", "lost"), ("cwd", None)):
        doc = j.to_json()
        doc[key] = value
        with pytest.raises(ValueError):
            Job.from_json(doc)
    doc = j.to_json()
    doc["pid"] = None
    assert Job.from_json(doc).pid is None


def test_a_record_over_the_size_limit_is_not_read(jobs: JobDir) -> None:
    Path(jobs.path, "5.json").write_text(" " * (recordfile.MAX_RECORD + 1) + "{}")
    with pytest.raises(JobError, match="too large"):
        jobs.read("5")
    with pytest.raises(ValueError):
        recordfile.load(jobs.fd, "5")
    jobs.write(job(id="6"))
    assert recordfile.load(jobs.fd, "6")["id"] == "6"


def test_the_grace_a_cancel_asked_for(jobs: JobDir) -> None:
    assert recordfile.cancel_grace(jobs.fd, "1") is None
    for asked, got in ((30.0, 30.0), (0.5, 0.5), (-3, 0.0), (99999, 3600.0)):
        jobs.request_cancel("1", asked)
        assert recordfile.cancel_grace(jobs.fd, "1") == got
    Path(jobs.path, ".1.cancel").write_text("soon\n")
    assert recordfile.cancel_grace(jobs.fd, "1") == 10.0  # unreadable: the default grace


def test_a_lost_jobs_ended_but_unreaped_command_no_longer_runs() -> None:
    """A zombie keeps its pid until reaped: `jobs --clear` must not keep the job for it."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not status.may_still_run(status.Status(job(pid=pid, submitted=time.time() - 60), "lost"))
    finally:
        os.waitpid(pid, 0)


def test_a_damaged_counter_never_gives_an_id_that_cannot_be_named(jobs: JobDir) -> None:
    Path(jobs.path, ".seq").write_text("1234567890\n")  # ten digits: no job id has them
    job_id, log = jobs.new_id()
    os.close(log)
    assert job_id == "1" and check_id(job_id) == "1"
    Path(jobs.path, ".seq").write_text("999999998\n")
    job_id, log = jobs.new_id()
    os.close(log)
    assert job_id == "999999999" and check_id(job_id) == job_id


def test_a_record_of_exactly_the_size_limit_is_read(jobs: JobDir) -> None:
    jobs.write(job(id="7"))
    text = Path(jobs.path, "7.json").read_text().rstrip("\n")
    Path(jobs.path, "7.json").write_text(" " * (recordfile.MAX_RECORD - len(text.encode())) + text)  # its end last
    assert os.path.getsize(os.path.join(jobs.path, "7.json")) == recordfile.MAX_RECORD
    assert jobs.read("7").id == "7" and recordfile.load(jobs.fd, "7")["id"] == "7"


def test_a_log_that_cannot_be_locked_means_no_supervisor_not_a_traceback(jobs: JobDir,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """flock fails with ENOLCK on an NFS mount without lock support: the job reads as lost, no traceback."""
    import errno

    from gpu_launch.jobs import store

    jobs.write(job())
    fd = hold_log(jobs, "1")
    try:
        def no_locks(fd: int, op: int) -> None:
            raise OSError(errno.ENOLCK, "No locks available")

        monkeypatch.setattr(store.fcntl, "flock", no_locks)
        assert jobs.alive("1") is False
    finally:
        os.close(fd)


def test_the_owner_of_a_foreign_job_dir_is_named_or_given_by_uid() -> None:
    import pwd

    from gpu_launch.jobs import store

    assert store._owner(0) == pwd.getpwuid(0).pw_name
    unnamed = next(uid for uid in range(54321, 64000) if not _has_name(uid))
    assert store._owner(unnamed) == f"uid {unnamed}"


def _has_name(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def test_a_record_up_to_one_mib_is_read_and_a_larger_one_refused(jobs: JobDir) -> None:
    """A long command (a sweep's argv) makes a large record: 600 KiB is read; 1.5 MiB is not."""
    for job_id, size, readable in (("8", 600 << 10, True), ("9", 3 << 19, False)):
        jobs.write(job(id=job_id, argv=("python", "x" * size)))
        if readable:
            assert len(jobs.read(job_id).argv[1]) == size and recordfile.load(jobs.fd, job_id)["id"] == job_id
        else:
            with pytest.raises(JobError, match="too large"):
                jobs.read(job_id)
            with pytest.raises(ValueError):
                recordfile.load(jobs.fd, job_id)


def test_submit_from_a_directory_that_was_removed_is_one_line_and_records_nothing(tmp_path: Path) -> None:
    """The job runs in the submitter's directory: one that no longer exists cannot be it (no traceback)."""
    from gpu_launch.jobs import start

    gone = tmp_path / "gone"
    gone.mkdir()
    here = os.getcwd()
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    try:
        os.chdir(gone)
        os.rmdir(gone)
        with pytest.raises(JobError, match=r"^the current directory cannot be used for a job \(No such file"):
            start.submit(["--gpus", "0"], ["true"], str(tmp_path / "locks"), environ)
    finally:
        os.chdir(here)
    assert not (tmp_path / "state").exists()


# --- which process cancel may signal (jobs/proof.py) ----------------------------------------------------------------------

def test_a_lost_jobs_command_is_known_by_its_session_its_job_id_and_its_log(tmp_path: Path) -> None:
    """`cancel` of a lost job ends its command only on the kernel's word: a process of its own session with
    GPULAUNCH_JOB_ID set to the job's id and the job's log as its stdout or stderr (the supervisor started
    it so); one whose stdout is closed is still known by its stderr (and no traceback)."""
    from gpu_launch.jobs import proof

    log = tmp_path / "7.log"
    log.touch()
    other = tmp_path / "8.log"
    other.touch()
    started = []

    def command(script: str, job_id: str = "7", session: bool = True) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 start_new_session=session, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                                 "GPULAUNCH_JOB_ID": job_id})
        started.append(p)
        return p

    try:
        mine, closed = command("exec sleep 60"), command("exec 1>&-; exec sleep 60")
        wrong_id, no_session = command("exec sleep 60", job_id="77"), command("exec sleep 60", session=False)
        for p in started:  # each has exec'd its sleep (its environment and descriptors are the sleep's)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert proof.runs_job(mine.pid, "7", log.stat()) and proof.runs_job(closed.pid, "7", log.stat())
        assert not proof.runs_job(mine.pid, "7", other.stat())  # another job's log
        assert not proof.runs_job(wrong_id.pid, "7", log.stat()) and not proof.runs_job(mine.pid, "8", log.stat())
        assert not proof.runs_job(no_session.pid, "7", log.stat())  # not the session the supervisor made
        assert not proof.runs_job(0, "7", log.stat()) and not proof.runs_job(-mine.pid, "7", log.stat())
    finally:
        for p in started:
            p.kill()
            p.wait()


def test_jobs_shows_a_waiting_jobs_place_read_from_its_own_lock_dirs_queue(jobs: JobDir,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`jobs`: "waiting #2" for a job whose launch is second in the queue of its lock dir (read once per
    lock dir of a waiting job; the lock dirs of ended jobs are not read)."""
    from types import SimpleNamespace

    from gpu_launch.reservations import waitqueue

    read: list[str] = []

    def waiters(lock_dir: str) -> list[SimpleNamespace]:
        read.append(lock_dir)
        return [SimpleNamespace(pid=78, position=1), SimpleNamespace(pid=77, position=2)] if lock_dir == "/q" else []

    monkeypatch.setattr(waitqueue, "waiters", waiters)
    waiting = job(id="1", state="waiting", pid=77, lock_dir="/q", host=status.host(), boot_id=status.boot_id())
    ended = job(id="2", state="done", exit_code=0, lock_dir="/ended")
    jobs.write(waiting)
    jobs.write(ended)
    fd = hold_log(jobs, "1")
    try:
        shown = status.statuses(jobs, [waiting, ended])
    finally:
        os.close(fd)
    assert [s.label for s in shown] == ["waiting #2", "done"] and read == ["/q"]


def test_a_jobs_exit_status_is_128_plus_its_signal() -> None:
    """`wait ID` / `log ID -f` end as a shell would: SIGTERM 143, SIGKILL 137 (a cancelled one too)."""
    ended = [(status.Status(job(state="done", exit_code=None, signal="SIGTERM"), "done"), 143),
             (status.Status(job(state="done", exit_code=None, signal="SIGKILL"), "done"), 137),
             (status.Status(job(state="cancelled", exit_code=None, signal="SIGKILL"), "cancelled"), 137),
             (status.Status(job(state="done", exit_code=None, signal="SIGNOTONE"), "done"), status.LOST_CODE)]
    assert [status.exit_status(s) for s, _ in ended] == [code for _, code in ended]


def test_a_lost_job_whose_pid_no_longer_exists_no_longer_runs_and_its_missing_log_is_none(jobs: JobDir) -> None:
    """`jobs --clear` and `cancel` of a lost job whose command ended and was reaped (no /proc/PID), or whose
    log was removed: nothing runs, nothing to prove (no traceback)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert not Path(f"/proc/{gone.pid}").exists()
    assert not status.may_still_run(status.Status(job(pid=gone.pid, submitted=time.time() - 60), "lost"))
    assert jobs.log_stat("41") is None
    os.symlink("/etc/passwd", os.path.join(jobs.path, "42.log"))
    assert jobs.log_stat("42") is None  # a symlink is not the job's log


def test_a_damaged_kept_outcome_is_not_believed_and_not_a_traceback(jobs: JobDir) -> None:
    """`.ID.outcome` (a full disk's last word, read over a record that is not over) cut short or edited: the
    record is shown as it is; a whole one is believed."""
    jobs.write(job(id="1", state="running", pid=77))
    outcome = Path(jobs.path) / ".1.outcome"
    for damaged in ('{"state": "done", "exit', "[1, 2]", "\0" * 64):
        outcome.write_text(damaged)
        assert recordfile.load_outcome(jobs.fd, "1") is None
        assert jobs.read("1").state == "running"
    outcome.write_text('{"state": "done", "exit_code": 3, "ended": 1800000000.0}'.ljust(200))
    assert recordfile.load_outcome(jobs.fd, "1") == {"state": "done", "exit_code": 3, "ended": 1.8e9}
    assert (jobs.read("1").state, jobs.read("1").exit_code) == ("done", 3)
