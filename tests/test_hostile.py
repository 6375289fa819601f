"""Hostile and odd input (issue 12): each case through the real CLI ends in one error line and its code.

Never a traceback, a hang (every run has a timeout), unbounded memory (runs that could expand without
bound get an address-space limit) or a wrong exit code. Closed and full streams, integers Python will
not convert, NUL bytes, and Ctrl-C during start-up are here too; the plain bad-input catalogue is in
tests/test_bad_input.py.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from childproc import example
from cli_run import ROOT, clean_env, gpulaunch_argv
from gpu_launch.errors import ExitCode

U, F, N = ExitCode.USAGE, ExitCode.BAD_FILE, ExitCode.NOT_ENOUGH_GPUS
BIG = "1" * 5000  # Python refuses to convert integers of more than 4300 digits
S = ("--snapshot", "dgx-h100")


def _limit_memory() -> None:
    """In the child: 2 GiB of address space, so an unbounded expansion fails instead of eating the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def run(*args: str, env: dict[str, str] | None = None, input: bytes | None = None, cwd: Path | None = None,
        timeout: float = 30, **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(gpulaunch_argv(*args), env=clean_env(env), input=input, capture_output=True,
                          timeout=timeout, cwd=cwd or ROOT, preexec_fn=_limit_memory, **kw)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(errors="backslashreplace"),
                                       done.stderr.decode(errors="backslashreplace"))


