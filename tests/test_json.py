"""Every JSON document gpulaunch prints validates against its schema in gpu_launch/views/schemas.py,
comes alone on stdout, and keeps its keys in the schema's order."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from cli_run import scrubbed

jsonschema = pytest.importorskip("jsonschema")

from gpu_launch.options import args

from gpu_launch.views import schemas  # noqa: E402
from gpu_launch.hardware.snapshot import example_names  # noqa: E402

EXAMPLES = example_names()


def gpulaunch(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = scrubbed()
    base.pop("NO_COLOR", None)
    base["GPULAUNCH_CONFIG"] = ""  # no user config file leaks into the test
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpu_launch", *argv], capture_output=True, text=True, env=base,
                          timeout=60)


def check_order(doc: Any, schema: dict[str, Any], where: str = "$") -> None:
    """Keys appear in the order the schema lists them (stable key order is part of the contract)."""
    if isinstance(doc, dict) and "properties" in schema:
        order = list(schema["properties"])
        assert list(doc) == [k for k in order if k in doc], f"{where}: keys out of order: {list(doc)}"
        for key, value in doc.items():
            check_order(value, schema["properties"][key], f"{where}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            check_order(item, schema["items"], f"{where}[{i}]")


def validated(proc: subprocess.CompletedProcess[str], schema: dict[str, Any]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    jsonschema.Draft202012Validator(schema).validate(doc)
    check_order(doc, schema)
    return doc


def test_the_schemas_are_valid_draft_2020_12() -> None:
    for schema in schemas.ALL.values():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"] == {"const": 1}


@pytest.mark.parametrize("example", EXAMPLES)
def test_ls_json_is_a_snapshot(example: str) -> None:
    doc = validated(gpulaunch("--snapshot", example, "ls", "--json"), schemas.SNAPSHOT)
    assert doc["schema"] == 1 and doc["gpus"]
    topo = validated(gpulaunch("--snapshot", example, "topo", "--json"), schemas.SNAPSHOT)
    assert topo["gpus"] == doc["gpus"]


def test_ls_json_round_trips_through_snapshot(tmp_path) -> None:
    first = gpulaunch("--snapshot", "dgx-h100", "ls", "--json")
    path = tmp_path / "box.json"
    path.write_text(first.stdout)
    again = validated(gpulaunch("--snapshot", str(path), "ls", "--json"), schemas.SNAPSHOT)
    assert again == json.loads(first.stdout)


def test_a_schema_violation_is_caught() -> None:
    """The validation above can fail: a document with a wrong type or an extra key is rejected."""
    doc = json.loads(gpulaunch("--snapshot", "workstation-4x", "ls", "--json").stdout)
    doc["gpus"][0]["index"] = "0"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schemas.SNAPSHOT)
    doc["gpus"][0]["index"] = 0
    doc["surprise"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schemas.SNAPSHOT)
    with pytest.raises(AssertionError):
        check_order({"gpus": [], "schema": 1}, schemas.SNAPSHOT)


@pytest.mark.parametrize("selection", [["--auto", "2"], ["--gpus", "3,1"], ["--fit", "100GiB"], ["--gpus", "all"]])
def test_dry_run_json(selection: list[str]) -> None:
    proc = gpulaunch("--snapshot", "dgx-h100", *selection, "--dry-run", "--json", "--", "python", "train.py", "--lr", "3e-4")
    doc = validated(proc, schemas.DRY_RUN)
    assert doc["argv"] == ["python", "train.py", "--lr", "3e-4"]
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(str(d["index"]) for d in doc["devices"])
    assert [d["cuda"] for d in doc["devices"]] == [f"cuda:{i}" for i in range(len(doc["devices"]))]
    assert "cuda:0 →" in proc.stderr  # the mapping table goes to stderr, never into the JSON stream
    if selection == ["--gpus", "3,1"]:
        assert [d["index"] for d in doc["devices"]] == [3, 1]


def test_dry_run_json_with_a_mig_device() -> None:
    mig = "MIG-b69a63cd-bed1-c0f3-b031-e2dc28fe9252"
    doc = validated(gpulaunch("--snapshot", "mig-a100", "--gpus", mig, "--dry-run", "--json"), schemas.DRY_RUN)
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == mig
    assert doc["argv"] == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_explain_json_auto(example: str) -> None:
    doc = validated(gpulaunch("--snapshot", example, "--auto", "1", "--explain", "--json"), schemas.EXPLAIN)
    assert doc["how"] == "auto" and len(doc["chosen"]) == 1 and "set" in doc


def test_explain_json_explicit_and_excluded() -> None:
    doc = validated(gpulaunch("--snapshot", "dgx-h100", "--gpus", "0,1", "--explain", "--json"), schemas.EXPLAIN)
    assert doc["how"] == "explicit" and doc["chosen"] == [0, 1] and "set" not in doc
    doc = validated(gpulaunch("--snapshot", "workstation-4x", "--auto", "2", "--exclude", "0", "--explain", "--json"),
                    schemas.EXPLAIN)
    assert doc["excluded"][0]["gpu"] == 0 and 0 not in doc["chosen"]
    assert all("lost_on" in s for s in doc["next_best"])


def test_config_json() -> None:
    doc = validated(gpulaunch("config", "--json", env={"GPULAUNCH_MIN_FREE": "20GiB"}), schemas.CONFIG)
    by_option = {s["option"]: s for s in doc["settings"]}
    assert by_option["--min-free"]["value"] == "20GiB" and by_option["--min-free"]["source"] == "env"
    assert by_option["--idle"] == {"option": "--idle", "key": "idle", "env": "GPULAUNCH_IDLE", "value": False,
                                   "source": "default", "where": ""}


def test_verbose_timings_stay_off_stdout() -> None:
    proc = gpulaunch("--snapshot", "pcie-8x", "ls", "--json", "-v")
    validated(proc, schemas.SNAPSHOT)
    assert "gpulaunch: read pcie-8x in" in proc.stderr


@pytest.mark.skipif("env" not in args.SUBCOMMANDS, reason="the `env` subcommand is not on this branch yet")
def test_env_json() -> None:
    doc = validated(gpulaunch("--snapshot", "dgx-h100", "env", "--auto", "2", "--json"), schemas.ENV)
    assert len(doc["devices"]) == 2


def test_jobs_json_and_submit_json_follow_their_schema(tmp_path) -> None:
    """Detached jobs (issue 26): the new job as submit prints it, and the list once it has run."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "GPULAUNCH_LOCK_DIR": str(tmp_path / "locks")}
    new = validated(gpulaunch("--snapshot", "dgx-h100", "submit", "--json", "--auto", "1", "--", sys.executable, "-c",
                              "print('hi')", env=env), schemas.JOBS)
    assert [(j["id"], j["state"], j["argv"][-1]) for j in new["jobs"]] == [("1", "waiting", "print('hi')")]
    gpulaunch("log", "1", "-f", env=env)
    listed = validated(gpulaunch("jobs", "--json", env=env), schemas.JOBS)
    assert [(j["id"], j["state"], j["exit_code"]) for j in listed["jobs"]] == [("1", "done", 0)]
    assert listed["job_dir"] == str(tmp_path / "state" / "gpulaunch" / "jobs")
