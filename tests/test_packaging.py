"""The package builds into a wheel that carries the example machines and runs as `python -m gpu_launch`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cli_run import LOCK_DIR
from gpu_launch.hardware.snapshot import example_names

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = ("Could not find a version that satisfies", "No matching distribution", "Failed to establish a new connection")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(out)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and any(s in proc.stderr for s in OFFLINE):
        pytest.skip(f"cannot build offline: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    (path,) = out.glob("gpulaunch-*.whl")
    return path


def test_wheel_contains_the_examples_and_the_entry_point(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for example in example_names():
        assert f"gpu_launch/hardware/examples/{example}.json" in names
    # every module of every sub-package ships (a package missing from pyproject.toml would not)
    package = Path(__file__).resolve().parent.parent / "gpu_launch"
    sources = {f"gpu_launch/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")}
    assert sources <= set(names), sorted(sources - set(names))
    assert "gpu_launch/py.typed" in names  # the Python API's types reach users' type checkers
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "gpulaunch = gpu_launch.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_installed_wheel_runs_an_example(wheel: Path, tmp_path: Path) -> None:
    """Unpacked on its own (no checkout on sys.path), the wheel finds its bundled examples."""
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    proc = subprocess.run([sys.executable, "-S", "-m", "gpu_launch", "--snapshot", "dgx-h100", "--auto", "2",
                           "--dry-run", "--json"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path / "site"), "GPULAUNCH_CONFIG": "", "PATH": "/usr/bin:/bin",
                               "GPULAUNCH_LOCK_DIR": LOCK_DIR})  # never the machine's shared reservations
    assert proc.returncode == 0, proc.stderr
    assert '"CUDA_VISIBLE_DEVICES": "' in proc.stdout


def test_installed_wheel_serves_the_python_api(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = (f"import gpu_launch, os; d = gpu_launch.use(2, snapshot='dgx-h100', lock_dir={str(tmp_path / 'locks')!r}, "
            "quiet=True); "
            "print(os.environ['CUDA_VISIBLE_DEVICES'], d[1].cuda)")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path / "site"), "GPULAUNCH_CONFIG": "", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2,3 cuda:1\n"


def test_wheel_installs_the_man_page(wheel: Path) -> None:
    """`man gpulaunch` finds it under PREFIX/share/man/man1 (tests/test_manpage.py keeps it current)."""
    names = zipfile.ZipFile(wheel).namelist()
    page = next(n for n in names if n.endswith(".data/data/share/man/man1/gpulaunch.1"))
    assert zipfile.ZipFile(wheel).read(page).decode() == (ROOT / "gpulaunch.1").read_text(encoding="utf-8")
