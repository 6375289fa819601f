"""gpulaunch's KV cache figure beside llama.cpp's own, family by family (issue 25).

``python benchmarks/llama_cpp_sizing.py --build`` downloads llama-cpp-python's source from the
package index (``pip download --no-binary :all:``), builds the llama.cpp it vendors for the CPU
(the ``llama`` library only: a few minutes on 2 cores) into ~/.cache/gpulaunch/llama-cpp, and
compiles benchmarks/llama_memory_probe.cpp against it. Then, for every family of
tests/family_fixtures.py (header-only GGUFs of published models, written by the real ``gguf``
package) and every setting of the matrix below, it asks llama.cpp what it allocates
(``llama_get_memory_breakdown``: the context's bytes are the KV cache and recurrent state) and
puts gpulaunch's figure beside it. ``--before DIR`` adds the figure of another gpulaunch checkout
(e.g. ``git worktree add /tmp/before main``), for a before/after table.

The matrix: contexts 512 to 32768 (past every window), 1 and 4 sequences (unified and split),
f16 / q8_0 / q4_0 / K-only q8_0, flash attention on, off and auto, --swa-full on and off. Settings
llama.cpp refuses are expected to be refused by gpulaunch too (exit 2 before anything is reserved).
Where flash attention is off, the compute buffer (which grows with the context) is checked against
gpulaunch's llama.cpp allowance. Not a test: it needs a C++ compiler and minutes; the exact rules
are unit-tested in tests/test_fit_kv_families.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

CACHE = Path(os.environ.get("GPULAUNCH_LLAMA_CPP", Path.home() / ".cache" / "gpulaunch" / "llama-cpp"))
SDIST = "llama-cpp-python==0.3.36"
PROBE = Path(__file__).with_name("llama_memory_probe.cpp")
#: (ctx, seqs, unified, K, V, flash attention, swa_full): the settings each family is sized at.
MATRIX = [(ctx, 1, True, "f16", "f16", "on", False) for ctx in (512, 4096, 32768)] + [
    (32768, 1, True, "f16", "f16", "off", False), (32768, 1, True, "f16", "f16", "auto", False),
    (8192, 4, True, "f16", "f16", "on", False), (8192, 4, False, "f16", "f16", "on", False),
    (8192, 4, False, "f16", "f16", "off", False), (32768, 1, True, "q8_0", "q8_0", "on", False),
    (32768, 1, True, "q4_0", "q4_0", "on", False), (32768, 1, True, "q8_0", "f16", "on", False),
    (32768, 1, True, "f16", "f16", "on", True), (8192, 4, True, "f16", "f16", "off", True),
    (3000, 1, True, "f16", "f16", "on", False),
]


def build(cache: Path) -> None:
    """Download the sdist and build llama.cpp's library for the CPU into ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", tmp, SDIST],
                       check=True)
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(cache, filter="data")
    source = next(cache.glob("llama_cpp_python-*/vendor/llama.cpp"))
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_CURL=OFF",
             "-DGGML_OPENMP=OFF"]
    subprocess.run(["cmake", "-S", str(source), "-B", str(cache / "build"), *flags], check=True)
    subprocess.run(["cmake", "--build", str(cache / "build"), "--target", "llama", "-j", str(os.cpu_count() or 2)],
                   check=True)


def probe(cache: Path) -> Path:
    """The compiled probe (rebuilt when its source is newer)."""
    source = next(cache.glob("llama_cpp_python-*/vendor/llama.cpp"), None)
    lib = cache / "build" / "bin"
    if source is None or not (lib / "libllama.so").exists():
        sys.exit(f"no llama.cpp build in {cache}: run with --build (or set GPULAUNCH_LLAMA_CPP)")
    out = cache / "llama_memory_probe"
    if not out.exists() or out.stat().st_mtime < PROBE.stat().st_mtime:
        subprocess.run(["g++", "-std=c++17", "-O1", f"-I{source}/include", f"-I{source}/src", f"-I{source}/ggml/include",
                        str(PROBE), f"-L{lib}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", str(out)],
                       check=True)
    return out


def engine_bytes(exe: Path, gguf: Path, case: tuple) -> dict:
    ctx, seqs, unified, k, v, fa, swa_full = case
    fa_arg = {"on": "1", "off": "0", "auto": "-1"}[fa]
    proc = subprocess.run([str(exe), f"meta:{gguf}", str(ctx), str(seqs), k, v, fa_arg, str(int(swa_full)),
                           str(int(unified)), "512", "2048"], capture_output=True, text=True)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "crashed"}


