"""The supervisor of one detached job: starts its launch, watches it, records how it ended.

``gpulaunch submit`` starts it (``python -I -S .../gpu_launch/jobs/supervisor.py ID LOCKFD DIRFD``:
:func:`command`) in a session of its own, with stdin closed and stdout and stderr on the job's log,
holding the log's lock (``LOCKFD``, taken by ``submit`` before it started us, so the job is never
unattended for a moment) and the job directory open (``DIRFD``, which ``submit`` checked is the
user's own). It holds no reservation: the launch it starts (``python -m gpu_launch OPTIONS --
COMMAND``, in a session of its own too, so a cancel reaches the command's whole process group) waits
in the queue, reserves, and execs the command, which then holds the GPUs exactly as long as it runs.
Just before the exec the launch writes ``E<gpus>`` on a pipe whose write end the exec closes
(:data:`gpu_launch.run.execute.EXEC_NOTIFY`): that is how the supervisor tells "the command ran and
exited 5" from "the launch failed with 5 (its --wait timed out)".

It lives as long as its job, one per waiting or running job, so it is kept small: it imports the
standard library's os, signal, sys, time and json and :mod:`gpu_launch.jobs.recordfile`, nothing else
of gpulaunch, and runs as a script without the ``site`` module (``-S``: no site-packages, no ``.pth``
hooks; ``-I``: no environment variables or user directories on the path); it finds the package beside
itself. About 10 MiB resident (4 MiB of it its own) instead of 17 (8) as a full ``gpulaunch``
(docs/performance.md, "Detached jobs").

Cancelling (``gpulaunch cancel``): a file ``.ID.cancel`` says so (and the grace), then SIGUSR1 tells
us; we send SIGTERM to the job's process group, and SIGKILL once the grace is over. Both sides look
for the other's word after leaving their own, so a cancel that comes while we start is not missed.
A SIGTERM to the supervisor itself (a shutdown, a ``kill``) is passed on to the job the same way,
without calling it cancelled. A job with a limit (``--time``, ``limit`` in its record) is ended the same way
once its command has run that long, as Slurm ends a job at its time limit (SIGTERM, then SIGKILL after the
grace): its outcome is ``timeout``. The child is waited for without being reaped (``WNOWAIT``) until its
end is noted, so no signal of ours can reach a process that took its pid.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

if __name__ == "__main__":  # run as a script with -I -S: the package is two directories up, found by hand
    # after the standard library, so that nothing beside the package (site-packages) can stand in for it
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gpu_launch.jobs import recordfile  # noqa: E402  (after the path is known)

__all__ = ["main", "command", "JOB_ENV", "DEFAULT_GRACE", "EXEC_NOTIFY"]

#: Set for the launch and the command: the job's id.
JOB_ENV = "GPULAUNCH_JOB_ID"
#: Seconds between SIGTERM and SIGKILL when a running job is cancelled.
DEFAULT_GRACE = 10.0
#: :data:`gpu_launch.run.execute.EXEC_NOTIFY`, written out: importing it would import the launch's
#: modules (and the errors' enum) into every supervisor; a test keeps the two equal.
EXEC_NOTIFY = "GPULAUNCH_EXEC_NOTIFY"


def command(job_id: str, lock_fd: int, dir_fd: int) -> list[str]:
    """The argv that starts a job's supervisor (``submit`` passes it ``lock_fd`` and ``dir_fd``)."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), job_id, str(lock_fd), str(dir_fd)]


def main(args: list[str]) -> int:
    """``supervisor.py ID LOCKFD DIRFD`` (only ``submit`` starts it)."""
    if len(args) != 3 or not all(a.isdigit() for a in args):
        os.write(2, b"gpulaunch: error: the supervisor of a job is started by `gpulaunch submit`, not by hand\n")
        return 2
    job_id, lock_fd, dir_fd = args[0], int(args[1]), int(args[2])
    for fd in (lock_fd, dir_fd):
        os.set_inheritable(fd, False)  # the log's lock and the job dir: ours alone, never the launch's
    try:
        job = recordfile.load(dir_fd, job_id)
    except (OSError, ValueError) as exc:
        os.write(2, f"gpulaunch: error: job {job_id}: cannot read its record ({exc})\n".encode())
        return 7
    return _Supervisor(dir_fd, job).run()


