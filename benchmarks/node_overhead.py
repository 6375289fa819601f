#!/usr/bin/env python3
"""What the node task of a ``--nodes`` run adds to an engine's start on each node (issue 24; target ≤ 0.1 s).

    python benchmarks/node_overhead.py [--rounds 40] [--json FILE]

Three commands, interleaved round robin (benchmarks/timing.py), on the bundled ``dgx-h100`` machine with a
private lock directory, each exec'ing ``true`` as the engine:

* ``single``: ``gpulaunch --auto 2 -- true``, one node as today;
* ``head``: ``gpulaunch --nodes 2 --gpus-per-node 2 --node-rank 0 --head 127.0.0.1:PORT -- true``;
* ``worker``: the same as rank 1, which also checks that the head answers (here: a refused connection,
  at once, as when the head's engine is not listening yet).

Reported: each median and the node task's extra over ``single`` (the target: at most 100 ms). Inside a
Slurm step a node also asks ``scontrol`` for the node list (and the head for its NodeAddr), and waits for
the head's file: time the network and slurmctld add, not gpulaunch's, and not measured here.
Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import Bench, measure, paired_args, row_line  # noqa: E402

TARGET_MS = 100.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    args = paired_args(__doc__.splitlines()[0], argv)
    locks = tempfile.mkdtemp(prefix="gpulaunch-bench-nodes-")
    port = _free_port()  # nothing listens there: the worker's check is refused at once
    base = [sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "-q", "--lock-dir", locks]
    node = ["--nodes", "2", "--gpus-per-node", "2", "--head", f"127.0.0.1:{port}"]
    benches = [Bench("single", "gpulaunch --auto 2 -- true", [*base, "--auto", "2", "--", "true"]),
               Bench("head", "node task, rank 0", [*base, *node, "--node-rank", "0", "--", "true"]),
               Bench("worker", "node task, rank 1 (checks the head)", [*base, *node, "--node-rank", "1", "--", "true"])]
    measure(benches, args.rounds)
    for b in benches:
        print(row_line(b))
    single = statistics.median(benches[0].samples) * 1000 if benches[0].ok else None
    doc = {"target_ms": TARGET_MS, "rows": [b.as_json() for b in benches], "extra_ms": {}}
    for b in benches[1:]:
        if b.ok and single is not None:
            extra = statistics.median(b.samples) * 1000 - single
            doc["extra_ms"][b.key] = round(extra, 3)
            print(f"{b.label}: +{extra:.1f} ms over a single-node launch "
                  f"({'within' if extra <= TARGET_MS else 'over'} the {TARGET_MS:.0f} ms target)")
        elif b.error:
            print(f"{b.label}: {b.error}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.chdir(tempfile.gettempdir())  # `python -m` would import a checkout in the working directory first
    sys.exit(main())