def gpulaunch_bytes(paths: dict[str, str], cases: list[tuple]) -> dict[str, list]:
    """gpulaunch's KV cache and allowance for each family and case, with whatever gpu_launch imports."""
    import inspect

    from gpu_launch.errors import GpuLaunchError
    from gpu_launch.fit import kv
    from gpu_launch.modelfile.read import read_model

    params = inspect.signature(kv.kv_cache).parameters
    out: dict[str, list] = {}
    for name, path in paths.items():
        model = read_model(path, environ={})
        rows = []
        for ctx, seqs, unified, k, v, fa, swa_full in cases:
            try:
                if "run" in params:
                    size = kv.kv_cache(model.hyper, ctx, seqs, k, run=kv.Run(unified=unified, v_type=v, flash_attn=fa,
                                                                              swa_full=swa_full))
                    scratch = size.scratch
                else:
                    extra = {"full_swa": swa_full} if "full_swa" in params else {}
                    size = kv.kv_cache(model.hyper, ctx, seqs, k, unified=unified, v_type=v, **extra)
                    scratch = 0
                logits = min(512, ctx) * (model.hyper.vocab_size or 0) * 4
                rows.append({"kv": size.total, "allowance": (1 << 30) + max(logits, scratch)})
            except GpuLaunchError as e:
                rows.append({"refused": e.message})
        out[name] = rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="store_true", help="download and build llama.cpp first")
    ap.add_argument("--before", metavar="DIR", help="also size with the gpulaunch checkout in DIR")
    ap.add_argument("--family", action="append", help="only these families (repeatable)")
    ap.add_argument("--json", metavar="FILE", help="write every row as JSON")
    ap.add_argument("--gpulaunch-only", metavar="FILE", help=argparse.SUPPRESS)  # internal: the --before side
    args = ap.parse_args()
    if args.gpulaunch_only:  # size with the checkout on PYTHONPATH, not this one
        sys.path[:] = [p for p in sys.path if Path(p).resolve() != ROOT]
        job = json.loads(Path(args.gpulaunch_only).read_text())
        print(json.dumps(gpulaunch_bytes(job["paths"], [tuple(c) for c in job["cases"]])))
        return
    if args.build:
        build(CACHE)
    exe = probe(CACHE)
    import family_fixtures

    names = args.family or list(family_fixtures.FAMILIES)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: str(family_fixtures.write_family(Path(tmp), n)) for n in names}
        after = gpulaunch_bytes(paths, MATRIX)
        before = None
        if args.before:
            job = Path(tmp) / "job.json"
            job.write_text(json.dumps({"paths": paths, "cases": MATRIX}))
            env = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
            proc = subprocess.run([sys.executable, __file__, "--gpulaunch-only", str(job)], capture_output=True,
                                  text=True, env=env, check=True, cwd=tmp)
            before = json.loads(proc.stdout)
        rows = []
        for name in names:
            for i, case in enumerate(MATRIX):
                rows.append({"family": name, "case": case, "engine": engine_bytes(exe, Path(paths[name]), case),
                             "after": after[name][i], "before": before[name][i] if before else None})
    report(rows, bool(before))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def _ratio(ours: dict | None, engine: dict) -> float | str | None:
    if ours is None:
        return None
    if "error" in engine:
        return "ok" if "refused" in ours else "not refused"
    if "refused" in ours:
        return "refused"
    return 1.0 if ours["kv"] == engine["context"] else (ours["kv"] / engine["context"] if engine["context"] else "inf")


def report(rows: list[dict], with_before: bool) -> None:
    """One line per family: the range of gpulaunch ÷ engine over the matrix, before and after."""
    families: dict[str, dict[str, list]] = {}
    for row in rows:
        f = families.setdefault(row["family"], {"before": [], "after": [], "compute": [], "refusals": []})
        for side in ("before", "after") if with_before else ("after",):
            r = _ratio(row[side], row["engine"])
            if isinstance(r, float):
                f[side].append(r)
            elif r is not None:
                f["refusals"].append(f"{side}: {r} {row['case']}")
        e = row["engine"]
        for side in ("before", "after") if with_before else ("after",):
            ours = row[side]
            if "compute" in e and ours and "allowance" in ours and ours["allowance"] < e["compute"]:
                f["compute"].append(f"{side}: compute {e['compute'] >> 20} MiB > allowance {ours['allowance'] >> 20} MiB "
                                    f"at {row['case'][0]}, -fa {row['case'][5]}")
    head = f"{'family':20} {'before ÷ engine':>17} {'after ÷ engine':>17}  notes"
    print(head)
    for name, f in families.items():
        def span(v: list) -> str:
            if not v:
                return "-"
            lo, hi = min(v), max(v)
            return f"{lo:.3f}" if abs(lo - hi) < 5e-4 else f"{lo:.2f}–{hi:.2f}"
        refusals = [n for n in f["refusals"] if " ok " not in n and not n.endswith("ok")]
        notes = "; ".join(f["compute"][:2] + refusals[:2])
        print(f"{name:20} {span(f['before']) if with_before else '':>17} {span(f['after']):>17}  {notes}")


if __name__ == "__main__":
    main()
