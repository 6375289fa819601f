"""Offload, read and chosen (issue 35, item 4).

Restated from llama.cpp 0c1e570: common/arg.cpp (-ot appends PATTERN=BUFT lists; --cpu-moe and
--n-cpu-moe N add common/common.h's LLM_FFN_EXPS_REGEX, the latter per block ``blk\\.i``; -nkvo),
src/llama-model-loader.cpp (each tensor: the first pattern found in its name, std::regex_search,
decides its buffer; CPU is the host); vLLM's --cpu-offload-gb (CacheConfig.cpu_offload_gb: GiB of
each GPU's weights in host memory). Layouts are header-only GGUFs written by the real gguf writer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gguf.constants import GGMLQuantizationType as Q  # noqa: E402

from gpu_launch.errors import UsageError  # noqa: E402
from gpu_launch.fit import plan  # noqa: E402
from gpu_launch.fit.sizing import sizing_of  # noqa: E402
from tests.model_fixtures import Gguf, T, write_gguf  # noqa: E402

GiB = 1 << 30
EXPS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")  # LLM_FFN_EXPS_REGEX, restated


def moe_tensors(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, experts: int, ffn: int,
                vocab: int, qtype: Q, exps_type: Q) -> list[T]:
    out = [T("token_embd.weight", (vocab, hidden), qtype)]
    for i in range(layers):
        p = f"blk.{i}."
        out += [T(p + "attn_norm.weight", (hidden,), Q.F32), T(p + "attn_q.weight", (heads * head_dim, hidden), qtype),
                T(p + "attn_k.weight", (kv_heads * head_dim, hidden), qtype),
                T(p + "attn_v.weight", (kv_heads * head_dim, hidden), qtype),
                T(p + "attn_output.weight", (hidden, heads * head_dim), qtype),
                T(p + "ffn_norm.weight", (hidden,), Q.F32), T(p + "ffn_gate_inp.weight", (experts, hidden), Q.F32),
                T(p + "ffn_gate_exps.weight", (experts, ffn, hidden), exps_type),
                T(p + "ffn_up_exps.weight", (experts, ffn, hidden), exps_type),
                T(p + "ffn_down_exps.weight", (experts, hidden, ffn), exps_type)]
    return out + [T("output_norm.weight", (hidden,), Q.F32), T("output.weight", (vocab, hidden), qtype)]


def qwen3_30b_a3b() -> Gguf:
    """Qwen3-30B-A3B's layout in BF16 (48 layers, 128 experts of 768, 4 KV heads of 128)."""
    a = "qwen3moe"
    kv = {f"{a}.block_count": 48, f"{a}.embedding_length": 2048, f"{a}.attention.head_count": 32,
          f"{a}.attention.head_count_kv": 4, f"{a}.attention.key_length": 128, f"{a}.attention.value_length": 128,
          f"{a}.context_length": 40960, f"{a}.expert_count": 128, f"{a}.expert_used_count": 8,
          f"{a}.vocab_size": 151936, "tokenizer.ggml.model": "none"}
    return Gguf(a, kv, moe_tensors(48, 2048, 32, 4, 128, 128, 768, 151936, Q.BF16, Q.BF16))


def gpt_oss_120b(exps_type: Q = Q.MXFP4) -> Gguf:
    """gpt-oss-120b's layout (36 layers, 128 experts of 2880 in MXFP4, 8 KV heads of 64, window 128)."""
    a = "gpt-oss"
    kv = {f"{a}.block_count": 36, f"{a}.embedding_length": 2880, f"{a}.attention.head_count": 64,
          f"{a}.attention.head_count_kv": 8, f"{a}.attention.key_length": 64, f"{a}.attention.value_length": 64,
          f"{a}.attention.sliding_window": 128, f"{a}.context_length": 131072, f"{a}.expert_count": 128,
          f"{a}.expert_used_count": 4, f"{a}.vocab_size": 201088, "tokenizer.ggml.model": "none"}
    return Gguf(a, kv, moe_tensors(36, 2880, 64, 8, 64, 128, 2880, 201088, Q.Q8_0, exps_type))


