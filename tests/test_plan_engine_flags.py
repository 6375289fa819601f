"""What the user sees (``plan --json``, one-line refusals) when the command's own engine flags change
the cache: -fa, --swa-full, -ctk/-ctv, a Python binding's defaults; and the sizing bugs of issue 28
(K and V types swapped, blocks rounded down, a sliding cache not capped at the context, vLLM's
utilisation rounded up), each pinned by the exact bytes or value the user is shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from tests.family_fixtures import FAMILIES, write_family  # noqa: E402
from tests.model_fixtures import Gguf, write_gguf  # noqa: E402
from tests.test_plan_cli import gpulaunch, plan_json  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("families")
    return {name: str(write_family(folder, name)) for name in FAMILIES}


def plan(*command: str) -> dict:
    return plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", *command)


def test_flash_attention_off_is_read_from_the_command(files: dict[str, str]) -> None:
    # Nemotron-NAS (per-layer KV heads): -fa off pads V to the widest layer; llama.cpp measured
    # 9563013120 bytes at 32768 with -fa off, 8388608000 with it on or auto
    m = files["nemotron-nas"]
    # (llama.cpp takes no --opt=value form: common_params_parse_ex looks each word up whole)
    for flag, want in ((["-fa", "off"], 9563013120), (["--flash-attn", "off"], 9563013120),
                       (["--flash_attn", "off"], 9563013120), (["-fa", "on"], 8388608000), ([], 8388608000)):
        doc = plan("llama-server", "-m", m, "-c", "32768", *flag)
        assert doc["kv_cache_bytes"] == want, flag
        assert doc["flash_attn"] == ({"off": "off", "on": "on"}.get(flag[-1].split("=")[-1], "auto") if flag else "auto")
    assert any("padded to the widest" in r for r in plan("llama-server", "-m", m, "-c", "32768", "-fa", "off")["kv_rules"])


@pytest.mark.parametrize("flag", ["--swa-full", "-swa-full"])
def test_swa_full_is_read_from_the_command(files: dict[str, str], flag: str) -> None:
    # gpt-oss-20b at 32768, one sequence: llama.cpp measured 824180736 bytes, 1610612736 with --swa-full
    assert plan("llama-server", "-m", files["gpt-oss-20b"], "-c", "32768", "-np", "1")["kv_cache_bytes"] == 824180736
    doc = plan("llama-server", "-m", files["gpt-oss-20b"], "-c", "32768", "-np", "1", flag)
    assert doc["kv_cache_bytes"] == 1610612736 and doc["swa_full"] is True


def test_llama_cpp_python_gets_the_full_sliding_cache_and_says_why(files: dict[str, str]) -> None:
    # llama-cpp-python keeps llama_context_default_params(): swa_full = true, and Llama(flash_attn=False)
    m = files["gpt-oss-20b"]
    doc = plan_json("--snapshot", "dgx-h100", "--fit", m, "--ctx", "32768", "--explain", "--json", "--",
                    "python", "-m", "llama_cpp.server", "--model", m)
    assert doc["kv_cache_bytes"] == 1610612736  # what llama.cpp measured with swa_full
    assert doc["swa_full"] is True and doc["flash_attn"] == "off"
    assert any("llama-cpp-python" in r and "swa_full = true" in r for r in doc["kv_rules"])


def test_without_flash_attention_the_allowance_covers_the_growing_compute_buffer(files: dict[str, str]) -> None:
    # llama.cpp's compute buffer for gpt-oss-20b at 32k with -fa off: 4402329600 bytes (4198 MiB)
    doc = plan("llama-server", "-m", files["gpt-oss-20b"], "-c", "32768", "-fa", "off", "-ngl", "99")
    assert doc["per_gpu"][-1]["allowance_bytes"] >= 4402329600
    on = plan("llama-server", "-m", files["gpt-oss-20b"], "-c", "32768", "-fa", "on", "-ngl", "99")
    assert on["per_gpu"][-1]["allowance_bytes"] == (1 << 30) + 512 * 201088 * 4  # the logits of one micro-batch


@pytest.mark.parametrize("family,flags,words", [
    ("phi-2", ["-ctk", "q8_0"], "does not divide the head size 80"),
    ("deepseek-v2-lite", ["-ctk", "q8_0"], "different K (q8_0) and V (f16) cache types"),
    ("llama-3.1-8b", ["-ctv", "q8_0", "-fa", "off"], "requires flash attention"),
])
def test_settings_llama_cpp_refuses_are_refused_before_anything_is_reserved(files: dict[str, str], family: str,
                                                                            flags: list[str], words: str) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--", "llama-server", "-m", files[family], "-c", "4096", *flags)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "(hint: " in lines[0], proc.stderr


def test_mtp_blocks_are_not_loaded(tmp_path: Path) -> None:
    from tests.model_fixtures import T, llama_tensors

    a = "glm4moe"
    tensors = llama_tensors(3, 256, 4, 4, 512, 1000) + [T("blk.3.nextn.eh_proj.weight", (256, 512))]
    for t in tensors:
        t.name = t.name.replace("blk.3.", "blk.3.") if t.name.startswith("blk.3") else t.name
    kv = {f"{a}.block_count": 4, f"{a}.nextn_predict_layers": 1, f"{a}.context_length": 4096,
          f"{a}.embedding_length": 256, f"{a}.attention.head_count": 4, f"{a}.attention.head_count_kv": 4}
    path = tmp_path / "glm.gguf"
    write_gguf(path, Gguf(a, kv, tensors))
    doc = plan_json("--snapshot", "dgx-h100", "plan", str(path), "--json")
    mtp = 256 * 512 * 2
    assert doc["model"]["weights_by_kind"]["mtp_not_loaded"] == mtp
    assert doc["model"]["weights_bytes"] == sum(t.nbytes for t in tensors) - mtp
    assert doc["gpu_layers"] == 5  # -ngl counts the MTP block among llama.cpp's n_layer_all + 1 units


# --- issue 28: the sizing bugs a user would suffer, each pinned by what the user is shown ---


def test_k_and_v_cache_types_are_not_swapped(tmp_path: Path) -> None:
    # a DeepSeek GGUF without the MLA keys: 16 KV heads with K of 192 and V of 128 values; -ctk q8_0
    # types K only (llama-kv-cache.cpp: K of type_k, V of type_v): K 16 x 192 / 32 x 34, V 16 x 128 x 2
    a = "deepseek2"
    kv = {f"{a}.block_count": 27, f"{a}.context_length": 4096, f"{a}.embedding_length": 2048,
          f"{a}.attention.head_count": 16, f"{a}.attention.head_count_kv": 16, f"{a}.attention.key_length": 192,
          f"{a}.attention.value_length": 128, f"{a}.vocab_size": 1000}
    write_gguf(tmp_path / "ds.gguf", Gguf(a, kv, []))
    doc = plan("llama-server", "-m", str(tmp_path / "ds.gguf"), "-c", "4096", "-ctk", "q8_0", "-ctv", "f16")
    assert doc["kv_cache_bytes"] == 27 * 4096 * (16 * 192 // 32 * 34 + 16 * 128 * 2)


def test_blocks_are_rounded_up_not_down(files: dict[str, str]) -> None:
    # llama.cpp pads the context up to 256 (3000 -> 3072); vLLM allocates whole 16-token blocks
    # (3000 -> 188 blocks) plus the one pool block it holds back
    doc = plan("llama-server", "-m", files["llama-3.1-8b"], "-c", "3000")
    assert doc["kv_cache_bytes"] == 32 * 3072 * 2 * 8 * 128 * 2
    doc = plan("vllm", "serve", files["llama-3.1-8b"], "--max-model-len", "3000")
    assert doc["kv_cache_bytes"] == 32 * (188 + 1) * 16 * 2 * 8 * 128 * 2


def test_sliding_cache_never_exceeds_the_context(files: dict[str, str]) -> None:
    # llama-kv-cache-iswa.cpp: GGML_PAD(min(n_ctx, window + n_ubatch), 256). Gemma-3 at -c 1024: the
    # sliding layers hold 1024 cells (not 1024 + 512 = 1536), the same as the global ones
    doc = plan("llama-server", "-m", files["gemma-3-4b"], "-c", "1024")
    assert doc["kv_cache_bytes"] == 34 * 1024 * 2 * 4 * 256 * 2


def test_vllm_utilisation_is_rounded_down_to_what_is_free(tmp_path: Path, files: dict[str, str]) -> None:
    # GPUs with 75.34 % free: gpulaunch hands vLLM 0.75 (0.76 would ask for more than is free, and
    # vLLM refuses to start when free memory is below utilisation x total)
    from gpu_launch.hardware.examples import __file__ as examples

    snapshot = json.loads((Path(examples).parent / "dgx-h100.json").read_text())
    for gpu in snapshot["gpus"]:
        gpu["memory_free_mib"] = int(gpu["memory_total_mib"] * 0.7534)
    (tmp_path / "busy.json").write_text(json.dumps(snapshot))
    doc = plan_json("--snapshot", str(tmp_path / "busy.json"), "plan", "--json", "--", "vllm", "serve",
                    files["llama-3.1-8b"], "--max-model-len", "4096", "--gpu-memory-utilization", "{gpu_mem_util}")
    assert doc["placeholders"]["gpu_mem_util"] == "0.75"
    total = snapshot["gpus"][doc["gpus"][0]]["memory_total_mib"] * MiB
    assert 0.75 * total <= doc["per_gpu"][0]["free_bytes"]


@pytest.mark.parametrize("family,key,value", [
    ("rwkv6-1.6b", "rwkv6.wkv.head_size", 0),
    ("rwkv6-1.6b", "rwkv6.token_shift_count", 1 << 20),
    ("lfm2-1.2b", "lfm2.shortconv.l_cache", float("nan")),
    ("kimi-linear", "kimi-linear.kda.head_dim", 1 << 30),
    ("gemma-4-e2b", "gemma4.attention.shared_kv_layers", 40),
    ("gemma-4-e2b", "gemma4.attention.key_length_swa", 0),
])
def test_new_state_keys_out_of_range_are_refused_in_one_line(tmp_path: Path, family: str, key: str, value: object) -> None:
    model = FAMILIES[family]()
    model.kv[key] = value
    write_gguf(tmp_path / "m.gguf", model)
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", str(tmp_path / "m.gguf"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 7 and len(lines) == 1 and key in lines[0], proc.stderr


@pytest.mark.parametrize("key,value", [("conv_L_cache", -1), ("conv_L_cache", 1e30), ("mamba_d_ssm", 2.5),
                                       ("num_kv_shared_layers", 16)])
def test_new_config_keys_out_of_range_are_refused_in_one_line(tmp_path: Path, key: str, value: object) -> None:
    from tests.test_modelfile_safetensors import llama_layout, write_model

    config = {"model_type": "lfm2", "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "hidden_size": 64, "vocab_size": 128, "conv_L_cache": 3, "layer_types": ["conv", "full_attention", "conv"],
              key: value}
    folder = write_model(tmp_path / "m", config, llama_layout(3))
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", str(folder))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 7 and len(lines) == 1 and key in lines[0], proc.stderr


def test_a_launch_is_refused_before_any_gpu_is_reserved(tmp_path: Path, files: dict[str, str]) -> None:
    import os
    import subprocess
    import sys

    from tests.cli_run import clean_env

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").write_text("#!/bin/sh\necho ran\n")
    (bin_dir / "llama-server").chmod(0o755)
    env = clean_env({"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GPULAUNCH_LOCK_DIR": str(tmp_path / "locks")})
    proc = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "--fit", "model", "--",
                           "llama-server", "-m", files["phi-2"], "-c", "4096", "-ctk", "q8_0"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "head size 80" in proc.stderr
