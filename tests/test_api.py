"""The Python API (gpu_launch.use/select/reserve/release/machine), in real child Python processes.

Each test starts a Python child that drives the API line by line (:class:`Py`) on the bundled
``dgx-h100`` snapshot with a private lock directory, and checks from outside, with the real CLI,
what a user on the same machine would see: the locks, who holds them, and when they end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from api_helpers import SNAP, cli, hold
from cli_run import ROOT, clean_env

DONE = "<<done>>"

# The child: runs each line it is sent, then prints DONE (or the exception as JSON, then DONE).
_REPL = r"""
import json, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises KeyboardInterrupt, as in a kernel
def report(exc):
    return {"type": type(exc).__name__, "message": getattr(exc, "message", str(exc)),
            "hint": getattr(exc, "hint", None), "exit_code": int(getattr(exc, "exit_code", -1))}
for line in sys.stdin:
    try:
        exec(line, globals())
    except BaseException as exc:
        print("EXC " + json.dumps(report(exc)), flush=True)
    print("<<done>>", flush=True)
"""


class Py:
    """A child Python process that executes the lines it is given; its stderr goes to a file."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None, prelude: str = "") -> None:
        self.err_path = tmp_path / f"stderr-{time.monotonic_ns()}.txt"
        self._err = open(self.err_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", prelude + _REPL], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, text=True, cwd=ROOT,
                                     env=clean_env({"GPULAUNCH_POLL_INTERVAL": "0.05", **(env or {})}))
        self.pid = self.proc.pid

    def __call__(self, line: str, timeout: float = 60) -> list[str]:
        """Run one line (no newlines in it); the lines it printed. Raises on an exception in the child."""
        out = self.send(line)
        return self.collect(out, timeout)

    def send(self, line: str) -> None:
        assert "\n" not in line
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def collect(self, _: object = None, timeout: float = 60) -> list[str]:
        assert self.proc.stdout is not None
        lines = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the child ended: {self.stderr()}")
            if line.rstrip("\n") == DONE:
                return lines
            lines.append(line.rstrip("\n"))
        raise AssertionError("the child did not answer in time")

    def value(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the child."""
        lines = self(f"print('VAL ' + json.dumps({expression}))")
        assert lines and lines[-1].startswith("VAL "), lines
        return json.loads(lines[-1][4:])

    def error(self, line: str) -> dict[str, Any]:
        """The exception ``line`` raises in the child: type, message, hint, exit_code."""
        lines = self(line)
        assert lines and lines[-1].startswith("EXC "), f"no exception from {line!r}: {lines}"
        return json.loads(lines[-1][4:])

    def stderr(self) -> str:
        self._err.flush()
        return self.err_path.read_text()

    def close(self) -> int:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        self._err.close()
        return self.proc.returncode


@pytest.fixture
def locks(tmp_path: Path) -> str:
    return str(tmp_path / "locks")


@pytest.fixture
def py(tmp_path: Path, locks: str):
    """A child with gpu_launch imported and ``L``, the private lock dir."""
    children: list[Py] = []

    def start(env: dict[str, str] | None = None, prelude: str = "") -> Py:
        child = Py(tmp_path, env, prelude)
        children.append(child)
        child(f"import gpu_launch; L = {locks!r}; S = {SNAP!r}")
        return child

    yield start
    for child in children:
        if child.proc.poll() is None:
            child.proc.kill()
        child.close()


ENV_NOW = "{k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'GPULAUNCH_GPUS')}"
UNSET = {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None, "GPULAUNCH_GPUS": None}


# --- use(): the environment and the reservation -------------------------------------------------

def test_use_sets_the_three_variables_and_holds_the_gpus_until_release(py, locks: str) -> None:
    child = py()
    child("devs = gpu_launch.use(2, snapshot=S, lock_dir=L)")
    assert child.value("[(d.cuda, d.index) for d in devs]") == [["cuda:0", 2], ["cuda:1", 3]]
    assert child.value(ENV_NOW) == {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                    "GPULAUNCH_GPUS": "2,3"}
    err = child.stderr()
    assert "gpulaunch: CUDA_VISIBLE_DEVICES=2,3\n" in err and "cuda:0 → GPU 2  NVIDIA H100 80GB HBM3" in err

    # Another user's launch of one of them fails with exit 6, naming this process as the holder.
    taken = cli(locks, "--gpus", "3", "--", "true")
    assert taken.returncode == 6, taken.stderr
    assert "GPU 3 is reserved by" in taken.stderr and f"(pid {child.pid}, " in taken.stderr
    assert "-c" in taken.stderr  # the holder's command line: this child's `python -c ...`
    listing = cli(locks, "ls")
    assert listing.stdout.count(f"pid {child.pid}") == 2  # ls: RESERVED BY on GPUs 2 and 3
    assert cli(locks, "--auto", "2", "--dry-run", "--json").stdout.count('"index": 2') == 0  # --auto goes elsewhere

    child("gpu_launch.release()")
    assert child.value(ENV_NOW) == UNSET  # the variables are as they were before use()
    assert child.value("[d.index for d in gpu_launch.held()]") == []
    assert cli(locks, "--gpus", "2,3", "--", "true").returncode == 0
    assert child.proc.poll() is None  # released by release(), not by the end of the process


def test_a_gpulaunch_started_from_the_process_uses_its_gpus_as_its_jobs(py, locks: str) -> None:
    child = py()
    child("gpu_launch.use(2, snapshot=S, lock_dir=L, quiet=True)")
    line = ("done = __import__('subprocess').run([sys.executable, '-m', 'gpu_launch', '--snapshot', S, "
            "'--lock-dir', L, '-q', '--auto', '1', '--', sys.executable, '-c', "
            "'import os; print(os.environ[\"GPULAUNCH_GPUS\"])'], capture_output=True, text=True)")
    child(line)
    assert child.value("(done.returncode, done.stdout, done.stderr)") == [0, "2\n", ""]  # within use()'s 2, 3
    assert cli(locks, "--gpus", "2", "--", "true").returncode == 6  # to everyone else, still the child's


def test_the_reservation_ends_with_the_process(py, locks: str) -> None:
    child = py()
    child("gpu_launch.use(gpus=[5, 4], snapshot=S, lock_dir=L, quiet=True)")
    assert child.value("os.environ['CUDA_VISIBLE_DEVICES']") == "5,4"  # the order given is cuda's order
    assert child.stderr() == ""  # quiet
    assert cli(locks, "--gpus", "4", "--", "true").returncode == 6
    assert child.close() == 0  # the process ends without release()
    done = cli(locks, "--gpus", "4,5", "--", "true")
    assert done.returncode == 0, done.stderr


def test_calling_use_again_releases_the_first_choice(py, locks: str) -> None:
    child = py()
    child("gpu_launch.use(gpus=2, snapshot=S, lock_dir=L)")
    child("gpu_launch.use(gpus='6', snapshot=S, lock_dir=L)")
    # The second choice is made on the whole machine, not within the first one's CUDA_VISIBLE_DEVICES.
    assert child.value(ENV_NOW)["CUDA_VISIBLE_DEVICES"] == "6"
    assert cli(locks, "--gpus", "2", "--", "true").returncode == 0
    assert cli(locks, "--gpus", "6", "--", "true").returncode == 6


def test_use_chooses_within_what_the_parent_allows(py, locks: str) -> None:
    child = py(env={"CUDA_VISIBLE_DEVICES": "6,7"})
    child("gpu_launch.use(1, snapshot=S, lock_dir=L)")
    assert child.value("os.environ['GPULAUNCH_GPUS']") in ("6", "7")
    assert child.value("os.environ['CUDA_VISIBLE_DEVICES']").startswith("GPU-")  # UUIDs under a narrowed view
    child("gpu_launch.release()")
    assert child.value("os.environ['CUDA_VISIBLE_DEVICES']") == "6,7"  # the parent's value is back


def test_use_takes_the_command_lines_strings_and_python_values(py, locks: str) -> None:
    child = py()
    child("a = gpu_launch.use(gpus='4-5', snapshot=S, lock_dir=L, quiet=True)")
    child("b = gpu_launch.use(gpus=range(4, 6), snapshot=S, lock_dir=L, quiet=True)")
    assert child.value("[d.index for d in a] == [d.index for d in b] == [4, 5]") is True
    # 70 GiB free each: GPU 5 (65 GiB free) is out, by text or by bytes.
    for size in ("'70GiB'", "70 * 2**30"):
        child(f"c = gpu_launch.use(2, min_free={size}, exclude=[2, 3], snapshot=S, lock_dir=L, quiet=True)")
        assert child.value("[d.index for d in c]") == [4, 6]
    child("c = gpu_launch.use(fit='150GiB', snapshot=S, lock_dir=L, quiet=True)")
    assert child.value("len(c)") == 2


def test_defaults_come_from_the_environment_as_for_the_cli(py, locks: str) -> None:
    child = py(env={"GPULAUNCH_SNAPSHOT": SNAP, "GPULAUNCH_EXCLUDE": "2", "GPULAUNCH_LOCK_DIR": locks})
    child("d = gpu_launch.use(1, quiet=True)")
    assert child.value("d[0].index") == 3
    child("d = gpu_launch.use(1, exclude=[3, 4], quiet=True)")  # an argument beats the default
    assert child.value("d[0].index") == 2


# --- select() and reserve() ---------------------------------------------------------------------

def test_select_reserves_nothing_and_changes_nothing_but_skips_reserved_gpus(py, locks: str) -> None:
    holder = hold(locks, "2,3")
    try:
        child = py()
        child("devs = gpu_launch.select(2, snapshot=S, lock_dir=L)")
        chosen = child.value("[d.index for d in devs]")
        assert len(chosen) == 2 and not {2, 3} & set(chosen)  # others' reservations are avoided
        assert child.value(ENV_NOW) == UNSET
        free = cli(locks, "--gpus", ",".join(map(str, chosen)), "--", "true")
        assert free.returncode == 0, free.stderr  # nothing was locked
        # A named GPU that someone holds: chosen anyway, with a warning naming the holder (as `env`).
        child("devs = gpu_launch.select(gpus=2, snapshot=S, lock_dir=L)")
        warning = [line for line in child.stderr().splitlines() if line.startswith("gpulaunch: warning: GPU 2 ")]
        assert len(warning) == 1 and f"is reserved by " in warning[0] and f"(pid {holder.pid}, " in warning[0]
        assert warning[0].endswith(": using it anyway")
        assert child.value("[d.index for d in devs]") == [2]
        assert child.value(ENV_NOW) == UNSET
    finally:
        holder.kill()
        holder.wait()


def test_reserve_holds_for_a_block_and_gives_the_env_to_subprocesses(py, locks: str) -> None:
    child = py()
    child("r = gpu_launch.reserve(gpus='4-5', snapshot=S, lock_dir=L)")
    assert child.value("r.env") == {"CUDA_VISIBLE_DEVICES": "4,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                    "GPULAUNCH_GPUS": "4,5"}
    assert child.value(ENV_NOW) == UNSET  # this process's own environment is left alone
    seen = child.value("__import__('subprocess').run([sys.executable, '-c', 'import os; "
                       "print(os.environ[\"CUDA_VISIBLE_DEVICES\"])'], env={**os.environ, **r.env}, "
                       "capture_output=True, text=True).stdout.strip()")
    assert seen == "4,5"
    assert cli(locks, "--gpus", "5", "--", "true").returncode == 6
    child("r.release()")
    assert cli(locks, "--gpus", "4,5", "--", "true").returncode == 0
    child("with gpu_launch.reserve(1, snapshot=S, lock_dir=L, quiet=True) as r: held = r.devices[0].index")
    assert child.value("(r.held, held)") == [False, 2]
    assert cli(locks, "--gpus", "2", "--", "true").returncode == 0  # the block ended: free again


def test_machine_is_the_model(py) -> None:
    child = py()
    assert child.value("len(gpu_launch.machine(snapshot=S).gpus)") == 8
    assert child.value("gpu_launch.machine(S).gpus[0].name") == "NVIDIA H100 80GB HBM3"
    # Importing the hardware sub-package first changes nothing: gpu_launch.machine stays the function.
    assert child.value("__import__('gpu_launch.hardware.model').machine(S).gpus[7].index") == 7


# --- CUDA already initialised -------------------------------------------------------------------

@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> str:
    """A stand-in for the CUDA driver (tests/fake_libcuda), named as the real one: libcuda.so.1."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    out = tmp_path_factory.mktemp("cuda") / "libcuda.so.1"
    src = Path(__file__).parent / "fake_libcuda" / "fake_libcuda.c"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return str(out)


def test_use_refuses_once_cuda_is_loaded(py, locks: str, fake_libcuda: str) -> None:
    child = py(prelude=f"import ctypes; ctypes.CDLL({fake_libcuda!r})\n")
    err = child.error("gpu_launch.use(1, snapshot=S, lock_dir=L)")
    assert err["type"] == "CudaAlreadyInitialized" and err["exit_code"] == 2
    assert err["message"] == (f"use(): CUDA is already initialised in this process: the CUDA driver is loaded "
                              f"({fake_libcuda}); CUDA_VISIBLE_DEVICES set now would have no effect")
    assert "restart the kernel" in err["hint"] and "call gpu_launch.use() first" in err["hint"]
    assert child.value(ENV_NOW) == UNSET
    assert not os.path.exists(locks)  # nothing was even read, let alone locked
    # Choosing for other processes still works: their CUDA starts afresh.
    child("r = gpu_launch.reserve(1, snapshot=S, lock_dir=L, quiet=True)")
    assert child.value("r.env['GPULAUNCH_GPUS']") == "2"


def test_use_refuses_after_torch_initialised_cuda_but_not_after_a_mere_import(py, locks: str) -> None:
    # A stand-in torch module: use() asks it, without importing anything itself.
    fake = ("import sys, types; torch = types.ModuleType('torch'); torch.cuda = types.SimpleNamespace("
            "is_initialized=lambda: STARTED); sys.modules['torch'] = torch; STARTED = False\n")
    child = py(prelude=fake)
    child("gpu_launch.use(1, snapshot=S, lock_dir=L, quiet=True)")  # imported, not initialised: fine
    assert child.value("os.environ['GPULAUNCH_GPUS']") == "2"
    child("STARTED = True")
    err = child.error("gpu_launch.use(2, snapshot=S, lock_dir=L, quiet=True)")
    assert err["type"] == "CudaAlreadyInitialized"
    assert "torch.cuda.is_initialized() is True" in err["message"]
    # Refused before anything changed: the first choice is still held and still in the environment.
    assert child.value("os.environ['GPULAUNCH_GPUS']") == "2"
    assert cli(locks, "--gpus", "2", "--", "true").returncode == 6


def test_use_imports_no_framework_to_find_out(py) -> None:
    child = py()
    child("gpu_launch.use(1, snapshot=S, lock_dir=L, quiet=True)")
    assert child.value("sorted(m for m in ('torch', 'jax', 'cupy', 'tensorflow') if m in sys.modules)") == []


# --- every error, as an exception of one hierarchy ------------------------------------------------

_BAD_TOML = "min-free = \n"


def test_every_error_is_a_gpulaunch_error_with_the_clis_message_hint_and_code(py, locks: str, tmp_path: Path) -> None:
    shim = tmp_path / "nvml"
    shim.mkdir()
    (shim / "pynvml.py").write_text(
        "from tests import fake_pynvml as _f\n"
        "_FAKE = _f.FakeNvml(_f.dgx_h100().gpus, errors={('nvmlInit', None): _f.NVMLError_DriverNotLoaded})\n"
        "def __getattr__(name):\n    return getattr(_FAKE, name)\n")
    bad_config = tmp_path / "config.toml"
    bad_config.write_text(_BAD_TOML)
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    child = py(env={"PYTHONPATH": os.pathsep.join([str(shim), str(ROOT)])})
    holder = hold(locks, "0")
    try:
        cases = {
            "gpu_launch.use(min_free='lots', snapshot=S, lock_dir=L)":
                ("UsageError", 2, "min_free: 'lots' is not a size", "write it like 20GiB, 512MiB, 20GB or 80%"),
            "gpu_launch.use(0, snapshot=S, lock_dir=L)":
                ("UsageError", 2, "n: 0 GPUs makes no sense", "ask for 1 or more, e.g. n=2"),
            "gpu_launch.use(2, gpus='0', snapshot=S, lock_dir=L)":
                ("UsageError", 2, "gpus and n cannot be used together", None),
            "gpu_launch.use(gpus=[0.5], snapshot=S, lock_dir=L)":
                ("UsageError", 2, "gpus: expected GPU indices or UUIDs, got [0.5]", "e.g. gpus=[0, 1]"),
            "gpu_launch.use(idle='no', snapshot=S, lock_dir=L)":
                ("UsageError", 2, "idle: expected True or False, got 'no'", "e.g. idle=True"),
            "gpu_launch.use(fit='50%', snapshot=S, lock_dir=L)":
                ("UsageError", 2, "fit: a percentage makes no sense here", None),
            "gpu_launch.use(wait='soon', snapshot=S, lock_dir=L)":
                ("UsageError", 2, "wait: 'soon' is not a duration", "write it like 90s, 30m, 2h or 1h30m"),
            "gpu_launch.use(9, snapshot=S, lock_dir=L)":
                ("NotEnoughGpus", 4, "need 9 GPUs, but this machine has 8", "ask for at most 8"),
            "gpu_launch.use(gpus=0, snapshot=S, lock_dir=L)":
                ("ReservationConflict", 6, "--gpus: GPU 0 is reserved by ", f"(pid {holder.pid}, for "),
            "gpu_launch.use(gpus=0, wait=0.3, snapshot=S, lock_dir=L)":
                ("WaitTimeout", 5, "waited 0s, and the request still cannot be met: --gpus: GPU 0 is reserved by",
                 "wait longer"),
            "gpu_launch.use(1, lock_dir=L)":
                ("NvmlUnavailable", 3, "NVML unavailable: the NVIDIA kernel driver is not loaded", "--snapshot dgx-h100"),
            f"gpu_launch.use(1, snapshot={str(tmp_path / 'none.json')!r}, lock_dir=L)":
                ("SnapshotError", 7, f"snapshot {tmp_path / 'none.json'}", "no such file"),
            f"gpu_launch.use(1, snapshot=S, lock_dir={str(a_file)!r})":
                ("LockDirError", 7, f"lock dir {a_file} exists but is not a directory", None),
        }
        for line, (kind, code, message, hint) in cases.items():
            err = child.error(line)
            assert (err["type"], err["exit_code"]) == (kind, code), (line, err)
            assert err["message"].startswith(message), (line, err)
            if hint is not None:  # in the hint, or (for the holder) further on in the message
                assert hint in (err["hint"] or "") + err["message"], (line, err)
        # One hierarchy, exported from the package, with the API's short names for two of them.
        assert child.value("[issubclass(getattr(gpu_launch, n), gpu_launch.GpuLaunchError) for n in ("
                           "'UsageError', 'NotEnoughGpus', 'Reserved', 'WaitTimeout', 'NoDriver', 'SnapshotError', "
                           "'LockDirError', 'ConfigError', 'CudaAlreadyInitialized', 'Interrupted', 'ModelFileError')]") == [True] * 11
        assert child.value("gpu_launch.Reserved is gpu_launch.ReservationConflict and "
                           "gpu_launch.NoDriver is gpu_launch.NvmlUnavailable") is True
        assert child.value(ENV_NOW) == UNSET  # no failure changed the environment
        assert cli(locks, "--gpus", "1-7", "--", "true").returncode == 0  # nor left a lock behind
    finally:
        holder.kill()
        holder.wait()
    # A bad config file is the CLI's error too: the API reads the same defaults.
    child = py(env={"GPULAUNCH_CONFIG": str(bad_config)})
    err = child.error("gpu_launch.use(1, snapshot=S, lock_dir=L)")
    assert (err["type"], err["exit_code"]) == ("ConfigError", 7) and err["message"].startswith(f"config {bad_config}")


# --- waiting, and Ctrl-C while waiting ------------------------------------------------------------

def test_waiting_prints_the_status_and_takes_the_gpu_when_it_frees(py, locks: str) -> None:
    holder = hold(locks, "4")
    try:
        child = py()
        child.send("gpu_launch.use(gpus=4, wait='1m', snapshot=S, lock_dir=L)")
        deadline = time.monotonic() + 30
        while "waiting" not in child.stderr():
            assert time.monotonic() < deadline, child.stderr()
            time.sleep(0.05)
    finally:
        holder.kill()
        holder.wait()
    assert child.collect(timeout=60) == []
    err = child.stderr()
    waiting = [line for line in err.splitlines() if re.match(r"gpulaunch: waiting \d+s: GPU 4 is reserved by ", line)]
    assert len(waiting) == 1 and f"(pid {holder.pid}: " in waiting[0]  # plain lines (no tty), when it changes
    assert "gpulaunch: CUDA_VISIBLE_DEVICES=4" in err
    assert cli(locks, "--gpus", "4", "--", "true").returncode == 6  # now the child holds it


def test_ctrl_c_while_waiting_stops_cleanly_holding_nothing(py, locks: str) -> None:
    holder = hold(locks, "4")
    try:
        child = py()
        child("gpu_launch.use(gpus=6, snapshot=S, lock_dir=L, quiet=True)")  # a first choice, released by the next
        child.send("gpu_launch.use(gpus=[4, 7], wait=True, snapshot=S, lock_dir=L)")
        deadline = time.monotonic() + 30
        while "waiting" not in child.stderr():
            assert time.monotonic() < deadline, child.stderr()
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGINT)
        lines = child.collect(timeout=30)
        assert lines and json.loads(lines[-1][4:])["type"] == "KeyboardInterrupt"
        assert child.proc.poll() is None  # the process goes on (a notebook's kernel would)
        assert child.value(ENV_NOW) == UNSET and child.value("list(gpu_launch.held())") == []
        assert not [n for n in os.listdir(locks) if n.startswith("ticket-")]  # it left the queue
        for gpu in ("6", "7"):
            assert cli(locks, "--gpus", gpu, "--", "true").returncode == 0  # neither the old nor a half-taken GPU
        child("gpu_launch.use(gpus=7, snapshot=S, lock_dir=L, quiet=True)")  # and it can try again
        assert child.value("os.environ['GPULAUNCH_GPUS']") == "7"
    finally:
        holder.kill()
        holder.wait()


