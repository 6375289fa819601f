"""`--nodes N --slurm`: what the nodes would refuse is refused at submission, before sbatch runs (one line,
exit 2, nothing written), and `--fit MODEL --slurm` writes the plan's values into the script wherever a
launch fills them (`--max-model-len={ctx}`), leaving `{{tp}}` for the node task to unescape once. A fake
`sbatch` on PATH records whether it was called; the node's half runs by hand (`--node-rank --head`)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sharing_helpers import env, gl


def _sbatch(tmp_path: Path) -> Path:
    """A stand-in sbatch: it records its call and answers a job id, as `sbatch --parsable` does; the
    engines and launchers the commands name are on PATH too (a launch checks its command exists first)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'sbatch-called'}\necho 4242\n")
    for name in ("vllm", "torchrun", "accelerate", "deepspeed", "text-generation-launcher", "llama-server"):
        (bindir / name).write_text("#!/bin/sh\nexit 0\n")
    for exe in bindir.iterdir():
        exe.chmod(0o755)
    return bindir


def _submit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    extra = env(tmp_path / "locks")
    extra["PATH"] = f"{_sbatch(tmp_path)}:{extra['PATH']}"
    return subprocess.run(gl("--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "4", "--slurm",
                             "--log-dir", str(tmp_path / "logs"), *args), env=extra, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


@pytest.mark.parametrize("command, says", [
    ("torchrun --nnodes 3 train.py", "`torchrun --nnodes 3` contradicts this run: gpulaunch sets --nnodes 2"),
    ("torchrun --nnodes=1:3 train.py", "`torchrun --nnodes=1:3` contradicts this run"),
    ("python -X dev -m torch.distributed.run --nproc-per-node 8 train.py", "gpulaunch sets --nproc-per-node 4"),
    ("vllm serve M -tp 3", "does not use the run's 8 GPUs"),
    ("vllm serve M --node-rank 0", "`vllm serve --node-rank 0` contradicts this run: gpulaunch sets --node-rank 1"),
    ("vllm serve M --headless", "--headless on the other nodes only"),
    ("accelerate launch --num_machines 4 train.py", "gpulaunch sets --num_machines 2"),
    ("deepspeed --hostfile hosts train.py", "does not go with --nodes"),
    ("text-generation-launcher --model-id M", "documents no multi-node mode"),
    ("llama-server -m M", "write --rpc {rpc}"),
    ("python train.py --ctx {ctx}", "{ctx} is filled in only when --fit names a model"),  # ({tp}: a node's GPUs)
    ("python train.py --out run-{node_rank}", "inside the argument 'run-{node_rank}'"),
])
def test_what_the_nodes_would_refuse_is_refused_before_sbatch_runs(tmp_path: Path, command: str, says: str) -> None:
    # was: sbatch ran, the job was queued, and every node then failed with this line in its log
    proc = _submit(tmp_path, "--", *shlex.split(command))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: ") and says in lines[0], proc.stderr
    assert not (tmp_path / "sbatch-called").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("command", [
    "vllm serve M --master-addr 10.9.9.9 --master-port 29999",  # the head is not known yet: the nodes check these
    "torchrun --rdzv-endpoint h:1 --rdzv-id mine --nnodes 2 train.py",
    "vllm serve M --nnodes 2 -tp 4 -pp 2",  # what gpulaunch would write: kept
    "python train.py --rank {node_rank} --lit {{tp}}",
])
def test_flags_that_agree_or_name_the_head_are_submitted(tmp_path: Path, command: str) -> None:
    proc = _submit(tmp_path, "-q", "--", *shlex.split(command))
    assert (proc.returncode, proc.stdout) == (0, "4242\n"), proc.stderr
    assert (tmp_path / "sbatch-called").exists()


def test_fit_model_slurm_fills_every_form_of_the_plans_placeholders(tmp_path: Path) -> None:
    # was: --max-model-len={ctx} went into the script as written, and every node refused it ({ctx} needs --fit)
    from docs_fixtures import llama_70b_safetensors

    model = tmp_path / "M"
    llama_70b_safetensors(model)
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("--snapshot", "dgx-h100", "--fit", "model", "--ctx", "8192", "--gpus-per-node", "2",
                             "--slurm", "--dry-run", "--log-dir", str(logs), "--", "vllm", "serve", str(model),
                             "--max-model-len={ctx}", "--served-model-name", "{{tp}}", "--tensor-parallel-size={tp}"),
                          env=env(tmp_path / "locks"), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = next(x for x in reversed(proc.stdout.splitlines()) if x.strip().startswith("-- "))  # (the script's)
    command = shlex.split(last.strip().removeprefix("-- "))
    assert command[:7] == ["vllm", "serve", str(model), "--max-model-len=8192", "--served-model-name", "{{tp}}",
                           "--tensor-parallel-size=2"], last
    # the node task (here node 1 by hand, as srun runs it on every node) unescapes {{tp}} once: the engine gets {tp}
    node = subprocess.run(gl("--snapshot", "dgx-h100", "-q", "--nodes", "2", "--gpus-per-node", "2", "--node-rank",
                             "1", "--head", "10.0.0.1:29400", "--dry-run", "--", *command),
                          env=env(tmp_path / "locks"), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert node.returncode == 0, node.stderr
    exec_line = shlex.split(next(x for x in node.stdout.splitlines() if x.startswith("exec ")))
    assert exec_line[1:8] == ["vllm", "serve", str(model), "--max-model-len=8192", "--served-model-name", "{tp}",
                              "--tensor-parallel-size=2"], exec_line
