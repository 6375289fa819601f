"""Which FSDP a training launch runs, read as each framework decides it (forms_common.fsdp_version): accelerate
launch's config (``fsdp_version``, default 1) and ``--fsdp_version``, ``FSDP_VERSION`` in the environment, the
Trainer's ``--fsdp`` by the command's own transformers (4: the environment's; 5.0-5.9: ``fsdp_config``'s
version or 1; 5.10 on: or 2), axolotl's ``fsdp_version`` (default 1), torchtune (2); and the plan says FSDP1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.fit.training.forms import read_launch
from gpu_launch.fit.training.forms_common import to_setup

pytest.importorskip("yaml")

NOBODY = {"HOME": "/nonexistent"}


def setup_of(argv: list[str], environ: dict[str, str] | None = None):
    launch = read_launch(argv, environ if environ is not None else NOBODY)
    assert launch is not None, argv
    return to_setup(launch, str(launch.get("model")), "bfloat16", {})


def _venv(root: Path, version: str) -> dict[str, str]:
    """A venv as the command would run it: bin/python, console scripts, transformers' metadata only."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    for name in ("torchrun", "accelerate", "llamafactory-cli"):
        script = root / "bin" / name
        script.write_text(f"#!{python}\nimport sys\n")
        script.chmod(0o755)
    (root / "lib" / "python3.11" / "site-packages" / f"transformers-{version}.dist-info").mkdir(parents=True)
    return {"PATH": str(root / "bin"), "HOME": "/nonexistent"}


def _accelerate_config(path: Path, version: str = "") -> Path:
    path.write_text("distributed_type: FSDP\nnum_processes: 4\nmixed_precision: bf16\nfsdp_config:\n"
                    "  fsdp_sharding_strategy: FULL_SHARD\n" + (f"  fsdp_version: {version}\n" if version else ""))
    return path


SCRIPT = ["train.py", "--model_name_or_path", "M", "--per_device_train_batch_size", "1"]


def test_accelerate_launch_runs_fsdp1_unless_its_config_or_command_line_says_2(tmp_path: Path) -> None:
    v1 = _accelerate_config(tmp_path / "v1.yaml")
    v2 = _accelerate_config(tmp_path / "v2.yaml", "2")
    s = setup_of(["accelerate", "launch", "--config_file", str(v1), *SCRIPT])
    assert (s.sharding, s.fsdp_version) == ("fsdp_full", 1)
    assert not any("FSDP" in a for a in s.assumed), s.assumed  # accelerate launch's default: known, not assumed
    assert setup_of(["accelerate", "launch", "--config_file", str(v2), *SCRIPT]).fsdp_version == 2
    # --fsdp_version on the command line wins over the file; the file's wins over the environment's
    assert setup_of(["accelerate", "launch", "--config_file", str(v1), "--fsdp_version", "2", *SCRIPT]).fsdp_version == 2
    assert setup_of(["accelerate", "launch", "--config_file", str(v1), *SCRIPT],
                    {**NOBODY, "FSDP_VERSION": "2"}).fsdp_version == 1
    # the default file accelerate reads silently
    home = tmp_path / "hf"
    (home / "accelerate").mkdir(parents=True)
    _accelerate_config(home / "accelerate" / "default_config.yaml", "2")
    assert setup_of(["accelerate", "launch", *SCRIPT], {"HF_HOME": str(home)}).fsdp_version == 2
    (tmp_path / "v7.yaml").write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 7\n")
    with pytest.raises(UsageError, match="fsdp_version 7 does not exist"):
        setup_of(["accelerate", "launch", "--config_file", str(tmp_path / "v7.yaml"), *SCRIPT])


@pytest.mark.parametrize("version, fsdp_config, environ, expected", [
    ("5.24.0", None, {}, 2),  # fsdp_config.get("version", 2)
    ("5.10.1", None, {}, 2),
    ("5.9.0", None, {}, 1),  # fsdp_config.get("version", 1) before 5.10
    ("5.5.0", {"version": 2}, {}, 2),
    ("5.24.0", {"fsdp_version": 1}, {}, 1),  # the fsdp_ prefix is dropped
    ("4.57.1", None, {}, 1),  # transformers 4: accelerate's plugin reads FSDP_VERSION, default 1
    ("4.57.1", {"version": 2}, {}, 1),  # ... and ignores fsdp_config's version
    ("4.57.1", None, {"FSDP_VERSION": "2"}, 2),
])
def test_the_trainers_fsdp_by_the_commands_transformers(tmp_path: Path, version: str, fsdp_config, environ,
                                                       expected: int) -> None:
    env = {**_venv(tmp_path / "venv", version), **environ}
    argv = ["torchrun", "--nproc-per-node", "4", *SCRIPT, "--fsdp", "full_shard auto_wrap"]
    if fsdp_config is not None:
        (tmp_path / "fsdp.json").write_text(json.dumps(fsdp_config))
        argv += ["--fsdp_config", str(tmp_path / "fsdp.json")]
    s = setup_of(argv, env)
    assert (s.sharding, s.fsdp_version) == ("fsdp_full", expected)
    assert not any("FSDP" in a for a in s.assumed), s.assumed


