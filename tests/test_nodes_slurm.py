"""`gpulaunch --nodes N --slurm`: one job over a real Slurm of two nodes on this host, and the engines' rendezvous.

The cluster (tests/slurm_cluster.py) runs one ``slurmd -N n1`` and one ``slurmd -N n2`` on this machine, each
with 4 fake GPUs. Its TaskProlog gives every task its node's own gpulaunch view: a lock directory and a
snapshot of its own (``locks-n1``, ``snap-n1.json``), so the two nodes never see each other's reservations.
A real ``torchrun`` (CPU PyTorch, gloo) joins 2 nodes × 2 processes; fake ``vllm`` and SGLang engines
(tests/fake_engine.py) act out their contract: the head listens on the address and port gpulaunch gave it,
the others connect. The tests skip, with the reason, where Slurm cannot be started (not root, not Debian,
packages missing) or torch is not installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurm_cluster
from sharing_helpers import env, first_gpus, gl, write_snapshot

TESTS = Path(__file__).resolve().parent
NODES = ["n1", "n2"]

TORCH_PROBE = r'''
import json, os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
record = json.dumps({"rank": rank, "world": world, "sum": total.item(), "node": os.environ.get("SLURMD_NODENAME"),
                     "local_rank": os.environ.get("LOCAL_RANK"), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                     "node_rank": os.environ.get("GPULAUNCH_NODE_RANK")})
with open(os.path.join(RECORDS, f"rank-{rank}.json"), "w") as out:
    out.write(record)
print("PROBE " + record, flush=True)
dist.destroy_process_group()
'''
# Each rank's record is read from its own file, not from the node's log: a node's two processes share one
# stdout, torchrun starts them with `python -u` (print writes the text and the newline apart), and in CI
# one's line once ran into the other's ("PROBE {rank 3}PROBE {rank 2}"): nothing gpulaunch writes or orders.


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    started = start_nodes(tmp_path_factory.mktemp("slurm-nodes"))
    print(f"\nslurm fixture: 2 nodes idle in {started.started_in:.1f} s", file=sys.stderr)
    try:
        yield started
    finally:
        started.stop()


def start_nodes(root: Path, netns: bool = False) -> slurm_cluster.Cluster:
    """Slurm's n1 and n2 (or skip, saying why), each node with its own gpulaunch snapshot and lock directory."""
    reason = slurm_cluster.why_not()
    if reason:
        pytest.skip(reason)
    example = json.loads((TESTS.parent / "gpu_launch" / "hardware" / "examples" / "dgx-h100.json").read_text())
    for name in NODES:  # each node's own machine: the example's first 4 GPUs, under the node's name
        write_snapshot(root / f"snap-{name}.json", {**first_gpus(example, 4), "hostname": name})
    prolog = ("#!/bin/sh\n"  # every task on node N reads N's snapshot and reserves in N's lock directory
              f'echo "export GPULAUNCH_SNAPSHOT={root}/snap-$SLURMD_NODENAME.json"\n'
              f'echo "export GPULAUNCH_LOCK_DIR={root}/locks-$SLURMD_NODENAME"\n')
    try:
        return slurm_cluster.start(root, gpus=4, nodes=NODES, task_prolog=prolog, netns=netns)
    except slurm_cluster.NoNetwork as e:
        pytest.skip(f"network namespaces cannot be made here ({e}); they need root with CAP_NET_ADMIN")


