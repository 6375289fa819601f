"""Messages a new user meets in the first hour (issue 19, item 2 and 6): each says what to do next."""

from __future__ import annotations

from childproc import gpulaunch


def _env_of(shell_lines: str) -> dict[str, str]:
    """The variables ``eval "$(gpulaunch env ...)"`` would set, read from its bash output."""
    import shlex

    env = {}
    for line in shell_lines.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0] if value else ""
    return env


def test_after_eval_env_a_bigger_request_says_unset_lifts_the_limit():
    first = gpulaunch(["--snapshot", "pcie-8x", "env", "--auto", "2"])
    assert first.returncode == 0, first.stderr
    inherited = _env_of(first.stdout)
    assert "CUDA_VISIBLE_DEVICES" in inherited
    done = gpulaunch(["--snapshot", "pcie-8x", "--auto", "4", "--", "true"], inherited)
    assert done.returncode == 4
    line = done.stderr.strip()
    assert "\n" not in line
    assert "`unset CUDA_VISIBLE_DEVICES` or a new shell lifts the limit" in line
    # ...and a parent launch's allotment is not called a mistake: it is the GPUs the job was given
    assert "inside a gpulaunch job or a Slurm step, those are the GPUs it was given" in line


def test_gpus_outside_an_inherited_cvd_says_how_to_lift_it():
    done = gpulaunch(["--snapshot", "pcie-8x", "--gpus", "5", "--", "true"], {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert done.returncode == 2
    assert "`unset CUDA_VISIBLE_DEVICES`" in done.stderr


def test_container_visibility_is_not_something_unset_can_lift():
    from childproc import uuids

    u = uuids("pcie-8x")
    done = gpulaunch(["--snapshot", "pcie-8x", "--auto", "4", "--", "true"], {"NVIDIA_VISIBLE_DEVICES": f"{u[6]},{u[7]}"})
    assert done.returncode == 4
    assert "unset" not in done.stderr
    assert "the container was started with NVIDIA_VISIBLE_DEVICES=" in done.stderr


def test_check_with_a_cvd_hiding_every_gpu_gives_a_fix_not_itself():
    done = gpulaunch(["--snapshot", "pcie-8x", "check"], {"CUDA_VISIBLE_DEVICES": "9"})
    assert done.returncode == 4
    assert "gpulaunch check" not in done.stderr.split("hint:", 1)[1]
    assert "`unset CUDA_VISIBLE_DEVICES`" in done.stderr


def test_a_holder_of_several_gpus_is_named_once(tmp_path) -> None:
    """A reservation conflict groups GPUs by holder (it once repeated a 60-character holder per GPU)."""
    from sharing_helpers import Lines, run, start

    release = tmp_path / "release"
    hold = ("import os, sys, time\nprint('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n")
    locks = tmp_path / "locks"
    holder = start(["--snapshot", "dgx-h100", "--gpus", "0-3", "--", "python3", "-c", hold, str(release)], locks)
    try:
        assert Lines(holder.stdout).wait("CVD=").startswith("CVD=0,1,2,3")
        clash = run(["--snapshot", "dgx-h100", "--gpus", "0-3", "--", "true"], locks)
        assert clash.returncode == 6
        assert clash.stderr.count(f"pid {holder.pid}") == 1, clash.stderr
        assert "--gpus: GPUs 0-3 are reserved by " in clash.stderr
        timeout = run(["--snapshot", "dgx-h100", "--gpus", "0-3", "--wait=0.2s", "--", "true"], locks)
        assert timeout.returncode == 5
        last = timeout.stderr.strip().splitlines()[-1]
        assert last.count(f"pid {holder.pid}") == 1, last
        everything = run(["--snapshot", "dgx-h100", "--auto", "8", "--", "true"], locks)
        assert everything.returncode == 4 and everything.stderr.count(f"pid {holder.pid}") == 1
    finally:
        release.touch()
        holder.communicate(timeout=30)


def test_exclusions_name_where_they_came_from(tmp_path) -> None:
    from childproc import gpulaunch as run_gl

    by_env = run_gl(["--snapshot", "pcie-8x", "--auto", "4", "--", "true"], {"GPULAUNCH_EXCLUDE": "0-5"})
    assert by_env.returncode == 4
    assert "GPUs 0-5: excluded by GPULAUNCH_EXCLUDE=0-5" in by_env.stderr and "--exclude" not in by_env.stderr
    config = tmp_path / "config.toml"
    config.write_text('idle = false\nexclude = "0-5"\n')
    by_file = run_gl(["--snapshot", "pcie-8x", "--auto", "4", "--", "true"], {"GPULAUNCH_CONFIG": str(config)})
    assert by_file.returncode == 4
    assert f"excluded by exclude = '0-5' in {config}:2" in by_file.stderr
    by_flag = run_gl(["--snapshot", "pcie-8x", "--auto", "4", "-x", "0-5", "--", "true"], {"GPULAUNCH_EXCLUDE": "7"})
    assert "GPUs 0-5: excluded by --exclude" in by_flag.stderr


def test_config_shows_the_built_in_value_of_a_default() -> None:
    done = gpulaunch(["config"])
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("--")}
    assert "–" not in rows["--lock-dir"] and "/" in rows["--lock-dir"]
    assert rows["--gpus-per-job"].split()[1] == "1"
    assert "auto" in rows["--bind"] and "gpulaunch-logs" in rows["--log-dir"]


def _two_close_gpus(tmp_path) -> str:
    """Two idle 8 GiB GPUs whose free memory differs by 2 MiB."""
    import json

    from gpu_launch.hardware import snapshot

    doc = snapshot.to_dict(snapshot.resolve("workstation-4x"))
    doc["gpus"] = doc["gpus"][:2]
    doc["links"] = [row[:2] for row in doc["links"][:2]] if doc.get("links") else None
    for gpu, free in zip(doc["gpus"], (8092, 8090)):
        gpu.update(memory_total_mib=8192, memory_free_mib=free, memory_used_mib=8192 - free, processes=[])
    path = tmp_path / "close.json"
    path.write_text(json.dumps({k: v for k, v in doc.items() if v is not None}))
    return str(path)


def test_explain_shows_enough_precision_when_two_values_differ(tmp_path) -> None:
    done = gpulaunch(["--snapshot", _two_close_gpus(tmp_path), "--auto", "1", "--explain"])
    assert done.returncode == 0, done.stderr
    lost = next(line for line in done.stdout.splitlines() if "lost on" in line)
    assert "7.9 GiB vs 7.9 GiB" not in lost
    assert "(8090 MiB vs 8092 MiB)" in lost


def test_explain_lines_stay_readable() -> None:
    for machine, n in (("dgx-h100", "8"), ("dgx-h100", "4"), ("pcie-8x", "4"), ("dgx1-v100", "4")):
        done = gpulaunch(["--snapshot", machine, "--auto", n, "--max-util", "100", "--explain"])
        assert done.returncode == 0, done.stderr
        assert max(len(line) for line in done.stdout.splitlines()) <= 100, machine
    eight = gpulaunch(["--snapshot", "dgx-h100", "--auto", "8", "--max-util", "100", "--explain"]).stdout
    assert "links: all 28 pairs NV18" in eight
