"""Training launches planned and chosen by their step, end to end through the CLI, on the bundled dgx-h100
with a header-only Llama-3.1-8B (config.json + a safetensors header, written at test time): never sized as
inference, the fewest GPUs whose per-GPU peak fits, {nproc}/{micro_batch}, a shortfall that says what fits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import clean_env
from tests.docs_fixtures import llama_8b_safetensors

jsonschema = pytest.importorskip("jsonschema")

from gpu_launch.views import schemas  # noqa: E402


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("training")
    llama_8b_safetensors(root / "Llama-3.1-8B")
    return root


def gpulaunch(work: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", *argv], capture_output=True,
                          text=True, env=clean_env(), timeout=120, cwd=work)


FIRST_CASE = ["torchrun", "--nproc-per-node", "{n}", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
              "--per_device_train_batch_size", "4", "--bf16"]


def test_the_issues_first_case_is_refused_with_what_fits_never_one_gpu_with_room_left(work: Path) -> None:
    proc = gpulaunch(work, "--fit", "model", "--explain", "--", *FIRST_CASE)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("gpulaunch: error: ./Llama-3.1-8B: one training step needs") and "\n" not in line
    assert "KV" not in line and "46.69" not in proc.stdout
    assert "(hint: what would fit: with --gradient_checkpointing:" in line and "micro-batch 1:" in line


def test_zero3_takes_more_than_one_gpu_and_fills_nproc_and_micro_batch(work: Path) -> None:
    argv = ["torchrun", "--nproc-per-node", "{nproc}", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
            "--per_device_train_batch_size", "{micro_batch}", "--bf16", "--gradient_checkpointing",
            "--deepspeed", '{"zero_optimization": {"stage": 3}}']
    proc = gpulaunch(work, "--fit", "model", "--dry-run", "--", *argv)
    assert proc.returncode == 0, proc.stderr
    exec_line = [x for x in proc.stdout.splitlines() if x.startswith("exec ")][0]
    words = exec_line.split()
    n = int(words[words.index("--nproc-per-node") + 1])
    micro = int(words[words.index("--per_device_train_batch_size") + 1])
    assert n >= 2 and micro >= 1
    assert f"CUDA_VISIBLE_DEVICES=" in proc.stdout
    visible = [x for x in proc.stdout.splitlines() if x.startswith("CUDA_VISIBLE_DEVICES=")][0]
    assert len(visible.split("=", 1)[1].split(",")) == n
    # the micro-batch is the largest that fits: one more does not (plan with it fixed)
    doc = plan_json(work, "--gpus", visible.split("=", 1)[1], "--micro-batch", str(micro + 1), "--", *argv)
    entry = doc["per_gpu"][0]
    assert entry["training"]["peak_bytes"] + entry["training"]["allowance_bytes"] > entry["free_bytes"]


def plan_json(work: Path, *argv: str) -> dict:
    proc = gpulaunch(work, "plan", "--json", *argv)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schemas.PLAN).validate(doc)
    return doc


def test_plan_json_has_a_training_object_in_each_gpus_entry(work: Path) -> None:
    doc = plan_json(work, "--", "trl", "sft", "--model_name_or_path", "./Llama-3.1-8B", "--use_peft")
    assert doc["engine"] == "training" and doc["kv_cache_bytes"] == 0
    t = doc["per_gpu"][0]["training"]
    assert t["peak_bytes"] >= t["weights_bytes"] + t["optimizer_bytes"] and t["peak_at"] in ("backward", "optimizer step")
    assert t["weights_bytes"] > 14 << 30 and t["allowance_bytes"] > 0
    # TRL's fused LM head (trl >= 1.15; none in this PATH: the current one's): no logits, so the peak is in the
    # layers' backward, the head's tensors gone
    assert doc["training"]["loss"] == "fused" and t["loss_bytes"] == 0 and t["peak_at"] == "backward"
    assert doc["per_gpu"][0]["left_bytes"] == doc["per_gpu"][0]["free_bytes"] - t["peak_bytes"] - t["allowance_bytes"]
    assert doc["training"]["method"] == "lora" and doc["training"]["seq_len"] == 1024  # TRL's max_length
    # TRL's bf16 unless fp16 (SFTConfig): the step under autocast; ModelConfig's LoRA dropout
    assert (doc["training"]["mixed_precision"], doc["training"]["lora_dropout"]) == (True, 0.05)
    plain = plan_json(work, "--", "torchrun", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
                      "--per_device_train_batch_size", "1")
    assert plain["training"]["mixed_precision"] is False and plain["training"]["lora_dropout"] == 0.0
    assert plain["training"]["fsdp_version"] is None and doc["training"]["fsdp_version"] is None  # no FSDP
    assert doc["placeholders"] == {"nproc": "1"}


def test_plan_json_says_which_fsdp_the_launch_runs(work: Path) -> None:
    config = work / "fsdp-accelerate.yaml"
    config.write_text("distributed_type: FSDP\nnum_processes: 4\nmixed_precision: bf16\nfsdp_config:\n"
                      "  fsdp_sharding_strategy: FULL_SHARD\n")
    argv = ["accelerate", "launch", "--config_file", str(config), "train.py", "--model_name_or_path",
            "./Llama-3.1-8B", "--per_device_train_batch_size", "1", "--gradient_checkpointing"]
    v1 = plan_json(work, "--", *argv)  # accelerate launch's default: FullyShardedDataParallel
    v2 = plan_json(work, "--", *argv[:4], "--fsdp_version", "2", *argv[4:])
    assert (v1["training"]["sharding"], v1["training"]["fsdp_version"]) == ("fsdp_full", 1)
    assert (v2["training"]["sharding"], v2["training"]["fsdp_version"]) == ("fsdp_full", 2)


def test_a_bare_python_script_is_planned_with_its_assumptions_stated(work: Path) -> None:
    proc = gpulaunch(work, "plan", "--", "python", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
                     "--gradient_checkpointing")
    assert proc.returncode == 0, proc.stderr
    assert "  assumed: full fine-tune (the script may add LoRA): say --train-method full|lora|qlora" in proc.stdout
    assert "  assumed: 2048 tokens a sequence" in proc.stdout
    assert "  assumed: micro-batch 8 a GPU (the Trainer's default)" in proc.stdout  # it takes Trainer flags
    for term, label in (("weights", "exact"), ("loss", "rule"), ("allowance", "allowance")):
        assert any(x.split()[:1] == [term] and x.endswith(f"[{label}]") or f"[{label}]" in x and x.strip().startswith(term)
                   for x in proc.stdout.splitlines()), term
    assert "a GPU at the step's peak (" in proc.stdout and "the largest term" in proc.stdout


def test_one_process_shares_nothing_whatever_the_config_says(work: Path) -> None:
    stage0 = '{"zero_optimization": {"stage": 0}}'
    proc = gpulaunch(work, "plan", "--", "torchrun", "--nproc-per-node", "1", "train.py", "--model_name_or_path",
                     "./Llama-3.1-8B", "--use_lora", "--gradient_checkpointing", "--deepspeed", stage0)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].endswith(", one process")
    two = gpulaunch(work, "plan", "--", "torchrun", "--nproc-per-node", "2", "train.py", "--model_name_or_path",
                    "./Llama-3.1-8B", "--use_lora", "--gradient_checkpointing", "--deepspeed", stage0)
    assert two.stdout.splitlines()[1].endswith(", DDP over 2 GPUs")


def test_gpulaunch_options_change_the_plan(work: Path) -> None:
    base = ["--micro-batch", "1", "--", "python", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
            "--gradient_checkpointing"]
    short = plan_json(work, "--train-seq", "512", *base)["per_gpu"][0]["training"]
    long = plan_json(work, "--train-seq", "4096", *base)["per_gpu"][0]["training"]
    assert long["loss_bytes"] == 8 * short["loss_bytes"]
    lora = plan_json(work, "--train-method", "lora", *base)["per_gpu"][0]["training"]
    full = plan_json(work, *base)["per_gpu"][0]["training"]
    assert lora["optimizer_bytes"] < full["optimizer_bytes"] // 100


def test_a_training_launch_with_no_model_is_refused_exit_2(work: Path) -> None:
    proc = gpulaunch(work, "--fit", "model", "--dry-run", "--", "torchrun", "train.py", "--do_train", "--bf16")
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulaunch: error: the training launch (trainer) names no model") \
        and "(hint: add --model_name_or_path" in proc.stderr


def test_a_missing_config_is_one_line_exit_2(work: Path) -> None:
    proc = gpulaunch(work, "plan", "--", "axolotl", "train", "nope.yml")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "the axolotl config 'nope.yml' does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_api_plan_training(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpu_launch as gl

    monkeypatch.chdir(work)
    p = gl.plan(command=["trl", "sft", "--model_name_or_path", "./Llama-3.1-8B", "--use_peft"], snapshot="dgx-h100",
                train_seq=2048)
    peak = p.placement.per_gpu[0].training
    assert peak is not None and peak.peak_bytes > p.sizing.model.weights.total
    assert p.sizing.settings.training.setup.seq_len == 2048


DS3 = '{"zero_optimization": {"stage": 3}}'


@pytest.fixture(scope="module")
def big(work: Path) -> Path:
    from tests.docs_fixtures import laptop_snapshot, llama_70b_safetensors

    llama_70b_safetensors(work / "Llama-3.1-70B")
    laptop_snapshot(work / "laptop.json")
    return work


def test_a_sharded_step_one_node_cannot_hold_is_planned_in_nodes(big: Path) -> None:
    argv = ["torchrun", "--nproc-per-node", "{nproc}", "train.py", "--model_name_or_path", "./Llama-3.1-70B", "--bf16",
            "--gradient_checkpointing", "--deepspeed", DS3]
    doc = plan_json(big, "--", *argv)
    k = doc["nodes"]
    assert k >= 2 and doc["gpus_per_node"] == 8 and len(doc["per_gpu"]) == 8 * k
    t = doc["per_gpu"][0]["training"]
    assert t["peak_bytes"] + t["allowance_bytes"] <= doc["per_gpu"][0]["free_bytes"]
    # one node fewer does not hold it: the launch on this machine says so, and names the nodes that would
    proc = gpulaunch(big, "--fit", "model", "--dry-run", "--", *argv)
    assert proc.returncode == 4
    assert f"{k} nodes of this kind (ZeRO-3 over {8 * k} ranks): gpulaunch --nodes {k} --slurm" in proc.stderr
    # DDP never gets smaller with more nodes: no several-node answer, the refusal stands
    ddp = gpulaunch(big, "plan", "--", *argv[:-2])
    assert ddp.returncode == 4 and "nodes of this kind" not in ddp.stderr


def test_offload_is_checked_against_the_hosts_memory(big: Path) -> None:
    offload = '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}'
    proc = gpulaunch(big, "--snapshot", str(big / "laptop.json"), "--fit", "model", "--dry-run", "--train-method",
                     "lora", "--", "python", "train.py", "--model_name_or_path", "./Llama-3.1-8B", "--bf16",
                     "--gradient_checkpointing", "--deepspeed", offload)
    assert "of host memory" not in proc.stderr  # LoRA's few states fit the laptop's 16 GiB
    full = gpulaunch(big, "--snapshot", str(big / "laptop.json"), "--fit", "model", "--dry-run", "--", "python",
                     "train.py", "--model_name_or_path", "./Llama-3.1-8B", "--bf16", "--gradient_checkpointing",
                     "--deepspeed", offload)
    assert full.returncode == 4
    assert "the offloaded states need" in full.stderr and "the host has 16.0 GiB available" in full.stderr


def test_explain_shows_the_terms_labelled_and_the_peaks_moment(work: Path) -> None:
    proc = gpulaunch(work, "--fit", "model", "--explain", "--", "trl", "sft", "--model_name_or_path", "./Llama-3.1-8B",
                     "--use_peft")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    labelled = {x.split()[0]: x.split()[-1] for x in lines if x.startswith("  ") and x.rstrip().endswith("]")
                and x.split()[0] in ("weights", "gradients", "optimizer", "activations", "loss")}
    assert set(labelled) == {"weights", "gradients", "optimizer", "activations", "loss"}
    assert all(v in ("[exact]", "[rule]") for v in labelled.values())
    assert any(x.startswith("  allowance") and "[allowance]" in x for x in lines)
    assert any(x.startswith("a GPU at the step's peak (the ") and "the largest term" in x for x in lines)


def test_a_several_node_launch_gets_the_training_split(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fit model --slurm`` without --nodes asks node_split: ZeRO-3 in nodes, DDP refused with why."""
    from gpu_launch.fit.model_plan import node_split
    from gpu_launch.in_process.keywords import invocation

    monkeypatch.chdir(big)
    inv = invocation("plan", {"snapshot": "dgx-h100"})
    base = ["torchrun", "--nproc-per-node", "{nproc}", "train.py", "--model_name_or_path", "./Llama-3.1-70B", "--bf16",
            "--gradient_checkpointing"]
    split = node_split(inv, "model", [*base, "--deepspeed", DS3])
    doc = plan_json(big, "--", *base, "--deepspeed", DS3)
    assert split.nodes == doc["nodes"] >= 2 and split.gpus_per_node == 8
    assert split.placeholders()["nproc"] == "8" and "ctx" not in split.placeholders()
    # the fewest: one node fewer does not hold the step (each rank's share at that world size)
    from gpu_launch.fit.sizing import sizing_of
    from gpu_launch.fit.training import steps
    from gpu_launch.base.records import replace

    s = sizing_of("model", [*base, "--deepspeed", DS3], {})
    run = s.settings.training
    frees = [sh["free_bytes"] for sh in doc["per_gpu"][:8]]
    assert steps.step_on(s.model, replace(run, nnodes=split.nodes), frees, None).fits
    assert not steps.step_on(s.model, replace(run, nnodes=split.nodes - 1), frees, None).fits
    # GPUs just large enough for two nodes' share: two nodes, not more
    two = steps.step_on(s.model, replace(run, nnodes=2), frees, None).peak
    assert steps.nodes_needed(s.model, run, [two.peak_bytes + two.allowance_bytes] * 8, None) == 2
    ddp = node_split(inv, "model", base)
    assert ddp.nodes == 0 and "more nodes do not divide it" in ddp.problem
    small = node_split(inv, "model", ["torchrun", "train.py", "--model_name_or_path", "./Llama-3.1-8B", "--use_peft",
                                      "--lora_r", "8", "--gradient_checkpointing", "--per_device_train_batch_size", "1"])
    assert (small.nodes, small.gpus_per_node) == (1, 1)


