"""Seconds and peak memory of `gpulaunch plan` on the hostile model files of issue 27 (item 2).

``python benchmarks/hostile_models.py [--only NAME]`` writes, in a temporary directory (about 1.2 GB
of real bytes and sparse holes), a normal model of each format and the hostile ones, then runs
``gpulaunch --snapshot dgx-h100 plan FILE`` on each as a subprocess and prints its wall-clock
seconds, its peak resident memory (``ru_maxrss`` of that child alone, from ``os.wait4``), its exit
code and the first line of stderr:

* ``gguf-normal``: Llama-3.1-8B's layout, 291 tensors, written by the real ``gguf`` writer;
* ``st-normal``: one safetensors file of the same layout (bf16) with its config.json;
* ``gguf-15m-tensors``: 15,000,000 real tensor records (495 MB of them), each a 32-element F32 row;
* ``gguf-10m-kv``: 10,000,000 real key/value pairs (u32 values, distinct keys);
* ``gguf-4gb-tokenizer``: a ``tokenizer.ggml.tokens`` array of 536,870,912 empty strings (4 GiB
  of zero lengths, a sparse hole);
* ``gguf-65536-tensors`` and ``gguf-4m-tokens``: well-formed files exactly at the caps on tensors
  (65,536) and on array strings walked (4,194,304): what the most a file may cost costs;
* ``st-100mb-objects``, ``st-91mb-lists``: a 99.9 MB safetensors header of ``{}``
  (``{"w":[{},{},...]}``), a 91 MB one of ``[]``;
* ``st-24mb-objects``, ``st-24mb-lists``: the same under the 25 MB cap on headers.

Children run under RLIMIT_AS 4 GiB (``--limit-gib``), as in the issue, so that a reader's blow-up
ends in a MemoryError instead of taking the machine. The target (issue 27): each hostile file is one
``gpulaunch: error:`` line, exit 7, within a second, its peak memory within a few MiB of the normal
file's. The tests (tests/test_modelfile_limits.py) assert the line and the exit code; speed and
memory are measured here, never in a timed test.

Measured on the 2-core development machine, one run each, before (main at 94ff07d) and after (the
caps of issue 27) back to back under the same heavy load (load average 7-10 from other work, so the
seconds are 3-4x a quiet machine's); peak RSS in MiB of gpulaunch alone; exit code:

==================  ========================  ========================
file                before                    after
==================  ========================  ========================
gguf-normal           0.42 s    16 MiB  0       0.27 s    16 MiB  0
st-normal             0.46 s    16 MiB  0       0.37 s    16 MiB  0
gguf-15m-tensors    120.53 s  2887 MiB  7       0.20 s    16 MiB  7
gguf-10m-kv          51.55 s   863 MiB  0       0.40 s    16 MiB  7
gguf-4gb-tokenizer   91.68 s    16 MiB  0       0.41 s    16 MiB  7
gguf-65536-tensors    1.13 s    34 MiB  0       1.06 s    40 MiB  0
gguf-4m-tokens        1.18 s    16 MiB  0       0.92 s    16 MiB  0
st-100mb-objects      6.49 s  2501 MiB  7       0.44 s    16 MiB  7
st-91mb-lists        14.50 s  2279 MiB  7       0.42 s    16 MiB  7
st-24mb-objects       1.55 s   639 MiB  7       0.42 s    20 MiB  7
st-24mb-lists         4.03 s   639 MiB  7       0.42 s    20 MiB  7
==================  ========================  ========================

On a quieter machine the five hostile files took 50.9, 33.3, 39.5, 7.7 and 6.1 s before, and 0.09-0.10
s after, where the normal files took 0.10-0.15 s. Before, the 15 M tensors ended in an overlap error
after reading all of them, the safetensors headers in "tensor w is not described by an object" after
parsing all of them; the 10 M key/values and the 4 GB tokenizer array were read to the end (exit 0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

CHUNK = 1 << 20


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


_BASE_KV = [_s("general.architecture") + struct.pack("<I", 8) + _s("llama"), _kv_u32("llama.block_count", 1),
            _kv_u32("llama.attention.head_count", 1), _kv_u32("llama.embedding_length", 32)]


def _write_repeated(fh: BinaryIO, unit: bytes, count: int) -> None:
    """``unit`` ``count`` times, in chunks of about a MiB."""
    per = max(1, CHUNK // len(unit))
    block = unit * per
    while count >= per:
        fh.write(block)
        count -= per
    fh.write(unit * count)


def _gguf_many_tensors(path: Path, count: int) -> None:
    record = _s("t") + struct.pack("<IQIQ", 1, 32, 0, 0)  # 1 dim of 32 F32 elements at offset 0
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, count, len(_BASE_KV)) + b"".join(_BASE_KV))
        _write_repeated(fh, record, count)
        fh.write(b"\0" * 4096)


def _gguf_at_the_tensor_cap(path: Path, count: int) -> None:
    """``count`` distinct, well-formed tensors of 128 bytes each, one after the other (a hole of data)."""
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, count, len(_BASE_KV)) + b"".join(_BASE_KV))
        for start in range(0, count, 65536):
            fh.write(b"".join(_s(f"t{i}") + struct.pack("<IQIQ", 1, 32, 0, 128 * i)
                              for i in range(start, min(count, start + 65536))))
        fh.truncate(-(-fh.tell() // 32) * 32 + 128 * count)


def _gguf_many_kv(path: Path, count: int) -> None:
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, count + len(_BASE_KV)) + b"".join(_BASE_KV))
        done = 0
        while done < count:
            n = min(65536, count - done)
            fh.write(b"".join(_kv_u32(f"k{i}", 1) for i in range(done, done + n)))
            done += n


def _gguf_huge_tokenizer(path: Path, strings: int) -> None:
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(_BASE_KV) + 1) + b"".join(_BASE_KV))
        fh.write(_s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, strings))
        fh.truncate(fh.tell() + 8 * strings)  # every string's length is 0: a hole of zeros


def _safetensors_of(folder: Path, inner: bytes, size: int) -> None:
    """A safetensors header ``{"w":[inner,inner,...]}`` of about ``size`` bytes, with a config.json."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1,
                                                    "num_attention_heads": 1, "hidden_size": 4}))
    unit = inner + b","
    count = (size - 8) // len(unit)
    body_len = 6 + count * len(unit) - 1 + 2
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", body_len) + b'{"w":[')
        _write_repeated(fh, unit, count - 1)
        fh.write(inner + b"]}")


