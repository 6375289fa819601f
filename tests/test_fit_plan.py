"""Where a model goes on a set of GPUs, per engine (fit/plan.py, fit/engines.py, fit/command.py)."""

from __future__ import annotations

import json

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.fit import command, engines, plan
from tests.fit_models import GiB, MiB, llama_70b, llama_like

LLAMA = engines.ENGINES["llama.cpp"]
VLLM = engines.ENGINES["vllm"]


def sized(model, engine, **settings):
    return plan.sizing(model, engine, plan.Settings(**{"ctx": 8192, **settings}))


def test_llama_cpp_all_on_one_gpu_counts_the_output_layer() -> None:
    s = sized(llama_like(), LLAMA)
    p = plan.place(s, [plan.Room(0, 24 * GiB, 24 * GiB)])
    assert p.whole and p.fits
    assert p.gpu_layers == 33  # all of a 32-layer model is -ngl 33
    assert p.cpu_weights_bytes == 500 * MiB  # the token embedding stays on the host
    assert p.per_gpu[0].weights_bytes == 32 * 200 * MiB + 500 * MiB
    assert p.per_gpu[0].kv_bytes == s.kv.total


def test_seed_case_6_gib_card_and_16_gib_of_ram() -> None:
    # ~7.2 GiB of weights; a 6 GiB card: the last layers and the output go to the GPU, the rest to the CPU
    model = llama_like(layers=32, layer_bytes=200 * MiB, embedding=500 * MiB, output=500 * MiB)
    s = sized(model, LLAMA, ctx=4096, partial=True, host_free=16 * GiB)
    p = plan.place(s, [plan.Room(0, 6 * GiB, 6 * GiB)])
    assert not p.whole and p.fits
    # what fits: 6 GiB - 1 GiB margin - logits (512 x 128256 x 4) holds the output unit + k layers (200 MiB + 16 MiB KV)
    room = 6 * GiB - 1 * GiB - 512 * 128256 * 4
    per_layer = 200 * MiB + s.kv.per_layer[0]
    k = (room - 500 * MiB) // per_layer
    assert p.gpu_layers == 1 + k
    assert p.cpu_weights_bytes == 500 * MiB + (32 - k) * 200 * MiB
    assert p.per_gpu[0].left_bytes >= 0
    # the host has too little room: it does not fit
    small = sized(model, LLAMA, ctx=4096, partial=True, host_free=1 * GiB)
    assert not plan.place(small, [plan.Room(0, 6 * GiB, 6 * GiB)]).fits


def test_llama_cpp_splits_over_unequal_gpus_in_proportion() -> None:
    s = sized(llama_like(layers=40, layer_bytes=500 * MiB), LLAMA)
    p = plan.place(s, [plan.Room(0, 20 * GiB, 24 * GiB), plan.Room(3, 10 * GiB, 24 * GiB)])
    assert p.whole and p.gpu_layers == 41
    assert sum(p.tensor_split) == 41
    assert p.tensor_split[0] > p.tensor_split[1]  # the GPU with more room holds more layers
    assert all(sh.left_bytes >= 0 for sh in p.per_gpu)
    assert p.placeholders(8192)["tensor_split"] == ",".join(map(str, p.tensor_split))


