"""A stand-in for an engine's multi-node mode (vLLM, SGLang): it reads the flags gpulaunch filled in and
acts out the engine's contract. Rank 0 listens on the head's address and port; every other rank connects
and says its rank; the head answers once all have joined. Each rank records what it was given (argv, the
GPUs, whether its node's locks are held, the variables) as FAKE_RECORDS/KIND-RANK.json.

``FAKE_FAIL_RANK=R``: rank R exits 3 at once, as an engine that fails on one node does.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time



def _options(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if eq:
                out[name] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out[name] = argv[i + 1]
                i += 1
            else:
                out[name] = ""
        i += 1
    return out


def _held(lock_dir: str) -> list[str]:
    """The lock files in this node's lock directory that are held (by this process, through gpulaunch)."""
    held = []
    for name in sorted(os.listdir(lock_dir)):
        if not name.endswith(".lock") or name == "queue.lock":
            continue
        with open(os.path.join(lock_dir, name), "rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(name)
            else:
                fcntl.flock(fh, fcntl.LOCK_UN)
    return held


def main(kind: str) -> None:
    argv = sys.argv[1:]
    opts = _options(argv)
    if kind == "vllm":
        head, port = opts["--master-addr"], int(opts["--master-port"])
    else:  # sglang
        head, _, port_text = opts["--dist-init-addr"].rpartition(":")
        port = int(port_text)
    rank, nnodes = int(opts["--node-rank"]), int(opts["--nnodes"])
    env = os.environ
    record = {"kind": kind, "argv": argv, "rank": rank, "nnodes": nnodes, "head": head, "port": port,
              "node": env.get("SLURMD_NODENAME"), "cvd": env.get("CUDA_VISIBLE_DEVICES"), "gpus": env.get("GPULAUNCH_GPUS"),
              "lock_dir": env.get("GPULAUNCH_LOCK_DIR"), "pid": os.getpid(),
              "held": _held(env["GPULAUNCH_LOCK_DIR"]),
              "env": {k: v for k, v in env.items() if k.startswith(("NCCL_", "GLOO_", "VLLM_HOST_IP", "GPULAUNCH_N",
                                                                    "GPULAUNCH_HEAD"))}}
    out = os.path.join(env["FAKE_RECORDS"], f"{kind}-{rank}.json")
    if env.get("FAKE_FAIL_RANK") == str(rank):
        record["failed"] = True
        _write(out, record)
        sys.exit(3)
    if rank == 0:
        with socket.create_server((head, port)) as server:  # the head's address is this node's, the port free
            server.settimeout(60)
            joined, peers = [], []
            while len(joined) < nnodes - 1:
                conn, _ = server.accept()
                words = conn.makefile().readline().split()
                if not words:  # a connection that says nothing (gpulaunch's reachability check): as a TCPStore does
                    conn.close()
                    continue
                joined.append(int(words[1]))
                peers.append(conn)
            for conn in peers:
                conn.sendall(b"ok\n")
                conn.close()
        record["joined"] = sorted(joined)
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection((head, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            conn.sendall(f"rank {rank}\n".encode())
            record["acked"] = conn.makefile().readline().strip() == "ok"
    _write(out, record)


def _write(path: str, record: dict) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(record, fh)
    os.replace(path + ".tmp", path)
