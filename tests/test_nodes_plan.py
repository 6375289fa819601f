"""`plan` answers in nodes (issue 24, item 1): a model one node of this kind cannot hold is planned over
N such nodes, tp within each and pp across them, with what each GPU of each stage holds; a launch that
no wait could help says how many nodes it needs instead of suggesting --wait, and exits 4 at once.

The models are header-only sparse files in the layouts of Llama-3.1-405B (bf16, 756 GiB), Llama-3.1-70B
and DeepSeek-V3 (FP8, MLA), on the bundled dgx-h100 machine (8 × H100 80 GB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_run import clean_env
from tests.docs_fixtures import llama_70b_safetensors, llama_405b_safetensors
from tests.model_fixtures import safetensors_header

GiB = 1 << 30


def deepseek_v3(folder: Path) -> None:
    """DeepSeek-V3's config (MLA: kv_lora_rank 512 + rope 64) and about its FP8 weights, one hole."""
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
              "num_attention_heads": 128, "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512,
              "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
              "max_position_embeddings": 163840, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
              "quantization_config": {"quant_method": "fp8"}}
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": ("BF16", (129280, 7168))}
    for i in range(61):
        tensors[f"model.layers.{i}.mlp.experts.weight"] = ("F8_E4M3", (10_800_000_000,))
        tensors[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", (7168,))
    tensors["model.norm.weight"] = ("BF16", (7168,))
    tensors["lm_head.weight"] = ("BF16", (129280, 7168))
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    header = safetensors_header(tensors, {"BF16": 2, "F8_E4M3": 1})
    data = sum((2 if dtype == "BF16" else 1) * _count(shape) for dtype, shape in tensors.values())
    with open(folder / "model.safetensors", "wb") as f:
        f.write(header)
        f.truncate(len(header) + data)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    llama_405b_safetensors(root / "Llama-3.1-405B")
    llama_70b_safetensors(root / "Llama-3.1-70B")
    deepseek_v3(root / "DeepSeek-V3")
    return {"405b": str(root / "Llama-3.1-405B"), "70b": str(root / "Llama-3.1-70B"), "dsv3": str(root / "DeepSeek-V3")}


def gpulaunch(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True,
                          env=clean_env(env), timeout=timeout)


def plan(*argv: str) -> dict:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--json", *argv)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema = pytest.importorskip("jsonschema")
    from gpu_launch.views import schemas

    jsonschema.Draft202012Validator(schemas.PLAN).validate(doc)
    return doc


def test_405b_bf16_on_a_dgx_h100_is_two_nodes_tp8_pp2(models: dict[str, str]) -> None:
    doc = plan(models["405b"], "--ctx", "32768", "--engine", "vllm")
    assert (doc["nodes"], doc["gpus_per_node"], doc["tp"], doc["pp"]) == (2, 8, 8, 2)
    stages = doc["stages"]
    assert [s["layers"] for s in stages] == [[0, 63], [63, 126]] and [s["nodes"] for s in stages] == [[0], [1]]
    for s in stages:  # ≈ 47 GiB of weights a GPU: 756 GiB over 16
        assert 46.5 * GiB < s["weights_bytes"] < 48 * GiB
    # 8 KV heads over tp 8: one head a GPU, so a GPU holds its stage's share of 1/8 of the cache
    assert sum(s["kv_bytes"] for s in stages) * 8 == pytest.approx(doc["kv_cache_bytes"], rel=1e-6)
    assert len(doc["per_gpu"]) == 16 and {g["node"] for g in doc["per_gpu"]} == {0, 1}
    text = gpulaunch("--snapshot", "dgx-h100", "plan", models["405b"], "--ctx", "32768", "--engine", "vllm")
    assert text.returncode == 0
    assert "nodes: 2 × 8 GPUs" in text.stdout and "tp 8 within a node × pp 2 across" in text.stdout
    assert "gpulaunch --nodes 2 --slurm" in text.stdout


def test_deepseek_v3_mla_latent_is_whole_on_every_tp_rank(models: dict[str, str]) -> None:
    doc = plan(models["dsv3"], "--ctx", "32768", "--engine", "vllm")
    assert (doc["nodes"], doc["tp"], doc["pp"]) == (2, 8, 2)  # SGLang's own table: 2 × 8 H100
    # the compressed latent (512 + 64 values a token a layer) is not split by tp: every GPU of a stage
    # holds the whole latent of its stage's layers, so the stages' per-GPU caches add up to the whole cache
    assert doc["model"]["kv_bytes_per_token"] == 61 * 576 * 2
    assert sum(s["kv_bytes"] for s in doc["stages"]) == doc["kv_cache_bytes"]
    first, last = doc["stages"]
    assert first["layers"][1] - first["layers"][0] == 31 and last["layers"] == [31, 61]


def test_70b_fits_one_node_and_needs_no_nodes(models: dict[str, str]) -> None:
    doc = plan(models["70b"], "--ctx", "32768", "--engine", "vllm")
    assert doc["nodes"] == 1 and doc["tp"] == 4 and doc["pp"] == 1 and doc["gpus_per_node"] == 4
    text = gpulaunch("--snapshot", "dgx-h100", "plan", models["70b"], "--ctx", "32768", "--engine", "vllm")
    assert text.returncode == 0 and "--nodes" not in text.stdout and "nodes:" not in text.stdout


def test_gpus_per_node_sets_the_node_kind(models: dict[str, str]) -> None:
    doc = plan(models["405b"], "--ctx", "32768", "--engine", "vllm", "--gpus-per-node", "4")
    assert doc["gpus_per_node"] == 4 and doc["tp"] == 4 and doc["nodes"] * 4 == doc["pp"] * 4 >= 12
    doc = plan(models["70b"], "--ctx", "32768", "--engine", "vllm", "--gpus-per-node", "2")
    assert (doc["nodes"], doc["gpus_per_node"], doc["tp"], doc["pp"]) == (2, 2, 2, 2)
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", models["70b"], "--gpus-per-node", "9")
    assert proc.returncode == 2 and "8 usable GPUs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_heads_not_divisible_are_refused_with_the_valid_tp_sizes(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--", "vllm", "serve", models["405b"], "-tp", "6", "-pp", "2")
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "does not divide the model's 128 attention heads" in line and "1, 2, 4, 8, 16, 32, 64" in line


