"""The launcher end to end: a real child process, the environment it got, exit codes, messages."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from conftest import PRINT_CVD, clean_env, run_cli

PY = sys.executable


def child_env(*args, **kw):
    """Run `gpulaunch ARGS -- python -c <dump env>` and return the child's interesting variables."""
    script = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
              "('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'GPULAUNCH_GPUS')}))")
    result = run_cli(*args, "--", PY, "-c", script, **kw)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result


def test_gpus_range_reaches_the_child():
    env, result = child_env("--snapshot", "dgx-h100", "--gpus", "4-7")
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GPULAUNCH_GPUS": "4,5,6,7"}
    lines = result.stderr.splitlines()
    assert "cuda:0 → GPU 4" in lines[1] and "00000000:9D:00.0" in lines[1]
    assert "cuda:3 → GPU 7" in lines[4]
    assert "79.6 GiB free" in lines[1]


def test_order_is_kept_as_written():
    env, result = child_env("--snapshot", "dgx-h100", "--gpus", "3,1")
    assert env["CUDA_VISIBLE_DEVICES"] == "3,1" and env["GPULAUNCH_GPUS"] == "3,1"
    assert "cuda:0 → GPU 3" in result.stderr and "cuda:1 → GPU 1" in result.stderr


def test_uuid_option_writes_uuids():
    from gpu_launch.hardware import snapshot
    machine = snapshot.resolve("dgx-h100")
    env, _ = child_env("--snapshot", "dgx-h100", "--gpus", "6,2", "--uuid")
    assert env["CUDA_VISIBLE_DEVICES"] == f"{machine.gpus[6].uuid},{machine.gpus[2].uuid}"
    assert env["GPULAUNCH_GPUS"] == "6,2"


def test_auto_picks_the_idle_gpus_with_most_free_memory():
    # dgx-h100: GPUs 0 and 1 are busy, 5 is partly used; 2,3,4,6,7 idle on NVSwitch.
    env, _ = child_env("--snapshot", "dgx-h100", "--auto", "2")
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    env, _ = child_env("--snapshot", "dgx-h100", "--auto", "5")
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3,4,6,7"
    env, _ = child_env("--snapshot", "dgx-h100", "--auto", "6")
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5,6,7"  # the partly used one before the busy ones


def test_bare_command_gets_one_gpu():
    env, _ = child_env("--snapshot", "dgx-h100")
    assert env["CUDA_VISIBLE_DEVICES"] == "2"


def test_exit_code_of_the_command_passes_through():
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "--", PY, "-c", "import sys; sys.exit(7)")
    assert result.returncode == 7


def test_exec_keeps_the_pid():
    # The child reports its pid and its parent's; with exec there is no gpulaunch process in between.
    script = "import os; print(os.getpid(), os.getppid())"
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "-q", "--", PY, "-c",
                     "import subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'gpu_launch', '--snapshot', "
                     f"'dgx-h100', '--gpus', '2', '-q', '--', sys.executable, '-c', {script!r}]); "
                     "p.wait(); print('launched', p.pid)")
    # (In that order, and the parent's line after the child ended: its stdout is a pipe, block-buffered
    # unless PYTHONUNBUFFERED is set, which the test must not rely on.)
    (child_pid, _), (said, launched_pid) = (line.split() for line in result.stdout.splitlines())
    assert said == "launched" and launched_pid == child_pid, result.stdout


def test_a_holder_is_named_by_its_program_not_its_path(tmp_path):
    """A command at a long path (a conda environment's python, a clone's venv) is shown by its name: the
    holder line's 40 characters showed only the path, never what it ran."""
    deep = tmp_path / ("envs-" + "x" * 60) / "bin"
    deep.mkdir(parents=True)
    (deep / "sleep").symlink_to(shutil.which("sleep"))
    holder = subprocess.Popen([PY, "-m", "gpu_launch", "--snapshot", "dgx-h100", "--gpus", "3", "-q", "--",
                               str(deep / "sleep"), "60"], env=clean_env())
    try:
        deadline = time.monotonic() + 30
        while f"(pid {holder.pid}, " not in (listing := run_cli("--snapshot", "dgx-h100", "ls").stdout):
            assert time.monotonic() < deadline and holder.poll() is None, "the holder did not take GPU 3"
            time.sleep(0.05)
        taken = run_cli("--snapshot", "dgx-h100", "--gpus", "3", "--", "true")
        assert taken.returncode == 6 and f"(pid {holder.pid}, for " in taken.stderr, taken.stderr
        assert ": sleep 60)" in taken.stderr and str(deep) not in taken.stderr + listing, taken.stderr
    finally:
        holder.kill()
        holder.wait()