class _Supervisor:
    def __init__(self, dir_fd: int, job: dict) -> None:  # type: ignore[type-arg]
        self.dir_fd = dir_fd
        self.job = job  # the record, as stored: changed only by _record
        self.id: str = job["id"]
        self.pid = 0  # the launch (and then the command)
        self.exited = False  # the child has ended (not yet reaped): no signal may go to its pid any more
        self.cancelled = False
        self.limit_due = False  # the next SIGALRM is the job's --time limit (else: the grace is over)
        self.timed_out = False  # ended at its --time limit
        self.outcome: int | None = None  # .ID.outcome, set aside for a full disk (recordfile.reserve)

    def run(self) -> int:
        signal.signal(signal.SIGUSR1, lambda *_: self.cancel())
        signal.signal(signal.SIGTERM, lambda *_: self._signal(signal.SIGTERM))
        signal.signal(signal.SIGALRM, lambda *_: self._alarm())
        if recordfile.cancel_grace(self.dir_fd, self.id) is not None:  # cancelled before it could start
            self._record_end(state="cancelled", ended=time.time(), note="cancelled before it started: it never ran")
            return 0
        self.outcome = recordfile.reserve(self.dir_fd, self.id)
        read_end, write_end = os.pipe()
        self.pid = self._start(write_end)
        os.close(write_end)
        self._record(pid=self.pid, supervisor=os.getpid())
        if recordfile.cancel_grace(self.dir_fd, self.id) is not None:
            self.cancel()
        ran = exec_outcome(read_end, self._running)
        os.close(read_end)
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        self.exited = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        _, status = os.waitpid(self.pid, 0)
        self._finish(ran, status)
        return 0

    def _start(self, notify: int) -> int:
        """Fork and exec the launch: its own session, stdin closed, our stdout and stderr (the log)."""
        job = self.job
        argv = [sys.executable, "-m", "gpu_launch", *job["options"], "--", *job["argv"]]
        env = {**os.environ, EXEC_NOTIFY: str(notify), JOB_ENV: self.id}
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.set_inheritable(notify, True)
                os.chdir(job["cwd"])
                os.execve(sys.executable, argv, env)
            except BaseException as exc:  # noqa: BLE001  (the child must never return into our code)
                os.write(2, f"gpulaunch: error: job {self.id}: could not start its launch: {exc}\n".encode())
            finally:
                os._exit(127)
        return pid

    def _running(self, gpus: str) -> None:
        """The command was exec'd: recorded, and its --time limit set (counted from now, as Slurm counts)."""
        self._record(state="running", started=time.time(), gpus=gpus)
        limit = self.job.get("limit")
        if isinstance(limit, (int, float)) and limit > 0 and not self.cancelled:
            self.limit_due = True
            signal.setitimer(signal.ITIMER_REAL, float(limit))

    def _alarm(self) -> None:
        """The --time limit reached: SIGTERM now, SIGKILL after the grace; else the grace is over: SIGKILL."""
        if not self.limit_due:
            self._signal(signal.SIGKILL)
            return
        self.limit_due, self.timed_out = False, True
        self._signal(signal.SIGTERM)
        if not self.exited:
            signal.setitimer(signal.ITIMER_REAL, self._grace())

    def _grace(self) -> float:
        """Seconds from SIGTERM to SIGKILL at the --time limit: the job's --grace (Slurm's KillWait), else 10."""
        grace = self.job.get("grace")
        return float(grace) if isinstance(grace, (int, float)) and not isinstance(grace, bool) and grace > 0 \
            else DEFAULT_GRACE

    def cancel(self) -> None:
        """SIGTERM to the job now, SIGKILL after the grace the cancel asked for."""
        if self.cancelled or self.pid == 0:
            return
        self.cancelled, self.limit_due = True, False
        grace = recordfile.cancel_grace(self.dir_fd, self.id)
        self._signal(signal.SIGTERM)
        if not self.exited:
            signal.setitimer(signal.ITIMER_REAL, max(grace if grace is not None else DEFAULT_GRACE, 0.001))

    def _signal(self, sig: int) -> None:
        """``sig`` to the job's process group (the launch leads it, the command keeps it)."""
        if self.pid == 0 or self.exited:
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:  # not yet a group of its own (between fork and setsid): the process
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _record(self, **changes: object) -> bool:
        """The record with ``changes``; False when the disk is full (or any write fails): the record keeps
        its last state, this process the new one, so that the end is still recorded (:meth:`_record_end`)."""
        self.job = {**self.job, **changes}  # the keys keep their order: the record reads as submit wrote it
        try:
            recordfile.write(self.dir_fd, self.id, self.job)
        except OSError:
            return False
        return True

    def _record_end(self, **changes: object) -> None:
        """The final record. On a full disk the outcome goes over the blocks set aside at the start (the
        store reads it from there), and the record is tried again, less and less often, until it is
        written: ``jobs`` shows the real exit code, never *lost* for a job that ended."""
        if self._record(**changes):
            self._drop_outcome()
            return
        kept = self.outcome is not None and recordfile.keep_outcome(self.outcome, changes)
        _say(f"gpulaunch: job {self.id}: its record cannot be written (the disk is full?); "
             + ("its outcome is kept, " if kept else "") + "trying again until it can be")
        pause, end = 0.5, time.monotonic() + 7 * 86400.0
        while time.monotonic() < end:
            time.sleep(pause)
            pause = min(pause * 2, 30.0)
            if kept and self.outcome is not None and os.fstat(self.outcome).st_nlink == 0:
                return  # `jobs --clear` removed the job, its outcome read from the kept file: nothing to write
            if self._record():
                self._drop_outcome()
                return

    def _drop_outcome(self) -> None:
        if self.outcome is not None:
            os.close(self.outcome)
            self.outcome = None
            recordfile.drop_outcome(self.dir_fd, self.id)

    def _finish(self, ran: bool, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        exit_code, sig = (code, None) if code >= 0 else (None, signal.Signals(-code).name)
        ended = time.time()
        if ran and self.timed_out and not self.cancelled:
            limit = float(self.job["limit"])
            shown = f"{limit:g}s" if limit < 120 else f"{limit / 60:g} min"
            how = f"then {sig} after the {self._grace():g}s grace" if sig == "SIGKILL" else \
                f"it ended on {sig}" if sig else f"it exited {exit_code}"
            self._record_end(state="timeout", ended=ended, exit_code=exit_code, signal=sig,
                             note=f"ended at its --time limit ({shown}): SIGTERM, {how}")
            _say(f"gpulaunch: job {self.id}: {self.job['note']}")
        elif ran:
            state = "cancelled" if self.cancelled else "done"
            note = f"cancelled while running; ended by {sig}" if self.cancelled and sig else \
                "cancelled while running" if self.cancelled else None
            self._record_end(state=state, ended=ended, exit_code=exit_code, signal=sig, note=note)
        elif self.cancelled:
            self._record_end(state="cancelled", ended=ended, note="cancelled while waiting: it never ran")
        else:
            self._record_end(state="failed", ended=ended, exit_code=exit_code, signal=sig,
                             note=_last_error(self.dir_fd, self.id) or "the launch ended before the command started")
        if self.cancelled:  # the log says so too, for whoever follows it
            _say(f"gpulaunch: job {self.id}: {self.job['note']}")


def exec_outcome(fd: int, on_exec: Callable[[str], object]) -> bool:
    """Whether the launch exec'd its command, from its status lines on ``fd``: ``E<gpus>`` just before the
    exec (``on_exec(gpus)`` is called then, unless the same read already says it failed), ``F`` when the
    exec failed, nothing more when it succeeded (the exec closes the pipe). Every line of a read is kept:
    an exec that fails at once sends both lines together (issue 37: they were taken for a run, "done, exit 126")."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    told, _, rest = data.partition(b"\n")
    if not told.startswith(b"E") or rest.startswith(b"F"):  # no exec, or both lines in this one read
        return False
    on_exec(told[1:].decode("ascii", "replace"))
    rest += _read_rest(fd)
    return not rest.startswith(b"F")  # "F": the exec failed after all


def _say(line: str) -> None:
    """A line in the job's log (our stderr), best effort: a full disk must not end the supervisor."""
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass


def _read_rest(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


def _last_error(dir_fd: int, job_id: str) -> str | None:
    """The launch's last ``gpulaunch: error: ...`` line in the log (why it failed to start)."""
    try:
        fd = os.open(f"{job_id}.log", os.O_RDONLY | recordfile.FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, 16384, max(0, size - 16384)).decode("utf-8", "replace")
    finally:
        os.close(fd)
    errors = [line for line in tail.splitlines() if line.startswith("gpulaunch: error: ")]
    return errors[-1][len("gpulaunch: error: "):][:500] if errors else None


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # as a gpulaunch would: one line, 130
        os.write(2, b"gpulaunch: interrupted\n")
        sys.exit(130)