def one_error(done: subprocess.CompletedProcess[str], code: int, fragment: str) -> str:
    """``done`` failed with ``code`` and exactly one ``gpulaunch: error:`` line (the last) holding ``fragment``."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, f"exit {done.returncode}, want {int(code)}: {done.stderr}"
    errors = [line for line in done.stderr.splitlines() if line.startswith("gpulaunch: error: ")]
    assert len(errors) == 1 and done.stderr.rstrip("\n").splitlines()[-1] == errors[0], done.stderr
    assert fragment in errors[0], errors[0]
    return errors[0]


def snapshot_file(tmp_path: Path, change: Any, name: str = "dgx-h100", raw: str | None = None) -> str:
    doc = example(name)
    change(doc)
    path = tmp_path / "machine.json"
    path.write_text(raw if raw is not None else json.dumps(doc))
    return str(path)


# --- unbounded reads ------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "env", "code", "fragment"), [
    (("--snapshot", "/dev/zero", "ls"), {}, F, "snapshot /dev/zero: is a character device, not a JSON file"),
    ((*S, "ls"), {"GPULAUNCH_CONFIG": "/dev/zero"}, F, "config /dev/zero: is a character device, not a TOML file"),
    ((*S, "each", "/dev/zero"), {}, U, "job file /dev/zero: is a character device"),
    (("ls",), {"GPULAUNCH_SNAPSHOT": "/dev/zero"}, F, "is a character device"),
], ids=["snapshot", "config", "each", "snapshot-env"])
def test_dev_zero_is_refused_before_it_is_read(args: tuple[str, ...], env: dict[str, str], code: int,
                                               fragment: str) -> None:
    one_error(run(*args, env=env), code, fragment)


@pytest.mark.parametrize("which", ["snapshot", "config", "each"])
def test_a_fifo_nobody_writes_is_refused_not_waited_on(tmp_path: Path, which: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    if which == "snapshot":
        done, code = run("--snapshot", str(fifo), "ls", timeout=20), F
    elif which == "config":
        done, code = run(*S, "ls", env={"GPULAUNCH_CONFIG": str(fifo)}, timeout=20), F
    else:
        done, code = run(*S, "each", str(fifo), timeout=20), U
    one_error(done, code, "is a FIFO (named pipe)")


def test_a_snapshot_on_a_pipe_named_dev_stdin_is_read(tmp_path: Path) -> None:
    data = json.dumps(example("workstation-4x")).encode()
    done = run("--snapshot", "/dev/stdin", "ls", "--json", input=data)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["gpus"]) == 4


def test_an_endless_pipe_is_cut_at_the_limit() -> None:
    """`yes | gpulaunch --snapshot /dev/stdin ls`: refused at 64 MiB, not read into memory for ever."""
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        done = run("--snapshot", "/dev/stdin", "ls", stdin=yes.stdout, timeout=60)
    finally:
        yes.kill()
        yes.wait()
    one_error(done, F, "more than the limit of 64 MiB")


def test_a_cpu_list_that_would_expand_without_bound_is_refused(tmp_path: Path) -> None:
    path = snapshot_file(tmp_path, lambda d: d["gpus"][0].update(cpu_affinity="0-99999999999"))
    for args in (("ls",), ("--gpus", "0", "--bind", "on", "--", "true"), ("ls", "--topo")):
        one_error(run("--snapshot", path, *args), F, "gpus[0].cpu_affinity: CPU 99999999999 in the CPU list is above 65535")


# --- integers Python refuses to convert, and digits that are not ASCII -------------------------

@pytest.mark.parametrize(("variable", "value"), [
    ("CUDA_VISIBLE_DEVICES", BIG),
    ("CUDA_VISIBLE_DEVICES", "-" + BIG),
    ("NVIDIA_VISIBLE_DEVICES", BIG),
    ("NVIDIA_VISIBLE_DEVICES", "²"),
    ("NVIDIA_VISIBLE_DEVICES", "0:" + BIG),
    ("CUDA_VISIBLE_DEVICES", "٣"),  # Arabic-Indic three: CUDA stops at it, so nothing is visible
    ("CUDA_VISIBLE_DEVICES", "MIG-GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/" + BIG + "/0"),
], ids=["cvd-5000-digits", "cvd-negative-5000", "nvd-5000-digits", "nvd-superscript", "nvd-mig-5000",
        "cvd-arabic-digit", "cvd-legacy-mig-5000"])
def test_odd_numbers_in_the_parents_variables_never_widen_the_view(variable: str, value: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = run(*S, "--auto", "1", "--", "touch", str(marker), env={variable: value})
    one_error(done, N, "allows no GPU")
    assert not marker.exists()


def test_unicode_digits_in_cuda_visible_devices_are_not_indices() -> None:
    """'1,٣': CUDA sees GPU 1 only (it stops at the second entry); gpulaunch must not read it as 1,3."""
    done = run(*S, "--auto", "2", "--dry-run", "--json", env={"CUDA_VISIBLE_DEVICES": "4,٣"})
    one_error(done, N, "")
    alone = run(*S, "--auto", "1", "--dry-run", "--json", env={"CUDA_VISIBLE_DEVICES": "4,٣"})
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["env"]["GPULAUNCH_GPUS"] == "4"


def test_a_huge_verbosity_count_is_a_usage_error() -> None:
    line = one_error(run(*S, "ls", env={"GPULAUNCH_VERBOSE": BIG}), U, "GPULAUNCH_VERBOSE: expected true/false or a count")
    assert len(line) < 300, "the value is cut short in the message"
    one_error(run(*S, "ls", env={"GPULAUNCH_VERBOSE": "²"}), U, "GPULAUNCH_VERBOSE")


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("index", BIG, "not valid JSON (a number is too long)"),
    ("memory_total_mib", "9" * 400, "gpus[0].memory_total_mib: a 400-digit number is above 9007199254740992"),
    ("temperature_c", "9" * 400, "gpus[0].temperature_c: a 400-digit number is above 200"),
])
def test_huge_integers_in_a_snapshot(tmp_path: Path, field: str, value: str, fragment: str) -> None:
    doc = example("dgx-h100")
    doc["gpus"][0][field] = "@@"
    raw = json.dumps(doc).replace('"@@"', value)
    path = tmp_path / "big.json"
    path.write_text(raw)
    for args in (("ls",), ("--auto", "1", "--", "true")):
        one_error(run("--snapshot", str(path), *args), F, fragment)


def test_nvlink_counts_are_bounded(tmp_path: Path) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["links"][0][1] = doc["links"][1][0] = "NV" + BIG
    one_error(run("--snapshot", snapshot_file(tmp_path, change), "--auto", "2", "--", "true"), F,
              "is not a topology code")


@pytest.mark.parametrize(("text", "fragment"), [
    ("max-util = " + BIG, "not valid TOML (a number is too long)"),
    ("min-free = " + "[" * 5000 + "]" * 5000, "not valid TOML (nested too deeply)"),
    ("max-util = " + "9" * 400, "max-util: '99999"),
], ids=["5000-digits", "nested-5000", "400-digits"])
def test_toml_values_that_break_parsers(tmp_path: Path, text: str, fragment: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text + "\n")
    one_error(run(*S, "--auto", "1", "--", "true", env={"GPULAUNCH_CONFIG": str(config)}), F, fragment)


# --- NUL bytes, empty and mistyped paths ---------------------------------------------------------

@pytest.mark.parametrize(("key", "fragment"), [
    ("lock-dir", "lock-dir: 'a\\x00b' contains a NUL byte"),
    ("snapshot", "snapshot: 'a\\x00b' contains a NUL byte"),
    ("log-dir", "log-dir: 'a\\x00b' contains a NUL byte"),
])
def test_nul_bytes_in_configured_paths_are_refused_up_front(tmp_path: Path, key: str, fragment: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'{key} = "a\\u0000b"\n')
    args = ("each", "-") if key == "log-dir" else ("--auto", "1", "--", "true")
    one_error(run(*S, *args, env={"GPULAUNCH_CONFIG": str(config)}, input=b"true\n"), F, fragment)


def test_a_nul_byte_in_a_job_line_is_refused_before_any_gpu_is_reserved(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    jobs.write_bytes(b"true\nprintf 'a\x00b'\n")
    done = run(*S, "each", str(jobs), "--log-dir", str(tmp_path / "logs"))
    one_error(done, U, f"{jobs}, line 2: the command contains a NUL byte")
    assert not (tmp_path / "logs").exists(), "refused before anything started"


def test_a_nul_byte_in_the_command_is_a_usage_error_in_process() -> None:
    """No real argv can hold a NUL; a caller of cli.run can (hypothesis found argv=['\\x00'])."""
    from gpu_launch import cli
    from gpu_launch.errors import UsageError

    with pytest.raises(UsageError, match="NUL byte"):
        cli.run(["--snapshot", "dgx-h100", "--no-lock", "--auto", "1", "-q", "--", "\x00"])
    with pytest.raises(UsageError, match="argument 1 contains a NUL byte"):
        cli.run(["--snapshot", "dgx-h100", "--no-lock", "--auto", "1", "-q", "--", "true", "a\x00"])


# --- other tracebacks ------------------------------------------------------------------------------

def test_each_with_stdin_closed() -> None:
    done = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", *gpulaunch_argv(*S, "each")], capture_output=True,
                          text=True, env=clean_env(), timeout=30, cwd=ROOT)
    one_error(done, U, "`each`: stdin is closed")
    done = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", *gpulaunch_argv(*S, "each", "-")], capture_output=True,
                          text=True, env=clean_env(), timeout=30, cwd=ROOT)
    one_error(done, U, "`each`: stdin is closed")


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a second user (setpriv)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            f"import os; os.stat({str(ROOT / 'gpu_launch')!r})"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user nobody cannot read this checkout")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def shared_dir() -> Any:
    """A directory every user can reach (pytest's tmp_path is private to root), removed afterwards."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="gpulaunch-two-users-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _shared_tmp(root: Path, name: str, mode: int) -> Path:
    path = root / name
    path.mkdir()
    path.chmod(mode)
    return path


def test_each_log_dir_that_cannot_be_written_fails_before_any_job(shared_dir: Path) -> None:
    nobody = _as_nobody()
    tmp_path = shared_dir
    logs = _shared_tmp(tmp_path, "logs", 0o755)  # root's, exists, not writable by nobody
    locks = _shared_tmp(tmp_path, "locks", 0o1777)
    done = subprocess.run([*nobody, *gpulaunch_argv(*S, "each", "-", "--log-dir", str(logs), "--lock-dir", str(locks))],
                          input="true\n", capture_output=True, text=True, env=clean_env(), timeout=30, cwd=tmp_path)
    one_error(done, U, f"log dir {logs}: cannot write in it")


@pytest.mark.parametrize("how", ["wait", "each"])
def test_a_lock_dir_others_cannot_list(shared_dir: Path, how: str) -> None:
    """Mode 1733 (sticky, writable, not readable by others): queueing must fail with one line, exit 7."""
    nobody = _as_nobody()
    tmp_path = shared_dir
    locks = _shared_tmp(tmp_path, "locks", 0o1733)
    logs = _shared_tmp(tmp_path, "logs", 0o1777)
    args = (("--auto", "1", "--wait", "5s", "--", "true") if how == "wait"
            else ("each", "-", "--log-dir", str(logs)))
    done = subprocess.run([*nobody, *gpulaunch_argv(*S, "--lock-dir", str(locks), *args)] if how == "wait" else
                          [*nobody, *gpulaunch_argv(*S, args[0], "--lock-dir", str(locks), *args[1:])],
                          input="true\n", capture_output=True, text=True, env=clean_env(), timeout=60, cwd=tmp_path)
    one_error(done, F, f"lock dir {locks}: cannot list it to queue for GPUs (Permission denied)")


def test_ctrl_c_during_start_up_exits_130_with_one_line() -> None:
    """SIGINT at moments from gpulaunch's first import on (found with -X importtime) to a few tens of ms later.

    (A Ctrl-C while the interpreter itself is still starting, before any gpulaunch code runs, is
    Python's business: it dies of SIGINT, which a shell reports as 130 too. docs/exit-codes.md.)
    """
    outcomes = []
    for delay_ms in range(0, 60, 4):
        # A lost Ctrl-C shows as `sleep 5` ending well (exit 0), not as a 30 s hang.
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "gpu_launch", *S, "--auto", "1", "--",
                                 "sleep", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=ROOT)
        seen = b""
        try:
            while b"| gpu_launch\n" not in seen:  # the package's __init__ has run
                chunk = os.read(proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
                assert chunk, seen.decode()[-2000:]
                seen += chunk
            time.sleep(delay_ms / 1000)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
        text = (seen + err).decode()
        lines = [line for line in text.splitlines() if not line.startswith("import time:")]
        outcomes.append((delay_ms, proc.returncode, lines))
    # On a fast machine the later signals land after the mapping was printed (still before exec: 130
    # and the one line after it) or even in `sleep` itself (it dies of SIGINT): both are fine. What
    # must never happen is a traceback, a second line about the interrupt, or another exit status.
    for delay_ms, code, lines in outcomes:
        assert code in (ExitCode.INTERRUPTED, -signal.SIGINT), (delay_ms, code, lines[-20:])
        normal = [line for line in lines if line.startswith(("gpulaunch: CUDA_VISIBLE_DEVICES=", "  cuda:"))]
        ending = ["gpulaunch: interrupted"] if code == ExitCode.INTERRUPTED else []
        assert lines == normal + ending, (delay_ms, lines[-20:])
    assert any(lines == ["gpulaunch: interrupted"] for _, _, lines in outcomes)  # some landed in start-up


def test_ctrl_c_at_the_hand_over_is_never_lost() -> None:
    """SIGINT just after the mapping is printed, while the exec is under way: 130, or death by SIGINT (in
    gpulaunch or in the command), never a command that runs on as if no Ctrl-C was pressed.

    A large environment widens the moment inside ``execve`` where Python's handler would only mark the
    signal in a process image about to be replaced (before the fix: 4 in 20 tries ran ``sleep`` to the end).
    """
    environ = clean_env({f"FILLER_{i}": "x" * 40 for i in range(25000)})
    codes = []
    for _ in range(10):
        proc = subprocess.Popen(gpulaunch_argv(*S, "--auto", "1", "--", "sleep", "3"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=environ, cwd=ROOT)
        seen = b""
        try:
            while b"cuda:0" not in seen:  # the mapping's last line: the exec comes next
                chunk = os.read(proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
                assert chunk, seen.decode()[-2000:]
                seen += chunk
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
        codes.append(proc.returncode)
    assert set(codes) <= {ExitCode.INTERRUPTED, -signal.SIGINT}, codes



def test_a_ctrl_c_that_python_dropped_still_stops_the_exec() -> None:
    """A KeyboardInterrupt raised inside a finaliser is printed as "Exception ignored" and dropped; the
    Ctrl-C must still stop the launch at the hand-over, not let the command run as if none had come."""
    program = textwrap.dedent("""
        import os, signal
        from gpu_launch.base import interrupt
        from gpu_launch.run.execute import exec_command

        interrupt.install()

        def finalised():
            try:
                yield
            finally:  # runs when the generator is freed: what it raises is dropped
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(100000))

        gen = finalised()
        next(gen)
        del gen
        print("dropped", flush=True)
        exec_command(["echo", "the command ran"], dict(os.environ))
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=clean_env(),
                          timeout=60, cwd=ROOT)
    assert done.stdout == "dropped\n", (done.stdout, done.stderr)
    assert "Exception ignored" in done.stderr and done.returncode == -signal.SIGINT, (done.returncode, done.stderr)


# --- closed and full streams ----------------------------------------------------------------------

def _sh(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``sh -c SCRIPT`` where "$@" is gpulaunch ARGS, so the script can close or redirect its streams."""
    return subprocess.run(["sh", "-c", script, "sh", *gpulaunch_argv(*args)], capture_output=True, text=True,
                          env=clean_env(env), timeout=30, cwd=ROOT)


@pytest.mark.parametrize("args", [(*S, "ls"), ("--help",), (*S, "env", "--auto", "1"), (*S, "config"),
                                  (*S, "ls", "--json"), (*S, "--auto", "1", "--dry-run")],
                         ids=["ls", "help", "env", "config", "ls-json", "dry-run"])
def test_output_into_a_closed_stdout_is_one_error(args: tuple[str, ...]) -> None:
    one_error(_sh('"$@" >&-', *args), ExitCode.OUTPUT_FAILED, "cannot write to stdout (it is closed)")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [(*S, "ls"), ("--help",), (*S, "ls", "--json")], ids=["ls", "help", "json"])
def test_output_into_a_full_disk_is_one_error(args: tuple[str, ...]) -> None:
    done = _sh('"$@" > /dev/full', *args)
    one_error(done, ExitCode.OUTPUT_FAILED, "cannot write to stdout (No space left on device)")
    assert "Exception ignored" not in done.stderr


CHILD_FDS = """
import os, sys
def is_open(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
fds = [fd for fd in range(64) if is_open(fd)]  # before this child opens anything itself
with open(sys.argv[1], "w") as out:
    out.write(repr(fds))
"""


@pytest.mark.parametrize(("redirect", "closed"), [(">&-", 1), ("2>&-", 2), ("<&-", 0), (">&- 2>&-", 1)],
                         ids=["stdout", "stderr", "stdin", "both"])
def test_a_launch_with_a_closed_stream_still_runs_and_the_stream_stays_closed(tmp_path: Path, redirect: str,
                                                                              closed: int) -> None:
    report = tmp_path / "fds"
    done = _sh(f'"$@" {redirect}', *S, "--auto", "1", "--", sys.executable, "-c", CHILD_FDS, str(report))
    assert done.returncode == 0, done.stderr
    fds = json.loads(report.read_text())
    assert closed not in fds, "the command gets the descriptor closed, as it was given (not a lock file)"
    assert any(fd > 2 for fd in fds), "the reservation's lock descriptor is there"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_launch_with_stderr_on_a_full_disk_still_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = _sh('"$@" 2>/dev/full', *S, "--auto", "1", "--", "touch", str(marker))
    assert done.returncode == 0 and marker.exists()
    failed = _sh('"$@" 2>/dev/full', *S, "--gpus", "99", "--", "touch", str(marker))
    assert failed.returncode == ExitCode.USAGE, "an error still sets the code when it cannot be printed"


# --- wrong outcomes -----------------------------------------------------------------------------

@pytest.mark.parametrize("min_free", ["100GiB", "100%"])
def test_a_request_no_wait_can_meet_fails_at_once(min_free: str) -> None:
    started = time.monotonic()
    done = run(*S, "--auto", "1", "--min-free", min_free, "--wait", "20s", "--", "true",
               env={"GPULAUNCH_POLL_INTERVAL": "0.1"})
    one_error(done, N, "waiting cannot help: only 0 of 8 GPUs could ever have --min-free")
    assert time.monotonic() - started < 15, "it did not wait out the timeout"
    without = run(*S, "--auto", "1", "--min-free", min_free, "--", "true")
    line = one_error(without, N, "no wait can help")
    assert "--wait" not in line


def test_named_gpus_that_could_never_have_min_free_fail_at_once() -> None:
    started = time.monotonic()
    done = run(*S, "--gpus", "2", "--min-free", "100GiB", "--wait", "20s", "--", "true",
               env={"GPULAUNCH_POLL_INTERVAL": "0.1"})
    one_error(done, N, "waiting cannot help: GPU 2 could never have --min-free 100.0 GiB free")
    assert time.monotonic() - started < 15


def test_fit_larger_than_the_machine_does_not_suggest_waiting() -> None:
    line = one_error(run(*S, "--fit", "700GiB", "--", "true"), N, "no wait can help: the 8 largest GPUs here have 637.2 GiB")
    assert "--wait" not in line
    one_error(run(*S, "--fit", "700GiB", "--wait", "20s", "--", "true"), N, "waiting cannot help")


@pytest.mark.parametrize(("first_line", "code", "fragment"), [
    (b"#!/nonexistent/python3\n", ExitCode.COMMAND_NOT_FOUND, "its interpreter /nonexistent/python3 (from the #! line) does not exist"),
    (b"#!/bin/sh\r\n", ExitCode.COMMAND_NOT_FOUND, "its #! line ends in a carriage return (Windows line endings), so the kernel would run '/bin/sh\\r'"),
    (b"#!/usr/bin/env python3\r\n", ExitCode.NOT_EXECUTABLE, "would run '/usr/bin/env python3\\r'"),
    (b"#!/etc\n", ExitCode.NOT_EXECUTABLE, "its interpreter /etc (from the #! line) cannot be executed"),
], ids=["missing", "crlf", "crlf-env", "directory"])
def test_a_script_that_cannot_start_fails_before_anything_is_reserved(tmp_path: Path, first_line: bytes, code: int,
                                                                      fragment: str) -> None:
    script = tmp_path / "job.sh"
    script.write_bytes(first_line + b"echo hi\n")
    script.chmod(0o755)
    done = run(*S, "--auto", "1", "--", str(script))
    one_error(done, code, fragment)
    assert "cuda:0" not in done.stderr, "nothing was chosen, shown or reserved"
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(f"true\n{script}\n")
    one_error(run(*S, "each", str(jobs), "--log-dir", str(tmp_path / "logs")), code, f"{jobs}, line 2: ")
    assert not (tmp_path / "logs").exists()


def test_schema_true_is_not_version_1(tmp_path: Path) -> None:
    one_error(run("--snapshot", snapshot_file(tmp_path, lambda d: d.update(schema=True)), "ls"), F,
              "schema: version True is not supported")


@pytest.mark.parametrize(("text", "fragment"), [
    ("lock-dir = 5", "lock-dir: expected a string like DIR, got an integer"),
    ("log-dir = 5.5", "log-dir: expected a string like DIR, got a number"),
    ("snapshot = 1", "snapshot: expected a string like FILE, got an integer"),
    ('lock-dir = ""', "lock-dir: empty directory name"),
])
def test_path_settings_must_be_strings(tmp_path: Path, text: str, fragment: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text + "\n")
    one_error(run(*S, "ls", env={"GPULAUNCH_CONFIG": str(config)}, cwd=tmp_path), F, fragment)
    assert not (tmp_path / "5").exists()


@pytest.mark.parametrize("option", ["--lock-dir", "--log-dir", "--snapshot"])
def test_empty_paths_on_the_command_line(option: str) -> None:
    args = ("each", "-", option, "") if option == "--log-dir" else (option, "", "ls")
    one_error(run(*((*S,) if option == "--log-dir" else ()), *args, input=b"true\n"), U, f"{option}: empty")


def test_a_form_feed_inside_quotes_does_not_split_a_job_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    jobs = tmp_path / "jobs.txt"
    jobs.write_bytes(b"sh -c 'printf \"%s\" \"a\x0cb\" > " + str(out).encode() + b"'\n")
    done = run(*S, "each", str(jobs), "--log-dir", str(tmp_path / "logs"), "-q")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == b"a\x0cb"


def test_binary_stdin_to_each_gets_the_same_code_as_the_same_file(tmp_path: Path) -> None:
    data = b"echo \xff\xfe\n"
    jobs = tmp_path / "jobs.txt"
    jobs.write_bytes(data)
    from_file = run(*S, "each", str(jobs))
    from_stdin = run(*S, "each", "-", input=data)
    one_error(from_file, U, f"job file {jobs}: not UTF-8 text (byte 6 is 0xff)")
    one_error(from_stdin, U, "stdin: not UTF-8 text (byte 6 is 0xff)")


@pytest.mark.parametrize("args", [("--auto", "1", "--wait", "5s", "--", "true"), ("each", "/dev/null")],
                         ids=["wait", "each"])
def test_a_snapshot_on_a_pipe_cannot_be_reread(args: tuple[str, ...]) -> None:
    done = run("--snapshot", "/dev/stdin", *args, input=json.dumps(example("dgx-h100")).encode())
    one_error(done, U, "--snapshot /dev/stdin is a pipe, which can be read only once")


# --- terminal safety ------------------------------------------------------------------------------

EVIL = "\x1b]0;owned\x07\x1b[2J\x9b1m"  # set the window title, clear the screen, a C1 CSI
RAW = ("\x1b]0;", "\x1b[2J", "\x07", "\x9b")  # none of these may reach the terminal


def _evil_snapshot(tmp_path: Path) -> str:
    def change(doc: dict[str, Any]) -> None:
        doc["hostname"] = "box" + EVIL
        doc["gpus"][0]["name"] = "H100 [red]x[/red]" + EVIL
        doc["gpus"][0]["processes"] = [{"pid": 7, "used_memory_mib": 100, "user": "mallory" + EVIL,
                                        "command": "python [red]x[/red]" + EVIL}]
        doc["gpus"][1].update(available=False, error="lost" + EVIL)
    return snapshot_file(tmp_path, change)


def _assert_safe(text: str) -> None:
    for raw in RAW:
        assert raw not in text, repr(text)


def test_foreign_text_in_a_snapshot_is_escaped_in_every_view(tmp_path: Path) -> None:
    path = _evil_snapshot(tmp_path)
    for args in (("ls",), ("ls", "--topo"), ("--gpus", "0", "--", "true"), ("--auto", "8", "--explain"),
                 ("--gpus", "1", "--", "true")):
        done = run("--snapshot", path, *args)
        _assert_safe(done.stdout + done.stderr)
    shown = run("--snapshot", path, "ls").stdout
    assert "H100 [red]x[/red]\\x1b]0;owned\\x07" in shown and "mallory\\x1b" in shown


def test_foreign_text_is_escaped_in_the_rich_table_on_a_terminal(tmp_path: Path) -> None:
    from test_output import run_in_pty

    env = clean_env({"TERM": "xterm-256color", "COLUMNS": "200"})
    out = run_in_pty(["--snapshot", _evil_snapshot(tmp_path), "ls"], env).decode(errors="replace")
    _assert_safe(out)
    assert "[red]x[/red]" in out, "rich markup in foreign text is shown, not interpreted"


def test_another_users_reserved_command_is_escaped(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    env = {"GPULAUNCH_LOCK_DIR": str(locks)}
    holder = subprocess.Popen(gpulaunch_argv("--snapshot", "workstation-4x", "-q", "--gpus", "0", "--", "sh", "-c",
                                             "read x", EVIL),
                              stdin=subprocess.PIPE, env=clean_env(env), cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        # The lock is taken first and the holder's line written just after: wait for the line itself.
        while ": sh -c 'read x'" not in (listing := run("--snapshot", "workstation-4x", "ls", env=env)).stdout:
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never took its GPU"
            time.sleep(0.05)
        outputs = [listing.stdout,
                   run("--snapshot", "workstation-4x", "--gpus", "0", "--", "true", env=env).stderr,
                   run("--snapshot", "workstation-4x", "--auto", "4", "--explain", env=env).stdout,
                   run("--snapshot", "workstation-4x", "--auto", "4", "--", "true", env=env).stderr]
    finally:
        holder.communicate(timeout=30)
    for text in outputs:
        _assert_safe(text)
    assert "\\x1b]0;owned" in outputs[0]


# --- short options ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "cvd"), [(("-qn2",), "2,3"), (("-qn", "2"), "2,3"), (("-qg3,2",), "3,2"),
                                            (("-vqn1",), "2"), (("-n1", "-q"), "2")])
def test_short_options_cluster(flags: tuple[str, ...], cvd: str) -> None:
    done = run(*S, *flags, "--", "printenv", "CUDA_VISIBLE_DEVICES")
    assert done.returncode == 0, done.stderr
    assert done.stdout == cvd + "\n"
    assert done.stderr == "", "-q is in the group"


def test_vv_counts() -> None:
    done = run(*S, "-vv", "--auto", "1", "--", "true")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("gpulaunch: read dgx-h100 in ")


@pytest.mark.parametrize(("flags", "fragment"), [(("-qz",), "unknown option -z"), (("-qn",), "-n needs a value"),
                                                 (("-nq",), "--auto: 'q' is not a whole number")])
def test_bad_short_option_groups(flags: tuple[str, ...], fragment: str) -> None:
    one_error(run(*S, *flags), U, fragment)


@pytest.mark.parametrize(("args", "fragment"), [
    (("--auto", "٣"), "--auto: '٣' is not a whole number"),
    (("--auto", BIG), "is not a whole number"),
    (("--gpus", "٣"), "--gpus: '٣' is not a GPU index"),
    (("--max-util", "٣"), "--max-util: '٣' is not a percentage"),
    (("--min-free", "٣GiB"), "--min-free: '٣GiB' is not a size"),
], ids=["auto-arabic", "auto-5000", "gpus-arabic", "max-util-arabic", "min-free-arabic"])
def test_options_read_ascii_digits_only(args: tuple[str, ...], fragment: str) -> None:
    line = one_error(run(*S, *args, "--", "true"), U, fragment)
    assert len(line) < 300


def test_the_line_pump_of_the_sharing_tests_ends_quietly_when_its_stream_is_closed() -> None:
    """`proc.communicate()` after `Lines(proc.stderr)` closes the stream under the pump thread: that must
    end the pump, not raise in it (a PytestUnhandledThreadExceptionWarning in CI)."""
    import threading

    from sharing_helpers import Lines

    class ClosedAfterOneLine:
        def __init__(self) -> None:
            self.given = False

        def readline(self) -> str:
            if self.given:
                raise ValueError("I/O operation on closed file.")
            self.given = True
            return "waiting\n"

    raised: list[BaseException | None] = []
    before = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:
        lines = Lines(ClosedAfterOneLine())
        assert lines.text() == "waiting\n"
    finally:
        threading.excepthook = before
    assert raised == []


def test_a_launch_started_with_ctrl_c_ignored_leaves_it_ignored_for_the_command() -> None:
    """A background job of a script (`gpulaunch ... &` in sh) starts with SIGINT ignored; the command it
    becomes must inherit that, as it would without gpulaunch in between."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    done = subprocess.run(gpulaunch_argv(*S, "--auto", "1", "-q", "--", sys.executable, "-c", probe),
                          capture_output=True, text=True, env=clean_env(), timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0 and done.stdout == "True\n", done.stderr


def test_the_command_gets_default_signal_actions_not_pythons() -> None:
    """Python ignores SIGPIPE and SIGXFSZ at start-up; an exec keeps ignored signals ignored. The command
    must start as it would from a shell: `yes | head` ends by SIGPIPE, `ulimit -f` ends a writer by SIGXFSZ."""
    done = subprocess.run(gpulaunch_argv(*S, "--auto", "1", "-q", "--", "grep", "^SigIgn:", "/proc/self/status"),
                          capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    ignored = int(done.stdout.split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), (sig, done.stdout)