def test_a_command_that_fixes_more_ranks_than_a_node_has_is_planned_in_nodes(models: dict[str, str]) -> None:
    doc = plan("--", "vllm", "serve", models["405b"], "--max-model-len", "32768", "-tp", "8", "-pp", "2")
    assert (doc["nodes"], doc["tp"], doc["pp"]) == (2, 8, 2)


def test_a_launch_no_wait_can_help_says_the_nodes_and_exits_at_once(models: dict[str, str], tmp_path: Path) -> None:
    argv = ["--snapshot", "dgx-h100", "--fit", "model", "--wait", "1h", "--", sys.executable, "-m",
            "vllm.entrypoints.openai.api_server", "--model", models["405b"], "--max-model-len", "32768",
            "--tensor-parallel-size", "{tp}"]
    start = time.monotonic()
    proc = gpulaunch(*argv, env={"GPULAUNCH_POLL_INTERVAL": "0.1"}, timeout=30)
    assert time.monotonic() - start < 25
    assert proc.returncode == 4, proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "it needs 2 nodes of this kind (8 GPUs each, tp 8 × pp 2)" in line
    assert "gpulaunch --nodes 2 --slurm" in line and "--wait" not in line.partition("(hint:")[2]


def test_only_the_hosts_memory_blocking_exits_4_at_once_under_wait(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from tests.model_fixtures import llama_pair

    models = llama_pair(tmp_path)
    gpu = {"index": 0, "uuid": "GPU-5d1e2c3b-0a4f-4e6d-9b8c-7a6f5e4d3c2b", "name": "NVIDIA GeForce RTX 3060 Laptop GPU",
           "pci_bus_id": "00000000:01:00.0", "memory_total_mib": 6144, "memory_used_mib": 0, "memory_free_mib": 6144,
           "utilization_gpu": 0, "temperature_c": 45, "processes": []}
    snap = tmp_path / "laptop.json"
    snap.write_text(json.dumps({"schema": 1, "hostname": "laptop", "driver_version": "550.54.15",
                                "cuda_driver_version": "12.4", "host_memory_available_mib": 2048, "gpus": [gpu]}))
    start = time.monotonic()
    proc = gpulaunch("--snapshot", str(snap), "--wait", "1h", "--fit", "model", "--dry-run", "--", "llama-server",
                     "-m", str(models["8b"]), "-c", "32768", "-ngl", "{gpu_layers}",
                     env={"GPULAUNCH_POLL_INTERVAL": "0.1"}, timeout=30)
    assert time.monotonic() - start < 25
    assert proc.returncode == 4, proc.stderr
    assert "the host has 2.0 GiB available" in proc.stderr and "no wait can help" in proc.stderr


def test_node_split_for_a_several_node_launch(models: dict[str, str]) -> None:
    """The function a ``--fit model --slurm`` launch calls for (nodes, gpus_per_node, tp, pp)."""
    from gpu_launch.options.args import parse
    from gpu_launch.fit.model_plan import node_split

    def split(*argv: str) -> tuple[int, int, int, int]:
        inv = parse(["--snapshot", "dgx-h100", "--fit", "model", "--", *argv])
        found = node_split(inv, "model", inv.argv)
        return found.nodes, found.gpus_per_node, found.tp, found.pp

    assert split("vllm", "serve", models["405b"], "--max-model-len", "32768", "-tp", "{tp}") == (2, 8, 8, 2)
    assert split("vllm", "serve", models["70b"], "--max-model-len", "32768", "-tp", "{tp}") == (1, 4, 4, 1)
    os.environ.get("PATH")  # (no environment needed: the node kind is the snapshot)


def test_the_split_prefers_stages_to_replicated_kv_heads_and_refuses_models_without_stages() -> None:
    from dataclasses import replace

    from gpu_launch.fit import engines, nodes
    from gpu_launch.fit import plan as fit_plan
    from tests.fit_models import llama_like

    node = [fit_plan.Room(i, 80 * GiB, 80 * GiB) for i in range(8)]
    # 4 KV heads on 8-GPU nodes: tp 8 would copy each head's cache on 2 GPUs; tp 4 × 2 stages a node does not
    model = llama_like(layers=96, layer_bytes=10 * GiB, heads=64, kv_heads=4)
    s = fit_plan.sizing(model, engines.ENGINES["vllm"], fit_plan.Settings(ctx=32768))
    split = nodes.split_for_nodes(s, node)
    assert (split.nodes, split.tp, split.pp) == (2, 4, 4) and "4 KV heads" in split.notes[0]
    assert split.placement is not None and split.placement.whole
    # vLLM has no pipeline stages for Gemma-3n (its docs' PP column): one node or nothing, and why
    gemma = replace(model, architecture="gemma3n")
    s = fit_plan.sizing(gemma, engines.ENGINES["vllm"], fit_plan.Settings(ctx=32768))
    split = nodes.split_for_nodes(s, node)
    assert split.nodes == 0 and "no pipeline-parallel support for gemma3n" in split.problem
    # and llama.cpp splits no model over nodes here
    s = fit_plan.sizing(model, engines.ENGINES["llama.cpp"], fit_plan.Settings(ctx=32768))
    assert nodes.split_for_nodes(s, node).nodes == 0


def test_fit_model_slurm_takes_the_node_count_from_the_plan(models: dict[str, str], tmp_path: Path) -> None:
    """``--fit model --slurm`` with no ``--nodes``: the batch script asks for the plan's nodes and GPUs a node,
    and every node's gpulaunch gets them (405B bf16 at 32k on dgx-h100: 2 × 8)."""
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--slurm", "--dry-run", "--log-dir", str(tmp_path),
                     "--", "vllm", "serve", models["405b"], "--max-model-len", "32768")
    assert proc.returncode == 0, proc.stderr
    assert "--nodes=2" in proc.stdout or "--nodes 2" in proc.stdout, proc.stdout
    assert "--gpus-per-node 8" in proc.stdout, proc.stdout
    small = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--slurm", "--dry-run", "--log-dir", str(tmp_path),
                      "--", "vllm", "serve", models["70b"], "--max-model-len", "8192", "--tensor-parallel-size", "{tp}")
    assert small.returncode == 0, small.stderr
    assert "--nodes 1 " in small.stdout or "--nodes=1" in small.stdout, small.stdout