LAYOUTS = {"qwen3-30b-a3b": qwen3_30b_a3b, "gpt-oss-120b": gpt_oss_120b,
           "gpt-oss-120b-bf16": lambda: gpt_oss_120b(Q.BF16)}  # its experts unquantised: 229 GB


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Gguf]]:
    folder = tmp_path_factory.mktemp("moe")
    out = {}
    for name, make in LAYOUTS.items():
        model = make()
        write_gguf(folder / f"{name}.gguf", model)
        out[name] = (folder / f"{name}.gguf", model)
    return out


def placed(path: Path, *command: str, gib: int = 24, engine: str = "llama-server", ctx: int = 32768
           ) -> plan.Placement:
    s = sizing_of(str(path), [engine, "-m", str(path), "-c", str(ctx), *command], {}, environ={})
    s = plan.Sizing(s.model, s.engine, plan.replace(s.settings, host_free=None), s.kv)  # the host is not this test's
    return plan.place(s, [plan.Room(0, gib * GiB, gib * GiB)])


def experts_below(model: Gguf, n: int) -> int:
    return sum(t.nbytes for t in model.tensors if EXPS.search(t.name) and int(t.name.split(".")[1]) < n)


#: (layout, GPU GiB, context): each too big for the GPU whole, so some experts must go to the CPU
CASES = [("qwen3-30b-a3b", 24, 32768), ("qwen3-30b-a3b", 80, 262144), ("gpt-oss-120b", 24, 32768),
         ("gpt-oss-120b-bf16", 80, 32768)]


@pytest.mark.parametrize(("name", "gib", "ctx"), CASES)
def test_n_cpu_moe_is_the_fewest_layers_that_fit(files: dict, name: str, gib: int, ctx: int) -> None:
    path, model = files[name]
    assert not placed(path, "-ngl", "999", gib=gib, ctx=ctx).whole
    chosen = placed(path, "-ngl", "999", "--n-cpu-moe", "{n_cpu_moe}", gib=gib, ctx=ctx)
    n = chosen.n_cpu_moe
    assert n and chosen.whole and chosen.placeholders(ctx)["n_cpu_moe"] == str(n)
    explicit = placed(path, "-ngl", "999", "--n-cpu-moe", str(n), gib=gib, ctx=ctx)
    assert explicit.whole and explicit.host_bytes == experts_below(model, n)
    assert not placed(path, "-ngl", "999", "--n-cpu-moe", str(n - 1), gib=gib, ctx=ctx).whole
    assert any(f"{{n_cpu_moe}} = {n}: the experts" in note and f"{n - 1} does not" in note for note in chosen.notes)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "gpt-oss-120b"])
def test_a_model_that_fits_whole_keeps_every_expert_on_the_gpu(files: dict, name: str) -> None:
    chosen = placed(files[name][0], "-ngl", "999", "--n-cpu-moe", "{n_cpu_moe}", gib=80)
    assert chosen.n_cpu_moe == 0 and chosen.whole and chosen.host_bytes == 0


def test_the_80gb_gpu_takes_fewer_cpu_layers_than_the_24gb(files: dict) -> None:
    path, _ = files["gpt-oss-120b"]
    small = placed(path, "-ngl", "999", "--n-cpu-moe", "{n_cpu_moe}", gib=24).n_cpu_moe
    big = placed(path, "-ngl", "999", "--n-cpu-moe", "{n_cpu_moe}", gib=80).n_cpu_moe
    assert small is not None and big is not None and big < small


def test_cpu_moe_puts_every_expert_on_the_host(files: dict) -> None:
    path, model = files["qwen3-30b-a3b"]
    got = placed(path, "-ngl", "999", "--cpu-moe", gib=80)
    assert got.host_bytes == experts_below(model, 48) and got.whole
    assert got.cpu_weights_bytes >= got.host_bytes
    assert sum(sh.weights_bytes for sh in got.per_gpu) < 12 * GiB  # attention and shared tensors only


