"""Several nodes as users write them (issue 36 item 7), unit level where no Slurm is needed: `{pp}`, `{nnodes}`,
`{tp}` in an engine's own flags through `--slurm` (checked as each node fills them, not as the template); `{tp}`
is the GPUs a node; a Slurm step that was given no GPUs is refused with the --gres hint; a dry run shows each
node's engine argv and says the port is chosen at start; `--wait` says "pending" of a pending job; a failed
node's last error line is printed; a GPU busy for its memory says so."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sharing_helpers import env, gl
from test_choice_states import gpu, machine

from gpu_launch.choose.select import Constraints, eligibility
from gpu_launch.cluster import nodejob
from gpu_launch.errors import WaitTimeout


def _run(args: list[str], tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gl("--snapshot", "dgx-h100", *args), env=env(tmp_path / "locks", **extra),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def _nodes(out: str) -> dict[str, list[str]]:
    """The dry run's node lines: rank -> that node's argv."""
    lines = [line[2:] for line in out.splitlines() if line.startswith("# node ")]
    return {line.split()[1]: shlex.split(line.partition(": ")[2]) for line in lines}


def test_pp_and_nnodes_in_the_engines_own_flags_are_accepted_through_slurm(tmp_path: Path) -> None:
    """Was: "`vllm serve --pipeline-parallel-size {pp}` contradicts this run: gpulaunch sets
    --pipeline-parallel-size 2", though the same command runs under srun, where {pp} becomes 2."""
    vllm = _run(["--nodes", "2", "--gpus-per-node", "2", "--slurm", "--dry-run", "--", "vllm", "serve", "M",
                 "--pipeline-parallel-size", "{pp}"], tmp_path)
    assert vllm.returncode == 0, vllm.stderr
    nodes = _nodes(vllm.stdout)
    assert nodes["0"][:5] == ["vllm", "serve", "M", "--pipeline-parallel-size", "2"], nodes
    assert "--master-port" in nodes["1"] and nodes["1"][nodes["1"].index("--master-port") + 1] == "PORT"
    assert "# HEAD: the first node's address; PORT: a free port the head picks when the job starts" in vllm.stdout
    torch = _run(["--nodes", "2", "--gpus-per-node", "4", "--slurm", "--dry-run", "--", "torchrun", "--nnodes",
                  "{nnodes}", "--nproc-per-node", "{tp}", "train.py"], tmp_path)
    assert torch.returncode == 0, torch.stderr
    run = _nodes(torch.stdout)["1"]
    assert run[run.index("--nnodes") + 1] == "2" and run[run.index("--nproc-per-node") + 1] == "4", run
    assert "--rdzv-endpoint" in run and run[run.index("--rdzv-endpoint") + 1] == "HEAD:PORT"


def test_a_real_contradiction_is_still_refused(tmp_path: Path) -> None:
    refused = _run(["--nodes", "2", "--gpus-per-node", "2", "--slurm", "--dry-run", "--", "vllm", "serve", "M",
                    "--pipeline-parallel-size", "3"], tmp_path)
    assert refused.returncode == 2 and "--pipeline-parallel-size 3` does not use the run's 4 GPUs" in refused.stderr


def test_tp_is_the_gpus_a_node_under_nodes(tmp_path: Path) -> None:
    """Was: "{tp} is filled in only when --fit names a model" under --nodes."""
    ran = _run(["-q", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head", "10.0.0.1:29400",
                "--dry-run", "--", "echo", "--tp", "{tp}", "--pp", "{pp}", "--rank", "{node_rank}"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "exec echo --tp 2 --pp 2 --rank 1" in ran.stdout.splitlines()
    plain = _run(["--auto", "2", "--dry-run", "--", "echo", "{tp}"], tmp_path)  # without --nodes or a model: refused
    assert plain.returncode == 2 and "{tp} is filled in only when --fit names a model or --nodes is given" in plain.stderr


STEP = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "n[1-2]"}


def test_a_slurm_step_given_no_gpus_is_refused_with_the_gres_hint(tmp_path: Path) -> None:
    """Was: `salloc -N2` (no --gres), then `srun gpulaunch --nodes 2 -- ...` took all 8 GPUs of each node."""
    refused = _run(["--nodes", "2", "--", "python", "train.py"], tmp_path, **STEP)
    assert refused.returncode == 4, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert line.startswith("gpulaunch: error: this Slurm step was given no GPUs") and "--gres=gpu:G" in line, line
    # A step Slurm gave GPUs gets past that (here on to asking Slurm for the node list, which is not installed)
    given = _run(["--nodes", "2", "--", "python", "train.py"], tmp_path, **STEP, SLURM_STEP_GPUS="2,3",
                 CUDA_VISIBLE_DEVICES="2,3", PATH="/usr/bin:/bin")
    assert "given no GPUs" not in given.stderr


def _job(tmp_path: Path) -> nodejob.NodeJob:
    return nodejob.NodeJob(2, 2, ("vllm", "serve", "M"), str(tmp_path))


def test_wait_says_pending_of_a_job_that_never_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: "Slurm job 7 is still running after 5s" of a job Slurm still held pending."""
    monkeypatch.setattr(nodejob, "state_of", lambda job_id, environ: {"JobState": "PENDING", "Reason": "Resources"})
    with pytest.raises(WaitTimeout) as caught:
        nodejob._follow(_job(tmp_path), "7", {}, 0.01, 0.05, False, False, True)
    assert caught.value.message.startswith("Slurm job 7 is still pending after "), caught.value.message
    monkeypatch.setattr(nodejob, "state_of", lambda job_id, environ: {"JobState": "RUNNING", "NodeList": "n[1-2]"})
    with pytest.raises(WaitTimeout) as running:
        nodejob._follow(_job(tmp_path), "7", {}, 0.01, 0.05, False, False, True)
    assert running.value.message.startswith("Slurm job 7 is still running after ")


def test_a_failed_node_says_why_not_only_its_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: "job 7 failed: exit 3 (node n2 first)"; the reason was only in that node's log."""
    (tmp_path / "slurm-7.out").write_text("srun: error: n2: task 1: Exited with exit code 3\n")
    (tmp_path / "job-7.node-0.log").write_text("gpulaunch: node 0 of 2 (n1) ...\n")
    (tmp_path / "job-7.node-1.log").write_text("some output\ngpulaunch: error: NVML unavailable: the NVIDIA kernel "
                                               "driver is not loaded (hint: load it)\n")
    status = nodejob._ended(_job(tmp_path), "7", {"JobState": "FAILED", "ExitCode": "3:0"}, False, False)
    assert status == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gpulaunch: job 7 failed: exit 3 (node n2 first)")
    assert err[1] == ("gpulaunch: job 7 node 1: NVML unavailable: the NVIDIA kernel driver is not loaded "
                      "(hint: load it)"), err


def test_a_gpu_busy_for_its_memory_names_memory() -> None:
    """Was: "busy (0% utilisation; --max-util 100 takes it anyway)": the one thing that did not decide it."""
    m = machine([gpu(0, used=48000, users=("bob",)), gpu(1, util=97)], lambda i, j: "NV12")
    reasons = {e.gpu.index: e.reason for e in eligibility(m, Constraints(polite=True)).excluded}
    assert reasons[0].startswith("busy by bob (59% of its memory in use, 0% utilisation; "), reasons
    assert reasons[1] == "busy (97% utilisation; --max-util 100 takes it anyway)"
