"""Training launches read as each framework reads them (fit/training/forms_*): TRL, axolotl, LLaMA-Factory,
Trainer flags behind torchrun/accelerate/deepspeed/python, DeepSpeed JSON with "auto", the accelerate config
(named or the default file); every spelling, repeats (last wins), and bad configs as one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_launch.errors import ExitCode, UsageError
from gpu_launch.fit.training.forms import read_launch
from gpu_launch.fit.training.forms_common import to_setup

pytest.importorskip("yaml")


def setup_of(argv: list[str], environ: dict[str, str] | None = None, dtype: str = "bfloat16", **options):
    launch = read_launch(argv, environ if environ is not None else {"HOME": "/nonexistent"})
    assert launch is not None, argv
    return to_setup(launch, str(launch.get("model")), dtype, options)


TORCHRUN = ["torchrun", "--nproc-per-node", "{n}", "train.py", "--model_name_or_path", "./M"]


def test_trainer_flags_behind_torchrun() -> None:
    s = setup_of([*TORCHRUN, "--per_device_train_batch_size", "4", "--bf16", "--gradient_checkpointing",
                  "--max_seq_length", "4096", "--optim", "adamw_torch_fused"])
    assert (s.launcher, s.micro_batch, s.precision, s.gradient_checkpointing, s.seq_len, s.optimizer) == \
        ("trainer", 4, "bf16", True, 4096, "adamw_torch_fused")
    assert s.nproc is None  # {n}: gpulaunch counts them


@pytest.mark.parametrize("words, expected", [
    (["--bf16"], True), (["--bf16", "True"], True), (["--bf16", "false"], False), (["--bf16=yes"], True),
    (["--bf16", "0"], False), (["--bf16", "false", "--bf16", "True"], True), (["--bf16", "--bf16", "no"], False),
])
def test_hf_argparser_booleans_in_every_spelling_last_wins(words: list[str], expected: bool) -> None:
    s = setup_of([*TORCHRUN, *words, "--gradient-checkpointing", "true"], dtype="float32")
    assert s.precision == ("amp_bf16" if expected else "fp32")  # fp32 weights: --bf16 is autocast
    assert s.gradient_checkpointing  # the dashed spelling HfArgumentParser adds


def test_a_repeated_number_last_wins_and_dashes_read_as_underscores() -> None:
    s = setup_of([*TORCHRUN, "--per_device_train_batch_size", "2", "--per-device-train-batch-size=8"])
    assert s.micro_batch == 8


def test_nargs_lists_and_peft_flags() -> None:
    s = setup_of(["python", "sft.py", "--model_name_or_path", "./M", "--use_peft", "--lora_r", "32",
                  "--lora_target_modules", "q_proj", "v_proj", "k_proj", "--load_in_4bit", "--bf16"])
    assert (s.method, s.lora_r, s.lora_targets, s.quant_bits) == ("qlora", 32, ("q_proj", "v_proj", "k_proj"), 4)


def test_nproc_from_each_launcher() -> None:
    assert setup_of(["torchrun", "--nproc_per_node=4", "train.py", "--model_name_or_path", "M",
                     "--do_train"]).nproc == 4
    assert setup_of(["deepspeed", "--num_gpus", "2", "train.py", "--model_name_or_path", "M"]).nproc == 2
    assert setup_of(["accelerate", "launch", "--num_processes", "8", "train.py", "--model_name_or_path", "M"],
                    ).nproc == 8


def test_an_inference_script_is_not_a_training_launch() -> None:
    assert read_launch(["python", "infer.py", "--model_name_or_path", "M"], {}) is None
    assert read_launch(["vllm", "serve", "M"], {}) is None


def test_bare_python_lists_its_assumptions() -> None:
    s = setup_of(["python", "train.py", "--model_name_or_path", "./M"])
    assert s.method == "full" and s.seq_len == 2048 and s.micro_batch == 1
    joined = " | ".join(s.assumed)
    assert "full fine-tune" in joined and "--train-method" in joined
    assert "2048 tokens" in joined and "--train-seq" in joined
    assert "micro-batch 1" in joined  # no Trainer flag: the script's batch is unknown
    trainer = setup_of(["python", "train.py", "--model_name_or_path", "./M", "--learning_rate", "1e-5"])
    assert trainer.micro_batch == 8 and any("the Trainer's default" in a for a in trainer.assumed)


def test_the_launchers_nodes_and_a_placeholder_count(tmp_path: Path) -> None:
    from gpu_launch.fit.training.forms import read_launch

    assert read_launch(["torchrun", "--nnodes", "2:4", "--nproc-per-node", "8", "train.py", "--do_train"], {}).nnodes == 2
    cfg = tmp_path / "multi.yaml"
    cfg.write_text("distributed_type: MULTI_GPU\nnum_processes: 8\n")
    said = ["accelerate", "launch", "--config_file", str(cfg)]
    assert setup_of([*said, "train.py", "--model_name_or_path", "M"]).nproc == 8
    assert setup_of([*said, "--num_processes", "{n}", "train.py", "--model_name_or_path", "M"]).nproc is None


def test_gpulaunch_options_win_over_the_launch() -> None:
    s = setup_of([*TORCHRUN, "--max_length", "1024"], train_seq=8192, train_method="lora", micro_batch=3)
    assert (s.seq_len, s.method, s.micro_batch) == (8192, "lora", 3)
    assert not any("tokens" in a for a in s.assumed)


def test_deepspeed_json_auto_values_resolved_as_the_trainer_does(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
                              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    s = setup_of([*TORCHRUN, "--deepspeed", str(ds), "--per_device_train_batch_size", "2", "--bf16"])
    assert (s.sharding, s.offload_optimizer, s.micro_batch) == ("zero3", True, 2)
    assert str(ds) in s.sources


def test_deepspeed_json_bucket_sizes_are_kept_as_written(tmp_path: Path) -> None:
    # the ZeRO sizes that decide a rank's buffers (fit/training/memory_sharding.py zero3): "auto", numbers,
    # and nothing where the config says nothing (DeepSpeed's own defaults then)
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                    "stage3_prefetch_bucket_size": 5e7,
                                                    "stage3_max_reuse_distance": 0, "overlap_comm": True,
                                                    "stage3_max_live_parameters": 3e8,
                                                    "stage3_param_persistence_threshold": "auto"}}))
    s = setup_of([*TORCHRUN, "--deepspeed", str(ds)])
    assert s.zero_buckets == (("reduce_bucket_size", "auto"), ("stage3_prefetch_bucket_size", 5e7),
                              ("stage3_max_reuse_distance", 0), ("stage3_max_live_parameters", 3e8),
                              ("stage3_param_persistence_threshold", "auto"))
    assert setup_of([*TORCHRUN, "--deepspeed", '{"zero_optimization": {"stage": 3}}']).zero_buckets == ()


def test_deepspeed_json_numbers_fill_the_batch_and_a_mismatch_is_refused(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}))
    assert setup_of([*TORCHRUN, "--deepspeed", str(ds)]).micro_batch == 4
    with pytest.raises(UsageError, match="disagrees"):
        setup_of([*TORCHRUN, "--deepspeed", str(ds), "--per_device_train_batch_size", "8"])


def test_trl_cli_with_its_yaml_the_command_line_winning(tmp_path: Path) -> None:
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_name_or_path: ./Q\nper_device_train_batch_size: 2\nmax_length: 4096\nuse_peft: true\n"
                   "lora_r: 8\n")
    s = setup_of(["trl", "sft", "--config", str(cfg), "--per_device_train_batch_size", "6"])
    assert (s.launcher, s.micro_batch, s.seq_len, s.method, s.lora_r) == ("trl sft", 6, 4096, "lora", 8)
    assert s.gradient_checkpointing  # TRL's default
    assert str(cfg) in s.sources


def test_trl_defaults_are_known_not_assumed() -> None:
    s = setup_of(["trl", "sft", "--model_name_or_path", "./Q"])
    assert (s.seq_len, s.micro_batch, s.precision) == (1024, 8, "bf16")
    assert s.assumed == ()


def test_axolotl_yaml_with_a_deepspeed_json(tmp_path: Path) -> None:
    ds = tmp_path / "zero2.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    cfg = tmp_path / "qlora.yml"
    cfg.write_text(f"base_model: ./M\nadapter: qlora\nload_in_4bit: true\nlora_r: 32\nlora_target_linear: true\n"
                   f"sequence_len: 4096\nsample_packing: true\nmicro_batch_size: 2\ngradient_checkpointing: true\n"
                   f"bf16: auto\nflash_attention: true\ndeepspeed: {ds}\n")
    for argv in (["axolotl", "train", str(cfg)], ["accelerate", "launch", "-m", "axolotl.cli.train", str(cfg)]):
        s = setup_of(argv)
        assert (s.method, s.quant_bits, s.lora_r, s.lora_targets) == ("qlora", 4, 32, ("all-linear",))
        assert (s.seq_len, s.packing, s.micro_batch, s.gradient_checkpointing) == (4096, True, 2, True)
        assert (s.attention, s.sharding, s.precision) == ("flash_attention_2", "zero2", "bf16")


def test_llamafactory_checkpointing_is_on_by_default_and_key_value_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "lf.yaml"
    cfg.write_text("model_name_or_path: ./M\nstage: sft\nfinetuning_type: lora\nlora_rank: 16\ncutoff_len: 1024\n"
                   "per_device_train_batch_size: 2\nbf16: true\n")
    s = setup_of(["llamafactory-cli", "train", str(cfg), "cutoff_len=4096"])
    assert (s.method, s.lora_r, s.seq_len, s.micro_batch) == ("lora", 16, 4096, 2)
    assert s.gradient_checkpointing
    off = setup_of(["llamafactory-cli", "train", str(cfg), "disable_gradient_checkpointing=true"])
    assert not off.gradient_checkpointing


def test_accelerate_fsdp_config_named_and_the_default_file(tmp_path: Path) -> None:
    cfg = tmp_path / "fsdp.yaml"
    cfg.write_text("distributed_type: FSDP\nnum_processes: 4\nmixed_precision: bf16\nfsdp_config:\n"
                   "  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_offload_params: false\n")
    argv = ["accelerate", "launch", "--config_file", str(cfg), "train.py", "--model_name_or_path", "M"]
    s = setup_of(argv, dtype="float32")
    assert (s.sharding, s.nproc, s.precision) == ("fsdp_full", 4, "amp_bf16")
    home = tmp_path / "hf"
    (home / "accelerate").mkdir(parents=True)
    (home / "accelerate" / "default_config.yaml").write_text(
        "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n"
        "  offload_optimizer_device: cpu\n")
    bare = ["accelerate", "launch", "train.py", "--model_name_or_path", "M"]
    s = setup_of(bare, environ={"HF_HOME": str(home)})
    assert (s.sharding, s.nproc, s.offload_optimizer) == ("zero3", 2, True)
    assert setup_of(bare, environ={"HOME": str(tmp_path / "nobody")}).sharding == "none"


@pytest.mark.parametrize("case, match", [
    ("missing", "does not exist"),
    ("list", "not a mapping"),
    ("zero7", "ZeRO stage 7 does not exist"),
    ("negative", "must be 1 or more"),
    ("rank0", "LoRA rank 0 must be 1 or more"),
    ("notbool", "not a boolean"),
])
def test_bad_configs_are_one_line_each_exit_2(tmp_path: Path, case: str, match: str) -> None:
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "ds7.json").write_text(json.dumps({"zero_optimization": {"stage": 7}}))
    argv = {
        "missing": ["trl", "sft", "--config", str(tmp_path / "nope.yaml")],
        "list": ["axolotl", "train", str(tmp_path / "list.yaml")],
        "zero7": [*TORCHRUN, "--deepspeed", str(tmp_path / "ds7.json")],
        "negative": [*TORCHRUN, "--per_device_train_batch_size", "-2"],
        "rank0": ["trl", "sft", "--model_name_or_path", "M", "--use_peft", "--lora_r", "0"],
        "notbool": [*TORCHRUN, "--bf16", "maybe"],
    }[case]
    with pytest.raises(UsageError, match=match) as info:
        setup_of(argv)
    assert info.value.exit_code == ExitCode.USAGE and "\n" not in info.value.message


def _venv(root: Path, version: str) -> Path:
    """A venv as the command would run it: bin/python and a console script, transformers' metadata only."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    torchrun = root / "bin" / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\n")
    torchrun.chmod(0o755)
    (root / "lib" / "python3.11" / "site-packages" / f"transformers-{version}.dist-info").mkdir(parents=True)
    return root / "bin"