def test_a_bare_fsdp_flag_and_no_transformers_found(tmp_path: Path) -> None:
    # transformers 5's --fsdp takes no value (nargs="?", const=True): full shard
    s = setup_of(["torchrun", "--nproc-per-node", "4", *SCRIPT, "--fsdp", "--bf16"])
    assert (s.sharding, s.fsdp_version) == ("fsdp_full", 2)
    assert any(a.startswith("FSDP2 (the Trainer's --fsdp since transformers 5.10") for a in s.assumed), s.assumed
    (tmp_path / "bad.json").write_text(json.dumps({"version": 3}))
    with pytest.raises(UsageError, match="FSDP version 3 does not exist"):
        setup_of(["torchrun", *SCRIPT, "--fsdp", "full_shard", "--fsdp_config", str(tmp_path / "bad.json")])


def test_the_trainers_plugin_wins_over_accelerate_launchs_config_from_transformers_5(tmp_path: Path) -> None:
    v1 = _accelerate_config(tmp_path / "v1.yaml")
    argv = ["accelerate", "launch", "--config_file", str(v1), *SCRIPT, "--fsdp", "full_shard"]
    assert setup_of(argv, _venv(tmp_path / "v5", "5.24.0")).fsdp_version == 2
    v2 = _accelerate_config(tmp_path / "v2.yaml", "2")
    argv = ["accelerate", "launch", "--config_file", str(v2), *SCRIPT, "--fsdp", "full_shard"]
    assert setup_of(argv, _venv(tmp_path / "v4", "4.57.1")).fsdp_version == 2  # 4: accelerate's FSDP_VERSION


def test_axolotl_fsdp_version_and_fsdp_config_alone(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yml"
    cfg.write_text("base_model: ./M\nmicro_batch_size: 1\nsequence_len: 1024\nfsdp_config:\n"
                   "  offload_params: false\n  reshard_after_forward: true\n")
    s = setup_of(["axolotl", "train", str(cfg)])
    assert (s.sharding, s.fsdp_version) == ("fsdp_full", 1)  # only fsdp_version: 2 sets FSDP_VERSION
    cfg.write_text(cfg.read_text() + "fsdp_version: 2\n")
    assert setup_of(["axolotl", "train", str(cfg)]).fsdp_version == 2
    old = tmp_path / "old.yml"
    old.write_text("base_model: ./M\nfsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n  fsdp_version: 2\n"
                   "  fsdp_reshard_after_forward: false\n")
    s = setup_of(["axolotl", "train", str(old)])
    assert (s.sharding, s.fsdp_version) == ("fsdp_grad_op", 2)


def test_torchtune_is_fsdp2_and_llamafactory_reads_the_trainers_keys(tmp_path: Path) -> None:
    tune = tmp_path / "full.yaml"
    tune.write_text("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ncheckpointer:\n"
                    "  checkpoint_dir: ./M\nbatch_size: 1\ndtype: bf16\n")
    s = setup_of(["tune", "run", "--nproc_per_node", "4", "full_finetune_distributed", "--config", str(tune)])
    assert (s.sharding, s.fsdp_version) == ("fsdp_full", 2)
    lmf = tmp_path / "lmf.yaml"
    lmf.write_text("model_name_or_path: ./M\nfinetuning_type: full\nfsdp: full_shard\nfsdp_config:\n  version: 1\n")
    s = setup_of(["llamafactory-cli", "train", str(lmf)], _venv(tmp_path / "venv", "5.24.0"))
    assert (s.sharding, s.fsdp_version) == ("fsdp_full", 1)


def test_no_fsdp_is_version_2_and_says_nothing(tmp_path: Path) -> None:
    s = setup_of(["torchrun", *SCRIPT], {**NOBODY, "FSDP_VERSION": "1"})
    assert (s.sharding, s.fsdp_version) == ("none", 2)
    assert not any("FSDP" in a for a in s.assumed)
