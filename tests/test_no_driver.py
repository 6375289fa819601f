"""One no-driver story (issue 36 item 6), from a fresh `env -i` shell as a user who is not root: every read-only view
(`ls`, `ls --json`, `topo`, `topo --json`, `plan`) shows the example machine with the same one-line note
(`--json`: an `example` field); what starts work refuses in one line naming `--snapshot dgx-h100`; the example
machine never warns about the shared lock dir; `--explain` with a command says that it ran nothing.

"No driver" is a pynvml whose nvmlInit fails with NVML_ERROR_LIBRARY_NOT_FOUND (tests/fake_pynvml.py), first
on the path, so the story is the same on a machine that has a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_fixtures import llama8b, write_gguf
from two_users import as_nobody, python_for_nobody, shared_dir  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
NOTE = "gpulaunch: note: no NVIDIA driver here, so this is the example machine dgx-h100\n"

NO_DRIVER_PYNVML = """\
import sys
sys.path.insert(0, {tests!r})
from fake_pynvml import FakeNvml, make_gpu, NVML_ERROR_LIBRARY_NOT_FOUND
_fake = FakeNvml([make_gpu(0)], errors={{("nvmlInit", None): NVML_ERROR_LIBRARY_NOT_FOUND}})


def __getattr__(name):
    return getattr(_fake, name)
"""


class Fresh:
    """`gpulaunch ARGS` from `env -i` (PATH, HOME and the path to this checkout only) as a user who is not root:
    this one, or nobody when the tests run as root."""

    def __init__(self, top: Path) -> None:
        if os.geteuid() == 0:
            self.prefix = as_nobody()
            self.python = python_for_nobody(self.prefix, top)
        else:
            self.prefix, self.python = [], sys.executable
        self.top = top
        fake = top / "nvml"
        fake.mkdir(mode=0o755)
        (fake / "pynvml.py").write_text(NO_DRIVER_PYNVML.format(tests=str(TESTS)))
        (fake / "pynvml.py").chmod(0o644)
        self.home = top / "home"
        self.home.mkdir(mode=0o777)
        self.home.chmod(0o777)
        self.pythonpath = f"{fake}{os.pathsep}{ROOT}"

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        shell = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={self.home}", f"PYTHONPATH={self.pythonpath}",
                 "sh", "-c", 'exec "$0" -m gpu_launch "$@"', self.python, *args]
        return subprocess.run([*self.prefix, *shell], capture_output=True, text=True, timeout=120, cwd=self.top,
                              stdin=subprocess.DEVNULL)


@pytest.fixture
def fresh(shared_dir: Path) -> Fresh:  # noqa: F811
    return Fresh(shared_dir)


def test_every_read_only_view_shows_the_example_machine_with_one_note(fresh: Fresh) -> None:
    """Was: `ls` and `topo` showed it, `ls --json`, `topo --json` and `plan` exited 3."""
    model = fresh.top / "l8.gguf"
    write_gguf(model, llama8b())
    model.chmod(0o644)
    for args in (["ls"], ["topo"], ["plan", str(model)]):
        shown = fresh(*args)
        assert (shown.returncode, shown.stderr) == (0, NOTE), (args, shown.stderr)
        assert "Traceback" not in shown.stderr
    assert fresh("ls").stdout.startswith("dgx-h100-01  ")
    for args in (["ls", "--json"], ["topo", "--json"], ["plan", str(model), "--json"]):
        shown = fresh(*args)
        assert (shown.returncode, shown.stderr) == (0, NOTE), (args, shown.stderr)
        doc = json.loads(shown.stdout)
        assert doc["example"] == "dgx-h100", args
    assert len(json.loads(fresh("ls", "--json").stdout)["gpus"]) == 8
    quiet = fresh("ls", "--json", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["example"] == "dgx-h100"


@pytest.mark.parametrize("args", [
    ["--auto", "2", "--", "python3", "train.py"],
    ["--gpus", "0", "--", "true"],
    ["env", "--auto", "1"],
    ["check", "--auto", "1"],
])
def test_what_starts_work_refuses_in_one_line_naming_the_snapshot(fresh: Fresh, args: list[str]) -> None:
    """Was: "NVML unavailable ... (hint: ... try an example machine: gpulaunch --snapshot dgx-h100 ls)", pointing
    at `ls`, not at the command's own option."""
    refused = fresh(*args)
    assert refused.returncode == 3 and refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulaunch: error: no NVIDIA driver here"), refused.stderr
    assert lines[0] == ("gpulaunch: error: no NVIDIA driver here (libnvidia-ml.so.1 was not found) "
                        "(hint: add --snapshot dgx-h100 to run it on the example machine)"), lines[0]


def test_the_readme_set_up_line_runs_in_a_fresh_shell(fresh: Fresh) -> None:
    """`gpulaunch ls && gpulaunch --snapshot dgx-h100 --auto 2 -- ...`, the README's first run."""
    assert fresh("ls").returncode == 0
    ran = fresh("--snapshot", "dgx-h100", "--auto", "2", "--", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"')
    assert ran.returncode == 0 and ran.stdout == "2,3\n", ran.stderr
    assert "lock dir" not in ran.stderr


def test_explain_with_a_command_says_that_it_ran_nothing(fresh: Fresh) -> None:
    """Was: `--explain -- python train.py` explained, ran nothing, and said nothing of it."""
    said = fresh("--snapshot", "dgx-h100", "--explain", "--", "python3", "train.py")
    assert said.returncode == 0 and said.stdout.startswith("chosen: GPU 2")
    assert said.stderr == "gpulaunch: --explain ran nothing; without it, python3 train.py would run on GPU 2\n"
    assert fresh("--snapshot", "dgx-h100", "--explain", "-q", "--", "python3", "train.py").stderr == ""
    assert fresh("--snapshot", "dgx-h100", "--explain").stderr == ""  # no command: nothing to say


def test_the_example_machine_never_warns_about_the_shared_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """As a user who is not root, the very first `ls` warned "lock dir: 2 users can remove each other's locks"
    about the machine's shared lock dir, which the example machine does not use. The shared dir is played by a
    private one with files of two users in it (only root can make a file another user owns)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the stand-in shared lock dir a file of a second user")
    from gpu_launch import cli
    from gpu_launch.errors import NvmlUnavailable
    from gpu_launch.hardware import read
    from gpu_launch.reservations import lockdir

    shared = tmp_path / "shared-locks"
    shared.mkdir()
    shared.chmod(0o1777)
    for name, uid in (("GPU-a.lock", 0), ("GPU-b.lock", 65534)):
        (shared / name).write_text("")
        os.chown(shared / name, uid, uid)
    assert lockdir.shared_note(str(shared))  # what the shared dir would say
    monkeypatch.setattr(lockdir, "DEFAULT_LOCK_DIR", str(shared))
    monkeypatch.delenv("GPULAUNCH_LOCK_DIR", raising=False)
    monkeypatch.delenv("GPULAUNCH_SNAPSHOT", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the user's own example lock dir, under tmp_path
    real = read.read_machine

    def no_driver(source: object, *a: object, **kw: object) -> object:
        if source is None:
            exc = NvmlUnavailable("NVML unavailable: libnvidia-ml.so.1 was not found")
            exc.no_driver = True
            raise exc
        return real(source, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(read, "read_machine", no_driver)
    for args in (["ls"], ["ls", "--json"]):
        assert cli.run(args) == 0
        out, err = capsys.readouterr()
        assert err == NOTE and "lock dir" not in out, (args, out)
