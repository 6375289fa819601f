"""--wait (a GPU frees up mid-wait, timeout, Ctrl-C, first come first served) and --fallback cpu."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest

from gpu_launch.options import args

from gpu_launch.reservations import holders

from gpu_launch.hardware import snapshot
from gpu_launch.errors import UsageError
from sharing_helpers import HOLD, Lines, example, first_gpus, run, set_free, start, write_snapshot

SHOW = ["python3", "-c", "import os; print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))"]
GIB = 1024


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    return tmp_path / "locks"


@pytest.fixture
def full(tmp_path: Path) -> Path:
    """workstation-4x with every GPU down to 10 GiB free: `--min-free 40GiB` cannot be met."""
    return write_snapshot(tmp_path / "machine.json", set_free(example("workstation-4x"), lambda g: 10 * GIB))


def _free_gpu(path: Path, index: int) -> None:
    doc = set_free(example("workstation-4x"), lambda g: 45 * GIB if g["index"] == index else 10 * GIB)
    write_snapshot(path, doc)


def test_a_gpu_that_frees_up_mid_wait_is_taken(full: Path, locks: Path) -> None:
    waiter = start(["--snapshot", str(full), "--auto", "1", "--min-free", "40GiB", "--wait", "--", *SHOW], locks)
    err = Lines(waiter.stderr)
    line = err.wait("waiting")
    assert "need 1 GPU with ≥ 40.0 GiB free, not busy or full with others' work; eligible now: none" in line
    assert waiter.poll() is None
    _free_gpu(full, 2)  # the snapshot file is re-read on every poll, as NVML would be
    assert waiter.wait(timeout=30) == 0
    assert waiter.stdout.read() == "CVD=2\n"
    assert "cuda:0 → GPU 2" in err.text()


def test_timeout_is_a_clear_error_with_its_own_exit_code(full: Path, locks: Path) -> None:
    result = run(["--snapshot", str(full), "--auto", "1", "--min-free", "40GiB", "--wait", "0.3s", "--", "true"], locks)
    assert result.returncode == 5
    assert "gpulaunch: error: waited 0s, and the request still cannot be met: need 1 GPU" in result.stderr
    assert "--fallback cpu" in result.stderr
    assert not list(locks.glob("ticket-*"))  # it left the queue


def test_waiting_cannot_help_an_impossible_request(locks: Path) -> None:
    result = run(["--snapshot", "workstation-4x", "--auto", "5", "--wait", "--", "true"], locks, timeout=30)
    assert result.returncode == 4
    assert "need 5 GPUs, but this machine has 4; waiting cannot help: the machine has too few GPUs" in result.stderr
    assert result.stderr.count("need 5 GPUs") == 1


def test_ctrl_c_while_waiting_exits_130_holding_nothing(full: Path, locks: Path) -> None:
    waiter = start(["--snapshot", str(full), "--auto", "1", "--min-free", "40GiB", "--wait", "--", "true"], locks)
    err = Lines(waiter.stderr)
    err.wait("waiting")
    waiter.send_signal(signal.SIGINT)
    assert waiter.wait(timeout=30) == 130
    assert "gpulaunch: interrupted" in err.text()
    assert "Traceback" not in "".join(err.lines)
    uuids = [g.uuid for g in snapshot.resolve(str(full)).gpus]
    assert holders.holders(str(locks), uuids) == {}
    assert not list(locks.glob("ticket-*"))


def test_waiters_are_served_first_come_first_served(tmp_path: Path, locks: Path) -> None:
    one = write_snapshot(tmp_path / "one.json", first_gpus(example("workstation-4x"), 1))
    order = tmp_path / "order.txt"
    note = ["python3", "-c", "import sys, time; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); time.sleep(0.3)",
            str(order)]
    release = tmp_path / "release"
    holder = start(["--snapshot", str(one), "--gpus", "0", "--", "python3", "-c", HOLD, str(release)], locks)
    Lines(holder.stdout).wait("CVD=0")
    first = start(["--snapshot", str(one), "--auto", "1", "--wait", "--", *note, "first"], locks)
    Lines(first.stderr).wait("waiting")
    second = start(["--snapshot", str(one), "--auto", "1", "--wait", "--", *note, "second"], locks)
    second_err = Lines(second.stderr)
    assert "1 waiter ahead in the queue" in second_err.wait("waiting")
    release.touch()
    assert holder.wait(timeout=30) == 0
    assert first.wait(timeout=30) == 0 and second.wait(timeout=30) == 0
    assert order.read_text() == "first\nsecond\n"


def test_fallback_cpu_runs_with_no_gpu_visible(full: Path, locks: Path) -> None:
    result = run(["--snapshot", str(full), "--auto", "1", "--min-free", "40GiB", "--fallback", "cpu", "--", *SHOW], locks)
    assert result.returncode == 0
    assert result.stdout == "CVD=\n"  # set, and empty: CUDA sees no device
    assert "--fallback cpu: running on the CPU with no GPU visible" in result.stderr
    assert "need 1 GPU" in result.stderr


def test_fallback_cpu_after_waiting(full: Path, locks: Path) -> None:
    result = run(["--snapshot", str(full), "--auto", "1", "--min-free", "40GiB", "--wait=0.2s", "--fallback", "cpu",
                  "--", *SHOW], locks)
    assert result.returncode == 0 and result.stdout == "CVD=\n"
    assert "waited" in result.stderr and "running on the CPU" in result.stderr


def test_fallback_is_not_used_when_gpus_are_free(locks: Path) -> None:
    result = run(["--snapshot", "workstation-4x", "--auto", "1", "--fallback", "cpu", "--", *SHOW], locks)
    assert result.returncode == 0 and result.stdout in {f"CVD={i}\n" for i in range(4)}


def test_unknown_fallback_is_a_usage_error() -> None:
    result = run(["--snapshot", "workstation-4x", "--fallback", "tpu", "--", "true"])
    assert result.returncode == 2 and "--fallback: 'tpu' is not a fallback" in result.stderr


def test_quiet_waits_silently(full: Path, locks: Path) -> None:
    result = run(["--snapshot", str(full), "--auto", "1", "--min-free", "40GiB", "--wait", "0.2", "-q", "--", "true"], locks)
    assert result.returncode == 5
    assert "waiting" not in result.stderr and "error: waited" in result.stderr


@pytest.mark.parametrize(("argv", "wait", "command"), [
    (["--wait", "python", "x.py"], math.inf, ("python", "x.py")),
    (["--wait", "2h", "python"], 7200.0, ("python",)),
    (["--wait=30m", "--", "python"], 1800.0, ("python",)),
    (["--wait", "90", "--", "python"], 90.0, ("python",)),
    (["--wait", "--", "2h"], math.inf, ("2h",)),
    (["--auto", "2", "--wait"], math.inf, ()),
])
def test_wait_takes_a_value_only_when_it_is_a_duration(argv: list[str], wait: float, command: tuple[str, ...]) -> None:
    inv = args.parse(argv)
    assert inv.get("wait") == wait
    assert inv.argv == command


def test_wait_with_an_empty_value_is_an_error() -> None:
    with pytest.raises(UsageError, match="is not a duration"):
        args.parse(["--wait=", "true"])


def test_poll_interval_must_be_a_number(locks: Path) -> None:
    from sharing_helpers import env

    result = run(["--snapshot", "workstation-4x", "--auto", "5", "--wait", "--", "true"], locks,
                 env=env(locks, GPULAUNCH_POLL_INTERVAL="soon"))
    assert result.returncode == 2 and "GPULAUNCH_POLL_INTERVAL='soon' is not a number" in result.stderr


def test_waiting_for_a_named_gpu_says_who_holds_it_once(tmp_path: Path, locks: Path) -> None:
    release = tmp_path / "release"
    holder = start(["--snapshot", "dgx-h100", "--gpus", "3", "--", "python3", "-c", HOLD, str(release)], locks)
    try:
        Lines(holder.stdout).wait("CVD=3")
        result = run(["--snapshot", "dgx-h100", "--gpus", "3", "--wait", "0.5", "--", "true"], locks)
        assert result.returncode == 5
        waiting = [line for line in result.stderr.splitlines() if "waiting" in line]
        # about ten polls, one line: the plain line is printed only when the situation changes
        assert len(waiting) == 1, waiting
        assert "GPU 3 is reserved by" in waiting[0] and f"(pid {holder.pid}: python3 -c" in waiting[0]
    finally:
        release.touch()
        holder.wait(timeout=30)


# --- --gpus X --wait: the named GPUs must meet the constraints and be free of others' reservations ---

def test_a_named_gpu_that_fails_the_constraints_is_waited_for_until_the_timeout(locks: Path) -> None:
    # dgx-h100's GPU 0 runs at 98 %: with --wait it is not used with a warning, it is waited for
    result = run(["--snapshot", "dgx-h100", "--gpus", "0", "--max-util", "50", "--wait", "0.5", "--", *SHOW], locks)
    assert result.returncode == 5, result.stderr  # ExitCode.WAIT_TIMEOUT
    assert "CVD=" not in result.stdout
    assert "waiting" in result.stderr and "need GPU 0 with ≤ 50% utilisation" in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "gpulaunch: error: waited 0s, and the request still cannot be met: --gpus: GPU 0: 98% utilisation > --max-util 50%")
    idle = run(["--snapshot", "dgx-h100", "--gpus", "3,0", "--idle", "--wait=0.3", "--", *SHOW], locks)
    assert idle.returncode == 5 and "--gpus: GPU 0: not idle" in idle.stderr and "GPU 3" not in idle.stderr.splitlines()[-1]
    # without --wait, --gpus obeys at once, with a warning
    now = run(["--snapshot", "dgx-h100", "--gpus", "0", "--max-util", "50", "--", *SHOW], locks)
    assert now.returncode == 0 and now.stdout == "CVD=0\n" and "warning: GPU 0: 98% utilisation" in now.stderr


def test_a_named_gpu_is_taken_once_it_meets_the_constraints(tmp_path: Path, locks: Path) -> None:
    busy = example("workstation-4x")
    busy["gpus"][2]["utilization_gpu"] = 97
    path = write_snapshot(tmp_path / "machine.json", busy)
    waiter = start(["--snapshot", str(path), "--gpus", "2", "--max-util", "10", "--wait", "--", *SHOW], locks)
    err = Lines(waiter.stderr)
    err.wait("eligible now: none (GPU 2: 97% utilisation > --max-util 10%)")  # waiting, and saying why
    time.sleep(0.5)
    assert waiter.poll() is None  # still waiting: not run at once with a warning
    busy["gpus"][2]["utilization_gpu"] = 3
    write_snapshot(path, busy)  # snapshot files are re-read every poll, like NVML
    out, _ = waiter.communicate(timeout=30)
    assert waiter.returncode == 0 and out == "CVD=2\n"


def test_a_named_gpu_reserved_by_a_real_job_is_taken_when_the_job_ends(locks: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    holder = start(["--snapshot", "dgx-h100", "--gpus", "3", "--", "python3", "-c",
                    "import os, sys, time; print('held', flush=True)\n"
                    "while not os.path.exists(sys.argv[1]): time.sleep(0.02)", str(release)], locks)
    Lines(holder.stdout).wait("held")
    waiter = start(["--snapshot", "dgx-h100", "--gpus", "3", "--idle", "--wait", "30", "--", *SHOW], locks)
    Lines(waiter.stderr).wait("GPU 3 is reserved by")  # it waits for the holder...
    assert waiter.poll() is None
    release.touch()
    assert holder.wait(timeout=30) == 0
    out, err = waiter.communicate(timeout=30)  # ...and runs once the holder's command has ended
    assert waiter.returncode == 0 and out == "CVD=3\n", err