def _bin(tmp_path: Path) -> Path:
    """A directory of fake engines: ``vllm`` on PATH, and an ``sglang`` package for ``python -m``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    starter = f"#!{sys.executable}\nimport sys\nsys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}]\n" \
              "import fake_engine\nfake_engine.main({kind!r})\n"
    (bindir / "vllm").write_text(starter.format(kind="vllm"))
    (bindir / "vllm").chmod(0o755)
    package = tmp_path / "pkgs" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(starter.format(kind="sglang").split("\n", 1)[1])
    return bindir


def _env(cluster: slurm_cluster.Cluster, tmp_path: Path, **extra: str) -> dict[str, str]:
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    bindir = _bin(tmp_path) if not (tmp_path / "bin").exists() else tmp_path / "bin"
    out = env(tmp_path / "submitter-locks", **{
        "GPULAUNCH_POLL_INTERVAL": "0.2", "FAKE_RECORDS": str(records), "PYTHONPATH": f"{tmp_path / 'pkgs'}:{TESTS.parent}",
        "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo", **extra})
    out.update(cluster.env)
    out["PATH"] = f"{bindir}:{Path(sys.executable).parent}:{out['PATH']}"
    return out


def _submit(cluster: slurm_cluster.Cluster, tmp_path: Path, command: list[str], *options: str,
            timeout: float = 120, **extra: str) -> tuple[subprocess.CompletedProcess[str], str, Path]:
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("--nodes", "2", "--gpus-per-node", "2", "--slurm", "--follow", "--log-dir", str(logs),
                             *options, "--", *command), env=_env(cluster, tmp_path, **extra), capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path)
    m = re.search(r"submitted Slurm job (\d+)", proc.stderr)
    assert m, proc.stderr
    return proc, m.group(1), logs


def _records(tmp_path: Path, kind: str) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (tmp_path / "records").glob(f"{kind}-*.json")}


def _node_logs(logs: Path, job: str) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(logs.glob(f"job-{job}.node-*.log")))


def test_torchrun_joins_two_nodes_through_its_own_rendezvous(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    took = torchrun_over_two_nodes(cluster, tmp_path, "127.0.0.1")
    print(f"\ntorchrun over 2 nodes × 2 processes, submitted and followed in {took:.1f} s", file=sys.stderr)


def torchrun_over_two_nodes(cluster: slurm_cluster.Cluster, tmp_path: Path, head_addr: str, **extra: str) -> float:
    """A real torchrun (gloo) of 2 nodes × 2 processes doing an all-reduce, its head at ``head_addr``; the
    seconds from submission to the job's end."""
    pytest.importorskip("torch", reason="the real rendezvous needs CPU PyTorch: pip install torch==2.13.0")
    probe = tmp_path / "probe.py"
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    probe.write_text(f"RECORDS = {str(ranks)!r}\n" + TORCH_PROBE)
    t0 = time.monotonic()
    proc, job, logs = _submit(cluster, tmp_path, ["torchrun", str(probe)], timeout=240, **extra)
    took = time.monotonic() - t0
    text = _node_logs(logs, job)
    assert proc.returncode == 0, proc.stderr + text
    probes = [json.loads(p.read_text()) for p in sorted(ranks.glob("rank-*.json"))]
    assert text.count("PROBE ") == 4, text  # and all four said so in their node's log
    assert sorted(p["rank"] for p in probes) == [0, 1, 2, 3], text
    assert {p["world"] for p in probes} == {4} and {p["sum"] for p in probes} == {10.0}  # 1+2+3+4 over both nodes
    by_node = sorted(sorted(p["rank"] for p in probes if p["node"] == node) for node in NODES)
    assert by_node == [[0, 1], [2, 3]], probes  # 2 processes a node (c10d numbers the nodes as they join)
    assert {p["node_rank"] for p in probes if p["node"] == "n2"} == {"1"}  # gpulaunch's node rank: Slurm's
    assert all(len(p["cvd"].split(",")) == 2 for p in probes)  # each node's 2 GPUs, for both of its processes
    # What the follower said, and the head's port: picked for this job, not torchrun's fixed 29500.
    head = re.search(rf"job {job} head n1 at {re.escape(head_addr)}:(\d+)", proc.stderr)
    assert head and int(head.group(1)) not in (29500, 29400), proc.stderr
    assert f"job {job} running on n[1-2]" in proc.stderr and f"job {job} completed: exit 0" in proc.stderr
    assert f"--rdzv-endpoint {head_addr}:{head.group(1)}" in text and "--nproc-per-node 2" in text
    assert f"head: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint {head_addr}:{head.group(1)} " \
           f"--rdzv-id {job}.0 --rdzv-conf is_host=1 --local-addr {head_addr} {probe}" in text
    return took


def test_fake_vllm_gets_its_rank_head_and_headless_on_every_node(cluster: slurm_cluster.Cluster,
                                                                  tmp_path: Path) -> None:
    proc, job, logs = _submit(cluster, tmp_path, ["vllm", "serve", "./M", "--max-model-len", "4096"],
                              VLLM_HOST_IP="ignored-by-the-fake", NCCL_DEBUG="INFO")
    assert proc.returncode == 0, proc.stderr + _node_logs(logs, job)
    ranks = _records(tmp_path, "vllm")
    assert sorted(ranks) == [0, 1]
    head, worker = ranks[0], ranks[1]
    assert (head["node"], worker["node"]) == ("n1", "n2")
    assert head["joined"] == [1] and worker["acked"] is True
    assert {r["head"] for r in ranks.values()} == {"127.0.0.1"} and head["port"] == worker["port"]
    assert head["port"] not in (29500, 29501, 6379)
    assert "--headless" not in head["argv"] and "--headless" in worker["argv"]
    for r in ranks.values():
        args = r["argv"]
        assert args[args.index("--tensor-parallel-size") + 1] == "2" and args[args.index("--pipeline-parallel-size") + 1] == "2"
        assert args[args.index("--nnodes") + 1] == "2" and args[:4] == ["serve", "./M", "--max-model-len", "4096"]
        assert len(r["cvd"].split(",")) == 2 and len(r["held"]) == 2  # G GPUs a node, each reserved while it runs
        assert r["env"]["NCCL_DEBUG"] == "INFO" and r["env"]["VLLM_HOST_IP"] == "ignored-by-the-fake"
        assert r["env"]["GPULAUNCH_NODE_RANK"] == str(r["rank"]) and r["env"]["GPULAUNCH_HEAD_PORT"] == str(head["port"])
    assert head["lock_dir"].endswith("locks-n1") and worker["lock_dir"].endswith("locks-n2")
    # The script: kept beside the logs, one srun step, the command quoted, nothing for the batch shell to expand.
    script = (logs / "nodes.sh").read_text()
    assert "srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=1" in script and "$" not in script
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gres=gpu:2" in script
    assert cluster.scontrol("write", "batch_script", job, "-") == script