# --- the status line in a notebook's output area --------------------------------------------------

class _NotebookStream:
    """Looks like ipykernel's OutStream to the status line (its class's module), and records writes."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True  # ipykernel may claim it; rich must still not be used


_NotebookStream.__module__ = "ipykernel.iostream"


def test_the_status_line_redraws_in_place_in_a_notebook() -> None:
    from gpu_launch.views.status_line import StatusLine

    stream = _NotebookStream()
    with StatusLine(stream) as status:  # type: ignore[arg-type]
        status.update(1, "need GPU 4; eligible now: none")
        status.update(2, "need GPU 4")
    first = "gpulaunch: waiting 1s: need GPU 4; eligible now: none"
    second = "gpulaunch: waiting 2s: need GPU 4"
    # Each update overwrites the line from its start, padded to blank what the longer one left;
    # at the end the line is blanked, so the mapping table printed next starts on a clean line.
    assert stream.text == "\r" + first + "\r" + second.ljust(len(first)) + "\r" + " " * len(first) + "\r"
    assert "rich" not in sys.modules or not any("Live" in type(v).__name__ for v in vars(status).values())


def test_a_select_while_use_holds_gpus_looks_at_the_whole_machine(py, locks: str) -> None:
    """After `use(gpus=2)` this process's CUDA_VISIBLE_DEVICES is "2"; a `select` or `reserve` it makes
    next is not narrowed by it (it is this process's own choice, not a parent's limit)."""
    child = py()
    child("gpu_launch.use(gpus=2, snapshot=S, lock_dir=L)")
    child("devs = gpu_launch.select(gpus='6', snapshot=S, lock_dir=L)")
    assert child.value("[d.index for d in devs]") == [6]
    child("r = gpu_launch.reserve(gpus='4-5', snapshot=S, lock_dir=L)")
    assert child.value("r.env['GPULAUNCH_GPUS']") == "4,5"
    child("r.release(); gpu_launch.release()")
