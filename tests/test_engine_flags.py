"""The user's own flags are obeyed or refused, never silently overridden (issue 25, item 2; issue 27, item 4).

A fixed tp/pp/--num-shard/--data-parallel-size decides how many GPUs a real child gets; repeated options
read as the engine reads them; every spelling the engine's parser accepts is read; every documented way to
start an engine names its model; numbers outside what the engine accepts are one line, exit 2. Each case is
checked as a user sees it: the CUDA_VISIBLE_DEVICES and argv a fake engine on PATH received, the dry
run's environment, the plan's JSON, the one error line and its exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import clean_env

pytest.importorskip("gguf")

from tests.docs_fixtures import llama_70b_safetensors  # noqa: E402
from tests.model_fixtures import llama_pair  # noqa: E402

FAKE_ENGINES = ("vllm", "sglang", "text-generation-launcher", "llama-server", "mlc_llm")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    found = {size: str(path) for size, path in llama_pair(root).items()}
    llama_70b_safetensors(root / "Llama-3.1-70B")
    found["70b-bf16"] = str(root / "Llama-3.1-70B")
    return found


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Engines that print the GPUs and the argv they were given, as a real engine would receive them."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name in FAKE_ENGINES:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\nimport os, sys, json\n"
                        "print(json.dumps({'cvd': os.environ['CUDA_VISIBLE_DEVICES'], 'argv': sys.argv[1:]}))\n")
        path.chmod(0o755)
    return str(bin_dir)


def gpulaunch(*argv: str, env: dict[str, str] | None = None, path: str | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    extra = dict(env or {})
    if path:
        extra["PATH"] = path + os.pathsep + os.environ.get("PATH", "")
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True,
                          env=clean_env(extra), timeout=timeout)


def child(proc: subprocess.CompletedProcess[str]) -> dict:
    """What the fake engine received: its CUDA_VISIBLE_DEVICES (as a list) and argv."""
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"gpus": got["cvd"].split(","), "argv": got["argv"]}


def one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def plan_json(*argv: str, env: dict[str, str] | None = None) -> dict:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--json", *argv, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --- a fixed size decides the GPUs --------------------------------------------------------------------


def test_a_fixed_tp_too_small_for_the_model_is_refused_with_the_size_that_would(models: dict[str, str],
                                                                                 fake_bin: str) -> None:
    # was: 4 GPUs reserved and vLLM started at tp 2 on them, without a word
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "vllm", "serve", models["70b-bf16"],
                     "--max-model-len", "32768", "--tensor-parallel-size", "2", path=fake_bin)
    line = one_line(proc, 4)
    assert "as the command's --tensor-parallel-size 2 says" in line and "on each of 2 GPUs" in line
    assert "with --tensor-parallel-size 4 (4 GPUs) it fits" in line
    assert proc.stdout == ""  # the engine never ran


@pytest.mark.parametrize("spelling", [["--tensor-parallel-size", "4"], ["-tp", "4"], ["--tensor-parallel-size=4"],
                                      ["--tensor_parallel_size", "4"], ["--tensor-parallel", "4"]])
def test_a_fixed_tp_takes_that_many_gpus_for_a_small_model(models: dict[str, str], fake_bin: str,
                                                           spelling: list[str]) -> None:
    # was: one GPU for an 8B with --tensor-parallel-size 4 (vLLM then fails: 4 ranks, 1 device)
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "vllm", "serve", models["8b"],
                          "--max-model-len", "8192", *spelling, path=fake_bin))
    assert len(got["gpus"]) == 4 and len(set(got["gpus"])) == 4


def test_vllm_without_a_tp_runs_one_gpu_and_gets_one(models: dict[str, str], fake_bin: str) -> None:
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "vllm", "serve", models["8b"],
                          "--max-model-len", "8192", "-tp", "1", path=fake_bin))
    assert len(got["gpus"]) == 1
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "vllm", "serve",
                     models["70b-bf16"], "--max-model-len", "32768", path=fake_bin)
    line = one_line(proc, 4)  # vLLM's default is tp 1: the bf16 70B on one H100 cannot run, and says what would
    assert "vLLM's default with no --tensor-parallel-size" in line and "--tensor-parallel-size 4" in line


@pytest.mark.parametrize("how", ["flag", "env"])
def test_tgi_num_shard_is_obeyed(models: dict[str, str], fake_bin: str, how: str) -> None:
    # was: --num-shard 8 ignored, one GPU given to a launcher that then starts 8 shards
    argv = ["--model-id", models["8b"], "--max-total-tokens", "4096"] + (["--num-shard", "8"] if how == "flag" else [])
    # all 8: alice's busy GPUs 0 and 1 too, which the busy rule leaves out unless --max-util says otherwise
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--max-util", "100", "--",
                          "text-generation-launcher", *argv,
                          path=fake_bin, env={"NUM_SHARD": "8"} if how == "env" else None))
    assert len(got["gpus"]) == 8


def test_tp_placeholder_with_fixed_pipeline_stages_takes_tp_times_pp(models: dict[str, str], fake_bin: str) -> None:
    # was: 4 GPUs reserved and {tp}=4, for 4 × 2 = 8 ranks
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "vllm", "serve", models["70b-bf16"],
                          "--max-model-len", "32768", "--tensor-parallel-size", "{tp}", "--pipeline-parallel-size",
                          "2", path=fake_bin))
    tp = int(got["argv"][got["argv"].index("--tensor-parallel-size") + 1])
    assert len(got["gpus"]) == tp * 2 == 4


def test_data_parallel_replicas_multiply_the_gpus(models: dict[str, str], fake_bin: str) -> None:
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "vllm", "serve", models["8b"],
                          "--max-model-len", "8192", "-tp", "{tp}", "--data-parallel-size", "2", path=fake_bin))
    assert got["argv"][got["argv"].index("-tp") + 1] == "1" and len(got["gpus"]) == 2


def test_sglang_spellings_and_model_path(models: dict[str, str], fake_bin: str) -> None:
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "sglang", "serve", "--model-path",
                          models["8b"], "--context-length", "8192", "--tp", "2", path=fake_bin))
    assert len(got["gpus"]) == 2
    doc = plan_json("--", sys.executable, "-m", "sglang.launch_server", "--model", models["8b"], "--tp-size", "4",
                    "--context-length", "4096")
    assert doc["engine"] == "sglang" and doc["tp"] == 4 and len(doc["gpus"]) == 4 and doc["ctx"] == 4096


def test_a_tp_the_heads_refuse_is_one_line_with_the_valid_sizes(models: dict[str, str]) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--", "vllm", "serve", models["70b-bf16"], "-tp", "3")
    line = one_line(proc, 2)
    assert "does not divide the model's 64 attention heads" in line and "1, 2, 4, 8, 16, 32, 64" in line


# --- repeats and spellings, as each engine reads them ---------------------------------------------------


def test_a_repeated_option_reads_as_the_engine_reads_it(models: dict[str, str]) -> None:
    # llama.cpp and argparse: the last one wins (was: the first)
    assert plan_json("--", "llama-server", "-m", models["8b"], "-c", "4096", "-c", "65536")["ctx"] == 65536
    assert plan_json("--", "vllm", "serve", models["8b"], "--max-model-len", "4096", "--max-model-len",
                     "16384")["ctx"] == 16384
    # TGI's clap refuses a repeated option: so does gpulaunch, before anything is reserved
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--", "text-generation-launcher", "--model-id", models["8b"],
                     "--num-shard", "2", "--num-shard", "4")
    assert "given twice" in one_line(proc, 2)


SPELLINGS = [
    (["vllm", "serve", "M", "--max_model_len", "8192"], 8192),  # FlexibleArgumentParser: _ reads as -
    (["vllm", "serve", "M", "--max-model-len=32k"], 32000),
    (["vllm", "serve", "M", "--max-model-len", "16K"], 16384),
    (["llama-server", "-m", "M", "--ctx_size", "12288"], 12288),  # llama.cpp: a -- option's _ reads as -
    (["llama-server", "-m", "M", "--ctx-size", "2048"], 2048),
]


def test_every_spelling_the_engine_accepts_is_read(models: dict[str, str]) -> None:
    for argv, ctx in SPELLINGS:
        doc = plan_json("--", *[models["8b"] if a == "M" else a for a in argv])
        assert (doc["ctx"], doc["ctx_from"]) == (ctx, "the command"), argv


def test_llama_cpp_environment_variables_are_read_and_the_command_line_wins(models: dict[str, str]) -> None:
    assert plan_json("--", "llama-server", "-m", models["8b"], env={"LLAMA_ARG_CTX_SIZE": "6144"})["ctx"] == 6144
    assert plan_json("--", "llama-server", "-m", models["8b"], "-c", "2048",
                     env={"LLAMA_ARG_CTX_SIZE": "6144"})["ctx"] == 2048
    doc = plan_json("--", "llama-server", "--port", "8080",
                    env={"LLAMA_ARG_MODEL": models["8b"], "LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_CTX_SIZE": "4096"})
    assert doc["parallel"] == 2 and doc["model"]["layers"] == 32


STARTS = [
    ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "M", "--max-model-len", "8192"],
    ["vllm", "serve", "--model", "M", "--max-model-len", "8192"],
    ["vllm", "serve", "M", "--max-model-len", "8192"],
    ["python3", "-m", "mlc_llm", "serve", "M", "--overrides", "context_window_size=8192"],
    ["python3", "-m", "mlc_llm", "chat", "M", "--overrides", "context_window_size=8192"],
    ["mlc_llm", "serve", "M", "--overrides", "context_window_size=8192"],
    ["python3", "-m", "sglang.launch_server", "--model-path", "M", "--context-length", "8192"],
    ["sglang", "serve", "--model-path", "M", "--context-length", "8192"],
    ["text-generation-launcher", "--model-id", "M", "--max-total-tokens", "8192"],
]


def test_every_documented_way_to_start_an_engine_names_its_model(models: dict[str, str]) -> None:
    for argv in STARTS:
        doc = plan_json("--", *[models["8b"] if a == "M" else a for a in argv])
        assert (doc["model"]["layers"], doc["ctx"]) == (32, 8192), argv


# --- utilisation and numbers ------------------------------------------------------------------------------


def test_a_utilisation_below_what_others_use_says_whose_memory_it_is(models: dict[str, str]) -> None:
    # was: "vLLM may use 0.0 GiB of the tightest"
    # --max-util 100: alice's busy GPUs are candidates, so their memory in use is what falls short
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--max-util", "100", "--dry-run", "--", "vllm",
                     "serve", models["70b-bf16"], "--max-model-len", "32768", "--gpu-memory-utilization", "0.5", "-tp",
                     "{tp}")
    line = one_line(proc, 4)
    assert "0.0 GiB" not in line
    assert "--gpu-memory-utilization 0.50 needs 39.8 GiB of each GPU free at start" in line
    assert "in use by alice (pid 284117" in line


@pytest.mark.parametrize("argv,says", [
    (["llama-server", "-m", "M", "-ngl", "9" * 5000], "-ngl takes a layer count (0 to 2147483647), auto or all"),
    (["llama-server", "-m", "M", "-c", "-5"], "-c takes 0 (the model's own) to 2147483647 tokens"),
    (["llama-server", "-m", "M", "-c", "12345678901"], "-c takes 0 (the model's own) to 2147483647 tokens"),
    (["vllm", "serve", "M", "--gpu-memory-utilization", "1.5"], "above 0 and at most 1"),
    (["vllm", "serve", "M", "--gpu-memory-utilization", "nan"], "above 0 and at most 1"),
    (["vllm", "serve", "M", "-tp", "0"], "--tensor-parallel-size takes 1 to"),
    # an integer's bounds as integers (was: "takes 1 to 2.14748e+09")
    (["vllm", "serve", "M", "--block-size", "0"], "--block-size takes 1 to 2147483647)"),
    (["vllm", "serve", "M", "--kv-cache-dtype="], "the command's KV cache type is empty"),  # was: taken for f16
])
def test_numbers_the_engine_refuses_are_one_line_with_the_valid_range(models: dict[str, str], argv: list[str],
                                                                      says: str) -> None:
    # was: a traceback (-ngl of 5000 nines), silently ignored (-c -5, an 11-digit -c), or read as 0.9 (1.5)
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--",
                     *[models["8b"] if a == "M" else a for a in argv])
    line = one_line(proc, 2)
    assert says in line and len(line) < 300


# --- the tables themselves, as the node task of a several-node launch reads them -----------------------


def test_the_tables_answer_which_flags_the_user_set_last_wins() -> None:
    from gpu_launch.fit import cmdline

    said = cmdline.read(["vllm", "serve", "M", "-tp", "2", "--tensor-parallel-size", "8", "-pp", "2", "-n", "2",
                         "--node-rank=1", "--master-addr", "10.0.0.1", "--master_port", "29511", "--headless"])
    got = {m: s.text for m, s in said.settings.items()}
    assert got == {"model": "M", "tp": "8", "pp": "2", "nnodes": "2", "node_rank": "1", "master_addr": "10.0.0.1",
                   "master_port": "29511", "headless": "1"}
    assert said.get("tp").index == 5 and said.get("tp").written == "--tensor-parallel-size 8"
    assert said.number("master_port") == 29511
    sg = cmdline.read(["python3", "-m", "sglang.launch_server", "--model-path", "M", "--tp", "8", "--nnodes", "2",
                       "--node-rank", "0", "--dist-init-addr", "h:5000"])
    assert (sg.engine, sg.text("tp"), sg.text("dist_init_addr")) == ("sglang", "8", "h:5000")
    tr = cmdline.read(["torchrun", "--nproc_per_node", "4", "--nnodes=2", "train.py", "--nnodes", "9"])
    assert (tr.text("nproc_per_node"), tr.text("nnodes")) == ("4", "2")  # the script's own flags are its own
    assert cmdline.read(["accelerate", "launch", "--num_machines", "2", "t.py"]).text("nnodes") == "2"


def test_the_tables_follow_each_parsers_rules() -> None:
    from gpu_launch.errors import UsageError
    from gpu_launch.fit import cmdline

    with pytest.raises(UsageError, match="ambiguous"):  # SGLang's argparse: --pp-size, --pp-max-micro-batch-size...
        cmdline.read(["sglang", "serve", "--model-path", "M", "--pp", "2"])
    mlc = cmdline.read(["mlc_llm", "serve", "M", "--overrides", "tensor_parallel_shards=2;context_window_size=4096",
                        "--overrides", "context_window_size=8192;context_window_size=2048"])
    assert mlc.text("tp") is None and mlc.text("ctx") == "2048"  # argparse: the last --overrides replaces the first
    env = {"LLAMA_ARG_KV_UNIFIED": "true", "LLAMA_ARG_N_GPU_LAYERS": "all"}
    ll = cmdline.read(["llama-server", "-m", "M", "-no-kvu"], environ=env)
    assert ll.text("kv_unified") == "0" and ll.word("gpu_layers") == "all"
    assert cmdline.read(["llama-server", "-m", "M", "-ngl", "{gpu_layers}"]).number("gpu_layers") is None
    with pytest.raises(UsageError, match="given twice"):
        cmdline.read(["text-generation-launcher", "--num-shard=2", "--num-shard", "2"])