def test_fit_model_slurm_gives_every_node_the_plans_tp_and_pp(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """`--fit model --slurm` with no --nodes: a model too big for one node of 4 H100s, with 2 KV heads, is
    planned as 2 nodes × tp 2 × pp 4 (tp kept at the KV heads, 2 stages a node). Both nodes run that split,
    not the node task's own default (tp 4 × pp 2)."""
    from docs_fixtures import _CONFIG_70B, _safetensors_llama

    model = tmp_path / "M"
    _safetensors_llama(model, {**_CONFIG_70B, "num_hidden_layers": 200, "num_key_value_heads": 2})
    logs = tmp_path / "logs"
    environ = _env(cluster, tmp_path, GPULAUNCH_SNAPSHOT=str(cluster.root / "snap-n1.json"))  # the node kind
    proc = subprocess.run(gl("--fit", "model", "--ctx", "8192", "--slurm", "--follow", "--log-dir", str(logs), "--",
                             "vllm", "serve", str(model), "--max-model-len={ctx}", "--served-model-name", "{{tp}}"),
                          env=environ,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    m = re.search(r"submitted Slurm job (\d+): 2 nodes × 4 GPUs", proc.stderr)
    assert m, proc.stderr
    assert proc.returncode == 0, proc.stderr + _node_logs(logs, m.group(1))
    ranks = _records(tmp_path, "vllm")
    assert [ranks[r]["node"] for r in (0, 1)] == ["n1", "n2"] and ranks[0]["joined"] == [1]
    for r in ranks.values():
        args = r["argv"]
        # the plan's {ctx} written into the script in its KEY= form too; {{tp}} unescaped once, by the node task
        assert args[:5] == ["serve", str(model), "--max-model-len=8192", "--served-model-name", "{tp}"]
        assert args.count("--tensor-parallel-size") == 1 and args[args.index("--tensor-parallel-size") + 1] == "2"
        assert args.count("--pipeline-parallel-size") == 1 and args[args.index("--pipeline-parallel-size") + 1] == "4"
        assert len(r["held"]) == 4 and args[args.index("--nnodes") + 1] == "2"
    assert "# The model's plan: 2 nodes × 4 GPUs, tp 2 × pp 4" in (logs / "nodes.sh").read_text()


def test_fake_sglang_and_one_failing_rank_fails_the_job(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", "./M"]
    proc, job, logs = _submit(cluster, tmp_path, command)
    assert proc.returncode == 0, proc.stderr + _node_logs(logs, job)
    ranks = _records(tmp_path, "sglang")
    assert [ranks[r]["node"] for r in (0, 1)] == ["n1", "n2"] and ranks[0]["joined"] == [1]
    for r in ranks.values():
        args = r["argv"]
        assert args[args.index("--tp-size") + 1] == "4"  # SGLang's tp spans every GPU of the run
        assert args[args.index("--dist-init-addr") + 1] == f"127.0.0.1:{ranks[0]['port']}"
    failing = tmp_path / "again"
    failing.mkdir()
    proc, job, logs = _submit(cluster, failing, command, FAKE_FAIL_RANK="1")
    assert proc.returncode == 3, proc.stderr  # the job's own status: srun's, the failing rank's
    assert f"job {job} failed: exit 3 (node n2 first)" in proc.stderr
    ranks = _records(failing, "sglang")
    assert ranks[1].get("failed") and 0 not in ranks  # the head never finished: the step was ended


def test_a_node_that_cannot_get_its_gpus_fails_the_job(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """--gpus-per-node above what a node's allotment holds: Slurm refuses it at submission (exit 2)."""
    logs = tmp_path / "logs"
    proc = subprocess.run(gl("--nodes", "2", "--gpus-per-node", "5", "--slurm", "--log-dir", str(logs), "--",
                             "vllm", "serve", "M"), env=_env(cluster, tmp_path), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gpulaunch: error: sbatch refused the job: ") and proc.stderr.count("\n") == 1
    assert not logs.exists()


def test_srun_inside_an_allocation_is_the_node_task(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """`srun gpulaunch --nodes 2 -- ...` in a user's own allocation, and the batch shell refused with the fix."""
    environ = _env(cluster, tmp_path)
    script = tmp_path / "mine.sh"
    script.write_text(f"#!/bin/sh\n{sys.executable} -m gpu_launch --nodes 2 -- vllm serve M || echo refused=$?\n"
                      f"srun --ntasks-per-node=1 --gres=gpu:2 {sys.executable} -m gpu_launch --nodes 2 -- vllm serve M\n")
    out = tmp_path / "mine.out"
    proc = subprocess.run(["sbatch", "--wait", "-N", "2", "--ntasks-per-node=1", "--gres=gpu:2", "-o", str(out),
                           str(script)], env=environ, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    text = out.read_text()
    assert proc.returncode == 0, proc.stderr + text
    assert "would run once, on one node" in text and "srun --ntasks-per-node=1 gpulaunch --nodes 2" in text
    assert "refused=2" in text
    ranks = _records(tmp_path, "vllm")
    assert [ranks[r]["node"] for r in (0, 1)] == ["n1", "n2"] and ranks[0]["joined"] == [1]
    assert (tmp_path / "gpulaunch-logs" / ".nodes").is_dir()  # the default rendezvous directory, in the job's cwd


def test_node_placeholders_in_the_engines_flags_are_accepted_and_filled(cluster: slurm_cluster.Cluster,
                                                                         tmp_path: Path) -> None:
    """Issue 36: `--pipeline-parallel-size {pp}` was refused at submission as contradicting what gpulaunch sets,
    though the same command ran under srun; each node now gets it filled: 2 nodes, 2 pipeline stages."""
    proc, job, logs = _submit(cluster, tmp_path, ["vllm", "serve", "M", "--pipeline-parallel-size", "{pp}",
                                                  "--tensor-parallel-size", "{tp}"])
    assert proc.returncode == 0, proc.stderr + _node_logs(logs, job)
    ranks = _records(tmp_path, "vllm")
    for r in (0, 1):
        args = ranks[r]["argv"]
        assert args[args.index("--pipeline-parallel-size") + 1] == "2", args
        assert args[args.index("--tensor-parallel-size") + 1] == "2", args  # {tp}: the GPUs a node
        assert "{pp}" not in args and "{tp}" not in args


def test_a_step_slurm_gave_no_gpus_is_refused_with_the_gres_hint(cluster: slurm_cluster.Cluster,
                                                                 tmp_path: Path) -> None:
    """Issue 36: `salloc -N2` without --gres, then `srun gpulaunch --nodes 2 -- ...`, took every GPU of each
    node though Slurm gave the step none."""
    environ = _env(cluster, tmp_path)
    script = tmp_path / "mine.sh"
    script.write_text(f"#!/bin/sh\nsrun --ntasks-per-node=1 {sys.executable} -m gpu_launch --nodes 2 -- vllm serve M"
                      " || echo refused=$?\n")
    out = tmp_path / "mine.out"
    proc = subprocess.run(["sbatch", "--wait", "-N", "2", "--ntasks-per-node=1", "-o", str(out), str(script)],
                          env=environ, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    text = out.read_text()
    assert proc.returncode == 0, proc.stderr + text
    assert "this Slurm step was given no GPUs" in text and "--gres=gpu:G" in text, text
    assert "refused=4" in text, text
    assert not _records(tmp_path, "vllm")  # no engine ran on any node


def test_follow_prints_the_reason_a_node_failed(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """Issue 36: when a node failed, `--follow` printed only its exit code; the reason was only in that node's log.
    Node n2's machine cannot be read (its snapshot is damaged for this job): its launch fails with one error line
    (exit 7), srun ends the step, and the follower prints that line, naming the node."""
    snap = cluster.root / "snap-n2.json"
    kept = snap.read_text()
    snap.write_text("{this is not JSON")
    try:
        proc, job, logs = _submit(cluster, tmp_path, ["vllm", "serve", "M"])
    finally:
        snap.write_text(kept)
    assert proc.returncode == 7, proc.stderr + _node_logs(logs, job)
    assert f"job {job} failed: exit 7 (node n2 first)" in proc.stderr, proc.stderr
    reason = [line for line in proc.stderr.splitlines() if line.startswith(f"gpulaunch: job {job} node 1: ")]
    assert len(reason) == 1 and str(snap) in reason[0], proc.stderr + _node_logs(logs, job)
    assert (f"gpulaunch: error: {reason[0].split(': ', 2)[2]}") in (logs / f"job-{job}.node-1.log").read_text()