def test_plan_names_the_peaks_moment_and_its_terms_add_up_in_text_and_json(work: Path) -> None:
    # checkpointing, a chunked loss and fused AdamW at micro-batch 4: the peak is late in backward, with most
    # gradients there; at the start of backward (a plain loss: TRL's LoRA run with label smoothing, which makes
    # the full logits) there are none yet
    late = ["torchrun", "train.py", "--model_name_or_path", "./Llama-3.1-8B", "--per_device_train_batch_size", "4",
            "--bf16", "--gradient_checkpointing", "--loss_type", "chunked_nll", "--optim", "adamw_torch_fused"]
    start = ["trl", "sft", "--model_name_or_path", "./Llama-3.1-8B", "--use_peft", "--label_smoothing_factor", "0.1"]
    for argv, at, moment in ((late, "end of backward", "the end of backward"),
                             (start, "backward", "the start of backward")):
        t = plan_json(work, "--", *argv)["per_gpu"][0]["training"]
        assert t["peak_at"] == at
        assert sum(t[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                                  "loss_bytes", "other_bytes")) == t["peak_bytes"]
        assert (t["gradients_bytes"] > 0) == (at == "end of backward") and (t["loss_bytes"] > 0) == (at == "backward")
        proc = gpulaunch(work, "plan", "--", *argv)
        assert proc.returncode == 0, proc.stderr
        assert f"a GPU at the step's peak ({moment};" in proc.stdout