def _kv4_405b(folder: Path) -> None:
    """Llama-3.1-405B's layout with 4 KV heads: on nodes of 8 GPUs, tp 8 would copy each head's cache twice,
    so the plan keeps tp 4 and puts 2 stages on each node (2 nodes: tp 4 × pp 4, not tp 8 × pp 2)."""
    from tests.docs_fixtures import _CONFIG_70B, _safetensors_llama

    _safetensors_llama(folder, {**_CONFIG_70B, "num_hidden_layers": 126, "num_attention_heads": 128,
                                "num_key_value_heads": 4, "hidden_size": 16384, "intermediate_size": 53248})


def test_fit_model_slurm_runs_the_plans_tp_and_pp_on_every_node(tmp_path: Path) -> None:
    """The batch script carries the plan's split (tp 4 × pp 4, not the node task's default tp 8 × pp 2) in the
    command, its placeholders replaced (a node task sizes nothing); the node task, run as the script runs it
    on two "machines" (two lock directories) with a fake vLLM, keeps it on both."""
    import shlex
    import socket

    _kv4_405b(tmp_path / "M")
    logs = tmp_path / "logs"
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--ctx", "32768", "--slurm", "--dry-run", "--log-dir",
                     str(logs), "--", "vllm", "serve", str(tmp_path / "M"), "--max-model-len", "{ctx}")
    assert proc.returncode == 0, proc.stderr
    assert "# The model's plan: 2 nodes × 8 GPUs, tp 4 × pp 4, written into the command." in proc.stdout
    words = shlex.split(proc.stdout.split("exec srun", 1)[1].split("\n# node ")[0].replace("\\\n", " "))
    task = words[words.index("-m") + 1:]  # gpulaunch's node task, as srun starts it on every node
    assert task[:4] == ["gpu_launch", "--nodes", "2", "--gpus-per-node"] and task[4] == "8"
    assert task[task.index("--") + 1:] == ["vllm", "serve", str(tmp_path / "M"), "--max-model-len", "32768",
                                           "--tensor-parallel-size", "4", "--pipeline-parallel-size", "4"]
    bindir, records = tmp_path / "bin", tmp_path / "records"
    bindir.mkdir()
    records.mkdir()
    tests = Path(__file__).resolve().parent
    (bindir / "vllm").write_text(f"#!{sys.executable}\nimport sys\nsys.path[:0] = [{str(tests)!r}, "
                                 f"{str(tests.parent)!r}]\nimport fake_engine\nfake_engine.main('vllm')\n")
    (bindir / "vllm").chmod(0o755)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cut = task.index("--")
    procs = []
    for rank in (1, 0):  # the worker first: it waits for the head
        # GPULAUNCH_MAX_UTIL=100: each "node" is a dgx-h100 whose GPUs 0 and 1 are alice's, busy; a node
        # started by hand takes busy GPUs only when told (in a Slurm allocation they are the step's own)
        environ = clean_env({"GPULAUNCH_LOCK_DIR": str(tmp_path / f"locks-{rank}"), "FAKE_RECORDS": str(records),
                             "GPULAUNCH_MAX_UTIL": "100",
                             "PATH": f"{bindir}:{os.environ['PATH']}"})
        argv = [sys.executable, "-m", *task[:cut], "--node-rank", str(rank), "--head", f"127.0.0.1:{port}",
                *task[cut:]]
        procs.append(subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=tmp_path))
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for rank in (0, 1):
        record = json.loads((records / f"vllm-{rank}.json").read_text())
        args = record["argv"]
        assert args.count("--tensor-parallel-size") == 1 and args[args.index("--tensor-parallel-size") + 1] == "4"
        assert args.count("--pipeline-parallel-size") == 1 and args[args.index("--pipeline-parallel-size") + 1] == "4"
        assert len(record["held"]) == 8 and ("--headless" in args) == (rank == 1)


def test_a_several_node_plan_shows_a_line_per_pipeline_stage(models: dict[str, str]) -> None:
    text = gpulaunch("--snapshot", "dgx-h100", "plan", models["405b"], "--ctx", "32768", "--engine", "vllm")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["stage", "layers"])
    assert [line.split()[:3] for line in lines[head + 1:head + 3]] == [["0", "0-62", "0"], ["1", "63-125", "1"]]