@pytest.mark.parametrize("version, precision", [("4.57.1", "amp_bf16"), ("5.0.0", "bf16")])
def test_the_commands_own_transformers_decides_how_weights_load(tmp_path: Path, version: str, precision: str) -> None:
    env = {"PATH": str(_venv(tmp_path / "venv", version))}
    for word in ("python", "torchrun"):
        s = setup_of([word, "train.py", "--model_name_or_path", "./M", "--bf16", "--do_train"], environ=env)
        assert s.precision == precision, word
        assert any(f"transformers {version.split('.')[0]}" in a for a in s.assumed), s.assumed
    # the script's --dtype wins over either default
    s = setup_of(["python", "train.py", "--model_name_or_path", "./M", "--bf16", "--dtype", "bfloat16"], environ=env)
    assert s.precision == "bf16"


TUNE_LORA = """\
model:
  _component_: torchtune.models.llama3_1.lora_llama3_1_8b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_rank: 8
  lora_alpha: 16.0
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  max_seq_len: null
checkpointer:
  checkpoint_dir: ./Meta-Llama-3.1-8B-Instruct/
batch_size: 2
dtype: bf16
optimizer:
  _component_: torch.optim.AdamW
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
enable_activation_checkpointing: True
"""


def test_torchtune_a_config_file_and_key_value_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "8B_lora.yaml"
    cfg.write_text(TUNE_LORA)
    s = setup_of(["tune", "run", "--nproc_per_node", "2", "lora_finetune_distributed", "--config", str(cfg),
                  "batch_size=4", "tokenizer.max_seq_len=4096"])
    assert (s.launcher, s.model, s.method, s.lora_r, s.lora_alpha) == \
        ("torchtune", "./Meta-Llama-3.1-8B-Instruct/", "lora", 8, 16)
    assert s.lora_targets == ("q_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "up_proj")  # HF's names
    assert (s.micro_batch, s.seq_len, s.loss, s.gradient_checkpointing) == (4, 4096, "chunked", True)
    assert (s.sharding, s.nproc, s.precision) == ("fsdp_full", 2, "bf16")
    bare = setup_of(["tune", "run", "lora_finetune_single_device", "--config", str(cfg)])
    assert bare.sharding == "none" and bare.micro_batch == 2
    assert any("2048 tokens" in a for a in bare.assumed)  # max_seq_len: null


def test_torchtune_a_shipped_config_is_found_in_the_commands_torchtune(tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv", "5.0.0")
    tune = bin_dir / "tune"
    tune.write_text(f"#!{bin_dir / 'python'}\n")
    tune.chmod(0o755)
    shipped = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "recipes" / "configs" / "llama3_1"
    shipped.mkdir(parents=True)
    (shipped / "8B_lora.yaml").write_text(TUNE_LORA)
    s = setup_of(["tune", "run", "lora_finetune_single_device", "--config", "llama3_1/8B_lora"],
                 environ={"PATH": str(bin_dir)})
    assert s.method == "lora" and s.sources == (str(shipped / "8B_lora.yaml"),)
    with pytest.raises(UsageError, match="neither a file nor one the command's torchtune ships"):
        setup_of(["tune", "run", "lora_finetune_single_device", "--config", "llama3_1/70B_lora"],
                 environ={"PATH": str(bin_dir)})


def test_trl_needs_use_peft_a_script_of_ones_own_may_say_lora_r() -> None:
    assert setup_of(["trl", "sft", "--model_name_or_path", "M", "--lora_r", "8"]).method == "full"  # TRL: --use_peft
    assert setup_of(["python", "train.py", "--model_name_or_path", "M", "--lora_r", "8"]).method == "lora"
    assert setup_of(["python", "train.py", "--model_name_or_path", "M", "--use_lora", "--do_train"]).method == "lora"


def test_a_trl_script_behind_accelerate_reads_its_config_the_flags_winning(tmp_path: Path) -> None:
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_name_or_path: ./Q\nmax_length: 2048\nper_device_train_batch_size: 2\nuse_peft: true\n")
    s = setup_of(["accelerate", "launch", "trl/scripts/sft.py", "--config", str(cfg), "--max_length", "512"])
    assert (s.model, s.seq_len, s.micro_batch, s.method) == ("./Q", 512, 2, "lora")
    assert str(cfg) in s.sources
