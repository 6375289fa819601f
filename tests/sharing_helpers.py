"""Helpers for the reservation, --wait and `each` tests: run the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from childproc import example  # noqa: F401  (re-exported for the sharing tests)
from cli_run import clean_env

REPO = Path(__file__).resolve().parent.parent
POLL = "0.05"
_PRIVATE = tempfile.mkdtemp(prefix="gpulaunch-test-")  # never the machine's shared lock dir


def python_bin() -> str:
    """A folder whose ``python`` is this interpreter: the commands in these tests are written as a user
    writes them (``python train.py``), and a fresh Debian shell, or ``env -i``, has no ``python`` (only
    ``python3``, or the venv's, which only an activated venv puts on PATH)."""
    folder = os.path.join(_PRIVATE, "bin")
    if not os.path.exists(os.path.join(folder, "python")):
        os.makedirs(folder, exist_ok=True)
        os.symlink(sys.executable, os.path.join(folder, "python"))
    return folder


def env(lock_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The hermetic test environment (cli_run.clean_env), polling fast, in a private lock dir, with
    ``python`` on PATH (:func:`python_bin`)."""
    base = clean_env({
        "GPULAUNCH_POLL_INTERVAL": POLL,
        "NO_COLOR": "1",
        "GPULAUNCH_LOCK_DIR": str(lock_dir) if lock_dir is not None else os.path.join(_PRIVATE, "locks"),
        **extra,
    })
    if "PATH" not in extra:
        base["PATH"] = python_bin() + os.pathsep + base.get("PATH", os.defpath)
    return base


def gl(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpu_launch", *args]


def run(args: list[str], lock_dir: Path | None = None, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gl(*args), env=kw.pop("env", None) or env(lock_dir), capture_output=True, text=True,
                          timeout=timeout, cwd=kw.pop("cwd", None), **kw)


def start(args: list[str], lock_dir: Path | None = None, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(gl(*args), env=kw.pop("env", None) or env(lock_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def write_snapshot(path: Path, doc: dict[str, Any]) -> Path:
    """Write atomically (rename), so a gpulaunch re-reading it never sees half a file."""
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(temp, path)
    return path


def first_gpus(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """The example with only its first ``n`` GPUs (and the matching corner of the link matrix)."""
    out = dict(doc)
    out["gpus"] = doc["gpus"][:n]
    if doc.get("links"):
        out["links"] = [row[:n] for row in doc["links"][:n]]
    return out


def set_free(doc: dict[str, Any], free_mib: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    for gpu in out["gpus"]:
        free = free_mib(gpu)
        gpu["memory_free_mib"] = free
        gpu["memory_used_mib"] = gpu["memory_total_mib"] - free
    return out


def wait_for(predicate: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Lines:
    """Collects a pipe's lines in a thread, so a test can wait for one without blocking on the pipe."""

    def __init__(self, stream: Any) -> None:
        import threading

        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        try:
            for line in iter(stream.readline, ""):
                self.lines.append(line)
        except (ValueError, OSError):  # the test closed the stream (communicate(), a with-block): no more lines
            pass

    def wait(self, needle: str, timeout: float = 30) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if needle in line:
                    return line
            time.sleep(0.02)
        raise AssertionError(f"no line with {needle!r} in {self.lines!r}")

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


#: A child that prints what it was given, says it is ready, then waits for a release file.
HOLD = ("import os, sys, time; "
        "print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'), flush=True); "
        "release = sys.argv[1]; "
        "[time.sleep(0.02) for _ in iter(lambda: os.path.exists(release), True)]")


#: A waiter that stops just before it locks its new ticket (``python -c PAUSED_JOIN HERE ARGS...``), until the
#: file HERE/go exists; it makes HERE/paused when it stops.
PAUSED_JOIN = """
import fcntl, os, sys, time
real = fcntl.flock
here = sys.argv[1]
def flock(fd, op):
    if op & fcntl.LOCK_EX and "/.ticket-" in os.readlink(f"/proc/self/fd/{fd}") and not os.path.exists(here + "/go"):
        open(here + "/paused", "w").close()
        while not os.path.exists(here + "/go"):
            time.sleep(0.01)
    return real(fd, op)
fcntl.flock = flock
from gpu_launch.cli import main
main(sys.argv[2:])
"""
