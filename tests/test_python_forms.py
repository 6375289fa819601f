"""``python [python's options] -m MODULE ...``: the engine's options start after the module, python's own
(``-u``, ``-X dev``, ``-W ignore``, ``-um``...) are never the engine's; and llama-cpp-python's server
(``python -m llama_cpp.server``) read with its own spellings (``--n_ctx``, ``--n_gpu_layers``...) and
defaults (n_ctx 2048, n_gpu_layers 0). Checked as a user sees it: ``plan --json``, the argv and GPUs a
fake engine received, the dry run's command, the one error line and its exit code."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("gguf")

from tests.model_fixtures import llama_pair  # noqa: E402
from tests.test_engine_flags import child, gpulaunch, one_line, plan_json  # noqa: E402


@pytest.fixture(scope="module")
def m8(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(llama_pair(tmp_path_factory.mktemp("models"))["8b"])


@pytest.fixture(scope="module")
def fake_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A `python3` on PATH that prints the GPUs and the argv it was given (it runs no module)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    path = bin_dir / "python3"
    path.write_text(f"#!{sys.executable}\nimport os, sys, json\n"
                    "print(json.dumps({'cvd': os.environ['CUDA_VISIBLE_DEVICES'], 'argv': sys.argv[1:]}))\n")
    path.chmod(0o755)
    return str(bin_dir)


PYTHON_OPTIONS = [["-u"], ["-X", "dev"], ["-W", "ignore"], ["-Xdev", "-Wignore"], ["-B", "-E", "-I", "-s", "-S", "-O"]]
# each engine's python -m form, the model given as M, and what plan --json must then show
ENGINES = [
    (["vllm.entrypoints.openai.api_server", "--model", "M", "--max-model-len", "8192"], "vllm", 8192),
    (["sglang.launch_server", "--model-path", "M", "--context-length", "8192"], "sglang", 8192),
    (["mlc_llm", "serve", "M", "--overrides", "context_window_size=8192"], "mlc", 8192),
    (["llama_cpp.server", "--model", "M", "--n_ctx", "8192"], "llama.cpp", 8192),
]


@pytest.mark.parametrize("options", PYTHON_OPTIONS, ids=" ".join)
@pytest.mark.parametrize("module,engine,ctx", ENGINES, ids=[e[1] for e in ENGINES])
def test_pythons_own_options_are_not_the_engines(m8: str, options: list[str], module: list[str], engine: str,
                                                 ctx: int) -> None:
    # was: python's -X dev / -W ignore made the command "a script", sized as Transformers at the model's 131072
    doc = plan_json("--", "python3", *options, "-m", *[m8 if a == "M" else a for a in module])
    assert (doc["engine"], doc["ctx"], doc["ctx_from"], doc["model"]["layers"]) == (engine, ctx, "the command", 32)


def test_a_combined_m_and_an_attached_module_are_read_as_python_reads_them(m8: str) -> None:
    for argv in (["python3", "-um", "llama_cpp.server"], ["python3", "-mllama_cpp.server"],
                 ["python3", "-Bum", "llama_cpp.server"]):
        doc = plan_json("--", *argv, "--model", m8, "--n_ctx", "4096")
        assert (doc["engine"], doc["ctx"]) == ("llama.cpp", 4096), argv


def test_pythons_m_is_never_the_models_m(m8: str) -> None:
    # was: with the engine named, python's `-m llama_cpp.server` was read as llama.cpp's -m (the model)
    proc = gpulaunch("--snapshot", "dgx-h100", "plan", "--engine", "llama.cpp", "--json", "--", "python3", "-X",
                     "dev", "-m", "llama_cpp.server", env={"MODEL": m8, "N_CTX": "4096"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["model"]["layers"], doc["ctx"]) == (32, 4096)


def test_torchrun_as_a_python_module_gets_its_node_flags_after_the_module() -> None:
    # was: `python -X dev -m torch.distributed.run` was no launcher: no rank, no rendezvous, a warning
    proc = gpulaunch("--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head",
                     "10.0.0.1:29400", "--dry-run", "--", "python3", "-X", "dev", "-m", "torch.distributed.run",
                     "train.py", "--lr", "1")
    assert proc.returncode == 0, proc.stderr
    exec_line = proc.stdout.strip().splitlines()[-1]
    assert exec_line.startswith("exec python3 -X dev -m torch.distributed.run --nnodes 2 --nproc-per-node 2 "
                                "--rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 "), exec_line
    assert exec_line.endswith(" train.py --lr 1") and "no engine gpulaunch knows" not in proc.stderr


# --- llama-cpp-python's server: its own spellings and defaults ----------------------------------------------


def test_llama_cpp_python_reads_its_own_options(m8: str) -> None:
    # was: --n_ctx and --n_gpu_layers not read: planned at the model's 131072 tokens, "no -ngl: llama.cpp fits"
    doc = plan_json("--", "python3", "-m", "llama_cpp.server", "--model", m8, "--n_ctx", "8192",
                    "--n_gpu_layers", "-1")
    assert (doc["ctx"], doc["ctx_from"], doc["gpu_layers"]) == (8192, "the command", 33)
    assert doc["kv_cache_bytes"] == 32 * 8192 * 2 * 8 * 128 * 2 and doc["notes"] == []
    doc = plan_json("--", "python3", "-m", "llama_cpp.server", "--model", m8, "--n_c=4096", "--n_gpu", "10",
                    "--type_k", "8", "--type_v", "8", "--flash_attn", "True")  # argparse: prefixes, =, last wins
    assert (doc["ctx"], doc["gpu_layers"], doc["kv_type"], doc["flash_attn"]) == (4096, 10, "q8_0", "on")


def test_llama_cpp_python_defaults_are_its_own(m8: str) -> None:
    # n_ctx 2048 and n_gpu_layers 0 (every layer on the CPU), llama_cpp/server/settings.py ModelSettings
    doc = plan_json("--", "python3", "-m", "llama_cpp.server", "--model", m8)
    assert (doc["ctx"], doc["ctx_from"], doc["gpu_layers"]) == (2048, "llama-cpp-python's default", 0)
    assert any(n.startswith("--n_gpu_layers 0 (llama-cpp-python's default") for n in doc["notes"]), doc["notes"]
    # pydantic-settings: a field the command leaves out comes from the variable of its name
    doc = plan_json("--", "python3", "-m", "llama_cpp.server", env={"MODEL": m8, "N_CTX": "6144",
                                                                    "N_GPU_LAYERS": "-1"})
    assert (doc["ctx"], doc["gpu_layers"], doc["model"]["layers"]) == (6144, 33, 32)


def test_llama_cpp_python_gets_the_layers_gpulaunch_counted(m8: str, fake_python: str) -> None:
    got = child(gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--", "python3", "-u", "-m", "llama_cpp.server",
                          "--model", m8, "--n_ctx", "8192", "--n_gpu_layers", "{gpu_layers}", path=fake_python))
    assert got["argv"] == ["-u", "-m", "llama_cpp.server", "--model", m8, "--n_ctx", "8192", "--n_gpu_layers", "33"]
    assert len(got["gpus"]) == 1


@pytest.mark.parametrize("argv,says,code", [
    (["--n_ctx", "-1"], "--n_ctx takes 0 (the model's own) to 2147483647 tokens", 2),
    (["--n_gpu_layers", "-2"], "--n_gpu_layers takes a layer count (0 to 2147483647), or -1 (all)", 2),
    (["--mod", "x"], "--mod is ambiguous to llama-cpp-python: it could be --model, --model_alias", 2),
    (["--n_gpu_layers", "{gpu_layers}", "--tensor_split", "{tensor_split}"],
     "{tensor_split} has no value for llama-cpp-python", 2),
])
def test_llama_cpp_python_refusals_are_one_line(m8: str, argv: list[str], says: str, code: int) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "python3", "-m",
                     "llama_cpp.server", "--model", m8, *argv)
    assert says in one_line(proc, code)


def test_llama_cpp_python_over_nodes_asks_for_its_own_rpc_flag(m8: str) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head",
                     "10.0.0.1:29400", "--dry-run", "--", "python3", "-m", "llama_cpp.server", "--model", m8)
    assert "write --rpc_servers {rpc}" in one_line(proc, 2)


def test_the_deprecated_torch_distributed_launch_is_torchrun_to_the_nodes() -> None:
    # torch/distributed/launch.py parses with torchrun's own parser, plus --use-env; was: no node flags at all
    proc = gpulaunch("--snapshot", "dgx-h100", "--nodes", "2", "--gpus-per-node", "2", "--node-rank", "1", "--head",
                     "10.0.0.1:29400", "--dry-run", "--", "python3", "-m", "torch.distributed.launch", "--use_env",
                     "train.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith(
        "exec python3 -m torch.distributed.launch --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d ")
    assert proc.stdout.strip().endswith(" --use_env train.py")


@pytest.mark.parametrize("command, word", [
    ("python -X dev -m vllm.entrypoints.openai.api_server --model M", "vllm.entrypoints.openai.api_server"),
    ("python3 -W ignore train.py --lr 1", "train.py"),
    ("python -um sglang.launch_server", "sglang.launch_server"),
])
def test_ls_names_a_holder_by_its_module_past_pythons_options(command: str, word: str) -> None:
    # was: `dev`, `ignore`: python's own option values taken for the script (ls at 80 columns, HELD BY)
    from gpu_launch.views.ls_table import command_word

    assert command_word(command) == word
