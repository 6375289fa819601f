"""How long gpulaunch takes to read a model's headers (issue 18: "well under 100 ms").

``python benchmarks/model_headers.py`` writes, in a temporary directory, header-only sparse files
with the real ``gguf`` writer (the test extra: ``pip install -e '.[test]'``):

* ``gguf-70b``: Llama-3.1-70B's layout (80 layers, 723 tensors, Q4_K/Q6_K) with its 128,256-token
  vocabulary and 280,147 merges: a 45 GB file whose data region is a hole;
* ``gguf-152k-vocab``: Qwen2.5-7B's layout (28 layers) with a 152,064-token vocabulary and 151,387 merges;
* ``safetensors-70b``: the same 70B layout as 30 bf16 safetensors shards with their index and config.json;

then times :func:`gpu_launch.modelfile.read.read_model` on each (median of ``--repeat`` runs, in
process, after one warm-up run so the page cache holds the headers) and prints wall-clock and CPU
milliseconds (CPU time is the steadier figure on a busy machine) and the bytes read. ``--reference`` also times ``gguf.GGUFReader`` on the GGUF files, for comparison.
Not a timed test: tests/test_modelfile_*.py check correctness, this measures speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gpu_launch.modelfile.read import read_model  # noqa: E402


def _fixtures(root: Path) -> dict[str, Path]:
    from model_fixtures import Gguf, llama70b, llama_tensors, safetensors_header, write_gguf

    out = {"gguf-70b": write_gguf(root / "llama-70b.gguf", llama70b())[0]}
    qwen = Gguf("qwen2", {"qwen2.block_count": 28, "qwen2.context_length": 32768, "qwen2.embedding_length": 3584,
                          "qwen2.attention.head_count": 28, "qwen2.attention.head_count_kv": 4},
                llama_tensors(28, 3584, 28, 4, 18944, 152064), vocab=152064, merges=151387)
    out["gguf-152k-vocab"] = write_gguf(root / "qwen2.5-7b.gguf", qwen)[0]
    folder = root / "llama-70b-safetensors"
    folder.mkdir()
    names = [t for t in llama_tensors(80, 8192, 64, 8, 28672, 128256)]
    shards = 30
    weight_map = {}
    for k in range(shards):
        part = names[k::shards]
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {t.name.replace("blk.", "model.layers."): ("BF16", t.shape) for t in part}
        header = safetensors_header(tensors, {"BF16": 2})
        with open(folder / fname, "wb") as fh:
            fh.write(header)
            fh.truncate(len(header) + sum(2 * _elements(t.shape) for t in part))
        weight_map.update({n: fname for n in tensors})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "hidden_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    out["safetensors-70b"] = folder
    return out


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _median_ms(fn, repeat: int, clock=time.perf_counter) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up: the page cache holds the headers afterwards
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--reference", action="store_true", help="also time gguf.GGUFReader (slow)")
    args = parser.parse_args(argv)
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("skipped: the gguf package is not installed (pip install -e '.[test]')")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        files = _fixtures(Path(tmp))
        print(f"{'model':18} {'file size':>12} {'read (MB)':>10} {'wall ms':>8} {'cpu ms':>7} {'GGUFReader ms':>14}")
        for name, path in files.items():
            facts = read_model(str(path))
            ms = _median_ms(lambda p=path: read_model(str(p)), args.repeat)
            cpu = _median_ms(lambda p=path: read_model(str(p)), args.repeat, time.process_time)
            size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size
            ref = ""
            if args.reference and name.startswith("gguf"):
                from gguf import GGUFReader

                ref = f"{_median_ms(lambda p=path: GGUFReader(p), 1):14.0f}"
            print(f"{name:18} {size / 1e9:10.1f}GB {facts.header_bytes / 1e6:10.2f} {ms:8.1f} {cpu:7.1f} {ref:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