def _gguf_normal(path: Path) -> None:
    from model_fixtures import llama8b, write_gguf

    write_gguf(path, llama8b())


def _safetensors_normal(folder: Path) -> None:
    from model_fixtures import llama_tensors, safetensors_header

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "hidden_size": 4096, "max_position_embeddings": 131072, "vocab_size": 128256, "torch_dtype": "bfloat16"}))
    tensors = {t.name: ("BF16", t.shape) for t in llama_tensors(32, 4096, 32, 8, 14336, 128256)}
    header = safetensors_header(tensors, {"BF16": 2})
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(header)
        fh.truncate(len(header) + sum(2 * math.prod(shape) for _, shape in tensors.values()))


#: name -> (what to name it in the temporary directory, how to write it)
FILES: dict[str, tuple[str, Callable[[Path], None]]] = {
    "gguf-normal": ("llama-8b.gguf", _gguf_normal),
    "st-normal": ("st-normal", _safetensors_normal),
    "gguf-15m-tensors": ("tensors.gguf", lambda p: _gguf_many_tensors(p, 15_000_000)),
    "gguf-10m-kv": ("kv.gguf", lambda p: _gguf_many_kv(p, 10_000_000)),
    "gguf-4gb-tokenizer": ("tokenizer.gguf", lambda p: _gguf_huge_tokenizer(p, 1 << 29)),
    "gguf-65536-tensors": ("tensor-cap.gguf", lambda p: _gguf_at_the_tensor_cap(p, 65536)),
    "gguf-4m-tokens": ("tokens-cap.gguf", lambda p: _gguf_huge_tokenizer(p, 1 << 22)),
    "st-100mb-objects": ("st-objects", lambda p: _safetensors_of(p, b"{}", 99_900_000)),
    "st-91mb-lists": ("st-lists", lambda p: _safetensors_of(p, b"[]", 91_000_000)),
    "st-24mb-objects": ("st-objects-24", lambda p: _safetensors_of(p, b"{}", 24_000_000)),
    "st-24mb-lists": ("st-lists-24", lambda p: _safetensors_of(p, b"[]", 24_000_000)),
}


