"""The Python API in a real Jupyter kernel (ipykernel, driven through jupyter_client).

What a notebook user does: ``gpu_launch.use(1)`` in a cell; the kernel's environment changes, the
GPU is reserved in the kernel's name (``gpulaunch ls`` shows the kernel's pid), and shutting the
kernel down frees it. ``wait=`` redraws its status line in the output area and stops on a kernel
interrupt holding nothing. Runs headless (no terminal, stdin from /dev/null, as root in CI).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from api_helpers import SNAP, cli, hold
from cli_run import clean_env

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

START_TIMEOUT = 120  # a kernel's start-up, on a loaded 2-core CI machine


class Kernel:
    """A started kernel and a blocking client for it."""

    def __init__(self, manager: Any, client: Any) -> None:
        self.manager = manager
        self.client = client

    @property
    def pid(self) -> int:
        return int(self.manager.provisioner.process.pid)

    def run(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], dict[str, str]]:
        """Execute ``code`` as a cell: the reply's content, and what it printed by stream name."""
        streams: dict[str, str] = {"stdout": "", "stderr": ""}

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                streams[msg["content"]["name"]] += msg["content"]["text"]

        reply = self.client.execute_interactive(code, output_hook=hook, timeout=timeout, allow_stdin=False)
        return reply["content"], streams

    def value(self, expression: str) -> Any:
        content, streams = self.run(f"print(json.dumps({expression}))")
        assert content["status"] == "ok", content
        return json.loads(streams["stdout"])


@contextmanager
def kernel(tmp_path: Path, locks: str) -> Iterator[Kernel]:
    """A python kernel of this interpreter, with a kernel spec, runtime and IPython dirs of its own."""
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    spec = tmp_path / "kernels" / "gpulaunch-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gpulaunch test", "language": "python"}))
    env = clean_env({"GPULAUNCH_POLL_INTERVAL": "0.05", "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                     "IPYTHONDIR": str(tmp_path / "ipython"), "JUPYTER_PLATFORM_DIRS": "1"})
    manager = KernelManager(kernel_name="gpulaunch-test",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]),
                            connection_file=str(tmp_path / "connection.json"))
    manager.start_kernel(env=env, cwd=str(tmp_path))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=START_TIMEOUT)
        k = Kernel(manager, client)
        content, _ = k.run(f"import gpu_launch, json, os; L = {locks!r}")
        assert content["status"] == "ok", content
        yield k
    finally:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)


@pytest.fixture(autouse=True)
def _quiet_jupyter_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # no path-migration warning from jupyter_core
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))


ENV_NOW = "{k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'GPULAUNCH_GPUS')}"


def test_use_in_a_kernel_holds_the_gpu_in_the_kernels_name_until_it_shuts_down(tmp_path: Path) -> None:
    locks = str(tmp_path / "locks")
    with kernel(tmp_path, locks) as k:
        content, streams = k.run(f"devs = gpu_launch.use(1, snapshot={SNAP!r}, lock_dir=L)")
        assert content["status"] == "ok", content
        # The mapping table in the cell's output (stderr), as the CLI prints it.
        assert "gpulaunch: CUDA_VISIBLE_DEVICES=2\n" in streams["stderr"]
        assert "cuda:0 → GPU 2  NVIDIA H100 80GB HBM3" in streams["stderr"]
        assert k.value(ENV_NOW) == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                    "GPULAUNCH_GPUS": "2"}
        assert k.value("[d.cuda for d in devs]") == ["cuda:0"]
        assert k.value("os.getpid()") == k.pid

        # From outside, with the CLI: the kernel is the holder.
        listing = cli(locks, "ls")
        assert listing.returncode == 0, listing.stderr
        row = next(line for line in listing.stdout.splitlines() if line.lstrip().startswith("2 "))
        assert f"(pid {k.pid}, " in row and "python" in row
        taken = cli(locks, "--gpus", "2", "--", "true")
        assert taken.returncode == 6
        assert re.search(rf"--gpus: GPU 2 is reserved by \S+ \(pid {k.pid}, for \d+s: ", taken.stderr), taken.stderr
        k.manager.shutdown_kernel(now=False)  # as a notebook's "Shut Down Kernel" does
        assert not k.manager.is_alive()
    free = cli(locks, "--gpus", "2", "--", "true")
    assert free.returncode == 0, free.stderr


def test_waiting_in_a_kernel_redraws_one_line_and_stops_on_an_interrupt(tmp_path: Path) -> None:
    locks = str(tmp_path / "locks")
    holder = hold(locks, "4")
    try:
        with kernel(tmp_path, locks) as k:
            # stop_on_error=False: after a cell's error ipykernel aborts the requests that reach it while it
            # flushes its queue, and on a loaded machine the next cell below could arrive then ("aborted").
            msg_id = k.client.execute(f"gpu_launch.use(gpus=4, wait='1h', snapshot={SNAP!r}, lock_dir=L)",
                                      stop_on_error=False)
            stderr = ""
            deadline = time.monotonic() + 60
            while stderr.count("\rgpulaunch: waiting") < 2:  # redrawn at least once
                assert time.monotonic() < deadline, stderr
                msg = k.client.get_iopub_msg(timeout=30)
                if msg["msg_type"] == "stream" and msg["content"]["name"] == "stderr":
                    stderr += msg["content"]["text"]
            assert "\n" not in stderr  # one line, rewritten in place: no rich, no widget, no scroll
            assert re.search(rf"\rgpulaunch: waiting \d+s: GPU 4 is reserved by \S+ \(pid {holder.pid}: ", stderr)

            k.manager.interrupt_kernel()
            reply = k.client.get_shell_msg(timeout=60)
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = k.client.get_shell_msg(timeout=60)
            assert (reply["content"]["status"], reply["content"].get("ename")) == ("error", "KeyboardInterrupt"), \
                reply["content"]

            # Nothing held, nothing changed, the queue left; and the kernel goes on.
            assert k.value(ENV_NOW) == {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None,
                                        "GPULAUNCH_GPUS": None}
            assert k.value("list(gpu_launch.held())") == []
            assert not [name for name in os.listdir(locks) if name.startswith("ticket-")]

            holder.kill()
            holder.wait()
            content, streams = k.run(f"devs = gpu_launch.use(gpus=4, wait='1m', snapshot={SNAP!r}, lock_dir=L)")
            assert content["status"] == "ok", content
            assert "gpulaunch: CUDA_VISIBLE_DEVICES=4\n" in streams["stderr"]
            taken = cli(locks, "--gpus", "4", "--", "true")
            assert taken.returncode == 6 and f"(pid {k.pid}, " in taken.stderr
    finally:
        holder.kill()
        holder.wait()
