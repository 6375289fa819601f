"""`gpulaunch plan` and `--fit MODEL` end to end, on GGUF headers written by the real gguf writer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import clean_env

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("gguf")

from gpu_launch.views import schemas  # noqa: E402
from tests.model_fixtures import Gguf, llama_pair, llama_tensors, write_gguf  # noqa: E402


def gpulaunch(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True,
                          env=clean_env(), timeout=60)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {size: str(path) for size, path in llama_pair(tmp_path_factory.mktemp("models")).items()}


def plan_json(*argv: str) -> dict:
    proc = gpulaunch(*argv)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schemas.PLAN).validate(doc)
    order = list(schemas.PLAN["properties"])
    assert list(doc) == [k for k in order if k in doc]
    return doc


def test_plan_json_of_a_small_gguf(models: dict[str, str]) -> None:
    doc = plan_json("--snapshot", "dgx-h100", "plan", models["8b"], "--ctx", "8192", "--json")
    assert doc["model"]["format"] == "gguf" and doc["model"]["architecture"] == "llama"
    assert doc["model"]["layers"] == 32
    assert doc["engine"] == "llama.cpp" and doc["ctx"] == 8192
    assert doc["gpu_layers"] == 33  # all of a 32-layer model, as -ngl counts
    assert doc["kv_cache_bytes"] == 32 * 8192 * 2 * 8 * 128 * 2
    assert len(doc["gpus"]) == 1 and doc["gpus"][0] in (2, 3, 4, 6, 7)  # an idle H100, not one in use
    share = doc["per_gpu"][0]
    assert share["weights_bytes"] + doc["cpu_weights_bytes"] == doc["model"]["weights_bytes"]
    assert doc["labels"] == {"weights": "exact", "kv": "rule", "allowance": "allowance"}


def test_plan_of_a_vllm_command_reads_the_model_and_context(models: dict[str, str]) -> None:
    doc = plan_json("--snapshot", "workstation-4x", "plan", "--json", "--", "vllm", "serve", models["70b"],
                    "--max-model-len", "131072", "--tensor-parallel-size", "{tp}")
    assert doc["engine"] == "vllm" and doc["ctx"] == 131072 and doc["ctx_from"] == "the command"
    assert doc["tp"] == len(doc["gpus"]) == 4
    assert doc["placeholders"]["tp"] == "4"


def test_explicit_options_win_over_the_command(models: dict[str, str]) -> None:
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--ctx", "4096", "--kv-type", "q8_0", "--json", "--",
                    "llama-server", "-m", models["8b"], "-c", "32768", "-ctk", "f16")
    assert doc["ctx"] == 4096 and doc["kv_type"] == "q8_0"
    assert doc["kv_cache_bytes"] == 32 * 4096 * 2 * (8 * 128 // 32) * 34


def test_plan_on_named_gpus_in_that_order(models: dict[str, str]) -> None:
    doc = plan_json("--snapshot", "pcie-8x", "plan", models["70b"], "--ctx", "8192", "--gpus", "5,1", "--json")
    assert doc["gpus"] == [5, 1]
    assert sum(g["layers"] for g in doc["per_gpu"]) == doc["gpu_layers"] == 81


def test_unplaceable_plan_exits_4_with_one_line(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "workstation-4x", "--gpus", "0", "--dry-run", "--", "true")  # sanity: the box works
    assert proc.returncode == 0
    # 45 GiB of allowance on 48 GiB cards: no number of them, nor of such nodes, holds it
    proc = gpulaunch("--snapshot", "workstation-4x", "plan", "--json", "--reserve", "45GiB", "--", "vllm", "serve",
                     models["70b"], "--max-model-len", "131072", "--kv-cache-dtype", "f32")
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: ") and "tokens" in lines[0]
    assert "Traceback" not in proc.stderr


def test_fit_model_fills_the_placeholders_of_a_real_child(models: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text("import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], *sys.argv[1:])")
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--engine", "llama.cpp", "--", sys.executable,
                     str(script), "-m", models["8b"], "--ctx-size", "{ctx}", "-ngl", "{gpu_layers}", "-c", "8192")
    assert proc.returncode == 0, proc.stderr
    cvd, *rest = proc.stdout.split()
    assert cvd in ("2", "3", "4", "6", "7")
    # llama.cpp takes the last of -c/--ctx-size: 8192, which the placeholder then repeats
    assert rest == ["-m", models["8b"], "--ctx-size", "8192", "-ngl", "33", "-c", "8192"]
    assert "33 of 33 layers" in proc.stderr


def test_fit_model_dry_run_for_vllm_and_mlc(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "workstation-4x", "--fit", "model", "--dry-run", "--", "vllm", "serve",
                     models["70b"], "--max-model-len", "32768", "--tensor-parallel-size", "{tp}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith("--tensor-parallel-size 2")
    proc = gpulaunch("--snapshot", "workstation-4x", "--fit", models["70b"], "--ctx", "32768", "--dry-run", "--",
                     "mlc_llm", "serve", "dist/x", "--overrides", "tensor_parallel_shards={tp};context_window_size={ctx}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith("--overrides 'tensor_parallel_shards=2;context_window_size=32768'") \
        or "tensor_parallel_shards=2;context_window_size=32768" in proc.stdout


def test_model_placeholders_need_a_model() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--auto", "2", "--dry-run", "--", "vllm", "serve", "M", "-tp", "{tp}")
    assert proc.returncode == 2
    assert "--fit" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("flag", [["--ctx", "8192"], ["--reserve", "2GiB"], ["--engine", "vllm"]])
def test_sizing_options_without_a_model_are_refused_not_ignored(flag: list[str]) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--auto", "1", *flag, "--dry-run", "--", "true")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{flag[0]} sizes a model: it needs --fit MODEL" in proc.stderr


def test_a_reserve_default_from_the_environment_does_not_stop_other_launches() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "--auto", "1", "--dry-run",
                           "--", "true"], capture_output=True, text=True, timeout=60,
                          env=clean_env({"GPULAUNCH_RESERVE": "2GiB"}))
    assert proc.returncode == 0, proc.stderr


def test_fit_model_with_a_command_that_names_none() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "python", "serve.py")
    assert proc.returncode == 2 and "names no model" in proc.stderr


def test_a_missing_model_file_is_exit_7(tmp_path: Path) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", str(tmp_path / "nope.gguf"))
    assert proc.returncode == 7 and proc.stderr.count("\n") == 1


def test_fit_size_still_means_a_size() -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "100GiB", "--dry-run", "--", "true")
    assert proc.returncode == 0 and "GPULAUNCH_GPUS=" in proc.stdout
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "10Gb!", "--dry-run", "--", "true")
    assert proc.returncode == 2 and "is not a size" in proc.stderr


@pytest.mark.parametrize("selection", [["--auto", "2"], ["--fit", "100GiB"], []])
def test_a_launch_without_a_model_imports_no_sizing(selection: list[str]) -> None:
    from tests.test_imports import run_importtime

    proc, modules = run_importtime("--snapshot", "dgx-h100", *selection, "-q", "--", sys.executable, "-c", "pass")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu_launch.cli" in modules
    sizing = {m for m in modules if m.startswith(("gpu_launch.fit", "gpu_launch.modelfile", "gpu_launch.fit.sizing",
                                                  "gpu_launch.choose.by_model"))}
    assert sizing == set()


def test_a_launch_with_a_model_does_import_them(models: dict[str, str]) -> None:
    from tests.test_imports import run_importtime

    proc, modules = run_importtime("--snapshot", "dgx-h100", "--fit", models["8b"], "-q", "--", sys.executable, "-c",
                                   "pass")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu_launch.fit.plan" in modules and "gpu_launch.modelfile.read" in modules


def _laptop(tmp_path: Path, host_mib: int) -> str:
    """One 6 GiB card and ``host_mib`` of host memory, as a snapshot states them."""
    gpu = {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000006", "name": "NVIDIA GeForce RTX 3060 Laptop",
           "pci_bus_id": "00000000:01:00.0", "memory_total_mib": 6144, "memory_used_mib": 0, "memory_free_mib": 6144,
           "utilization_gpu": 0, "processes": [], "mig_mode": "disabled", "health": []}
    path = tmp_path / "laptop.json"
    path.write_text(json.dumps({"schema": 1, "hostname": "laptop", "driver_version": None, "cuda_driver_version": None,
                                "gpus": [gpu], "host_memory_available_mib": host_mib}))
    return str(path)


def test_seed_case_6_gib_card_and_16_gib_of_ram(models: dict[str, str], tmp_path: Path) -> None:
    # The 70B Q4 layout (40.5 GiB) does not fit 6 GiB + 16 GiB; the 8B (4.8 GiB + KV) fits partly on the card.
    snap = _laptop(tmp_path, 16384)
    doc = plan_json("--snapshot", snap, "plan", "--json", "--", "llama-server", "-m", models["8b"], "-c", "32768",
                    "-ngl", "{gpu_layers}")
    assert not doc["whole"] and 0 < doc["gpu_layers"] < 33
    assert doc["per_gpu"][0]["left_bytes"] >= 0
    assert doc["per_gpu"][0]["weights_bytes"] + doc["cpu_weights_bytes"] == doc["model"]["weights_bytes"]
    proc = gpulaunch("--snapshot", snap, "--fit", "model", "--dry-run", "--", "llama-server", "-m", models["8b"],
                     "-c", "32768", "-ngl", "{gpu_layers}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith(f"-ngl {doc['gpu_layers']}")
    # the 70B's CPU share is more than the host has: one line, exit 4
    proc = gpulaunch("--snapshot", snap, "plan", "--", "llama-server", "-m", models["70b"], "-c", "8192", "-ngl",
                     "{gpu_layers}")
    assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and "host" in proc.stderr, proc.stderr
    # said as what runs out (the host), not as what the GPUs would need for the whole model
    line = proc.stderr
    assert "does not fit at 8192 tokens (llama.cpp): the best GPU (6.0 GiB free) takes " in line, line
    assert " left on the CPU need " in line and "the host has 16.0 GiB available" in line, line
    assert "needs" not in line and "a smaller -ngl" not in line, line
    # -ngl 0 keeps everything on the CPU: the same story, and no advice to lower -ngl further
    proc = gpulaunch("--snapshot", snap, "plan", "--", "llama-server", "-m", models["70b"], "-c", "8192", "-ngl", "0")
    assert proc.returncode == 4 and "takes 0 of its 81 layers; the 81 left on the CPU" in proc.stderr, proc.stderr
    assert "(hint: -ngl {gpu_layers} to put as many layers on the GPUs as fit" in proc.stderr, proc.stderr


def test_a_fixed_ngl_must_fit_whole(models: dict[str, str], tmp_path: Path) -> None:
    proc = gpulaunch("--snapshot", _laptop(tmp_path, 16384), "plan", "--", "llama-server", "-m", models["8b"], "-c",
                     "32768", "-ngl", "99")
    assert proc.returncode == 4
    assert "-ngl {gpu_layers}" in proc.stderr  # the hint: let gpulaunch say how many layers fit


def test_a_fixed_ngl_below_the_models_units_offloads_only_those(models: dict[str, str], tmp_path: Path) -> None:
    """-ngl 20 puts 20 units on the GPU and keeps the rest on the CPU (llama-model.cpp load_tensors: layers
    below n_layer + 1 - N stay on the CPU): a 6 GiB card runs it, so it is no shortfall."""
    snap = _laptop(tmp_path, 16384)
    doc = plan_json("--snapshot", snap, "plan", "--json", "--", "llama-server", "-m", models["8b"], "-c", "8192",
                    "-ngl", "20")
    assert doc["gpu_layers"] == 20 and doc["per_gpu"][0]["layers"] == 20 and not doc["whole"]
    assert doc["per_gpu"][0]["kv_bytes"] == 19 * 8192 * 2 * 8 * 128 * 2  # the 19 offloaded layers' KV
    assert doc["cpu_kv_bytes"] == 13 * 8192 * 2 * 8 * 128 * 2
    proc = gpulaunch("--snapshot", snap, "--fit", "model", "--dry-run", "--", "llama-server", "-m", models["8b"],
                     "-c", "8192", "-ngl", "20")
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].endswith("-ngl 20"), proc.stderr
    # -ngl 30 asks for more than the card holds at this context: one line, and a context at which it fits
    proc = gpulaunch("--snapshot", snap, "plan", "--", "llama-server", "-m", models["8b"], "-c", "8192", "-ngl", "30")
    assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and "-ngl 30" in proc.stderr, proc.stderr
    assert "-ngl 30 puts 30 of its 33 layers on the GPUs, the best GPU (6.0 GiB free) takes " in proc.stderr
    assert "tokens it fits" in proc.stderr and "(hint: a smaller -ngl" in proc.stderr


@pytest.mark.parametrize("flags,k_bytes,v_bytes", [(["-ctk", "q8_0"], 34, 64), (["-ctk", "q8_0", "-ctv", "q8_0"], 34, 34),
                                                    (["--cache-type-v", "q4_0"], 64, 18)])
def test_llama_cpp_types_k_and_v_apart(models: dict[str, str], flags: list[str], k_bytes: int, v_bytes: int) -> None:
    """-ctk types the K cache only; V stays f16 unless -ctv says (llama.cpp common/arg.cpp, --cache-type-k/-v;
    llama-kv-cache.cpp makes K of type_k and V of type_v). Bytes per 32 values: f16 64, q8_0 34, q4_0 18."""
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", "llama-server", "-m", models["8b"], "-c", "8192",
                    *flags)
    assert doc["kv_cache_bytes"] == 32 * 8192 * (8 * 128 // 32) * (k_bytes + v_bytes)


def test_gemma3_header_to_kv_matches_llama_cpps_log(tmp_path: Path) -> None:
    # A Gemma-3-4B layout (34 layers, 4 KV heads of 256, window 1024): the file carries no pattern, every 6th
    # layer is global. llama.cpp logs 160.00 MiB (8192 cells, 5 layers) + 174.00 MiB (1536 cells, 29 layers).
    kv = {"gemma3.block_count": 34, "gemma3.context_length": 131072, "gemma3.embedding_length": 2560,
          "gemma3.feed_forward_length": 10240, "gemma3.attention.head_count": 8, "gemma3.attention.head_count_kv": 4,
          "gemma3.attention.key_length": 256, "gemma3.attention.value_length": 256,
          "gemma3.attention.sliding_window": 1024}
    path = tmp_path / "gemma3.gguf"
    write_gguf(path, Gguf("gemma3", kv, llama_tensors(34, 2560, 8, 4, 10240, 262144, head_dim=256, tied=True)))
    doc = plan_json("--snapshot", "dgx-h100", "plan", str(path), "--ctx", "8192", "--json")
    assert doc["kv_cache_bytes"] == (160 + 174) << 20
    assert doc["gpu_layers"] == 35
    row = 2 * 4 * 256 * 2  # K and V of 4 heads of 256, f16, per token per layer
    # llama-server with no -np runs 4 slots over one unified cache: the sliding layers hold 4 windows + a micro-batch
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", "llama-server", "-m", str(path), "-c", "8192")
    assert doc["parallel"] == 4
    assert doc["kv_cache_bytes"] == 5 * 8192 * row + 29 * 4608 * row
    # -np 4 splits the cache 4 ways: each stream's sliding cache is pad256(min(8192 / 4, 1024 + 512))
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", "llama-server", "-m", str(path), "-c", "8192",
                    "-np", "4")
    assert doc["kv_cache_bytes"] == 5 * 8192 * row + 29 * 4 * 1536 * row
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", "llama-server", "-m", str(path), "-c", "8192",
                    "-np", "4", "-kvu")
    assert doc["kv_cache_bytes"] == 5 * 8192 * row + 29 * 4608 * row


def test_fallback_cpu_hands_the_cpu_plan_over(models: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text("import os, sys; print(repr(os.environ['CUDA_VISIBLE_DEVICES']), *sys.argv[1:])")
    # --idle leaves 3 of the 4 GPUs; vLLM needs 4 for 131072 tokens: nothing now, so the CPU
    proc = gpulaunch("--snapshot", "workstation-4x", "--idle", "--fallback", "cpu", "--fit", models["70b"], "--ctx",
                     "131072", "--engine", "vllm", "--", sys.executable, str(script), "--tp", "{tp}", "-c", "{ctx}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["''", "--tp", "1", "-c", "131072"]
    # llama.cpp on the CPU: no layer offloaded (a snapshot's host memory keeps it from fitting partly)
    snap = tmp_path / "ws.json"
    doc = json.loads(gpulaunch("--snapshot", "workstation-4x", "ls", "--json").stdout)
    doc["host_memory_available_mib"] = 1024
    snap.write_text(json.dumps(doc))
    proc = gpulaunch("--snapshot", str(snap), "--fallback", "cpu", "--fit", models["70b"], "--ctx", "8192",
                     "--engine", "llama.cpp", "--reserve", "47GiB", "--", sys.executable, str(script), "-ngl",
                     "{gpu_layers}", "-c", "{ctx}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["''", "-ngl", "0", "-c", "8192"]


def test_a_placeholder_the_engine_has_no_value_for_is_refused(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "workstation-4x", "--fit", "model", "--dry-run", "--", "vllm", "serve",
                     models["70b"], "--max-model-len", "8192", "-tp", "{tp}", "-ngl", "{gpu_layers}")
    assert proc.returncode == 2 and "{gpu_layers} has no value for vllm" in proc.stderr


def test_a_safetensors_folder_plans_for_vllm_by_default(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    from tests.test_modelfile_safetensors import LLAMA, llama_layout, nbytes, write_model

    tensors = llama_layout(3)
    folder = write_model(tmp_path / "tiny-llama", LLAMA, tensors)
    doc = plan_json("--snapshot", "dgx-h100", "plan", str(folder), "--json")
    assert doc["model"]["format"] == "safetensors" and doc["engine"] == "vllm"
    assert doc["model"]["weights_bytes"] == sum(nbytes(t) for t in tensors.values())
    assert doc["ctx"] == 4096 and doc["ctx_from"] == "the model's trained context"
    assert doc["kv_cache_bytes"] == 3 * (4096 + 16) * 2 * 2 * (64 // 4) * 2  # 2 KV heads of 16, bf16, + 1 block held back
    assert doc["tp"] == 1


def test_option_equals_placeholder_is_filled(models: dict[str, str]) -> None:
    """--n-gpu-layers={gpu_layers} is how llama.cpp's docs write it: filled, as a whole argument is (issue 26 item 4)."""
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "llama-server", "-m", models["8b"],
                     "-c", "4096", "--n-gpu-layers={gpu_layers}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith(" --n-gpu-layers=33"), proc.stdout


