"""`gpulaunch --nodes 2 --slurm` with each Slurm node in a network namespace of its own.

tests/test_nodes_slurm.py runs its two slurmd on one host, where every node's loopback is the same one, so
a head address of 127.0.0.1 would pass there as well as the right one. Here each slurmd runs in its own
network namespace (tests/slurm_cluster.py, ``netns=True``): node n1 is 10.254.X.1, n2 is 10.254.X.2, joined
by a bridge on the host (where slurmctld runs, at .254), and 127.0.0.1 on n2 is n2 alone. A rendezvous
that works here works because the others were given the head's own address. Skips, with the reason,
where Slurm cannot be started or network namespaces cannot be made (not root, no CAP_NET_ADMIN).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurm_cluster
from sharing_helpers import env, gl
from test_nodes_slurm import _bin, _node_logs, _records, _submit, start_nodes, torchrun_over_two_nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    started = start_nodes(tmp_path_factory.mktemp("slurm-netns"), netns=True)
    print(f"\nslurm fixture: 2 nodes in their own network namespaces, idle in {started.started_in:.1f} s",
          file=sys.stderr)
    try:
        yield started
    finally:
        started.stop()


def _addr(cluster: slurm_cluster.Cluster, node: str) -> str:
    assert cluster.network is not None
    return cluster.network.addresses[node]


def test_the_nodes_reach_each_other_only_at_their_own_addresses(cluster: slurm_cluster.Cluster) -> None:
    """What makes the other tests here worth running: a server on n1 is reached from n2 at n1's address,
    and not at 127.0.0.1."""
    assert cluster.network is not None
    server = subprocess.Popen([*cluster.network.run_in("n1"), sys.executable, "-c",
                               "import socket, sys\ns = socket.create_server(('0.0.0.0', 0))\n"
                               "print(s.getsockname()[1], flush=True)\ns.settimeout(30)\ns.accept()\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        probe = ("import socket, sys\n"
                 "for host in sys.argv[1:]:\n"
                 "    try:\n        socket.create_connection((host, %d), timeout=5).close(); print(host, 'answers')\n"
                 "    except OSError as e:\n        print(host, type(e).__name__)\n" % port)
        out = subprocess.run([*cluster.network.run_in("n2"), sys.executable, "-c", probe, "127.0.0.1", _addr(cluster, "n1")],
                             capture_output=True, text=True, timeout=60)
    finally:
        server.kill()
        server.wait()
    assert out.stdout.splitlines() == ["127.0.0.1 ConnectionRefusedError", f"{_addr(cluster, 'n1')} answers"], out


def test_fake_vllm_worker_joins_the_head_at_n1s_own_address(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    proc, job, logs = _submit(cluster, tmp_path, ["vllm", "serve", "./M"])
    assert proc.returncode == 0, proc.stderr + _node_logs(logs, job)
    ranks = _records(tmp_path, "vllm")
    head, worker = ranks[0], ranks[1]
    assert (head["node"], worker["node"]) == ("n1", "n2")
    # The head bound n1's address (the fake binds what it was given: 127.0.0.1 would have been n1's loopback,
    # which n2 cannot reach), and the worker connected to it from n2 and was answered.
    assert head["head"] == worker["head"] == _addr(cluster, "n1") and head["joined"] == [1] and worker["acked"] is True
    assert f"head n1 at {_addr(cluster, 'n1')}:{head['port']}: head: vllm serve" in _node_logs(logs, job)


def test_torchrun_rendezvous_across_the_namespaces(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    """The real c10d rendezvous and gloo all-reduce, each node's traffic on its own interface (gl0)."""
    took = torchrun_over_two_nodes(cluster, tmp_path, _addr(cluster, "n1"), GLOO_SOCKET_IFNAME="gl0",
                                   NCCL_SOCKET_IFNAME="gl0")
    # Each node's own address as torchrun's --local-addr: without it the workers' MASTER_ADDR was the first
    # node's host name, which here (one host name, one /etc/hosts) is the host's, not a node's, and the run
    # hung after the rendezvous until the test's 240 s ran out.
    logs = (tmp_path / "logs").glob("job-*.node-1.log")
    assert f"--rdzv-conf is_host=0 --local-addr {_addr(cluster, 'n2')} " in next(logs).read_text()
    print(f"\ntorchrun over 2 namespaced nodes × 2 processes in {took:.1f} s", file=sys.stderr)


def test_by_hand_a_worker_joins_the_head_at_the_address_it_printed(cluster: slurm_cluster.Cluster,
                                                                   tmp_path: Path) -> None:
    """Without Slurm: `--node-rank 0 --head ADDR` on n1 picks the port and prints the --head for the others;
    n2 started with it joins. A worker given 127.0.0.1 instead is warned: only its own machine is there."""
    assert cluster.network is not None
    records = tmp_path / "records"
    records.mkdir()
    bindir = _bin(tmp_path)  # the fake vllm on PATH

    def node(rank: int, *head: str) -> subprocess.Popen[str]:
        environ = env(tmp_path / f"locks-{rank}", FAKE_RECORDS=str(records), GPULAUNCH_RENDEZVOUS_TIMEOUT="20s")
        environ["PATH"] = f"{bindir}:{environ['PATH']}"
        return subprocess.Popen([*cluster.network.run_in(f"n{rank + 1}"), *gl(
            "--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", str(rank), *head, "--",
            "vllm", "serve", "./M")], env=environ, stderr=subprocess.PIPE, text=True, cwd=tmp_path)

    head = node(0, "--head", _addr(cluster, "n1"))
    try:
        assert head.stderr is not None
        said = head.stderr.readline()
        printed = re.match(r"gpulaunch: head at (\S+): start the other nodes with --head (\S+)\n", said)
        assert printed and printed.group(1) == printed.group(2), said
        assert printed.group(1).startswith(_addr(cluster, "n1") + ":"), said
        worker = node(1, "--head", printed.group(1))
        _, worker_err = worker.communicate(timeout=60)
        head_err = said + head.communicate(timeout=60)[1]
    finally:
        head.kill()
    assert worker.returncode == 0 and head.returncode == 0, worker_err + head_err
    ranks = _records(tmp_path, "vllm")
    assert ranks[0]["joined"] == [1] and ranks[1]["acked"] is True
    assert ranks[0]["head"] == ranks[1]["head"] == _addr(cluster, "n1")
    assert "warning" not in worker_err

    # The same worker given 127.0.0.1 at the head's port: a warning (n2's loopback refuses, which cannot be
    # told from a head whose engine is not listening yet), then the engine's own connect fails.
    loop = subprocess.run([*cluster.network.run_in("n2"), *gl(
        "--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head",
        f"127.0.0.1:{ranks[0]['port']}", "--dry-run", "--", "vllm", "serve", "./M")],
        env=env(tmp_path / "locks-loop"), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert loop.stderr.startswith("gpulaunch: warning: --head 127.0.0.1 is this machine's own loopback address: "
                                  "only a head started on this same machine is there (hint: give the --head "
                                  "HOST:PORT the head printed)\n"), loop.stderr
