"""Every architecture llama.cpp loads, spelled as llama.cpp spells it, sized by a stated rule or
refused with a reason (issue 35, items 2 and 3).

The names are llama.cpp 0c1e570's ``LLM_ARCH_NAMES`` (src/llama-arch.cpp), kept as data in
gpu_launch/modelfile/llama_archs.py; where that source is on this machine (the llama.cpp
benchmarks/llama_cpp_sizing.py builds, or LLAMA_CPP_SOURCE) the data is compared with it.
The DSA indexer cache is restated from src/llama-kv-cache-dsa.cpp: a second llama_kv_cache with one
K-only head of ``indexer_head_size`` values, in the -ctk type, the cells of the main cache, on the
layers create_memory's ``filter_lid`` keeps (src/llama-model.cpp).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gpu_launch.errors import ModelFileError  # noqa: E402
from gpu_launch.fit import kv  # noqa: E402
from gpu_launch.modelfile import gguf_facts  # noqa: E402
from gpu_launch.modelfile import llama_archs as A  # noqa: E402
from gpu_launch.modelfile.read import read_model  # noqa: E402
from tests.family_fixtures import _model  # noqa: E402
from tests.model_fixtures import write_gguf  # noqa: E402


def _vendored_arch_source() -> Path | None:
    roots = [os.environ.get("LLAMA_CPP_SOURCE", ""),
             os.environ.get("GPULAUNCH_LLAMA_CPP", str(Path.home() / ".cache" / "gpulaunch" / "llama-cpp"))]
    for root in filter(None, roots):
        for found in Path(root).glob("**/vendor/llama.cpp/src/llama-arch.cpp"):
            return found
        if (Path(root) / "src" / "llama-arch.cpp").exists():
            return Path(root) / "src" / "llama-arch.cpp"
    return None


def how_sized(arch: str) -> str | None:
    """Which of gpulaunch's llama.cpp rules sizes ``arch`` (None: none of them names it)."""
    tables = [("no KV cache", gguf_facts.NO_KV), ("recurrent state", gguf_facts.RECURRENT),
              ("hybrid", gguf_facts.KV0_HYBRIDS | set(gguf_facts.INTERVAL_HYBRIDS) | gguf_facts.KV_AND_FFN_HYBRIDS
               | gguf_facts.PARALLEL_HYBRIDS),
              ("MLA + DSA indexer", A.DSA_ARCHS), ("DeepSeek-V4's own cache", A.DSV4_ARCHS), ("interleaved sliding window", set(gguf_facts.SWA_RULES)),
              ("plain attention", A.PLAIN_ATTENTION), ("an upper bound", set(A.UPPER_BOUND)),
              ("refused", set(A.REFUSED))]
    return next((what for what, names in tables if arch in names), None)


def test_the_names_are_llama_cpps_own_list_where_its_source_is_here() -> None:
    source = _vendored_arch_source()
    if source is None:
        pytest.skip("no vendored llama.cpp source here (benchmarks/llama_cpp_sizing.py --build puts one)")
    block = re.search(r"LLM_ARCH_NAMES\s*=\s*\{(.*?)\n\};", source.read_text(), re.S)
    names = [n for n in re.findall(r'\{\s*LLM_ARCH_\w+,\s*"([^"]+)"\s*\}', block[1]) if n != "(unknown)"]
    assert tuple(names) == A.LLAMA_CPP_ARCHS


def test_every_table_spells_architectures_as_llama_cpp_does() -> None:
    """A rule under another spelling never applies (granite-swa for granite_swa: 2.17x at 16384)."""
    used = (set(gguf_facts.SWA_RULES) | gguf_facts.NO_KV | gguf_facts.RECURRENT | gguf_facts.KV0_HYBRIDS
            | set(gguf_facts.INTERVAL_HYBRIDS) | gguf_facts.KV_AND_FFN_HYBRIDS | gguf_facts.PARALLEL_HYBRIDS
            | set(gguf_facts.STATE_KINDS) | A.PLAIN_ATTENTION | A.DSA_ARCHS | A.DSV4_ARCHS | set(A.UPPER_BOUND) | set(A.REFUSED))
    assert sorted(used - set(A.LLAMA_CPP_ARCHS)) == []
    assert {"granite_swa", "spark2_5"} <= set(gguf_facts.SWA_RULES)


def test_every_architecture_llama_cpp_loads_is_sized_or_refused_with_a_reason() -> None:
    unaccounted = [a for a in A.LLAMA_CPP_ARCHS if how_sized(a) is None]
    assert unaccounted == []
    assert all(len(why) > 30 for why in A.REFUSED.values())


def test_a_refused_architecture_is_one_error_line_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "m3.gguf"
    write_gguf(path, _model("minimax-m3", 1000, 4096, block_count=2, embedding_length=64, attention__head_count=4))
    with pytest.raises(ModelFileError, match="llama_kv_cache_msa") as e:
        read_model(str(path), environ={})
    assert e.value.exit_code == 7