def test_commands_own_flags_are_not_parsed():
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "0", PY, "-c",
                     "import sys, os; print(sys.argv[1:], os.environ['CUDA_VISIBLE_DEVICES'])", "--gpus", "3", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--gpus', '3', '-q'] 0"


def test_stdout_is_the_childs_only_and_quiet_hides_the_table():
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "--", PY, "-c", "print('hello')")
    assert result.stdout == "hello\n" and "cuda:0 → GPU 2" in result.stderr
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "-q", "--", PY, "-c", "print('hello')")
    assert result.stdout == "hello\n" and result.stderr == ""


def test_snapshot_from_environment_variable(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(run_cli("--snapshot", "workstation-4x", "ls", "--json").stdout)
    result = run_cli("--gpus", "3", "--", PY, "-c", PRINT_CVD, env={"GPULAUNCH_SNAPSHOT": str(path)})
    assert result.stdout.strip() == "3" and "RTX A6000" in result.stderr


def test_command_not_found_is_127():
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "--", "no-such-program-xyz")
    assert result.returncode == 127
    assert result.stderr.strip().splitlines()[-1].startswith("gpulaunch: error: no-such-program-xyz: command not found")


def test_not_executable_and_directory_are_126(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    if os.access(script, os.X_OK):
        pytest.skip("running as a user who may execute anything")
    for target, fragment in ((str(script), "permission denied"), (str(tmp_path), "is a directory")):
        result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "--", target)
        assert result.returncode == 126, result.stderr
        assert fragment in result.stderr and "Traceback" not in result.stderr


def test_dry_run_prints_env_and_argv_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "4-5", "--dry-run", "--", "touch", str(marker), "a b")
    assert result.returncode == 0
    assert not marker.exists()
    assert result.stdout.splitlines() == [
        "CUDA_VISIBLE_DEVICES=4,5", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "GPULAUNCH_GPUS=4,5",
        f"exec touch {marker} 'a b'",
    ]
    doc = json.loads(run_cli("--snapshot", "dgx-h100", "--gpus", "4-5", "--dry-run", "--json", "--", "true").stdout)
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == "4,5" and doc["argv"] == ["true"]
    assert [d["cuda"] for d in doc["devices"]] == ["cuda:0", "cuda:1"] and doc["devices"][1]["index"] == 5


@pytest.mark.parametrize("args, code, fragment", [
    (["--gpus", "0"], 2, "no command to run"),
    (["--gpus", "9", "--", "true"], 2, "there is no GPU 9"),
    (["--gpus", "0", "--auto", "1", "--", "true"], 2, "cannot be used together"),
    (["--gpu", "0", "true"], 2, "unknown option --gpu (hint: did you mean --gpus?)"),
    (["--auto", "9", "--", "true"], 4, "need 9 GPUs, but this machine has 8"),
    (["--auto", "6", "--idle", "--", "true"], 4, "only 5 of 8 are eligible"),
    (["--auto", "0", "--", "true"], 2, "0 GPUs makes no sense"),
    (["--snapshot", "nope.json", "ls"], 7, "snapshot nope.json: no such file"),
])
def test_errors_are_one_line_with_a_documented_code(args, code, fragment):
    if "--snapshot" not in args:
        args = ["--snapshot", "dgx-h100", *args]
    result = run_cli(*args)
    assert result.returncode == code, result.stderr
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_gpus_subcommand_name_after_selection_is_a_program():
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "0", "-q", "ls", "/")
    assert result.returncode == 0 and "bin" in result.stdout.split()


