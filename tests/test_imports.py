"""Start-up stays lean: which heavy modules a real gpulaunch process imports on each path.

Each test runs the real CLI in a subprocess under ``python -X importtime``, which lists on stderr
every module the process imported, and asserts what is absent. These are behaviour tests, not
timings (the timings are in benchmarks/run.py): the quiet launch path on a snapshot must not import
rich, pynvml or psutil, and no snapshot path may import pynvml.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cli_run import scrubbed

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("rich", "pynvml", "psutil")
_LINE_RE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| ( *)(\S+)\s*$")


def _env(extra_path: Path | None = None) -> dict[str, str]:
    env = scrubbed(("GPULAUNCH_", "CUDA_", "NVIDIA_VISIBLE", "SLURM_", "PYTHONPROFILEIMPORTTIME"))
    paths = ([str(extra_path)] if extra_path else []) + [str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("NO_COLOR", None)
    return env


def imported_modules(stderr: str) -> set[str]:
    """Modules listed by ``-X importtime``, leaving out what site (start-up, .pth files) imported."""
    names: list[str] = []
    for line in stderr.splitlines():
        match = _LINE_RE.match(line)
        if match is None:
            continue
        indent, name = match.groups()
        names.append(name)
        if name == "site" and not indent:
            names.clear()  # all that came before was the interpreter's own start-up
    return set(names)


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".", 1)[0] for m in modules}


def run_importtime(*args: str, tty: bool = False,
                   pynvml_dir: Path | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``python -X importtime -m gpu_launch ARGS``; stdout is a pseudo-terminal when ``tty``;
    ``pynvml_dir`` holds a stand-in ``pynvml`` module that shadows the real one."""
    argv = [sys.executable, "-X", "importtime", "-m", "gpu_launch", *args]
    if not tty:
        proc = subprocess.run(argv, capture_output=True, text=True, env=_env(pynvml_dir), timeout=60, cwd=ROOT)
        return proc, imported_modules(proc.stderr)
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        try:
            while data := os.read(master, 65536):
                chunks.append(data)
        except OSError:
            pass  # EIO once the child has closed the terminal

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(argv, stdout=slave, stderr=subprocess.PIPE, text=True, env=_env(pynvml_dir),
                              timeout=60, cwd=ROOT)
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    proc.stdout = b"".join(chunks).decode("utf-8", "replace")
    return proc, imported_modules(proc.stderr)


PRINT_CVD = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"


@pytest.mark.parametrize("selection", [
    ["--auto", "2"],
    ["--gpus", "4-7"],
    ["--fit", "100GiB"],
    [],  # a bare command gets --auto 1
])
def test_quiet_launch_on_a_snapshot_imports_no_rich_pynvml_psutil(selection: list[str]) -> None:
    proc, modules = run_importtime("--snapshot", "dgx-h100", *selection, "-q", "--", sys.executable, "-c", PRINT_CVD)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The child really ran, on the chosen GPUs, and gpulaunch printed nothing of its own.
    assert re.fullmatch(r"\d+(,\d+)*\n", proc.stdout)
    assert not [line for line in proc.stderr.splitlines() if line.startswith("gpulaunch")]
    assert "gpu_launch.cli" in modules  # the import listing did cover gpulaunch itself
    assert top_level(modules) & set(HEAVY) == set()
    assert "gpu_launch.views.render" not in modules  # the quiet path formats nothing