def granite_swa(tmp_path: Path) -> Path:
    path = tmp_path / "granite_swa.gguf"
    write_gguf(path, _model("granite_swa", 1000, 131072, block_count=4, embedding_length=256, attention__head_count=4,
                            attention__head_count_kv=2, attention__sliding_window=512,
                            attention__sliding_window_pattern=[True, False, True, False]))
    return path


def test_granite_swa_sliding_layers_apply(tmp_path: Path) -> None:
    h = read_model(str(granite_swa(tmp_path)), environ={}).hyper
    assert h.sliding == (True, False, True, False) and h.sliding_window == 512
    row = 2 * 2 * 64 * 2  # K and V, 2 KV heads of 64, f16
    got = kv.kv_cache(h, 16384, 1, "f16", run=kv.Run(flash_attn="on")).total
    assert got == 2 * row * 16384 + 2 * row * (512 + 512)  # window + one micro-batch on the sliding layers


def dsa(tmp_path: Path, arch: str, layers: int, ctx: int, **more: object) -> Path:
    path = tmp_path / f"{arch}.gguf"
    write_gguf(path, _model(arch, 129280, ctx, block_count=layers + 1, nextn_predict_layers=1, embedding_length=7168,
                            attention__head_count=128, attention__head_count_kv=1, attention__key_length=576,
                            attention__value_length=512, attention__key_length_mla=192,
                            attention__value_length_mla=128, attention__kv_lora_rank=512, rope__dimension_count=64,
                            attention__indexer__head_count=64, attention__indexer__key_length=128,
                            attention__indexer__top_k=2048, expert_count=256, **more))
    return path


@pytest.mark.parametrize(("arch", "layers", "ctx"), [("deepseek32", 61, 163840), ("glm-dsa", 78, 202752)])
def test_dsa_models_hold_the_indexer_cache_beside_the_latent(tmp_path: Path, arch: str, layers: int, ctx: int) -> None:
    """DeepSeek-V3.2 and GLM-5: 576 latent + 128 indexer values a token a layer (0.818 of it before)."""
    h = read_model(str(dsa(tmp_path, arch, layers, ctx)), environ={}).hyper
    got = kv.kv_cache(h, ctx, 1, "f16", run=kv.Run(flash_attn="on"))
    assert got.total == layers * ctx * (576 + 128) * 2
    assert any("DSA indexer cache: 128 K values per token" in r for r in got.rules)
    q8 = kv.kv_cache(h, ctx, 1, "q8_0", run=kv.Run(flash_attn="on", v_type="q8_0")).total
    assert q8 == layers * ctx * (576 + 128) // 32 * 34  # the indexer in the -ctk type too


def test_glm_dsa_indexer_types_name_the_layers(tmp_path: Path) -> None:
    types = [1, 1] + [1, 0, 0, 0] * 19  # GLM-5.2's pattern, as its file may state it
    h = read_model(str(dsa(tmp_path, "glm-dsa", 78, 1048576, attention__indexer__types=types)), environ={}).hyper
    assert sum(h.indexer) == 21
    got = kv.kv_cache(h, 8192, 1, "f16", run=kv.Run(flash_attn="on")).total
    assert got == 8192 * 2 * (78 * 576 + 21 * 128)


def test_glm_52_without_types_gets_its_default_pattern(tmp_path: Path) -> None:
    h = read_model(str(dsa(tmp_path, "glm-dsa", 78, 1048576)), environ={}).hyper
    assert h.indexer[:7] == (True, True, True, False, False, False, True) and sum(h.indexer) == 21


# --- vLLM's model registry -------------------------------------------------------------------------

def _vllm_registry_source() -> Path | None:
    """vllm/model_executor/models/registry.py of an installed vLLM, or VLLM_REGISTRY_SOURCE."""
    given = os.environ.get("VLLM_REGISTRY_SOURCE")
    if given:
        return Path(given)
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / "model_executor" / "models" / "registry.py"
    return found if found.exists() else None


def test_the_vllm_classes_are_its_registrys_where_vllm_is_here() -> None:
    import ast

    from gpu_launch.modelfile import vllm_archs as V

    source = _vllm_registry_source()
    if source is None:
        pytest.skip("no vLLM here (pip download vllm==0.33.0 and set VLLM_REGISTRY_SOURCE to its registry.py)")
    classes: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id.endswith("_MODELS") and isinstance(node.value, ast.Dict) \
                and target.id not in ("_VLLM_MODELS", "_PREVIOUSLY_SUPPORTED_MODELS", "_OOT_SUPPORTED_MODELS"):
            classes |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    ours = {c for names in V.VLLM_REGISTRY.values() for c in names}
    assert sorted(classes - ours) == []  # a class vLLM loads that gpulaunch has not looked at
    assert sorted(ours - classes) == []