#: The process that starts each measured child: started first, while this one is small, because a
#: child's ru_maxrss counts the memory of the process it was forked from (Linux folds the old image's
#: high-water mark into it at exec), and this process grows as it writes the files.
_LAUNCHER = r"""
import json, os, resource, sys, time
for line in sys.stdin:
    job = json.loads(line)
    err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        if job["limit"]:
            resource.setrlimit(resource.RLIMIT_AS, (job["limit"], job["limit"]))
        os.dup2(err, 2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.execve(job["argv"][0], job["argv"], job["env"])
    os.close(err)
    print(pid, flush=True)
    _, status, usage = os.wait4(pid, 0)
    print(json.dumps([time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)]),
          flush=True)
"""


class Launcher:
    """Runs ``gpulaunch plan FILE`` in children of a small process; reports each one's own numbers."""

    def __init__(self, limit_gib: float) -> None:
        self.limit = int(limit_gib * 2**30)
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run_plan(self, model: Path, timeout: float) -> tuple[float, float, int, str]:
        """(seconds, peak RSS in MiB, exit code, first stderr line) of one ``gpulaunch plan``."""
        from cli_run import clean_env

        assert self.proc.stdin is not None and self.proc.stdout is not None
        with tempfile.NamedTemporaryFile(suffix=".stderr") as err:
            argv = [sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "plan", str(model)]
            job = {"argv": argv, "env": clean_env(), "limit": self.limit, "stderr": err.name}
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            child = int(self.proc.stdout.readline())
            timer = threading.Timer(timeout, os.kill, (child, signal.SIGKILL))
            timer.start()
            try:
                seconds, mib, code = json.loads(self.proc.stdout.readline())
            finally:
                timer.cancel()
            lines = Path(err.name).read_text(errors="replace").splitlines()
        first = lines[0] if lines else ""
        if len(lines) > 1 and "Traceback" in lines[0]:
            first = "traceback: " + lines[-1]
        return seconds, mib, code, first

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=4.0, help="RLIMIT_AS of each child (0: none)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a child is killed")
    parser.add_argument("--only", action="append", help="run only these files (by name)")
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - set(FILES)
    if unknown:
        parser.error(f"--only: no file named {', '.join(sorted(unknown))} (the names: {', '.join(FILES)})")
    launcher = Launcher(args.limit_gib)
    with tempfile.TemporaryDirectory(prefix="gpulaunch-hostile-") as tmp:
        print(f"{'file':20} {'seconds':>8} {'peak MiB':>9} {'exit':>4}  stderr")
        for name, (where, write) in FILES.items():
            if args.only and name not in args.only:
                continue
            path = Path(tmp) / where
            write(path)  # one at a time, each removed after its run: at most 500 MB on disk at once
            seconds, mib, code, first = launcher.run_plan(path, args.timeout)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            print(f"{name:20} {seconds:8.2f} {mib:9.1f} {code:>4}  {first[:110]}", flush=True)
    launcher.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
