"""What a job's record means now: still waiting (and where in the queue), running, over, or lost.

A record that says the job is over is believed. One that says it waits or runs is checked:

* written in an earlier boot of this machine (the kernel's boot id differs): **lost at reboot** —
  the machine went down while the job waited or ran, and nothing of it runs now;
* its supervisor no longer holds the log's lock: **lost** — the supervisor was killed (the
  command, in a session of its own, may still run; its pid is in the record);
* written on another host (a home directory shared over NFS): shown as recorded, not checked.
"""

from __future__ import annotations

import os

from gpu_launch.jobs.store import FINAL, Job, JobDir
from gpu_launch.base.records import dataclass

__all__ = ["BOOT_ID", "Status", "boot_id", "host", "status_of", "statuses", "may_still_run", "exit_status", "LOST_CODE", "backfilled"]

#: Where the kernel tells this boot's id (a new random UUID at every boot).
BOOT_ID = "/proc/sys/kernel/random/boot_id"

#: What the table shows for each recorded state that is over.
_SHOWN = {"done": "done", "failed": "failed to start", "cancelled": "cancelled", "timeout": "timeout"}
#: ``wait``/``log -f`` of a job ended at its --time limit: timeout(1)'s code (coreutils, src/timeout.c: EXIT_TIMEDOUT)
TIMEOUT_CODE = 124


def boot_id() -> str:
    """This boot's id; "" where the kernel does not say (then no record is ever taken for lost at reboot)."""
    try:
        with open(BOOT_ID, encoding="ascii", errors="replace") as f:
            return f.read(100).strip()
    except OSError:
        return ""


def host() -> str:
    return os.uname().nodename


@dataclass(frozen=True)
class Status:
    """A job as ``gpulaunch jobs`` shows it."""

    job: Job
    state: str  # waiting, running, done, failed to start, cancelled, lost, lost at reboot
    position: int | None = None  # in the --wait queue (1: next), while it waits
    note: str | None = None

    @property
    def over(self) -> bool:
        return self.state not in ("waiting", "running")

    @property
    def outcome(self) -> str:
        """What a script wants to know: a ``done`` job whose command exited non-zero *failed*, one a
        signal ended was *killed*; every other state is its own outcome."""
        if self.state != "done":
            return self.state
        if self.job.signal:
            return "killed"
        return "failed" if self.job.exit_code not in (0, None) else "done"

    @property
    def label(self) -> str:
        """The outcome as ``jobs`` shows it: ``failed (exit 3)``, ``killed (SIGTERM)``, ``waiting #2``."""
        kind = self.outcome
        if kind == "failed":
            return f"failed (exit {self.job.exit_code})"
        if kind == "killed":
            return f"killed ({self.job.signal})"
        if kind == "waiting" and self.position:
            return f"waiting #{self.position}"
        return kind


#: ``wait``/``log -f``: the exit code for a job whose own is unknown (lost, lost at reboot): JOBS_FAILED
LOST_CODE = 9


def _signal_code(name: str | None) -> int | None:
    """128 + the signal's number, as a shell reports a command a signal ended (SIGTERM: 143)."""
    import signal

    try:
        return 128 + int(signal.Signals[name]) if name else None
    except KeyError:
        return None


def exit_status(s: Status) -> int | None:
    """The exit code ``wait`` and ``log -f`` end with for a job that is over (None while it is not): the
    command's own (0, 3, ...); 128 + N when signal N ended it (a shell's ``$?``); for one that failed to
    start, gpulaunch's (5: its wait timed out); a cancelled job never 0 (its command's code if non-zero,
    else 128 + the signal, else 143, as if SIGTERM had ended it); :data:`LOST_CODE` when no one knows."""
    if not s.over:
        return None
    job = s.job
    if s.state == "timeout":
        return TIMEOUT_CODE
    if s.state in ("lost", "lost at reboot") or (job.exit_code is None and not job.signal and s.state != "cancelled"):
        return LOST_CODE
    by_signal = _signal_code(job.signal)
    if s.state == "cancelled":
        return job.exit_code if job.exit_code else by_signal or 143
    if by_signal is not None:
        return by_signal
    return job.exit_code if job.exit_code is not None else LOST_CODE


def status_of(job: Job, jobs: JobDir, boot: str, here: str, positions: dict[tuple[str, int], int]) -> Status:
    """The job's status now (``boot``: this boot's id; ``here``: this host's name)."""
    if job.state in FINAL:
        return Status(job, _SHOWN[job.state], note=job.note)
    if job.host != here:
        return Status(job, job.state, note=f"on {job.host}: not checked from here")
    if boot and job.boot_id and job.boot_id != boot:
        return Status(job, "lost at reboot", note=f"the machine restarted while it was {job.state}")
    if not jobs.alive(job.id):
        again = jobs.read(job.id)  # it may have ended between the two looks
        if again.state in FINAL:
            return Status(again, _SHOWN[again.state], note=again.note)
        where = f"; its command may still run as pid {job.pid}" if job.state == "running" and job.pid else ""
        return Status(job, "lost", note=f"its supervisor ended while the job was {job.state}, without recording how "
                                         f"it ended{where}")
    position = positions.get((job.lock_dir, job.pid)) if job.state == "waiting" and job.pid else None
    return Status(job, job.state, position)


def statuses(jobs: JobDir, records: list[Job]) -> list[Status]:
    """Every record's status; the queue positions of waiting ones read once per lock directory."""
    boot, here = boot_id(), host()
    positions: dict[tuple[str, int], int] = {}
    waiting_dirs = {j.lock_dir for j in records if j.state == "waiting"}
    if waiting_dirs:
        from gpu_launch.errors import GpuLaunchError
        from gpu_launch.reservations import waitqueue

        for lock_dir in waiting_dirs:
            try:
                positions.update(((lock_dir, w.pid), w.position) for w in waitqueue.waiters(lock_dir))
            except (GpuLaunchError, OSError):
                continue  # an unreadable queue: no position shown
    return [status_of(j, jobs, boot, here, positions) for j in records]


def backfilled(jobs: JobDir, job_id: str) -> str | None:
    """How the job got ahead of earlier waiters, if it did: its launch's ``gpulaunch: backfilled: ...``
    line, from the head of its log (the user's own file); None if it waited its turn."""
    try:
        fd = jobs.open_log(job_id)
    except Exception:  # noqa: BLE001 - no log, no line: nothing to say
        return None
    try:
        head = os.pread(fd, 1 << 16, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    mark = b"gpulaunch: backfilled: "
    for line in head.splitlines():
        if line.startswith(mark):
            return line[len(mark):].decode("utf-8", "replace")
    return None


def may_still_run(status: Status) -> bool:
    """Whether a *lost* job's command (or launch) may still run: a live process of this user has its pid
    and started no earlier than the job was submitted (a pid used again by an older process is not it)."""
    pid = status.job.pid
    if status.state != "lost" or not pid:
        return False
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return False
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read(4096).rsplit(b")", 1)[1].split()  # from field 3, the state, on
        if fields[0] in (b"Z", b"X"):  # ended, not yet reaped
            return False
        ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") >= status.job.submitted - 1
