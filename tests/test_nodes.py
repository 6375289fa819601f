"""`--nodes` without a Slurm cluster: each engine's flags on each rank, contradictions, bad input, the
script `--nodes --slurm --dry-run` shows, and two nodes started by hand (`--node-rank --head`) meeting for
real on this host through a fake vLLM (tests/fake_engine.py). The Slurm side: tests/test_nodes_slurm.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sharing_helpers import env, gl

TESTS = Path(__file__).resolve().parent
HEAD = ["--head", "10.0.0.1:29400"]


def _run(args: list[str], tmp_path: Path, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gl("--snapshot", "dgx-h100", *args), env=env(tmp_path / "locks", **extra),
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def _exec_line(args: list[str], tmp_path: Path, rank: int = 1) -> list[str]:
    proc = _run(["-q", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", str(rank), *HEAD, "--dry-run", "--",
                 *args], tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("exec "))
    return shlex.split(line)[1:]


@pytest.mark.parametrize("command, rank, want", [
    ("vllm serve M", 0, "vllm serve M --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29400 "
                        "--tensor-parallel-size 2 --pipeline-parallel-size 2"),
    ("vllm serve M", 1, "vllm serve M --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29400 "
                        "--tensor-parallel-size 2 --pipeline-parallel-size 2 --headless"),
    ("vllm serve M -tp 4", 1, "vllm serve M -tp 4 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29400 "
                              "--pipeline-parallel-size 1 --headless"),
    ("python -m sglang.launch_server --model-path M", 1,
     "python -m sglang.launch_server --model-path M --tp-size 4 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:29400"),
    ("torchrun train.py --lr 1", 0, "torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "
                                    "10.0.0.1:29400 --rdzv-id gpulaunch-10.0.0.1-29400 --rdzv-conf is_host=1 --local-addr 10.0.0.1 "
                                    "train.py --lr 1"),
    ("torchrun --nproc_per_node=gpu train.py", 1, "torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 "
                                                  "--rdzv-id gpulaunch-10.0.0.1-29400 --rdzv-conf is_host=0 "
                                                  "--local-addr ADDR --nproc_per_node=gpu train.py"),
    # the user's own --local-addr is theirs (an address on the network they want): kept, nothing added
    ("torchrun --local_addr 10.0.0.9 train.py", 1, "torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d "
                                                   "--rdzv-endpoint 10.0.0.1:29400 --rdzv-id gpulaunch-10.0.0.1-29400 "
                                                   "--rdzv-conf is_host=0 --local_addr 10.0.0.9 train.py"),
    ("accelerate launch --multi_gpu train.py", 1, "accelerate launch --num_machines 2 --machine_rank 1 --main_process_ip "
                                                  "10.0.0.1 --main_process_port 29400 --num_processes 4 --multi_gpu train.py"),
    ("python train.py --rank {node_rank} --of {nnodes} --at {{head_addr}}:x --addr={head_addr} {head_port} --pp {pp} {{pp}}", 1,
     "python train.py --rank 1 --of 2 --at {head_addr}:x --addr=10.0.0.1 29400 --pp 2 {pp}"),
])
def test_each_engine_gets_its_own_flags(tmp_path: Path, command: str, rank: int, want: str) -> None:
    assert _exec_line(shlex.split(command), tmp_path, rank) == shlex.split(want)


def test_deepspeed_gets_a_hostfile_and_this_nodes_gpus_as_its_slots(tmp_path: Path) -> None:
    """Its launcher sets CUDA_VISIBLE_DEVICES from the slots: they must be the GPUs gpulaunch chose here."""
    argv = _exec_line(["deepspeed", "train.py", "--deepspeed", "ds.json"], tmp_path)
    assert argv[:9] == ["deepspeed", "--no_ssh", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port",
                        "29400", "--hostfile"]
    assert argv[10:12] == ["--include", "node0:0,1@node1:2,3"] and argv[12:] == ["train.py", "--deepspeed", "ds.json"]


def test_gpu_numbers_handed_to_deepspeed_and_ray_count_the_gpus_by_bus_id(tmp_path: Path) -> None:
    """Where NVML numbers the GPUs otherwise than by bus id (as NVIDIA's mock NVML L40S profile does), the
    numbers deepspeed's --include and Ray's CUDA_VISIBLE_DEVICES pass on must be CUDA's under PCI_BUS_ID."""
    from childproc import example, write

    doc = example("dgx-h100")
    gpus = doc["gpus"]
    gpus[2]["pci_bus_id"], gpus[6]["pci_bus_id"] = gpus[6]["pci_bus_id"], gpus[2]["pci_bus_id"]
    machine = write(tmp_path, doc)  # by bus id: GPU 0, 1, 6, 3, 4, 5, 2, 7

    def dry_run(*command: str) -> list[str]:
        proc = subprocess.run(gl("--snapshot", machine, "-q", "--nodes", "2", "--gpus-per-node", "2", "--node-rank",
                                 "1", *HEAD, "--dry-run", "--", *command), env=env(tmp_path / "locks"),
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    lines = dry_run("deepspeed", "train.py")  # GPUs 2 and 3 chosen, as on dgx-h100 (0 and 1 are busy)
    assert "GPULAUNCH_GPUS=2,3" in lines
    assert "--include node0:0,1@node1:6,3" in next(line for line in lines if line.startswith("exec "))
    lines = dry_run("vllm", "serve", "M", "--distributed-executor-backend", "ray")
    assert "CUDA_VISIBLE_DEVICES=6,3" in lines and "GPULAUNCH_GPUS=2,3" in lines


def test_llama_cpp_is_spread_only_when_asked_and_ray_only_when_asked(tmp_path: Path) -> None:
    proc = _run(["--nodes", "2", "--node-rank", "0", *HEAD, "--dry-run", "--", "llama-server", "-m", "m.gguf"], tmp_path)
    assert proc.returncode == 2 and "write --rpc {rpc}" in proc.stderr, proc.stderr
    ray = _exec_line(["vllm", "serve", "M", "--distributed-executor-backend", "ray"], tmp_path)
    assert ray[:6] == ["ray", "start", "--address", "10.0.0.1:29400", "--num-gpus", "2"] and ray[-1] == "--block"


@pytest.mark.parametrize("command, message", [
    ("torchrun --nnodes 3 train.py", "`torchrun --nnodes 3` contradicts this run: gpulaunch sets --nnodes 2"),
    ("torchrun --standalone train.py", "`torchrun --standalone` does not go with --nodes"),
    ("vllm serve M --node-rank 0", "`vllm serve --node-rank 0` contradicts this run: gpulaunch sets --node-rank 1"),
    ("vllm serve M -tp 3", "`vllm serve --tensor-parallel-size 3` does not use the run's 4 GPUs"),
    ("deepspeed --hostfile h train.py", "`deepspeed --hostfile` does not go with --nodes"),
    ("text-generation-launcher --model-id M", "text-generation-inference shards a model over one machine's GPUs"),
    ("mlc_llm serve M", "MLC-LLM shards a model over one machine's GPUs"),
])
def test_contradictions_and_engines_without_a_multi_node_mode_are_refused(tmp_path: Path, command: str,
                                                                          message: str) -> None:
    proc = _run(["--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", *HEAD, "--dry-run", "--",
                 *shlex.split(command)], tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("args, code, message", [
    (["--nodes", "0"], 2, "gpulaunch: error: --nodes: must be 1 or more, got 0"),
    (["--nodes", "2"], 2, "--nodes 2 needs Slurm, or --node-rank and --head (hint: submit it: gpulaunch --nodes 2 --slurm"),
    (["--nodes", "2", "--node-rank", "1"], 2, "--nodes 2 by hand needs --head HOST:PORT too"),
    (["--nodes", "2", "--node-rank", "1", "--head", "h"], 2, "--head h: the other nodes need the head's port too"),
    (["--nodes", "2", "--node-rank", "2", *HEAD], 2, "--node-rank 2: the ranks of 2 nodes are 0 to 1"),
    (["--nodes", "2", "--node-rank", "-1", *HEAD], 2, "--node-rank -1: the ranks of 2 nodes are 0 to 1"),
    (["--nodes", "2", "--gpus-per-node", "9", "--node-rank", "1", *HEAD], 4, "node 1 of 2: need 9 GPUs"),
    (["--nodes", "2", "--auto", "2", "--node-rank", "1", *HEAD], 2, "--auto does not go with --nodes"),
    (["--head", "h:70000", "--nodes", "2"], 2, "--head: port 70000 is not between 1 and 65535"),
    (["--slurm"], 2, "--slurm is for a run over several nodes: it needs --nodes N (hint: for a sweep"),
    (["--gpus-per-node", "2"], 2, "--gpus-per-node is for a run over several nodes: it needs --nodes N"),
    (["--nodes", "2", "--slurm"], 2, "--nodes 2 --slurm needs --gpus-per-node G"),
    (["--nodes", "2", "--gpus-per-node", "2", "--slurm", "--sbatch-arg=--nodes=3"], 2,
     "--sbatch-arg '--nodes=3': give --nodes to gpulaunch"),
    (["--fit", "model", "--slurm"], 2, "names no model gpulaunch can read"),
])
def test_bad_input_is_one_line_with_a_documented_code(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    proc = _run([*args, "--", "python", "train.py"], tmp_path)
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("gpulaunch: error: ") and proc.stderr.count("\n") == 1


def test_a_worker_given_a_loopback_head_by_hand_is_warned(tmp_path: Path) -> None:
    """Only a head on this same machine is at 127.0.0.1 (or a name for it), and the reachability check
    cannot tell (a refusal counts: the head's engine may not listen yet), so the worker says so."""
    for head, warned in (("localhost:29400", True), ("127.0.0.1:29400", True), ("10.0.0.1:29400", False)):
        proc = _run(["--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head", head, "--dry-run", "--",
                     "torchrun", "train.py"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        name = head.rpartition(":")[0]
        assert proc.stderr.startswith(f"gpulaunch: warning: --head {name} is this machine's own loopback address: ") \
            is warned, proc.stderr
    proc = _run(["--nodes", "2", "--gpus-per-node", "2", "--node-rank", "0", "--head", "127.0.0.1:29400", "--dry-run",
                 "--", "torchrun", "train.py"], tmp_path)
    assert "warning" not in proc.stderr  # the head itself: a one-machine run by hand is fine


def test_node_placeholders_need_nodes(tmp_path: Path) -> None:
    proc = _run(["--auto", "1", "--", "python", "train.py", "--rank", "{node_rank}"], tmp_path)
    assert proc.returncode == 2 and "{node_rank} is filled in only with --nodes" in proc.stderr


def test_a_batch_script_is_refused_with_the_srun_that_fixes_it(tmp_path: Path) -> None:
    """Every node rank 0: --nodes run once by a batch shell, instead of by srun on every node."""
    proc = _run(["--nodes", "2", "--", "python", "train.py"], tmp_path, SLURM_JOB_ID="42", SLURM_NODEID="0",
                SLURM_PROCID="0", SLURM_JOB_NODELIST="n[1-2]")
    assert proc.returncode == 2
    assert ("--nodes 2 here would run once, on one node: this is Slurm job 42's batch script or shell" in proc.stderr
            and "hint: start it on every node: srun --ntasks-per-node=1 gpulaunch --nodes 2 -- ..." in proc.stderr)


def test_an_unresolvable_head_is_exit_11_naming_the_interface_variables(tmp_path: Path) -> None:
    proc = _run(["--nodes", "2", "--gpus-per-node", "4", "--node-rank", "1", "--head", "no-such-head.invalid:29400", "--", "python", "x.py"],
                tmp_path)
    assert proc.returncode == 11, proc.stderr
    assert "'no-such-head.invalid' does not resolve" in proc.stderr and "NCCL_SOCKET_IFNAME" in proc.stderr
    assert "GLOO_SOCKET_IFNAME" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (ip netns)")
def test_a_head_with_no_route_is_exit_11(tmp_path: Path) -> None:
    """In a network namespace of its own (only a loopback, down), the head's network is unreachable: the
    connect fails at once with ENETUNREACH, nothing is sent anywhere."""
    name = f"gltest-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        proc = subprocess.run(["ip", "netns", "exec", name, *gl("--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "4",
                               "--node-rank", "1", "--head", "10.254.0.1:29400", "--", "python", "x.py")],
                              env=env(tmp_path / "locks", GPULAUNCH_RENDEZVOUS_TIMEOUT="1s"), capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
    finally:
        subprocess.run(["ip", "netns", "delete", name])
    assert proc.returncode == 11, proc.stderr
    assert "the head 10.254.0.1:29400 cannot be reached from" in proc.stderr and "NCCL_SOCKET_IFNAME" in proc.stderr


def test_the_slurm_script_is_shown_by_dry_run_and_nothing_is_written(tmp_path: Path) -> None:
    proc = _run(["--nodes", "2", "--gpus-per-node", "8", "--slurm", "--partition", "gpu", "--time", "2h",
                 "--log-dir", str(tmp_path / "logs"), "--dry-run", "--", "vllm", "serve", "M", "--served-model-name", "$HOME"],
                tmp_path, PATH="/nonexistent")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"# sbatch --parsable --output={tmp_path}/logs/slurm-%j.out {tmp_path}/logs/nodes.sh" in out
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:8", "#SBATCH --partition=gpu",
                 "#SBATCH --time=02:00:00"):
        assert f"\n{line}\n" in out
    assert "exec srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=1" in out
    assert "--nodes 2 --gpus-per-node 8 --log-dir" in out and "-- vllm serve M --served-model-name '$HOME'" in out
    assert "$SLURM" not in out and not (tmp_path / "logs").exists()


def _fake_vllm(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text(f"#!{sys.executable}\nimport sys\nsys.path[:0] = [{str(TESTS)!r}, "
                                 f"{str(TESTS.parent)!r}]\nimport fake_engine\nfake_engine.main('vllm')\n")
    (bindir / "vllm").chmod(0o755)
    return bindir


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_nodes_started_by_hand_meet_at_the_head(tmp_path: Path) -> None:
    """`--nodes 2 --node-rank R --head HOST:PORT` on each "machine" (here two lock directories on one host):
    each reserves its GPUs, gets its flags, and the fake engine's rank 1 reaches rank 0 at the head."""
    bindir = _fake_vllm(tmp_path)
    records = tmp_path / "records"
    records.mkdir()
    port = _free_port()
    procs = []
    for rank in (1, 0):  # the worker first: it waits for the head
        environ = env(tmp_path / f"locks-{rank}", FAKE_RECORDS=str(records), PATH=f"{bindir}:{os.environ['PATH']}")
        procs.append(subprocess.Popen(gl("--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2",
                                         "--node-rank", str(rank), "--head", f"127.0.0.1:{port}", "--", "vllm", "serve",
                                         "M"), env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=tmp_path))
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    head, worker = (json.loads((records / f"vllm-{r}.json").read_text()) for r in (0, 1))
    assert head["joined"] == [1] and worker["acked"] and head["port"] == worker["port"] == port
    assert len(head["held"]) == len(worker["held"]) == 2 and head["cvd"] == worker["cvd"]  # same GPUs: two machines' views
    assert "--headless" in worker["argv"] and "--headless" not in head["argv"]
    assert f"gpulaunch: node 1 of 2 (node1), head node0 at 127.0.0.1:{port}: worker (headless): vllm serve M" \
           in outs[0][1]


def test_a_head_port_given_by_hand_that_another_job_holds_is_refused(tmp_path: Path) -> None:
    """Two runs on one fixed port would join each other: the head says so before anything starts."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = _run(["--nodes", "2", "--gpus-per-node", "4", "--node-rank", "0", "--head", f"127.0.0.1:{port}", "--", "python", "x.py"],
                    tmp_path)
    assert proc.returncode == 11, proc.stderr
    assert f"port {port} is in use on" in proc.stderr and "leave the port out" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (ip netns)")
def test_a_loopback_node_addr_becomes_the_heads_address_toward_the_others(tmp_path: Path) -> None:
    """Debian's `127.0.1.1 HOSTNAME`, or a NodeAddr left at a name that resolves to loopback on the head: the
    head gives the others its address on the interface that routes to them (a network namespace of the
    test's own, a veth pair with 10.254.0.1/24 on one end; no packet is sent). Loopback is kept only when
    every node's address is loopback (one host)."""
    name = f"gltest-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for step in (["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                     ["ip", "addr", "add", "10.254.0.1/24", "dev", "v0"], ["ip", "link", "set", "v0", "up"],
                     ["ip", "link", "set", "v1", "up"], ["ip", "link", "set", "lo", "up"]):
            subprocess.run(["ip", "netns", "exec", name, *step], check=True)
        code = ("from gpu_launch.cluster import rendezvous as r; "
                "print(r.head_address(['n1', 'n2'], {'n1': '127.0.1.1', 'n2': '10.254.0.7'})); "
                "print(r.head_address(['n1', 'n2'], {'n1': '127.0.0.1', 'n2': '127.0.0.1'}))")
        proc = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, cwd=TESTS.parent)
    finally:
        subprocess.run(["ip", "netns", "delete", name])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["10.254.0.1", "127.0.0.1"]