def test_explain_on_a_launch_with_a_model(models: dict[str, str]) -> None:
    argv = ("--snapshot", "workstation-4x", "--fit", "model", "--explain")
    cmd = ("--", "llama-server", "-m", models["70b"], "-c", "32768", "-ngl", "{gpu_layers}")
    doc = plan_json(*argv, "--json", *cmd)
    assert len(doc["gpus"]) == 2 and doc["gpu_layers"] == 81
    proc = gpulaunch(*argv, *cmd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("model: ") and "placeholders: " in proc.stdout and "{gpu_layers}=81" in proc.stdout


def test_an_mlc_folder_named_by_mlc_llm_serve(tmp_path: Path) -> None:
    from tests.model_fixtures import write_mlc_folder

    folder = tmp_path / "Llama-3-8B-q4f16_1-MLC"
    write_mlc_folder(folder, [("model.embed_tokens.q_weight", 1000),
                              ("model.layers.0.self_attn.qkv_proj.q_weight", 4000),
                              ("model.layers.1.mlp.down_proj.q_weight", 3000), ("lm_head.q_weight", 1200)])
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "mlc_llm", "serve", str(folder),
                     "--overrides", "tensor_parallel_shards={tp};context_window_size={ctx}")
    assert proc.returncode == 0, proc.stderr
    assert "tensor_parallel_shards=1;context_window_size=8192" in proc.stdout.splitlines()[-1]