def test_vllm_tp_per_gpu_share_and_kv_heads() -> None:
    s = sized(llama_70b(), VLLM, ctx=32768)
    rooms = [plan.Room(i, 79 * GiB, 80 * GiB) for i in range(2)]
    p = plan.place(s, rooms)
    assert p.tp == 2
    assert p.per_gpu[0].weights_bytes == -(-llama_70b().weights.total // 2)
    assert p.per_gpu[0].kv_bytes == s.kv.total // 2  # 8 KV heads: 4 per GPU
    # at tp 16 > 8 KV heads each GPU keeps one whole head: KV is replicated, not split further
    p16 = plan.place(sized(llama_70b(), VLLM, ctx=32768), [plan.Room(i, 79 * GiB, 80 * GiB) for i in range(16)])
    assert p16.per_gpu[0].kv_bytes == s.kv.total // 8


def test_vllm_refuses_gpus_with_less_free_than_its_utilisation() -> None:
    s = sized(llama_like(), VLLM)
    busy = [plan.Room(0, 60 * GiB, 80 * GiB)]  # 0.75 free < 0.9
    assert not plan.place(s, busy).fits
    chosen = sized(llama_like(), VLLM, util_placeholder=True)
    p = plan.place(chosen, busy)
    assert p.fits and p.gpu_mem_util == 0.75
    assert p.placeholders(8192)["gpu_mem_util"] == "0.75"


def test_tp_sizes_divide_the_heads() -> None:
    assert plan.tp_sizes(llama_like(heads=40), 8) == [1, 2, 4, 8]
    assert plan.tp_sizes(llama_like(heads=12, kv_heads=4), 8) == [1, 2, 4]
    assert plan.tp_sizes(llama_like(heads=28, kv_heads=4), 2) == [1, 2]
    assert plan.tp_sizes(llama_like(heads=48, kv_heads=6), 8) == [1, 2]  # 6 KV heads: 4 splits them unevenly


def test_transformers_max_memory_is_keyed_by_the_childs_device_numbers() -> None:
    s = sized(llama_like(), engines.ENGINES["transformers"], host_free=32 * GiB)
    p = plan.place(s, [plan.Room(5, 12 * GiB, 24 * GiB), plan.Room(2, 12 * GiB, 24 * GiB)])
    assert p.whole
    mm = json.loads(p.placeholders(8192)["max_memory"])
    assert set(mm) == {"0", "1", "cpu"}  # cuda:0 and cuda:1 in the child, not physical 5 and 2
    # the cap is for weights: free - allowance - the KV cache that will grow there
    assert mm["0"] == f"{((12 - 2) * GiB - p.per_gpu[0].kv_bytes) // MiB}MiB"


def test_reserve_replaces_the_allowance() -> None:
    s = sized(llama_like(), LLAMA, reserve=3 * GiB)
    p = plan.place(s, [plan.Room(0, 24 * GiB, 24 * GiB)])
    assert p.per_gpu[0].allowance_bytes == 3 * GiB


@pytest.mark.parametrize("argv,name", [
    (["llama-server", "-m", "x.gguf"], "llama.cpp"), (["/opt/bin/llama-cli"], "llama.cpp"),
    (["vllm", "serve", "M"], "vllm"), (["python3", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
    (["mlc_llm", "serve", "M"], "mlc"), (["text-generation-launcher", "--model-id", "M"], "tgi"),
    (["python", "infer.py"], "transformers"), (["accelerate", "launch", "x.py"], "transformers"),
])
def test_engine_from_the_command_word(argv, name) -> None:
    assert engines.detect(argv).name == name


def test_unknown_command_has_no_engine_and_engine_names() -> None:
    assert engines.detect(["bash", "-c", "x"]) is None
    assert engines.engine_named("llama").name == "llama.cpp"
    with pytest.raises(UsageError):
        engines.engine_named("tensorrt")


def test_command_facts_llama_server() -> None:
    f = command.read_command(["llama-server", "-m", "./q4.gguf", "-c", "8192", "-np", "4", "-ctk", "q8_0",
                              "-ngl", "{gpu_layers}"], LLAMA)
    assert (f.model, f.ctx, f.parallel, f.kv_type, f.gpu_layers) == ("./q4.gguf", 8192, 4, "q8_0", "{gpu_layers}")
    f = command.read_command(["llama-cli", "-m", "m.gguf", "--ctx-size", "{ctx}"], LLAMA)
    assert f.model == "m.gguf" and f.ctx is None
    # llama.cpp looks an option up whole (common_params_parse_ex): `--model=m.gguf` is no option to it
    f = command.read_command(["llama-cli", "--model=m.gguf"], LLAMA)
    assert f.model is None and "takes no OPTION=VALUE" in f.notes[0]


def test_command_facts_vllm_and_mlc() -> None:
    f = command.read_command(["vllm", "serve", "./Llama-3.1-70B", "--max-model-len", "32768",
                              "--tensor-parallel-size", "{tp}", "--kv-cache-dtype", "fp8"], VLLM)
    assert (f.model, f.ctx, f.tp, f.kv_type) == ("./Llama-3.1-70B", 32768, "{tp}", "fp8")
    f = command.read_command(["mlc_llm", "serve", "./dist/m-MLC", "--overrides",
                              "context_window_size=4096;tensor_parallel_shards={tp}"], engines.ENGINES["mlc"])
    assert (f.model, f.ctx, f.tp) == ("./dist/m-MLC", 4096, "{tp}")


def test_mtp_layers_count_in_ngl() -> None:
    from dataclasses import replace

    model = llama_like()
    model = replace(model, hyper=replace(model.hyper, nextn_layers=1))
    p = plan.place(sized(model, LLAMA), [plan.Room(0, 24 * GiB, 24 * GiB)])
    assert p.gpu_layers == 34  # llama.cpp's block count includes the MTP layer: all of it is -ngl 32 + 1 + 1
    assert sum(p.tensor_split) == 34


def test_command_facts_transformers_scripts_and_python_m_vllm() -> None:
    t = engines.ENGINES["transformers"]
    assert command.read_command(["python", "run_clm.py", "--model_name_or_path", "org/m"], t).model == "org/m"
    assert command.read_command(["accelerate", "launch", "gen.py", "--model=./m"], t).model == "./m"
    f = command.read_command(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "./m",
                              "--max-model-len=8192", "-tp", "{tp}"], VLLM)
    assert (f.model, f.ctx, f.tp) == ("./m", 8192, "{tp}")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None)
@given(layers=st.integers(1, 96), layer_mib=st.integers(1, 4096), frees=st.lists(st.integers(0, 96), min_size=1,
       max_size=8), ctx=st.integers(1, 200_000), partial=st.booleans(), tied=st.booleans())
def test_llama_placement_invariants(layers: int, layer_mib: int, frees: list[int], ctx: int, partial: bool,
                                    tied: bool) -> None:
    model = llama_like(layers=layers, layer_bytes=layer_mib * MiB, tied=tied)
    s = sized(model, LLAMA, ctx=ctx, partial=partial)
    p = plan.place(s, [plan.Room(i, f * GiB, f * GiB) for i, f in enumerate(frees)])
    on_gpus = sum(sh.weights_bytes for sh in p.per_gpu)
    duplicated = model.weights.token_embedding if tied and p.gpu_layers else 0  # the tied output's copy
    assert on_gpus + p.cpu_weights_bytes == model.weights.total + duplicated
    assert sum(sh.kv_bytes for sh in p.per_gpu) + p.cpu_kv_bytes == s.kv.total
    assert 0 <= p.gpu_layers <= layers + 1 and sum(p.tensor_split) == p.gpu_layers
    assert p.whole == (p.gpu_layers == layers + 1)
    assert all(sh.left_bytes >= 0 for sh in p.per_gpu)  # nothing is put where it does not fit
    if p.whole:
        assert p.fits and p.cpu_weights_bytes == model.weights.token_embedding


@settings(max_examples=100, deadline=None)
@given(heads=st.sampled_from([8, 12, 32, 40, 64]), kv_heads=st.sampled_from([1, 2, 4, 8]), n=st.sampled_from([1, 2, 4, 8]),
       ctx=st.integers(16, 131072))
def test_tensor_parallel_kv_never_less_than_its_share(heads: int, kv_heads: int, n: int, ctx: int) -> None:
    s = sized(llama_like(heads=heads, kv_heads=kv_heads), VLLM, ctx=ctx)
    p = plan.place(s, [plan.Room(i, 80 * GiB, 80 * GiB) for i in range(n)])
    per = p.per_gpu[0].kv_bytes
    assert per * n >= s.kv.total  # split or replicated, never lost
    assert per <= s.kv.total
    assert p.tp == n and (p.whole is False if heads % n else True) or p.whole is False


def test_vllm_on_a_full_gpu_of_unknown_total_is_no_crash() -> None:
    s = sized(llama_like(), VLLM, util_placeholder=True)
    p = plan.place(s, [plan.Room(0, 0, None)])
    assert not p.fits


@pytest.mark.parametrize(("engine", "gib"), [("vllm", 6), ("sglang", 6), ("tgi", 6), ("mlc", 2), ("transformers", 2)])
def test_each_engines_allowance_is_the_one_docs_model_sizing_states(engine: str, gib: int) -> None:
    # docs/model-sizing.md, "allowance per GPU" (seed 39: TGI's 6 GiB made 7 went unseen).
    s = plan.sizing(llama_like(), engines.ENGINES[engine], plan.Settings(ctx=8192))
    placed = plan.place(s, [plan.Room(0, 80 * GiB, 80 * GiB)])
    assert placed is not None and [sh.allowance_bytes for sh in placed.per_gpu] == [gib * GiB]
