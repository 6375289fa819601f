"""gpulaunch's per-GPU peak of a training step beside PyTorch's own count, case by case (issue 34).

For every case of tests/training_oracle.py's matrix (families × precision × full/LoRA × gradient
checkpointing × plain/chunked loss × sequence length), this builds the tiny model from its config with
the real transformers/peft code on CPU, runs two real steps under PyTorch's MemTracker, asks gpulaunch
(fit/training/memory.py) about the same model read from its config.json + header-only safetensors, and
prints gpulaunch ÷ PyTorch for the peak and for each term of each phase (the start of backward; the
optimizer step). Needs torch, transformers and peft (pip install -e '.[test]' after torch==2.13.0).

    python benchmarks/training_sizing.py [--family llama] [--sharded | --deepspeed] [--json out.json]

``--sharded``: rank 0 of FSDP2 steps over 2 and 8 fake ranks instead (tests/training_oracle_sharded.py;
accelerate's own wrapping, torch's FSDPMemTracker), with offload's host bytes. ``--deepspeed``: rank 0 of real
DeepSpeed ZeRO-1/2/3 steps over 2 gloo ranks (both, the larger each phase, in the ``-every_rank`` cases;
tests/training_oracle_deepspeed.py; needs deepspeed installed),
every case measured first in one pair of processes; its columns are the two phases' totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from training_oracle import compare, matrix, write_model  # noqa: E402

TERMS = ("weights", "gradients", "optimizer", "activations", "total")


def _ratio(pair: tuple[int, int]) -> str:
    ours, theirs = pair
    if not theirs:
        return "   -  " if not ours else "  inf "
    return f"{ours / theirs:6.3f}"


def _cases(args: argparse.Namespace) -> list[tuple[str, Any, Any]]:
    """(name, case, compare) for every case asked: the one-process matrix, or --sharded's FSDP ranks."""
    if args.deepspeed:
        from training_oracle_deepspeed import compare_zero, measure_zero, zero_matrix

        cases = [zc for zc in zero_matrix() if not args.family or zc.case.family in args.family]
        return [(zc.name, zc.case, lambda folder, zc=zc, m=m: compare_zero(zc, folder, m))
                for zc, m in zip(cases, measure_zero(cases))]
    if args.sharded:
        from training_oracle_sharded import compare_sharded, sharded_matrix

        return [(sc.name, sc.case, lambda folder, sc=sc: compare_sharded(sc, folder)) for sc in sharded_matrix()
                if not args.family or sc.case.family in args.family]
    return [(case.name + ("" if case.optimizer == "adamw_torch" else "-" + case.optimizer), case,
             lambda folder, case=case: compare(case, folder))
            for case in matrix() if not args.family or case.family in args.family]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", help="only these families")
    ap.add_argument("--sharded", action="store_true",
                    help="FSDP2 ranks over fake process groups (tests/training_oracle_sharded.py) instead")
    ap.add_argument("--deepspeed", action="store_true",
                    help="DeepSpeed ZeRO ranks over 2 gloo processes (tests/training_oracle_deepspeed.py) instead")
    ap.add_argument("--json", help="write every case's numbers here")
    args = ap.parse_args()
    rows = []
    head = " ".join(f"{'bw.' + t[:3]:>6s}" for t in TERMS) + " " + " ".join(f"{'st.' + t[:3]:>6s}" for t in TERMS)
    print(f"{'case':58s} {'peak':>6s} {'at (ours/torch)':17s} {head}")
    worst_over = worst_under = 1.0
    for name, case, compare_one in _cases(args):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            r = compare_one(write_model(case, Path(tmp)))
        ratio = r["peak"][0] / r["peak"][1]
        worst_over, worst_under = max(worst_over, ratio), min(worst_under, ratio)
        at = f"{r['peak_at'][0][:4]}/{r['peak_at'][1][:4]}"
        cols = " ".join(_ratio(r["backward"][t]) if t in r["backward"] else "   .  " for t in TERMS) + " " + \
            " ".join(_ratio(r["optimizer step"][t]) if t in r["optimizer step"] else "   .  " for t in TERMS)
        flag = "" if 0.99 <= ratio <= 1.03 else "  OFF"
        host = f" host {_ratio(r['host'])}" if r.get("host", (0, 0))[1] else ""
        print(f"{name:58s} {ratio:6.3f} {at:17s} {cols}{host}{flag}  ({time.perf_counter() - t0:.1f}s)", flush=True)
        rows.append({"case": name, "peak": r["peak"], "peak_at": r["peak_at"], "host": r.get("host"),
                     "backward": r["backward"], "optimizer step": r["optimizer step"]})
    print(f"{len(rows)} cases; peak ratio from {worst_under:.3f} to {worst_over:.3f} "
          f"(target: 0.99 to 1.03)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
