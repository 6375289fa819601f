"""The suite cannot be disturbed by other gpulaunch jobs on the same machine.

Someone's real job holds GPUs in the default lock directory (/tmp/gpulaunch-locks) while the tests
run: every test uses the private lock directory that tests/conftest.py sets for the session, and every
helper that builds a child's environment keeps it. The outer test holds every GPU of two bundled
machines in the *default* directory with real background ``gpulaunch --gpus all -- sleep`` jobs,
proves the hold is real (a launch on the default directory exits 6), then runs the helpers' test below
and tests/test_config.py in a child pytest. Where it can (root, ``unshare``), it does this in a private
mount namespace with a fresh tmpfs at the default path, so the hold cannot disturb other users.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import childproc
import cli_run
import sharing_helpers
import test_config
import test_fast_paths
import test_json
import test_output
from conftest import run_cli
from gpu_launch.hardware import snapshot
from gpu_launch.reservations.lockdir import DEFAULT_LOCK_DIR

HELD = ("workstation-4x", "dgx-h100")  # every GPU of these is held in the default directory
INNER = "GPULAUNCH_TEST_INNER"  # set by the outer test in the child pytest


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    assert "reserved" not in done.stderr, done.stderr


def test_every_helper_launches_on_gpus_held_in_the_default_directory() -> None:
    """Run alone this passes trivially; the outer test below runs it while the GPUs are held."""
    all4 = ["--snapshot", "workstation-4x", "--gpus", "all", "-q", "--", "true"]
    _ok(run_cli(*all4))
    _ok(cli_run.run_gpulaunch(*all4))
    _ok(childproc.gpulaunch(all4))
    _ok(sharing_helpers.run(all4))
    _ok(test_config.gpulaunch(*all4))
    _ok(test_json.gpulaunch(*all4))
    _ok(test_output.gpulaunch(*all4))
    _ok(test_fast_paths._launch(os.environ.get("PATH", os.defpath), "true", cwd=Path.cwd()))  # dgx-h100 GPU 3
    auto = run_cli("--snapshot", "dgx-h100", "--auto", "8", "--max-util", "100", "--dry-run", "--json")
    assert auto.returncode == 0 and json.loads(auto.stdout)["env"]["GPULAUNCH_GPUS"] == "0,1,2,3,4,5,6,7", auto.stderr
    if os.environ.get(INNER):  # the outer test's hold is visible to a launch that uses the default directory
        env = {k: v for k, v in cli_run.clean_env().items() if k != "GPULAUNCH_LOCK_DIR"}
        # (a snapshot file: launches on a bundled example's name reserve in the user's own directory)
        copy = Path(tempfile.mkdtemp()) / "workstation-4x.json"
        copy.write_text(snapshot.dump(snapshot.resolve("workstation-4x")))
        held = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", str(copy), *all4[2:]], env=env,
                              capture_output=True, text=True, timeout=60)
        assert held.returncode == 6, held.stderr


DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys, tempfile, time
    from gpu_launch.hardware import snapshot
    from gpu_launch.reservations import holders
    lock_dir, held, namespace, pytest_args = sys.argv[1], sys.argv[2].split(","), sys.argv[3] == "1", sys.argv[4:]
    if namespace:  # a fresh tmpfs at the default path, seen by this process and its children only
        # (where mounting is not allowed after all, the hold goes to the real default directory)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", lock_dir], capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "GPULAUNCH_LOCK_DIR"}  # the default directory
    # Snapshot files of the examples: a launch on an example's name reserves in the user's own directory.
    files = {}
    for name in held:
        files[name] = os.path.join(tempfile.mkdtemp(), name + ".json")
        with open(files[name], "w") as f:
            f.write(snapshot.dump(snapshot.resolve(name)))
    holding = [subprocess.Popen([sys.executable, "-m", "gpu_launch", "--snapshot", files[name], "--gpus", "all", "-q",
                                 "--", "sleep", "600"], env=env) for name in held]
    uuids = [g.uuid for name in held for g in snapshot.resolve(name).gpus]
    try:
        deadline = time.monotonic() + 60
        while len(holders.holders(lock_dir, uuids)) < len(uuids):
            assert time.monotonic() < deadline and all(h.poll() is None for h in holding), "no hold"
            time.sleep(0.05)
        control = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", files[held[0]], "--gpus", "0", "-q",
                                  "--", "true"], env=env, capture_output=True, text=True)
        inner = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                               env={**os.environ, "GPULAUNCH_TEST_INNER": "1"}, capture_output=True, text=True)
        print(json.dumps({"held": len(holders.holders(lock_dir, uuids)), "uuids": len(uuids),
                          "control": control.returncode, "control_err": control.stderr,
                          "inner": inner.returncode, "inner_out": inner.stdout[-3000:] + inner.stderr[-2000:]}))
    finally:
        for h in holding:
            h.terminate()
            h.wait()
""")


def _isolation() -> list[str] | None:
    """The prefix that runs the driver in a private mount namespace, or None where none can be had."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        return None
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return ["unshare", "-m", "--propagation", "private"] if probe.returncode == 0 else None


def test_the_suite_passes_while_others_hold_gpus_in_the_default_directory() -> None:
    if os.environ.get(INNER):
        pytest.skip("already inside the outer run")
    prefix = _isolation()
    if prefix is not None and not os.path.isdir(DEFAULT_LOCK_DIR):
        os.mkdir(DEFAULT_LOCK_DIR)  # the mount point; created as gpulaunch itself creates it
        os.chmod(DEFAULT_LOCK_DIR, 0o1777)
    here = Path(__file__).resolve().parent
    selection = [f"{here / 'test_undisturbed.py'}::test_every_helper_launches_on_gpus_held_in_the_default_directory",
                 str(here / "test_config.py")]
    argv = [*(prefix or []), sys.executable, "-c", DRIVER, DEFAULT_LOCK_DIR, ",".join(HELD),
            "1" if prefix else "0", *selection]
    env = {**os.environ, "PYTHONPATH": f"{cli_run.ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=cli_run.ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["held"] == result["uuids"] > 0, result
    assert result["control"] == 6, result["control_err"]  # the hold is real for a launch on the default dir
    assert result["inner"] == 0, result["inner_out"]