#: Every gpu_launch module a quiet launch on a snapshot may import (issue 21). A module added to the
#: launch path must be added here on purpose: each costs start-up (finder calls, unmarshalling).
QUIET_LAUNCH_MODULES = {
    "gpu_launch", "gpu_launch.cli", "gpu_launch.errors", "gpu_launch.base", "gpu_launch.base.records",
    "gpu_launch.base.streams", "gpu_launch.base.interrupt", "gpu_launch.base.text", "gpu_launch.base.units",
    "gpu_launch.commands", "gpu_launch.commands.launch",
    "gpu_launch.options", "gpu_launch.options.args", "gpu_launch.options.table", "gpu_launch.options.values", "gpu_launch.options.config",
    "gpu_launch.reservations", "gpu_launch.reservations.acquire", "gpu_launch.reservations.reservations",
    "gpu_launch.placing", "gpu_launch.placing.pick",
    "gpu_launch.reservations.lockdir", "gpu_launch.reservations.holders", "gpu_launch.reservations.waiting",
    "gpu_launch.run", "gpu_launch.run.environment", "gpu_launch.run.execute", "gpu_launch.run.placeholders",
    "gpu_launch.choose", "gpu_launch.choose.availability", "gpu_launch.choose.pool", "gpu_launch.choose.ranking",
    "gpu_launch.choose.select", "gpu_launch.choose.spec", "gpu_launch.choose.visibility",
    "gpu_launch.choose.branch_and_bound", "gpu_launch.choose.heuristic",  # --auto N > 1 only
    "gpu_launch.hardware", "gpu_launch.hardware.files", "gpu_launch.hardware.host", "gpu_launch.hardware.model",
    "gpu_launch.hardware.read", "gpu_launch.hardware.snapshot",
}
#: Never on a quiet launch: heavy third-party packages, standard modules the launch path avoids, and
#: the model sizing (gpu_launch.fit, gpu_launch.modelfile), which only a launch sized by a model needs.
NEVER_ON_A_QUIET_LAUNCH = ("rich", "pynvml", "psutil", "typing", "dataclasses", "inspect", "logging", "difflib",
                           "importlib.resources", "gpu_launch.fit", "gpu_launch.modelfile", "gpu_launch.views")