def test_a_model_request_reads_the_links_from_nvml(models: dict[str, str], tmp_path: Path) -> None:
    # The ranking among sets that hold the model needs the topology (NVLink pairs first), as --fit SIZE does.
    from tests.test_imports import _SHIM, run_importtime

    (tmp_path / "pynvml.py").write_text(_SHIM)
    proc, _modules = run_importtime("-v", "--fit", models["70b"], "--ctx", "8192", "--dry-run", "--", "true",
                                    pynvml_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    read = [line for line in proc.stderr.splitlines() if line.startswith("gpulaunch: read nvml in ")]
    assert read and "topology " in read[0]


def test_llama_cpp_keeps_the_token_embedding_on_the_host_and_the_plan_says_so(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", models["70b"], "--engine", "llama.cpp")
    assert proc.returncode == 0, proc.stderr
    cpu = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("CPU ")]
    assert cpu == ["  CPU       4 MiB       0 MiB  (the token embedding stays on the host)"]
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU"])
    assert lines[head].split()[-1] == "layers"  # llama.cpp splits by layers: how many each GPU holds
    assert lines[head + 1].split()[-2] == "GiB" and lines[head + 1].split()[-1].isdigit(), lines[head + 1]
    from gpu_launch.views.plan_view import _gib

    assert [_gib(n) for n in (int(4.6 * 2**20), 2**30, 3 * 2**29)] == ["5 MiB", "1.00 GiB", "1.50 GiB"]


def test_a_one_node_pipeline_says_each_gpus_stage(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "workstation-4x", "plan", "--", "vllm", "serve", models["70b"], "-tp", "2", "-pp", "2",
                     "--max-model-len", "8192")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU"])
    assert lines[head].split()[-1] == "stage"
    assert [line.split()[-1] for line in lines[head + 1:head + 5]] == ["0", "0", "1", "1"]


def test_a_plans_allowance_says_it_is_the_reserve_given(models: dict[str, str]) -> None:
    given = plan_json("--snapshot", "dgx-h100", "plan", "--json", models["70b"], "--engine", "vllm", "--reserve", "3GiB")
    default = plan_json("--snapshot", "dgx-h100", "plan", "--json", models["70b"], "--engine", "vllm")
    assert given["allowance"]["why"] == "--reserve" and given["allowance"]["bytes_per_gpu"] == 3 << 30
    assert gpulaunch("--snapshot", "dgx-h100", "plan", "--json", models["70b"]).stdout.startswith('{\n  "schema": ')
    assert default["allowance"]["why"] != "--reserve"