def test_override_tensor_first_matching_pattern_wins_and_lists_append(files: dict) -> None:
    path, model = files["qwen3-30b-a3b"]
    # blk.1's attn_q matches the first pattern (CUDA0: stays on the GPU); the rest of blk.1 the second (CPU)
    got = placed(path, "-ngl", "999", "-ot", r"blk\.1\.attn_q=CUDA0,blk\.1\.=CPU", "-ot", r"blk\.2\.ffn_up_exps=CPU",
                 gib=80)
    want = sum(t.nbytes for t in model.tensors if t.name.startswith("blk.1.") and "attn_q" not in t.name) + \
        next(t.nbytes for t in model.tensors if t.name == "blk.2.ffn_up_exps.weight")
    assert got.host_bytes == want
    assert any("stay on the CPU" in note for note in got.notes)


def test_a_bad_override_is_one_error_line(files: dict) -> None:
    path, _ = files["qwen3-30b-a3b"]
    with pytest.raises(UsageError, match="not a regular expression"):
        placed(path, "-ot", "blk.(=CPU")
    with pytest.raises(UsageError, match="not PATTERN=BUFFER_TYPE"):
        placed(path, "-ot", "exps")


def test_no_kv_offload_keeps_the_cache_on_the_host(files: dict) -> None:
    path, _ = files["gpt-oss-120b"]
    on, off = placed(path, "-ngl", "999", "--cpu-moe", gib=80), placed(path, "-ngl", "999", "--cpu-moe", "-nkvo", gib=80)
    assert sum(sh.kv_bytes for sh in off.per_gpu) == 0 and off.cpu_kv_bytes == sum(sh.kv_bytes for sh in on.per_gpu)
    assert any(note.startswith("-nkvo: the KV cache") for note in off.notes)


def test_a_dense_model_gets_zero(tmp_path: Path) -> None:
    from tests.model_fixtures import llama_tensors

    a = "llama"
    model = Gguf(a, {f"{a}.block_count": 4, f"{a}.embedding_length": 256, f"{a}.attention.head_count": 4,
                     f"{a}.context_length": 4096, "tokenizer.ggml.model": "none", f"{a}.vocab_size": 1000},
                 llama_tensors(4, 256, 4, 4, 512, 1000))
    write_gguf(tmp_path / "d.gguf", model)
    got = placed(tmp_path / "d.gguf", "--n-cpu-moe", "{n_cpu_moe}")
    assert got.n_cpu_moe == 0 and got.whole


def test_n_cpu_ffn_keeps_the_first_dense_ffns_on_the_host(tmp_path: Path) -> None:
    """--n-cpu-ffn N (common/arg.cpp: llm_add_n_cpu_ffn_overrides with LLM_FFN_DENSE_REGEX, \\.ffn_(up|down|gate)\\.
    after blk\\.i): the dense FFN weights of blocks 0..N-1 on the host, nothing else."""
    from tests.model_fixtures import llama_tensors

    a = "llama"
    tensors = llama_tensors(8, 1024, 8, 8, 4096, 1000)
    model = Gguf(a, {f"{a}.block_count": 8, f"{a}.embedding_length": 1024, f"{a}.attention.head_count": 8,
                     f"{a}.context_length": 4096, "tokenizer.ggml.model": "none", f"{a}.vocab_size": 1000}, tensors)
    write_gguf(tmp_path / "d.gguf", model)
    got = placed(tmp_path / "d.gguf", "-ngl", "999", "--n-cpu-ffn", "3", ctx=4096)
    want = sum(t.nbytes for t in tensors if re.match(r"blk\.[012]\.ffn_(up|down|gate)\.", t.name))
    assert got.host_bytes == want > 0 and got.whole  # was 0: the flag was not read


def test_vllm_cpu_offload_gb_lowers_each_gpus_weights(tmp_path: Path) -> None:
    import json

    from safetensors import numpy as st_numpy
    import numpy as np

    folder = tmp_path / "m"
    folder.mkdir()
    st_numpy.save_file({f"model.layers.{i}.mlp.up_proj.weight": np.zeros((1024, 1024, 8), np.float32)
                        for i in range(4)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 4,
                                                    "num_attention_heads": 8, "hidden_size": 1024,
                                                    "max_position_embeddings": 4096}))

    def weights(*more: str) -> tuple[int, int]:
        s = sizing_of(str(folder), ["vllm", "serve", str(folder), *more], {}, environ={})
        s = plan.Sizing(s.model, s.engine, plan.replace(s.settings, host_free=None), s.kv)
        p = plan.place(s, [plan.Room(0, 80 * GiB, 80 * GiB)])
        return p.per_gpu[0].weights_bytes, p.cpu_weights_bytes

    gpu, host = weights()
    gpu_off, host_off = weights("--cpu-offload-gb", "0.0625")
    assert host == 0 and host_off == GiB // 16 and gpu_off == gpu - GiB // 16


