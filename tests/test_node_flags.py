"""The node task of a `--nodes` run reads the user's flags through the same tables as sizing (fit/cmdline):
every spelling the engine's parser takes (`--tensor_parallel_size`, a unique prefix, `=`), the last of a
repeat, the engine's variables (torchrun's PET_*), its launcher's valueless options. What the user wrote
with gpulaunch's value is kept (no second copy), another value is refused (exit 2, one line), and sizing
reads the same value from the same words. tests/test_nodes.py has the flags each engine gets."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sharing_helpers import env, gl

HEAD = ["--head", "10.0.0.1:29400"]
# Every node of these runs: 2 nodes × 2 GPUs of the bundled dgx-h100, this one rank 1.
NODE = ["--snapshot", "dgx-h100", "-q", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", *HEAD,
        "--dry-run", "--"]


def _node(command: str, tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gl(*NODE, *shlex.split(command)), env=env(tmp_path / "locks", **environ),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def _exec(command: str, tmp_path: Path, **environ: str) -> list[str]:
    proc = _node(command, tmp_path, **environ)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(next(line for line in proc.stdout.splitlines() if line.startswith("exec ")))[1:]


def _tail(argv: list[str], command: str) -> list[str]:
    """What gpulaunch added after the command (engines whose flags go last)."""
    words = shlex.split(command)
    assert argv[:len(words)] == words
    return argv[len(words):]


TAIL = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29400"]


@pytest.mark.parametrize("command", [
    "vllm serve M --tensor_parallel_size 4",  # vLLM reads `_` as `-` (FlexibleArgumentParser)
    "vllm serve M --tensor-parallel 4",  # argparse's unique prefix
    "vllm serve M -tp 2 -tp 4",  # argparse: the last one wins
    "vllm serve M --tensor-parallel-size=2 --tensor_parallel_size=4",
])
def test_vllm_tp_in_any_spelling_is_kept_and_the_stages_follow(tmp_path: Path, command: str) -> None:
    """Was: the spelling unseen (or the first of a repeat read), so tp 2 × pp 2 filled in while vLLM ran tp 4
    (and sizing, reading it right, planned tp 4)."""
    from gpu_launch.fit import engines
    from gpu_launch.fit.command import read_command

    assert read_command(shlex.split(command), engines.ENGINES["vllm"]).tp == "4"  # what sizing reads
    argv = _exec(command, tmp_path)
    assert _tail(argv, command) == [*TAIL, "--pipeline-parallel-size", "1", "--headless"]


def test_vllm_prefill_context_parallel_takes_its_share_of_the_gpus(tmp_path: Path) -> None:
    """Sizing counts tp × pp × -pcp ranks; the node task now makes the same product the run's GPUs."""
    argv = _exec("vllm serve M -pcp 2", tmp_path)
    assert _tail(argv, "vllm serve M -pcp 2") == [*TAIL, "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
                                                  "--headless"]


@pytest.mark.parametrize("command", [
    "sglang serve M",  # SGLang's own CLI (python/sglang/cli/serve.py): was no engine to the node task
    "python -u -m sglang.launch_server --model-path M",  # python's own options before -m
])
def test_every_way_to_start_sglang_gets_its_flags(tmp_path: Path, command: str) -> None:
    argv = _exec(command, tmp_path)
    assert _tail(argv, command) == ["--tp-size", "4", "--nnodes", "2", "--node-rank", "1",
                                    "--dist-init-addr", "10.0.0.1:29400"]


def test_a_launchers_valueless_option_does_not_swallow_its_script(tmp_path: Path) -> None:
    """deepspeed -q takes no value: train.py is the script, and its own --node_rank is its own."""
    argv = _exec("deepspeed -q train.py --node_rank 5", tmp_path)
    assert argv[:4] == ["deepspeed", "--no_ssh", "--node_rank", "1"] and argv[-4:] == ["-q", "train.py", "--node_rank", "5"]


def test_a_variable_with_gpulaunchs_value_is_kept(tmp_path: Path) -> None:
    """torchrun reads PET_NNODES when --nnodes is not given (torch/distributed/argparse_util.py)."""
    argv = _exec("torchrun train.py", tmp_path, PET_NNODES="2")
    assert "--nnodes" not in argv and argv[:3] == ["torchrun", "--nproc-per-node", "2"]