def test_ls_plain_and_json():
    result = run_cli("--snapshot", "dgx-h100", "ls")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("dgx-h100-01  driver 550.54.15  CUDA 12.4  8 GPUs")
    assert lines[1].split()[:2] == ["GPU", "NAME"]
    assert "alice:" in lines[2] and "98%" in lines[2]
    assert "\x1b[" not in result.stdout  # not a terminal: plain text
    doc = json.loads(run_cli("--snapshot", "dgx-h100", "ls", "--json").stdout)
    assert doc["schema"] == 1 and len(doc["gpus"]) == 8 and doc["links"][0][1] == "NV18"


def test_ls_shows_free_memory_right_after_the_name():
    """FREE is what users ask for first: its own column, for GPUs and MIG devices, matching the JSON."""
    from gpu_launch.base.units import fmt_mib

    for example in ("dgx-h100", "mig-a100"):
        doc = json.loads(run_cli("--snapshot", example, "ls", "--json").stdout)
        lines = run_cli("--snapshot", example, "ls").stdout.splitlines()
        header = lines[1]
        assert header.split()[:3] == ["GPU", "NAME", "FREE"]
        end = header.index("FREE") + len("FREE")  # numbers are right-aligned under their heading
        rows = [line for line in lines[2:] if line.strip() and not line.startswith("lock dir: ")]
        free = [" ".join(line[:end].split()[-2:]) for line in rows]
        expected = []
        for gpu in doc["gpus"]:
            expected.append(fmt_mib(gpu["memory_free_mib"]))
            expected += [fmt_mib(m["memory_free_mib"]) for m in gpu.get("mig_devices", [])]
        assert free == expected


def test_ls_shows_unavailable_gpus(tmp_path):
    from gpu_launch.hardware import snapshot
    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    doc["gpus"][1].update(available=False, error="GPU is lost", memory_total_mib=None,
                          memory_used_mib=None, memory_free_mib=None)
    path = tmp_path / "lost.json"
    path.write_text(json.dumps(doc))
    result = run_cli("--snapshot", str(path), "ls")
    row = [line for line in result.stdout.splitlines() if line.startswith("1 ")][0]
    assert "unavailable" in row and "GPU is lost" in row
    result = run_cli("--snapshot", str(path), "--auto", "3", "--", PY, "-c", PRINT_CVD)
    assert result.stdout.strip() == "0,2,3"
    result = run_cli("--snapshot", str(path), "--gpus", "1", "--", "true")
    assert result.returncode == 4 and "GPU 1 is unavailable (GPU is lost)" in result.stderr


def test_help_and_version():
    result = run_cli("--help")
    assert result.returncode == 0 and "usage: gpulaunch [OPTIONS]" in result.stdout and "--gpus" in result.stdout
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("gpulaunch ")


def test_module_and_console_script_agree():
    import shutil
    exe = shutil.which("gpulaunch", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("console script not installed in this environment")
    import subprocess
    out = subprocess.run([exe, "--snapshot", "pcie-8x", "--auto", "2", "--dry-run"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == run_cli("--snapshot", "pcie-8x", "--auto", "2", "--dry-run").stdout


def _nvml_loadable() -> bool:
    import ctypes
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_nvml_loadable(), reason="this machine has an NVIDIA driver")
@pytest.mark.parametrize("args", [["--auto", "1", "--", "true"], ["--gpus", "0", "--", "true"]])  # the views: test_no_driver.py
def test_no_driver_is_one_line_with_a_hint(args):
    result = run_cli(*args)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "no NVIDIA driver here" in result.stderr and "(hint: add --snapshot dgx-h100 to run it on" in result.stderr


def test_bundled_example_does_not_bind_by_default():
    # The example's CPU lists describe another machine; `--bind auto` leaves the affinity alone.
    script = "import os; print(sorted(os.sched_getaffinity(0)))"
    result = run_cli("--snapshot", "dgx-h100", "--gpus", "2", "--", PY, "-c", script)
    assert result.returncode == 0 and "bound to CPUs" not in result.stderr
    assert result.stdout.strip() == str(sorted(os.sched_getaffinity(0)))
