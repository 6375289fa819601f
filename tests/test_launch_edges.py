"""The slips in a plain launch a user would suffer (issue 37, seed 38's survivors of commands/launch.py):
a typo of a subcommand told as one, the several-node options and placeholders refused without --nodes
with the option named, --no-lock and --dry-run reserving nothing, and --bind's line said unless -q."""

from __future__ import annotations

import shutil
from pathlib import Path

from sharing_helpers import run

EXAMPLES = Path(__file__).resolve().parent.parent / "gpu_launch" / "hardware" / "examples"


def _error(result: object) -> str:
    lines = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: "), lines
    return lines[0].removeprefix("gpulaunch: error: ")


def test_a_typo_of_a_subcommand_is_told_as_one_and_a_missing_program_is_not(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    typo = run(["--snapshot", "workstation-4x", "lss"], locks)
    assert typo.returncode == 127
    assert _error(typo) == "lss: command not found (hint: did you mean the subcommand `gpulaunch ls`?)"
    missing = run(["--snapshot", "workstation-4x", "--", "no-such-program-xyz"], locks)
    assert missing.returncode == 127
    assert _error(missing) == ("no-such-program-xyz: command not found "
                               "(hint: check the spelling, or activate the environment that has it)")


def test_several_node_options_and_placeholders_without_nodes_are_refused_by_name(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    rank = run(["--snapshot", "workstation-4x", "--node-rank", "1", "--", "true"], locks)
    assert rank.returncode == 2
    assert _error(rank) == ("--node-rank is for a run over several nodes: it needs --nodes N "
                            "(hint: add --nodes N (and --slurm to submit it))")
    named = run(["--snapshot", "workstation-4x", "--", "echo", "{node_rank}"], locks)
    assert named.returncode == 2
    assert _error(named) == ("{node_rank} is filled in only with --nodes "
                             "(hint: run it with --nodes N; write {{node_rank}} for a literal {node_rank})")


def test_no_lock_and_dry_run_reserve_nothing(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    ran = run(["--snapshot", "workstation-4x", "--no-lock", "--auto", "1", "-q", "--", "sh", "-c",
               f"ls -A {locks} 2>/dev/null | wc -l"], locks)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["0"]  # no lock held while the command ran
    dry = run(["--snapshot", "workstation-4x", "--dry-run", "--auto", "1", "-q", "--", "true"], locks)
    assert dry.returncode == 0, dry.stderr
    assert not locks.exists()


def test_bind_says_where_it_bound_unless_quiet(tmp_path: Path) -> None:
    snap = tmp_path / "machine.json"  # a snapshot file (not a bundled example): --bind auto binds
    shutil.copy(EXAMPLES / "workstation-4x.json", snap)
    said = run(["--snapshot", str(snap), "--gpus", "0", "--", "true"], tmp_path / "locks")
    assert said.returncode == 0, said.stderr
    assert any(line.startswith("gpulaunch: ") and " CPUs " in line for line in said.stderr.splitlines()), said.stderr
    quiet = run(["--snapshot", str(snap), "--gpus", "0", "-q", "--", "true"], tmp_path / "locks")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_fitted_launch_says_the_plan_in_one_line_with_the_reserve_given(tmp_path: Path) -> None:
    """`--fit model`: one line of what the model needs (tp, and pp only where there is more than one
    stage), the allowance a GPU as --reserve sets it, and the values handed to the command."""
    import pytest

    pytest.importorskip("gguf")
    from tests.model_fixtures import llama_pair

    model = str(llama_pair(tmp_path)["70b"])
    locks = tmp_path / "locks"
    command = ["--", "vllm", "serve", model, "--max-model-len", "32768", "-tp", "{tp}"]
    one = run(["--snapshot", "dgx-h100", "--fit", "model", "--dry-run", *command], locks)
    assert one.returncode == 0, one.stderr
    assert one.stderr.splitlines()[0] == (
        "gpulaunch: Llama 3.1 70B (header only): tp 1; weights 40.5 GiB [exact], KV 10.0 GiB at 32768 tokens [rule], "
        "6.0 GiB a GPU [allowance]; {ctx}=32768 {tp}=1 {gpu_mem_util}=0.90")
    reserved = run(["--snapshot", "dgx-h100", "--fit", "model", "--reserve", "3GiB", "--dry-run", *command], locks)
    assert reserved.returncode == 0, reserved.stderr
    assert ", 3.0 GiB a GPU [allowance]; " in reserved.stderr.splitlines()[0]


def test_explain_says_why_these_gpus_and_with_fit_the_plan_first_as_text_or_json(tmp_path: Path) -> None:
    import json

    import pytest

    pytest.importorskip("gguf")
    from tests.model_fixtures import llama_pair

    model = str(llama_pair(tmp_path)["70b"])
    locks = tmp_path / "locks"
    plain = run(["--snapshot", "dgx-h100", "--auto", "2", "--explain", "--", "true"], locks)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("chosen: GPU 2, GPU 3 (auto)\n")
    text = run(["--snapshot", "dgx-h100", "--fit", model, "--explain", "--", "true"], locks)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("model: Llama 3.1 70B (header only) (gguf, llama, 80 layers, Q4_K_M)\n")
    assert "\nchosen: GPU " in text.stdout  # then why these GPUs
    doc = run(["--snapshot", "dgx-h100", "--fit", model, "--explain", "--json", "--", "true"], locks)
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["schema"] == 1 and "model" in json.loads(doc.stdout)


def test_submit_refuses_what_no_wait_can_meet_and_says_the_id_on_stderr_when_stdout_fails(tmp_path: Path) -> None:
    import subprocess

    from sharing_helpers import env, gl

    box = env(tmp_path / "locks", XDG_STATE_HOME=str(tmp_path / "state"))
    try:
        hopeless = subprocess.run(gl("--snapshot", "workstation-4x", "submit", "--auto", "9", "--", "true"), env=box,
                                  capture_output=True, text=True, timeout=60)
        assert hopeless.returncode == 4
        assert _error(hopeless).startswith("need 9 GPUs") and "waiting cannot help: the machine has too few GPUs" in \
            hopeless.stderr
        with open("/dev/full", "w") as full:  # a stdout every write to fails (ENOSPC)
            done = subprocess.run(gl("--snapshot", "workstation-4x", "submit", "--auto", "1", "--", "true"), env=box,
                                  stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "gpulaunch: job 1 submitted (stdout cannot be written: its id is only said here)\n"
    finally:  # whatever was submitted is ended, never left waiting
        subprocess.run(gl("cancel", "-q", "1", "2"), env=box, capture_output=True, timeout=120)


def test_a_placeholder_the_engine_has_no_value_for_is_refused_with_the_engines_hint(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("gguf")
    from tests.model_fixtures import llama_pair

    model = str(llama_pair(tmp_path)["8b"])
    locks = tmp_path / "locks"
    binding = run(["--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "python", "-m", "llama_cpp.server",
                   "--model", model, "--n_gpu_layers", "{gpu_layers}", "--tensor_split", "{tensor_split}"], locks)
    assert binding.returncode == 2
    assert _error(binding) == ("{tensor_split} has no value for llama-cpp-python (hint: its --tensor_split takes one "
                               "word per GPU: leave it out, llama.cpp then splits the layers by each GPU's free memory)")
    vllm = run(["--snapshot", "dgx-h100", "--fit", "model", "--dry-run", "--", "vllm", "serve", model, "--foo",
                "{tensor_split}"], locks)
    assert vllm.returncode == 2
    assert _error(vllm).startswith("{tensor_split} has no value for vllm (hint: {gpu_layers} and {tensor_split} are "
                                   "llama.cpp's, ")