@pytest.mark.parametrize("command, environ, message", [
    ("vllm serve M --node_rank 0", {}, "`vllm serve --node_rank 0` contradicts this run: gpulaunch sets --node-rank 1"),
    ("vllm serve M --node-r 0", {}, "`vllm serve --node-r 0` contradicts this run: gpulaunch sets --node-rank 1"),
    ("vllm serve M --master_port=1234", {}, "`vllm serve --master_port=1234` contradicts this run: gpulaunch sets "
                                            "--master-port 29400"),
    ("vllm serve M --nnodes 2 --nnodes 3", {}, "`vllm serve --nnodes 3` contradicts this run: gpulaunch sets --nnodes 2"),
    ("vllm serve M -dp 2", {}, "`vllm serve -dp` does not go with --nodes: gpulaunch spreads tensor × pipeline"),
    ("vllm serve M --master 10.0.0.1", {}, "--master is ambiguous to vllm: it could be --master-addr, --master-port"),
    ("torchrun --nnode 3 train.py", {}, "`torchrun --nnode 3` contradicts this run: gpulaunch sets --nnodes 2"),
    ("torchrun --nproc 2 train.py", {}, "--nproc is ambiguous to torchrun: it could be --nproc-per-node, --nproc_per_node"),
    ("torchrun train.py", {"PET_NNODES": "3"}, "`PET_NNODES=3` (in the environment) contradicts this run: gpulaunch "
                                               "sets --nnodes 2 (the nodes of this run) (hint: unset PET_NNODES"),
    ("torchrun train.py", {"PET_STANDALONE": "1"}, "`PET_STANDALONE=1` (in the environment) does not go with --nodes"),
    ("accelerate launch --num_machines 2 --num-machines 3 train.py", {},
     "`accelerate launch --num-machines 3` contradicts this run: gpulaunch sets --num_machines 2"),
    ("deepspeed --host h train.py", {}, "`deepspeed --host` does not go with --nodes"),
    ("deepspeed --num_acc 2 train.py", {}, "`deepspeed --num_acc` does not go with --nodes"),
    ("python -u -m sglang.launch_server --model-path M --tp 3", {},
     "`python -u -m sglang.launch_server --tp-size 3` does not use the run's 4 GPUs"),
])
def test_a_contradiction_is_refused_whichever_spelling_says_it(tmp_path: Path, command: str,
                                                               environ: dict[str, str], message: str) -> None:
    """Was: unseen, so gpulaunch's own flag was added and the engine took one of the two (or, for a
    repeat, the one gpulaunch had not read)."""
    proc = _node(command, tmp_path, **environ)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("gpulaunch: error: ") and proc.stderr.count("\n") == 1


# -- the split and the head's switches at their edges (issue 28: survivors of the mutation run) --------------

def test_headless_written_by_the_user_is_refused_on_the_head_and_kept_once_on_the_others(tmp_path: Path) -> None:
    """Slips: the refusal's `not on` dropped (the head would run headless: no API server, and the worker
    refused instead), or its check turned into an assertion (a traceback)."""
    on_the_head = list(NODE)
    on_the_head[on_the_head.index("--node-rank") + 1] = "0"
    head = subprocess.run(gl(*on_the_head, "vllm", "serve", "M", "--headless"), env=env(tmp_path / "locks"),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert head.returncode == 2
    assert head.stderr == ("gpulaunch: error: `vllm serve --headless` contradicts this run: gpulaunch sets --headless "
                           "on the other nodes only (only the head serves the API) (hint: leave --headless out: "
                           "gpulaunch fills it in on every node)\n")
    assert _tail(_exec("vllm serve M --headless", tmp_path), "vllm serve M --headless") == [
        *TAIL, "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]


def test_a_pipeline_size_alone_is_kept_and_the_tensor_size_derived(tmp_path: Path) -> None:
    """Slip: the pp-only branch never taken: `-pp 2` on 2 nodes × 2 GPUs refused instead of tp 2 × pp 2."""
    command = "vllm serve M --pipeline-parallel-size 2"
    assert _tail(_exec(command, tmp_path), command) == [*TAIL, "--tensor-parallel-size", "2", "--headless"]


@pytest.mark.parametrize("command, said", [
    ("vllm serve M -tp 3", "`vllm serve --tensor-parallel-size 3` does not use the run's 4 GPUs: tensor × pipeline "
                           "parallel must be 4 (hint: leave the tensor and pipeline sizes out: gpulaunch sets "
                           "--tensor-parallel-size 2 --pipeline-parallel-size 2)"),
    ("vllm serve M -pcp 2 -tp 4", "`vllm serve --tensor-parallel-size 4 -pcp 2` does not use the run's 4 GPUs: "
                                  "tensor × pipeline parallel × --prefill-context-parallel-size must be 4 (hint: "
                                  "leave the tensor and pipeline sizes out: gpulaunch sets --tensor-parallel-size 2 "
                                  "--pipeline-parallel-size 1)"),
])
def test_a_split_that_leaves_gpus_out_is_one_line_naming_every_factor(tmp_path: Path, command: str, said: str) -> None:
    """Slips: `and` for `or` in the both-sizes test (a tp alone that does not divide: a TypeError
    traceback), and a factor of 2 (vLLM's -pcp) left out of the line."""
    proc = _node(command, tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"gpulaunch: error: {said}\n")
