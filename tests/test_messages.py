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
