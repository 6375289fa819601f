"""benchmarks/run.py works anywhere: it prints the table, writes comparable JSON, skips what it can't run.

Not a timed test: it checks that the runner runs and reports, never how fast anything is.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "benchmarks" / "run.py"


def _driver() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUNNER), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_runner_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = _run("--repeat", "2", "--only", "launch", "--only", "gpu", "--only", "nvml", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "Launch overhead" in result.stdout and "Targets" in result.stdout
    doc = json.loads(out.read_text())
    env = doc["environment"]
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["machine"]["cpus"] and env["repeat"] == 2
    assert env["commit"] is None or len(env["commit"]) == 40
    rows = {row["key"]: row for row in doc["rows"]}
    for key in ("python_floor", "launch_snapshot", "launch_snapshot_gpus"):
        assert rows[key]["status"] == "ok", rows[key]
        assert rows[key]["runs"] == 2 and rows[key]["median_ms"] > 0
    assert rows["nvitop_import"]["status"] in ("ok", "skipped: nvitop not installed (pip install nvitop)")
    assert doc["ratios"]["launch_vs_python_floor"] > 0  # computed; how large is the benchmark's to say (2 runs on a
    # loaded machine put the launch below the bare interpreter 1 time in a few)
    # ls was not selected: its rows say so instead of holding numbers.
    assert rows["ls_snapshot"]["status"] == "skipped: not selected (--only)"
    gpu_rows = [rows[k] for k in ("gpu_ls", "nvidia_smi", "gpustat", "gpu_launch_auto1", "nvisel")]
    if not _driver():
        assert all(row["status"] == "skipped: no NVIDIA driver" for row in gpu_rows)
        assert doc["nvml"]["status"] == "skipped: no NVIDIA driver"
        assert "skipped: no NVIDIA driver" in result.stdout
    else:
        assert rows["gpu_ls"]["status"] == "ok"


def test_runner_compares_with_an_earlier_run(tmp_path: Path) -> None:
    first = tmp_path / "a.json"
    assert _run("--repeat", "1", "--only", "ls", "--json", str(first)).returncode == 0
    result = _run("--repeat", "1", "--only", "ls", "--compare", str(first))
    assert result.returncode == 0, result.stderr
    compared = result.stdout.split("Compared with", 1)[1]
    assert "ls --json" in compared and "→" in compared


def test_selection_rows_are_shown_or_pending() -> None:
    result = _run("--repeat", "1", "--only", "selection")
    assert result.returncode == 0, result.stderr
    section = result.stdout.split("Selection on synthetic machines", 1)[1].split("Targets", 1)[0]
    if (ROOT / "benchmarks" / "selection.py").exists():
        assert "GPUs" in section and " 64 " in section
    else:
        assert "selection: pending" in section


def test_import_breakdown_charges_gpu_launch_modules_their_own_time_and_the_rest_cumulative() -> None:
    import importlib.util

    sys.path.insert(0, str(RUNNER.parent))  # breakdowns imports its sibling module timing
    try:
        spec = importlib.util.spec_from_file_location("gpulaunch_bench_breakdowns", RUNNER.parent / "breakdowns.py")
        assert spec is not None and spec.loader is not None
        runner = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runner)
    finally:
        sys.path.remove(str(RUNNER.parent))
    stderr = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:       900 |        900 |   encodings.aliases",
        "import time:      1000 |       3000 | site",
        "import time:       400 |        400 |       inspect",
        "import time:       500 |        900 |     dataclasses",
        "import time:      2000 |       2900 |   gpu_launch.hardware.model",
        "import time:       300 |       3200 | gpu_launch.cli",
        "import time:      1500 |       1500 | json",
    ])
    assert runner._attribute(stderr) == {"dataclasses": 0.9, "gpu_launch.hardware.model": 2.0, "gpu_launch.cli": 0.3, "json": 1.5}


def test_plan_vs_launch_pairs_a_70b_plan_with_a_dry_run_launch(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = subprocess.run([sys.executable, "benchmarks/plan_vs_launch.py", "--rounds", "2", "--json", str(out)],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("skipped:"):  # no gguf writer (the test extra)
        return
    assert "plan gguf-70b / dry-run launch" in result.stdout and "plan safetensors-70b / dry-run launch" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["target"] == 1.6 and len(doc["ratios"]) == 2
    assert all(r["cpu"]["median"] > 0 for r in doc["ratios"].values())


def test_training_plan_pairs_each_training_form_with_a_dry_run_launch(tmp_path: Path) -> None:
    out = tmp_path / "training.json"
    result = subprocess.run([sys.executable, "benchmarks/training_plan.py", "--rounds", "1", "--json", str(out)],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("skipped:"):  # no PyYAML (the test extra)
        return
    assert "plan torchrun-deepspeed / dry-run launch" in result.stdout and "plan trl-yaml / dry-run launch" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["target"] == 1.6 and len(doc["ratios"]) == 2
    assert all(r["cpu"]["median"] > 0 for r in doc["ratios"].values())


def test_launch_vs_nvitop_takes_the_launch_forms_to_pair(tmp_path: Path) -> None:
    import os

    (tmp_path / "nvitop.py").write_text("")  # a stand-in: what is paired, not nvitop's own time, is checked here
    out = tmp_path / "launch.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))}
    result = subprocess.run([sys.executable, "benchmarks/launch_vs_nvitop.py", "--rounds", "1", "--launch", "--gpus 0",
                             "--launch", "--auto 2", "--json", str(out)], capture_output=True, text=True, cwd=ROOT,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert "launch --gpus 0 (installed) / nvitop import" in result.stdout
    assert "launch --auto 2 (installed) / nvitop import" in result.stdout
    assert set(json.loads(out.read_text())["ratios"]) == {"launch --gpus 0 (installed)", "launch --auto 2 (installed)"}