def test_plan_json_and_text_say_which_tensors_stay_where(files: dict) -> None:
    """What a user reads: `gpulaunch plan` fills {n_cpu_moe}, its --json validates and says the split."""
    import json

    import jsonschema

    from gpu_launch.views import schemas
    from tests.cli_run import run_gpulaunch

    path, _ = files["gpt-oss-120b-bf16"]
    command = ["--", "llama-server", "-m", str(path), "-c", "32768", "-ngl", "999", "--n-cpu-moe", "{n_cpu_moe}"]
    proc = run_gpulaunch("--snapshot", "dgx-h100", "plan", "--json", "--gpus", "0", *command)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schemas.PLAN).validate(doc)
    n = doc["n_cpu_moe"]
    assert n and doc["placeholders"]["n_cpu_moe"] == str(n) and doc["host_bytes"] > 0
    assert any(f"{{n_cpu_moe}} = {n}: the experts (ffn_*_exps) of layers 0-{n - 1} stay on the CPU" in note
               for note in doc["notes"])
    text = run_gpulaunch("--snapshot", "dgx-h100", "plan", "--gpus", "0", *command).stdout
    assert f"{{n_cpu_moe}}={n}" in text and f"{{n_cpu_moe}} = {n}: the experts" in text


_MATCHER = r'''
#include <iostream>
#include <regex>
#include <string>
#include <vector>
int main(int argc, char ** argv) {  // llama_model_loader's -ot test: the first std::regex_search hit, or -1
    std::vector<std::regex> pats;
    for (int i = 1; i < argc; ++i) pats.emplace_back(argv[i]);
    std::string name;
    while (std::getline(std::cin, name)) {
        int hit = -1;
        for (size_t i = 0; i < pats.size(); ++i) if (std::regex_search(name, pats[i])) { hit = (int) i; break; }
        std::cout << hit << "\n";
    }
}
'''


@pytest.fixture(scope="module")
def matcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler here to run std::regex_search")
    folder = tmp_path_factory.mktemp("matcher")
    (folder / "m.cpp").write_text(_MATCHER)
    subprocess.run(["g++", "-O1", "-std=c++17", str(folder / "m.cpp"), "-o", str(folder / "m")], check=True)
    return folder / "m"


@pytest.mark.parametrize("patterns", [
    [("exps", "CPU")],  # -ot exps=CPU, as users write it
    [(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU")],
    [(rf"blk\.{i}\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU") for i in range(10)],
    [(r"blk\.1\.attn_q", "CUDA0"), (r"blk\.1\.", "CPU"), (r"blk\.(2|3|4)\.ffn_up_exps", "CPU"), (r"^output\.", "CPU"),
     (r"ffn_(gate|down)_exps", "CPU")]], ids=["ot-exps", "cpu-moe", "n-cpu-moe-10", "mixed"])
def test_host_tensors_are_those_cxx_regex_search_picks(files: dict, matcher: Path, patterns: list) -> None:
    """The patterns matched as llama.cpp matches them: C++'s std::regex_search on each tensor name."""
    import subprocess

    from gpu_launch.fit import offload
    from gpu_launch.modelfile.read import read_model
    for name in ("qwen3-30b-a3b", "gpt-oss-120b"):
        model = read_model(str(files[name][0]), environ={})
        names = "\n".join(n for n, _ in model.weights.tensors) + "\n"
        hits = subprocess.run([str(matcher), *(p for p, _ in patterns)], input=names, capture_output=True,
                              text=True, check=True).stdout.split()
        host = sum(b for (n, b), hit in zip(model.weights.tensors, hits)
                   if int(hit) >= 0 and patterns[int(hit)][1] == "CPU" and not n.startswith("token_embd"))
        assert offload.host_split(model, tuple(patterns)).total == host > 0