def test_a_fitted_training_launch_says_its_peak_a_gpu_in_one_line(work: Path) -> None:
    """The one line a `--fit model` training launch says on stderr: the step's peak plus the allowance, a
    GPU, where it peaks, its largest term (the tensor-parallel engines' line has no such terms)."""
    argv = ["torchrun", "--nproc-per-node", "{nproc}", "train.py", "--model_name_or_path", "./Llama-3.1-8B",
            "--per_device_train_batch_size", "{micro_batch}", "--bf16", "--gradient_checkpointing",
            "--deepspeed", '{"zero_optimization": {"stage": 3}}']
    proc = gpulaunch(work, "--fit", "model", "--dry-run", "--json", "--", *argv)
    assert proc.returncode == 0, proc.stderr
    line = proc.stderr.splitlines()[0]
    plan = json.loads(gpulaunch(work, "plan", "--json", "--", *argv).stdout)["per_gpu"][0]["training"]
    peak = (plan["peak_bytes"] + plan["allowance_bytes"]) / (1 << 30)
    assert line.startswith("gpulaunch: ") and f" GPU(s); {peak:.1f} GiB a GPU at the step's peak (" in line, line
    assert "the largest) [rule + allowance]; " in line and "{micro_batch}=" in line


def test_a_qlora_plan_says_its_base_bits_rank_and_only_the_terms_it_has(work: Path) -> None:
    proc = gpulaunch(work, "plan", "--train-method", "qlora", "--", "python", "train.py", "--model_name_or_path",
                     "./Llama-3.1-8B", "--per_device_train_batch_size", "4", "--bf16", "--lora_r", "16")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("training: trainer, QLoRA (4-bit base) r16 on q_proj,v_proj, bf16, micro-batch 4")
    peak = lines.index(next(x for x in lines if x.startswith("a GPU at the step's peak")))
    terms = [x.split()[0] for x in lines[peak + 1:peak + 8]]
    assert terms == ["weights", "gradients", "optimizer", "activations", "loss", "peak", "allowance"]  # no "other"
    assert lines[peak + 1].split()[1:] == ["5.64", "GiB", "[rule]"] and lines[peak + 2].split()[1:3] == ["0", "MiB"]