def _within(modules: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


@pytest.mark.parametrize("selection", [["--auto", "1"], ["--auto", "2"], ["--gpus", "4-7"], ["--fit", "100GiB"], []])
def test_a_quiet_launch_imports_only_the_modules_a_launch_needs(selection: list[str]) -> None:
    proc, modules = run_importtime("--snapshot", "dgx-h100", *selection, "-q", "--", "true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = {m for m in modules if m.split(".", 1)[0] == "gpu_launch"}
    assert "gpu_launch.commands.launch" in ours  # the listing did cover the launch
    assert ours - QUIET_LAUNCH_MODULES == set()
    assert _within(modules, NEVER_ON_A_QUIET_LAUNCH) == set()
    if selection in (["--auto", "1"], []):  # one GPU: no set to search
        assert not {"gpu_launch.choose.branch_and_bound", "gpu_launch.choose.heuristic"} & modules


def test_a_quiet_wait_launch_imports_no_dataclasses_or_typing() -> None:
    # --wait adds the queue (reservations/waitqueue.py) and the waiting line (views/status_line.py): records, and
    # typing under TYPE_CHECKING only, as on the launch path
    proc, modules = run_importtime("--snapshot", "dgx-h100", "--auto", "2", "--wait", "30", "-q", "--", "true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu_launch.reservations.waitqueue" in modules  # the listing did cover the queue
    assert _within(modules, ("rich", "pynvml", "psutil", "typing", "dataclasses", "inspect", "logging",
                             "gpu_launch.fit", "gpu_launch.modelfile")) == set()


def test_a_quiet_sweep_imports_no_dataclasses_typing_or_secrets(tmp_path: Path) -> None:
    # `each` starts its first jobs as soon as it has read the machine: its start-up is part of the sweep
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("true\n")
    proc, modules = run_importtime("--snapshot", "dgx1-v100", "--lock-dir", str(tmp_path / "locks"), "each",
                                   str(jobs), "-q", "--log-dir", str(tmp_path / "logs"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu_launch.sweeps.sweep" in modules and "gpu_launch.reservations.waitqueue" in modules
    assert _within(modules, ("rich", "pynvml", "psutil", "typing", "dataclasses", "inspect", "secrets",
                             "gpu_launch.fit", "gpu_launch.modelfile")) == set()


#: Never on a plan (or a launch sized by a model): what the model readers and sizing avoid at import.
NEVER_ON_A_PLAN = ("rich", "pynvml", "psutil", "typing", "dataclasses", "inspect", "pathlib", "logging", "difflib")


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_a_plan_imports_no_dataclasses_typing_or_pathlib(fmt: str, tmp_path: Path) -> None:
    from docs_fixtures import llama_70b_safetensors
    from model_fixtures import llama_pair

    model = llama_pair(tmp_path)["70b"] if fmt == "gguf" else tmp_path / "st"
    if fmt == "safetensors":
        llama_70b_safetensors(model)
    # a quiet launch sized by the model, too (--dry-run would print the mapping table, whose view is not lean)
    launch = ["--fit", str(model), "-q", "--", "true"] if fmt == "gguf" else ["plan", "--json", str(model)]
    for args in (["plan", str(model)], launch):
        proc, modules = run_importtime("--snapshot", "dgx-h100", *args)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "gpu_launch.modelfile.read" in modules and "gpu_launch.fit.plan" in modules  # the listing saw it
        assert _within(modules, NEVER_ON_A_PLAN) == set(), args


@pytest.mark.parametrize("args", [
    ["ls"],
    ["ls", "--json"],
    ["ls", "--topo"],
    ["topo"],
    ["--auto", "2", "--", "true"],
    ["--gpus", "0,1", "--dry-run", "--json", "--", "true"],
    ["--auto", "2", "--explain"],
    ["--auto", "2", "--explain", "--json"],
])
@pytest.mark.parametrize("machine", ["dgx-h100", "pcie-8x"])
def test_no_snapshot_path_imports_pynvml(args: list[str], machine: str) -> None:
    proc, modules = run_importtime("--snapshot", machine, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu_launch.cli" in modules
    assert "pynvml" not in top_level(modules)
    assert not any(m.startswith("gpu_launch.hardware.nvml") for m in modules)


def test_ls_into_a_pipe_is_plain_text_without_rich() -> None:
    proc, modules = run_importtime("--snapshot", "dgx-h100", "ls")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[1].split()[:2] == ["GPU", "NAME"]
    assert "rich" not in top_level(modules)
    assert "pynvml" not in top_level(modules) and "psutil" not in top_level(modules)


def test_ls_on_a_terminal_uses_rich_so_the_listing_can_see_it() -> None:
    # The counterpart of the tests above: when rich is imported, the listing does show it.
    proc, modules = run_importtime("--snapshot", "dgx-h100", "ls", tty=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rich" in top_level(modules)
    assert "H100" in proc.stdout
    assert "pynvml" not in top_level(modules)


def test_imported_modules_ignores_start_up_and_keeps_nesting() -> None:
    stderr = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:        50 |         50 |   rich",  # imported by a .pth file during start-up
        "import time:       700 |        900 | site",
        "import time:       300 |        300 |     pynvml",
        "import time:       120 |        420 |   gpu_launch.hardware.nvml",
        "gpulaunch: error: something",
    ])
    assert imported_modules(stderr) == {"pynvml", "gpu_launch.hardware.nvml"}


# -- the NVML path, against tests/fake_pynvml.py standing in for pynvml -------------------------

_SHIM = """
import os
from tests import fake_pynvml as _fake

_gpus = _fake.dgx_h100().gpus
if os.environ.get("FAKE_NVML_PROCESS"):  # one compute process (this test's own pid) on GPU 0
    _gpus[0].processes = [_fake.FakeProcess(pid=os.getppid())]
    if os.environ["FAKE_NVML_PROCESS"] == "busy":
        _gpus[0].utilization_gpu = 95
_FAKE = _fake.FakeNvml(_gpus)


def __getattr__(name):
    return getattr(_FAKE, name)
"""


@pytest.fixture
def fake_pynvml_dir(tmp_path: Path) -> Path:
    """A directory whose ``pynvml.py`` serves the fake 8-GPU DGX H100 through module attributes."""
    (tmp_path / "pynvml.py").write_text(_SHIM)
    return tmp_path


def test_fake_nvml_stands_in_for_the_driver(fake_pynvml_dir: Path) -> None:
    proc, modules = run_importtime("-v", "ls", "--topo", pynvml_dir=fake_pynvml_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu_launch.hardware.nvml" in modules and "pynvml" in modules
    assert "NV18" in proc.stdout  # the fake's NVSwitch fabric, so the machine came from it
    read = [line for line in proc.stderr.splitlines() if line.startswith("gpulaunch: read nvml in ")]
    assert len(read) == 1 and "init " in read[0] and "topology " in read[0]


@pytest.mark.parametrize("selection", [["--gpus", "0,1"], ["--auto", "1"], ["--auto", "2"]])
def test_quiet_launch_on_nvml_imports_neither_rich_nor_psutil(selection: list[str], fake_pynvml_dir: Path) -> None:
    proc, modules = run_importtime(*selection, "-q", "--", sys.executable, "-c", PRINT_CVD, pynvml_dir=fake_pynvml_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.fullmatch(r"\d+(,\d+)*\n", proc.stdout)
    assert "pynvml" in modules
    assert "rich" not in top_level(modules) and "psutil" not in top_level(modules)
    assert not {"logging", "socket"} & modules  # the NVML backend's start-up savings
    # (the stand-in pynvml itself imports typing and dataclasses: only gpu_launch's own are checked here)
    assert _within(modules, ("gpu_launch.fit", "gpu_launch.modelfile", "gpu_launch.views")) == set()


def test_process_details_import_psutil_only_where_they_are_shown(fake_pynvml_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_PROCESS", "1")
    proc, modules = run_importtime("ls", pynvml_dir=fake_pynvml_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert str(os.getpid()) in proc.stdout  # ls shows the process, with its user from psutil
    assert "psutil" in top_level(modules)
    # A launch counts processes (GPU 0 is not idle) but shows no users: psutil is not imported.
    for selection in (["--auto", "1"], ["--auto", "8"], ["--gpus", "0"]):
        proc, modules = run_importtime(*selection, "-q", "--", "true", pynvml_dir=fake_pynvml_dir)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "psutil" not in top_level(modules), selection
    proc, _ = run_importtime("--auto", "1", "--dry-run", "--json", pynvml_dir=fake_pynvml_dir)
    assert json.loads(proc.stdout)["devices"][0]["index"] == 1  # the process on GPU 0 was counted


def test_a_launch_names_who_is_on_a_busy_gpu_without_psutil(fake_pynvml_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    monkeypatch.setenv("FAKE_NVML_PROCESS", "busy")
    proc, modules = run_importtime("--gpus", "0", "--dry-run", "--", "true", pynvml_dir=fake_pynvml_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"gpulaunch: warning: GPU 0 is busy by {pwd.getpwuid(os.getuid()).pw_name} (95% utilisation" in proc.stderr
    assert "psutil" not in top_level(modules)


# -- the Python API (gpu_launch.use & co.) ---------------------------------------------------------

def _python_importtime(code: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {**_env(), "GPULAUNCH_CONFIG": "", "GPULAUNCH_LOCK_DIR": str(tmp_path / "locks")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, cwd=tmp_path)
    return proc, imported_modules(proc.stderr)


def test_importing_the_package_imports_nothing_else(tmp_path: Path) -> None:
    # `import gpu_launch` in a notebook or script costs only the package's own __init__: the API,
    # the errors and everything else load on first use (module __getattr__).
    proc, modules = _python_importtime("import gpu_launch; print(gpu_launch.__version__)", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert modules == {"gpu_launch"}


@pytest.mark.parametrize("quiet", [True, False])
def test_the_python_api_on_a_snapshot_imports_no_rich_pynvml_psutil(quiet: bool, tmp_path: Path) -> None:
    proc, modules = _python_importtime(
        f"import gpu_launch, os; gpu_launch.use(2, snapshot='dgx-h100', quiet={quiet}); "
        "print(os.environ['CUDA_VISIBLE_DEVICES'])", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "2,3\n"
    assert "gpu_launch.api" in modules and "gpu_launch.placing.pick" in modules  # the listing saw the API run
    assert ("gpu_launch.views.render" in modules) is not quiet  # the mapping table, only when not quiet
    assert top_level(modules) & set(HEAVY) == set()


def test_pynvml_is_imported_without_ctypes_util_which_it_never_calls(tmp_path: Path) -> None:
    # ctypes.util (subprocess, shutil, tempfile: ~7 ms) is imported by pynvml for a find_library it
    # does not call on Linux; the backend lends it a stand-in that still works if it ever is called.
    code = ("import sys; from gpu_launch.hardware import nvml_calls; before = set(sys.modules); "
            "pynvml = nvml_calls._import_pynvml(); new = set(sys.modules) - before; "
            "print(sorted(m for m in ('ctypes.util', 'subprocess', 'tempfile', 'shutil') if m in new)); "
            "print(bool(pynvml.find_library('c'))); import ctypes.util; print(ctypes.util.find_library is not None "
            "and ctypes.util.__file__.endswith('util.py'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["[]", "True", "True"]