def test_every_vllm_class_is_sized_or_refused_with_a_reason() -> None:
    from gpu_launch.modelfile import vllm_archs as V

    for group, names in V.VLLM_REGISTRY.items():
        for cls in names:
            why = V.refusal(cls)
            assert why is None or len(why) > 30, cls
            if group == "speculative decoding":
                assert why is not None, cls  # a draft is never sized alone
    assert V.refusal("DeepseekV32ForCausalLM") and V.refusal("LlamaForCausalLM") is None


@pytest.mark.parametrize("cls", ["DeepseekV32ForCausalLM", "EagleLlamaForCausalLM"])
def test_a_refused_vllm_class_is_one_error_line(tmp_path: Path, cls: str) -> None:
    import json

    import numpy as np
    from safetensors import numpy as st_numpy

    folder = tmp_path / "m"
    folder.mkdir()
    st_numpy.save_file({"model.norm.weight": np.zeros(8, np.float32)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": [cls], "model_type": "deepseek_v32",
                                                    "num_hidden_layers": 2, "num_attention_heads": 4,
                                                    "hidden_size": 64}))
    with pytest.raises(ModelFileError, match=f"does not size {cls} models") as e:
        read_model(str(folder), environ={})
    assert e.value.exit_code == 7


# --- against the real llama.cpp ---------------------------------------------------------------------
# llama.cpp 0c1e570 built for the CPU (benchmarks/llama_cpp_sizing.py's build), its
# llama_get_memory_breakdown() context bytes for these header-only GGUFs (llama_memory_probe.cpp,
# metadata only: llama.cpp creates the tensors its loader asks for), 2026-12-01.

def _dsa_meta(arch: str, layers: int, ctx: int, **more: object) -> object:
    return _model(arch, 129280, ctx, block_count=layers, embedding_length=7168, feed_forward_length=18432,
                  attention__head_count=128, attention__head_count_kv=1, attention__key_length=576,
                  attention__value_length=512, attention__key_length_mla=192, attention__value_length_mla=128,
                  attention__kv_lora_rank=512, attention__q_lora_rank=1536, rope__dimension_count=64,
                  attention__indexer__head_count=64, attention__indexer__key_length=128, attention__indexer__top_k=2048,
                  expert_count=256, expert_used_count=8, expert_shared_count=1, expert_feed_forward_length=2048,
                  leading_dense_block_count=3, expert_weights_scale=2.5, expert_weights_norm=True,
                  expert_gating_func=2, attention__layer_norm_rms_epsilon=1e-6, **more)


ENGINE_FILES = {
    "deepseek32": lambda: _dsa_meta("deepseek32", 61, 163840),  # DeepSeek-V3.2
    "glm-dsa": lambda: _dsa_meta("glm-dsa", 78, 202752),  # GLM-5
    "glm-dsa-5.2": lambda: _dsa_meta("glm-dsa", 78, 1048576, attention__indexer__types=[1, 1] + [1, 0, 0, 0] * 19),
    "granite_swa": lambda: _model("granite_swa", 49160, 131072, block_count=40, embedding_length=4096,
                                  feed_forward_length=12800, attention__head_count=32, attention__head_count_kv=8,
                                  attention__layer_norm_rms_epsilon=1e-5, logit_scale=16.0, residual_scale=0.22,
                                  embedding_scale=12.0, attention__scale=0.0078125, attention__sliding_window=4096,
                                  attention__sliding_window_pattern=[i % 4 != 3 for i in range(40)],
                                  rope__dimension_count=128),
}
#: (ctx, sequences, unified, K, V, -fa)
CASES = {"4k": (4096, 1, True, "f16", "f16", "on"), "32k": (32768, 1, True, "f16", "f16", "on"),
         "q8-32k": (32768, 1, True, "q8_0", "q8_0", "on"), "4-split-8k": (8192, 4, False, "f16", "f16", "on"),
         "fa-off-32k": (32768, 1, True, "f16", "f16", "off")}
ENGINE = {
    "deepseek32": {"4k": 351797248, "32k": 2814377984, "q8-32k": 1495138304, "4-split-8k": 703594496,
                   "fa-off-32k": 2814377984},
    "glm-dsa": {"4k": 449839104, "32k": 3598712832, "q8-32k": 1911816192, "4-split-8k": 899678208,
                "fa-off-32k": 3598712832},
    "glm-dsa-5.2": {"4k": 390070272, "32k": 3120562176, "q8-32k": 1657798656, "4-split-8k": 780140544,
                    "fa-off-32k": 3120562176},
    "granite_swa": {"4k": 671088640, "32k": 1908408320, "q8-32k": 1013841920, "4-split-8k": 1342177280,
                    "fa-off-32k": 1908408320},  # 16384: 1237319680 (was planned 2.17x as "granite-swa")
}


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_the_new_rules_match_llama_cpps_own_bytes(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, ENGINE_FILES[name]())
    h = read_model(str(path), environ={}).hyper
    for case, want in ENGINE[name].items():
        ctx, seqs, unified, k, v, fa = CASES[case]
        got = kv.kv_cache(h, ctx, seqs, k, run=kv.Run(unified=unified, v_type=v, flash_attn=fa)).total
        assert got == want, (name, case)
