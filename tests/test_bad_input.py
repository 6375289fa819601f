"""The bad-input catalogue: every row runs the real CLI and must end in one clear line and its code.

A row is ``Bad(id, argv, code, fragment)``: ``gpulaunch ARGV`` must exit with ``code`` (an
:class:`~gpu_launch.errors.ExitCode`, or 0 where the input is accepted), print ``fragment`` in its
``gpulaunch: error:`` line (stderr), never a Python traceback, and, when it fails, nothing on stdout.
To extend it, add a row to :data:`CATALOGUE`. In ``argv``, ``{dir}`` is a temporary directory that
holds the files of :data:`FILES` (bad snapshots, a program without the x bit, ...).
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from cli_run import LOCK_DIR, clean_env, gpulaunch_argv, has_option, run_gpulaunch
from gpu_launch.errors import ExitCode


def _example(name: str = "workstation-4x") -> dict[str, Any]:
    return json.loads(resources.files("gpu_launch.hardware.examples").joinpath(f"{name}.json").read_text("utf-8"))


def _mutate(change: Callable[[dict[str, Any]], None], name: str = "workstation-4x") -> bytes:
    data = copy.deepcopy(_example(name))
    change(data)
    return json.dumps(data).encode()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets ``data[a][b]...`` (path "gpus.1.index") to ``value``."""
    def change(data: dict[str, Any]) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target: Any = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change


def _many_gpus(n: int, links: bool) -> bytes:
    """``n`` H100s; with ``links``, NV18 inside each group of 8 and SYS between groups."""
    proto = _example("dgx-h100")["gpus"][2]
    gpus = []
    for i in range(n):
        gpu = dict(proto, index=i, uuid=f"GPU-{i:08x}-0000-4000-8000-{i:012x}", processes=[],
                   pci_bus_id=f"00000000:{i // 256:02X}:{i % 32:02X}.{i % 8}")
        gpus.append(gpu)
    doc: dict[str, Any] = {"schema": 1, "gpus": gpus}
    if links:
        doc["links"] = [["X" if i == j else ("NV18" if i // 8 == j // 8 else "SYS") for j in range(n)]
                        for i in range(n)]
    return json.dumps(doc).encode()


def _padded(megabytes: int) -> bytes:
    """A valid snapshot of ``megabytes`` MB: a long unknown field (readers ignore unknown keys)."""
    return _mutate(_set("comment", "x" * (megabytes * 1000 * 1000)))


def _many_processes(count: int) -> bytes:
    procs = [{"pid": 1000 + i, "used_memory_mib": 1, "user": "u", "command": "python train.py " + "x" * 120}
             for i in range(count)]
    return _mutate(_set("gpus.0.processes", procs))


def _one_gpu_free(mib: int) -> bytes:
    """One GPU with exactly ``mib`` free: sits between 20GB (19073 MiB) and 20GiB (20480 MiB)."""
    def change(data: dict[str, Any]) -> None:
        gpu = data["gpus"][0]
        # (a 24 GiB card, so that the rest in use does not make it busy: --auto would skip it)
        gpu.update(memory_total_mib=24576, memory_used_mib=24576 - mib, memory_free_mib=mib, processes=[])
        data["gpus"] = [gpu]
        data.pop("links", None)
    return _mutate(change)


def _asymmetric(data: dict[str, Any]) -> None:
    data["links"][0][1] = "SYS"


#: Files written into ``{dir}`` before the catalogue runs: name -> content (bytes) or a maker.
FILES: dict[str, bytes | Callable[[], bytes]] = {
    "empty.json": b"",
    "blank.json": b"  \n\t\n",
    "not-json.json": b"{\"schema\": 1, \"gpus\": [",
    "not-utf8.json": b"{\"schema\": 1, \"hostname\": \"\xff\xfe\", \"gpus\": []}",
    "deep.json": b"[" * 100_000 + b"]" * 100_000,
    "list.json": b"[1, 2, 3]",
    "no-schema.json": b"{\"gpus\": []}",
    "schema-2.json": b"{\"schema\": 2, \"gpus\": []}",
    "schema-str.json": b"{\"schema\": \"1\", \"gpus\": []}",
    "gpus-not-list.json": b"{\"schema\": 1, \"gpus\": {}}",
    "no-gpus.json": b"{\"schema\": 1, \"gpus\": []}",
    "links-3-rows.json": lambda: _mutate(lambda d: d.update(links=d["links"][:3])),
    "links-short-row.json": lambda: _mutate(lambda d: d["links"].__setitem__(0, d["links"][0][:3])),
    "links-not-list.json": lambda: _mutate(_set("links", "NV4")),
    "links-asymmetric.json": lambda: _mutate(_asymmetric),
    "links-bad-code.json": lambda: _mutate(_set("links.0.1", "NVX")),
    "links-x-off-diagonal.json": lambda: _mutate(lambda d: (_set("links.0.1", "X")(d), _set("links.1.0", "X")(d))),
    "dup-index.json": lambda: _mutate(_set("gpus.1.index", 0)),
    "dup-uuid.json": lambda: _mutate(lambda d: _set("gpus.1.uuid", d["gpus"][0]["uuid"])(d)),
    "negative-memory.json": lambda: _mutate(_set("gpus.1.memory_used_mib", -5)),
    "negative-index.json": lambda: _mutate(_set("gpus.1.index", -1)),
    "used-over-total.json": lambda: _mutate(_set("gpus.1.memory_used_mib", 49141)),
    "free-over-total.json": lambda: _mutate(_set("gpus.1.memory_free_mib", 50000)),
    "memory-string.json": lambda: _mutate(_set("gpus.1.memory_total_mib", "48GiB")),
    "memory-float.json": lambda: _mutate(_set("gpus.1.memory_total_mib", 49140.5)),
    "memory-missing.json": lambda: _mutate(lambda d: d["gpus"][1].pop("memory_free_mib")),
    "util-150.json": lambda: _mutate(_set("gpus.1.utilization_gpu", 150)),
    "bad-uuid.json": lambda: _mutate(_set("gpus.1.uuid", "83a97efc-0000")),
    "gpu-not-object.json": lambda: _mutate(_set("gpus.1", 7)),
    "process-no-pid.json": lambda: _mutate(_set("gpus.3.processes.0.pid", None)),
    "available-str.json": lambda: _mutate(_set("gpus.1.available", "no")),
    "bad-cpulist.json": lambda: _mutate(_set("gpus.1.cpu_affinity", "all")),
    "padded-10mb.json": lambda: _padded(10),
    "jobs-10mb-word.txt": lambda: b"true " + b"x" * (10 * 1024 * 1024) + b"\n",  # shlex: never finished
    "processes-10mb.json": lambda: _many_processes(65_000),
    "gpus-1000.json": lambda: _many_gpus(1000, links=False),
    "gpus-1000-links.json": lambda: _many_gpus(1000, links=True),
    "free-20000mib.json": lambda: _one_gpu_free(20000),
    "bad-unit.toml": b'min-free = "20XB"\n',
    "not-toml.toml": b"min-free = \n",
    "gpus-key.toml": b'gpus = "0"\n',
    "unknown-key.toml": b"bogus = 1\n",
    "not-utf8.toml": b"\xff\xfe",
    "util-150.toml": b"max-util = 150\n",
    "util-word.toml": b'max-util = "abc"\n',
    "idle-maybe.toml": b'idle = "maybe"\n',
    "section.toml": b'[section]\nmin-free = "1GiB"\n',
    "good.toml": b'min-free = "20GB"\n',
    "noexec.sh": b"#!/bin/sh\necho should not run\n",
    "no exec.sh": b"#!/bin/sh\necho should not run\n",
    "script.sh": b"#!/bin/sh\nexit 0\n",
}
#: Files that get a size without content (sparse): only their size is looked at.
SPARSE = {"too-large.json": 65 * 1024 * 1024}


@dataclass(frozen=True)
class Bad:
    """One catalogue row: ``gpulaunch *argv`` exits ``code`` and says ``fragment``."""

    id: str
    argv: tuple[str, ...]
    code: int
    fragment: str = ""
    env: dict[str, str] = field(default_factory=dict)
    needs: str = ""  # an option that must exist (added by another issue), else the row is skipped
    no_driver: bool = False  # reads the real NVML: only meaningful where no NVIDIA driver is installed
    hold: int | None = None  # a GPU of workstation-4x another gpulaunch job holds while the row runs


S = ("--snapshot", "dgx-h100")  # 8 GPUs, 0 and 1 busy
W = ("--snapshot", "workstation-4x")
RUN = ("-q", "--dry-run")  # accepted rows stop before exec
U, N, F = ExitCode.USAGE, ExitCode.NOT_ENOUGH_GPUS, ExitCode.BAD_FILE
BIG = "1" * 5000  # int() refuses over 4300 digits with ValueError

CATALOGUE: tuple[Bad, ...] = (
    # --gpus
    Bad("gpus-backwards-range", (*S, "--gpus", "7-4", "--", "true"), U, "range '7-4' runs backwards (hint: write 4-7)"),
    Bad("gpus-empty-item", (*S, "--gpus", "1,,2", "--", "true"), U, "empty item between commas"),
    Bad("gpus-trailing-comma", (*S, "--gpus", "1,", "--", "true"), U, "empty item between commas"),
    Bad("gpus-negative", (*S, "--gpus", "-1", "--", "true"), U, "'-1' is not a GPU index"),
    Bad("gpus-absent-index", (*S, "--gpus", "99", "--", "true"), U, "there is no GPU 99; this machine has GPU 0-7"),
    Bad("gpus-range-past-end", (*S, "--gpus", "6-9", "--", "true"), U, "there is no GPU 8"),
    Bad("gpus-word", (*S, "--gpus", "abc", "--", "true"), U, "'abc' is not a GPU index, range or UUID"),
    Bad("gpus-float", (*S, "--gpus", "1.5", "--", "true"), U, "'1.5' is not a GPU index, range or UUID"),
    Bad("gpus-ambiguous-prefix", (*S, "--gpus", "GPU-", "--", "true"), U, "UUID prefix 'GPU-' is ambiguous"),
    Bad("gpus-unknown-uuid", (*S, "--gpus", "GPU-ffffffff", "--", "true"), U, "no GPU has a UUID starting with"),
    Bad("gpus-whitespace", (*S, "--gpus", "  \t ", "--", "true"), U, "empty GPU list"),
    Bad("gpus-empty", (*S, "--gpus", "", "--", "true"), U, "empty GPU list"),
    Bad("gpus-duplicate", (*S, "--gpus", "0,0", "--", "true"), U, "GPU 0 is named twice"),
    Bad("gpus-duplicate-in-range", (*S, "--gpus", "0-2,1", "--", "true"), U, "GPU 1 is named twice"),
    Bad("gpus-duplicate-by-uuid", (*W, "--gpus", "0,GPU-83a97efc", "--", "true"), U, "GPU 0 is named twice"),
    Bad("gpus-all-plus-index", (*S, "--gpus", "all,0", "--", "true"), U, "'all' cannot be combined"),
    Bad("gpus-huge-number", (*S, "--gpus", BIG, "--", "true"), U, "is not a plausible GPU index"),
    Bad("gpus-huge-range", (*S, "--gpus", f"0-{BIG}", "--", "true"), U, "is not a plausible GPU index"),
    Bad("gpus-no-value", (*S, "--gpus"), U, "--gpus needs a value"),
    Bad("gpus-mig-parent", ("--snapshot", "mig-a100", "--gpus", "0", "--", "true"), U, "GPU 0 is in MIG mode"),
    Bad("gpus-ambiguous-mig", ("--snapshot", "mig-a100", "--gpus", "MIG-", "--", "true"), U, "is ambiguous"),
    Bad("gpus-ok-with-spaces", (*S, "--gpus", " 3 , 1 ", *RUN, "--", "true"), 0),
    # --auto / --fit
    Bad("auto-zero", (*S, "--auto", "0", "--", "true"), U, "--auto: 0 GPUs makes no sense"),
    Bad("auto-negative", (*S, "--auto", "-1", "--", "true"), U, "--auto: -1 GPUs makes no sense"),
    Bad("auto-more-than-exist", (*S, "--auto", "9", "--", "true"), N, "need 9 GPUs, but this machine has 8 (hint: ask for at most 8)"),
    Bad("auto-more-than-eligible", (*S, "--auto", "8", "--idle", "--", "true"), N, "but only 5 of 8 are eligible (GPUs 0,1: not idle"),
    Bad("auto-word", (*S, "--auto", "abc", "--", "true"), U, "--auto: 'abc' is not a whole number"),
    Bad("auto-float", (*S, "--auto", "2.5", "--", "true"), U, "is not a whole number"),
    Bad("auto-huge", (*S, "--auto", BIG, "--", "true"), U, "is not a whole number"),
    Bad("auto-no-value", (*S, "--auto"), U, "--auto needs a value"),
    Bad("fit-percent", (*S, "--fit", "10%", "--", "true"), U, "a percentage makes no sense here"),
    Bad("fit-too-big", (*S, "--fit", "10TiB", "--", "true"), N, "holds at most 318.6 GiB free"),
    # constraints
    Bad("min-free-gb-accepted", ("--snapshot", "{dir}/free-20000mib.json", "--min-free", "20GB", *RUN, "--", "true"), 0),
    Bad("min-free-gb-is-not-gib", ("--snapshot", "{dir}/free-20000mib.json", "--min-free", "20GiB", "--", "true"), N,
        "19.5 GiB free < 20.0 GiB asked by --min-free"),
    Bad("min-free-bad-unit", (*S, "--min-free", "20XB", "--", "true"), U, "unknown unit 'XB' in '20XB'"),
    Bad("min-free-no-unit", (*S, "--min-free", "20", "--", "true"), U, "'20' has no unit"),
    Bad("min-free-negative", (*S, "--min-free", "-5GiB", "--", "true"), U, "'-5GiB' is not a size"),
    Bad("min-free-over-100pct", (*S, "--min-free", "150%", "--", "true"), U, "'150%' is over 100%"),
    Bad("min-free-huge", (*S, "--min-free", f"{BIG}GiB", "--", "true"), U, "is out of range (at most 1 PiB)"),
    Bad("max-util-150", (*S, "--max-util", "150", "--", "true"), U, "--max-util: 150 is not between 0 and 100"),
    Bad("max-util-word", (*S, "--max-util", "low", "--", "true"), U, "'low' is not a percentage"),
    Bad("exclude-absent", (*S, "--exclude", "99", "--", "true"), U, "--exclude: there is no GPU 99"),
    Bad("exclude-everything", (*S, "--exclude", "all", "--", "true"), N, "excluded by --exclude"),
    Bad("wait-bad-duration", (*S, "--auto", "1", "--wait=5x", "--", "true"), U, "--wait: '5x' is not a duration",
        needs="--wait"),
    Bad("wait-negative", (*S, "--auto", "1", "--wait=-5m", "--", "true"), U, "is not a duration", needs="--wait"),
    Bad("wait-empty", (*S, "--auto", "1", "--wait=", "--", "true"), U, "is not a duration", needs="--wait"),
    Bad("wait-times-out", (*S, "--auto", "6", "--idle", "--min-free", "70GiB", "--wait=0.2s", "--", "true"),
        ExitCode.WAIT_TIMEOUT, "the request still cannot be met", needs="--wait"),
    Bad("wait-cannot-help", (*S, "--auto", "9", "--wait", "--", "true"), N, "waiting cannot help", needs="--wait"),
    Bad("gpus-reserved", (*W, "--gpus", "2", "--", "true"), ExitCode.RESERVED, "--gpus: GPU 2 is reserved by", hold=2,
        needs="--wait"),
    Bad("auto-skips-reserved", (*W, "--auto", "4", "--", "true"), N, "GPU 2: reserved by", hold=2, needs="--wait"),
    # conflicting or missing parts
    Bad("gpus-and-auto", (*S, "--gpus", "0", "--auto", "1", "--", "true"), U, "--gpus and --auto cannot be used together"),
    Bad("gpus-and-fit", (*S, "--gpus", "0", "--fit", "10GiB", "--", "true"), U, "--gpus and --fit cannot be used together"),
    Bad("gpus-and-exclude", (*S, "--gpus", "0", "--exclude", "1", "--", "true"), U, "--exclude makes no sense with --gpus"),
    Bad("no-command", S, U, "no command to run"),
    Bad("no-command-after-dashes", (*S, "--auto", "1", "--"), U, "no command to run"),
    Bad("ls-extra-argument", (*S, "ls", "extra"), U, "`ls` takes no arguments, got 'extra'"),
    Bad("auto-on-ls", (*S, "ls", "--auto", "2"), U, "--auto does not apply to `ls`"),
    Bad("topo-on-launch", (*S, "--topo", "--", "true"), U, "--topo does not apply to `run`"),
    Bad("flag-with-value", (*S, "--verbose=1", "ls"), U, "--verbose takes no value"),
    Bad("help-unknown-topic", ("help", "bogus"), U, "help: 'bogus' is not a subcommand (hint: subcommands: ls"),
    Bad("env-extra-argument", (*S, "env", "--auto", "1", "extra"), U, "`env` runs no command, got 'extra'"),
    Bad("env-bad-shell", (*S, "env", "--shell", "tcsh", "--auto", "1"), U, "--shell: 'tcsh' is not one of"),
    Bad("env-too-many", (*S, "env", "--auto", "9"), N, "need 9 GPUs, but this machine has 8"),
    Bad("shell-on-launch", (*S, "--shell", "bash", "--", "true"), U, "--shell does not apply to `run`"),
    Bad("check-extra-argument", (*S, "check", "extra"), U, "`check` takes no arguments, got 'extra'"),
    Bad("bind-bad-value", (*S, "--bind", "sometimes", "--", "true"), U, "--bind: 'sometimes' is not one of auto, on, off"),
    Bad("mig-auto-2", ("--snapshot", "mig-a100", "--auto", "2", "--mig", "--", "true"), U, "CUDA enumerates only one MIG device"),
    Bad("mig-with-gpus", ("--snapshot", "mig-a100", "--mig", "--gpus", "1", "--", "true"), U, "--mig makes no sense with --gpus"),
    Bad("mig-none-here", (*S, "--mig", "--", "true"), N, "no GPU here is in MIG mode"),
    # what the parent passed down
    Bad("parent-cvd-out-of-range", (*W, "--auto", "1", "--", "true"), N, "the parent's CUDA_VISIBLE_DEVICES=7 allows no GPU",
        env={"CUDA_VISIBLE_DEVICES": "7"}),
    Bad("parent-cvd-garbage", (*W, "--auto", "1", "--", "true"), N, "'abc' is neither an index nor a GPU-/MIG- UUID",
        env={"CUDA_VISIBLE_DEVICES": "abc"}),
    Bad("parent-cvd-empty", (*W, "--auto", "1", "--", "true"), N, "the value is empty, which hides every GPU",
        env={"CUDA_VISIBLE_DEVICES": ""}),
    Bad("parent-cvd-duplicate", (*W, "--auto", "1", "--", "true"), N, "names GPU 0 a second time",
        env={"CUDA_VISIBLE_DEVICES": "0,0"}),
    Bad("parent-nvd-none", (*W, "--auto", "1", "--", "true"), N, "NVIDIA_VISIBLE_DEVICES=none allows no GPU",
        env={"NVIDIA_VISIBLE_DEVICES": "none"}),
    Bad("parent-cvd-excludes-gpus", (*W, "--gpus", "0", "--", "true"), U, "GPU 0 is outside what the parent allows",
        env={"CUDA_VISIBLE_DEVICES": "1"}),
    # no driver on this machine: the real pynvml fails to load libnvidia-ml.so.1
    Bad("no-driver-auto", ("--auto", "1", "--", "true"), ExitCode.NO_DRIVER,
        "no NVIDIA driver here (libnvidia-ml.so.1 was not found) (hint: add --snapshot dgx-h100 to run it on the "
        "example machine)", no_driver=True),
    Bad("no-driver-gpus", ("--gpus", "0", "--", "true"), ExitCode.NO_DRIVER, "no NVIDIA driver here", no_driver=True),
    # options
    Bad("unknown-option-gpu", (*S, "--gpu", "0", "--", "true"), U, "unknown option --gpu (hint: did you mean --gpus?)"),
    Bad("unknown-option-typo", (*S, "--atuo", "2", "--", "true"), U, "did you mean --auto?"),
    Bad("unknown-option-eq", (*S, "--min_free=2GiB", "--", "true"), U, "did you mean --min-free?"),
    Bad("unknown-option-far", (*S, "--frobnicate", "--", "true"), U, "unknown option --frobnicate (hint: see `gpulaunch --help`)"),
    # the command
    Bad("command-is-directory", (*S, "--", "{dir}"), ExitCode.NOT_EXECUTABLE, "is a directory, not a program"),
    Bad("command-not-executable", (*S, "--", "{dir}/noexec.sh"), ExitCode.NOT_EXECUTABLE, "permission denied (not executable)"),
    Bad("command-not-found", (*S, "--", "gpulaunch-no-such-program"), ExitCode.COMMAND_NOT_FOUND,
        "gpulaunch-no-such-program: command not found"),
    Bad("command-path-not-found", (*S, "--", "{dir}/missing.sh"), ExitCode.COMMAND_NOT_FOUND, "missing.sh: no such file"),
    Bad("command-empty-string", (*S, "--", ""), ExitCode.COMMAND_NOT_FOUND, "the command is an empty string"),
    Bad("command-with-newline", (*S, "--", "two\nlines"), ExitCode.COMMAND_NOT_FOUND, "'two\\nlines': command not found"),
    Bad("command-not-executable-spaces", (*S, "--", "{dir}/no exec.sh"), ExitCode.NOT_EXECUTABLE,
        "/no exec.sh: permission denied (not executable) (hint: chmod +x '"),
    Bad("command-checked-before-gpus", (*S, "--auto", "9", "--", "gpulaunch-no-such-program"), ExitCode.COMMAND_NOT_FOUND,
        "gpulaunch-no-such-program: command not found"),
    Bad("command-not-on-path", (*S, "--", "script.sh"), ExitCode.COMMAND_NOT_FOUND, "script.sh: command not found",
        env={"PATH": "/nonexistent"}),
    # snapshot files
    Bad("snapshot-missing", ("--snapshot", "{dir}/missing.json", "ls"), F, "missing.json: no such file"),
    Bad("snapshot-env-missing", ("ls",), F, "missing.json: no such file", env={"GPULAUNCH_SNAPSHOT": "{dir}/missing.json"}),
    Bad("snapshot-unknown-example", ("--snapshot", "dgx-h1000", "ls"), F, "not an example name (hint: examples: dgx-h100"),
    Bad("snapshot-empty-name", ("--snapshot", "", "ls"), U, "--snapshot: empty file name"),
    Bad("snapshot-directory", ("--snapshot", "{dir}", "ls"), F, "is a directory, not a JSON file"),
    Bad("snapshot-empty", ("--snapshot", "{dir}/empty.json", "ls"), F, "file is empty"),
    Bad("snapshot-blank", ("--snapshot", "{dir}/blank.json", "ls"), F, "file is empty"),
    Bad("snapshot-not-json", ("--snapshot", "{dir}/not-json.json", "ls"), F, "not valid JSON (line 1"),
    Bad("snapshot-not-utf8", ("--snapshot", "{dir}/not-utf8.json", "ls"), F, "not UTF-8 text"),
    Bad("snapshot-deeply-nested", ("--snapshot", "{dir}/deep.json", "ls"), F, "not valid JSON (nested too deeply)"),
    Bad("snapshot-top-level-list", ("--snapshot", "{dir}/list.json", "ls"), F, "top level: expected an object, got a list"),
    Bad("snapshot-no-schema", ("--snapshot", "{dir}/no-schema.json", "ls"), F, "schema: missing"),
    Bad("snapshot-schema-2", ("--snapshot", "{dir}/schema-2.json", "ls"), F, "version 2 is not supported (this gpulaunch reads 1)"),
    Bad("snapshot-schema-string", ("--snapshot", "{dir}/schema-str.json", "ls"), F, "version '1' is not supported"),
    Bad("snapshot-gpus-not-list", ("--snapshot", "{dir}/gpus-not-list.json", "ls"), F, "gpus: expected a list, got an object"),
    Bad("snapshot-links-3-rows", ("--snapshot", "{dir}/links-3-rows.json", "ls"), F, "links: expected 4x4 matrix (one row per GPU), got 3 rows"),
    Bad("snapshot-links-short-row", ("--snapshot", "{dir}/links-short-row.json", "ls"), F, "links[0]: expected 4 entries, got 3"),
    Bad("snapshot-links-not-list", ("--snapshot", "{dir}/links-not-list.json", "ls"), F, "links: expected 4x4 matrix"),
    Bad("snapshot-links-asymmetric", ("--snapshot", "{dir}/links-asymmetric.json", "ls"), F, "differs from links[0][1]"),
    Bad("snapshot-links-bad-code", ("--snapshot", "{dir}/links-bad-code.json", "ls"), F, "'NVX' is not a topology code"),
    Bad("snapshot-links-x-off-diagonal", ("--snapshot", "{dir}/links-x-off-diagonal.json", "ls"), F, "'X' belongs on the diagonal"),
    Bad("snapshot-duplicate-index", ("--snapshot", "{dir}/dup-index.json", "ls"), F, "gpus[1].index: duplicate index 0"),
    Bad("snapshot-duplicate-uuid", ("--snapshot", "{dir}/dup-uuid.json", "ls"), F, "gpus[1].uuid: duplicate uuid GPU-83a97efc"),
    Bad("snapshot-negative-memory", ("--snapshot", "{dir}/negative-memory.json", "ls"), F, "gpus[1].memory_used_mib: -5 is below 0"),
    Bad("snapshot-negative-index", ("--snapshot", "{dir}/negative-index.json", "ls"), F, "gpus[1].index: -1 is below 0"),
    Bad("snapshot-used-over-total", ("--snapshot", "{dir}/used-over-total.json", "ls"), F, "49141 exceeds memory_total_mib 49140"),
    Bad("snapshot-free-over-total", ("--snapshot", "{dir}/free-over-total.json", "ls"), F, "50000 exceeds memory_total_mib 49140"),
    Bad("snapshot-memory-string", ("--snapshot", "{dir}/memory-string.json", "ls"), F, "expected an integer, got a string"),
    Bad("snapshot-memory-float", ("--snapshot", "{dir}/memory-float.json", "ls"), F, "expected an integer, got a number"),
    Bad("snapshot-memory-missing-ls", ("--snapshot", "{dir}/memory-missing.json", "ls"), 0),
    Bad("snapshot-memory-missing-auto", ("--snapshot", "{dir}/memory-missing.json", "--auto", "4", "--", "true"), N,
        "GPU 1: free memory unknown"),
    Bad("snapshot-memory-missing-gpus", ("--snapshot", "{dir}/memory-missing.json", "--gpus", "1", *RUN, "--", "true"), 0),
    Bad("snapshot-util-150", ("--snapshot", "{dir}/util-150.json", "ls"), F, "gpus[1].utilization_gpu: 150 is above 100"),
    Bad("snapshot-bad-uuid", ("--snapshot", "{dir}/bad-uuid.json", "ls"), F, "does not start with 'GPU-'"),
    Bad("snapshot-gpu-not-object", ("--snapshot", "{dir}/gpu-not-object.json", "ls"), F, "gpus[1]: expected an object, got an integer"),
    Bad("snapshot-process-no-pid", ("--snapshot", "{dir}/process-no-pid.json", "ls"), F, "processes[0].pid: missing (required)"),
    Bad("snapshot-available-string", ("--snapshot", "{dir}/available-str.json", "ls"), F, "expected true or false, got a string"),
    Bad("snapshot-bad-cpulist", ("--snapshot", "{dir}/bad-cpulist.json", "ls"), F, "'all' is not a CPU list"),
    Bad("snapshot-too-large", ("--snapshot", "{dir}/too-large.json", "ls"), F, "65 MiB is too large (limit 64 MiB)"),
    # config file and GPULAUNCH_* defaults
    *(Bad(f"config-{name.removesuffix('.toml')}", (*S, "--auto", "1", "--", "true"), F, says,
          env={"GPULAUNCH_CONFIG": f"{{dir}}/{name}"}) for name, says in (
        ("bad-unit.toml", "bad-unit.toml:1: min-free: unknown unit 'XB' in '20XB'"),
        ("not-toml.toml", "key 'min-free': not valid TOML"),
        ("gpus-key.toml", "'gpus' cannot have a default"),
        ("unknown-key.toml", "unknown key 'bogus'"),
        ("not-utf8.toml", "not UTF-8 text"),
        ("util-150.toml", "max-util: 150 is not between 0 and 100"),
        ("util-word.toml", "max-util: 'abc' is not a percentage (hint: e.g. max-util = 20)"),
        ("idle-maybe.toml", "idle: expected true/false, got 'maybe'"),
        ("section.toml", "unknown key 'section'"),
        ("missing.toml", "missing.toml: no such file (hint: fix or unset GPULAUNCH_CONFIG)"),
    )),
    Bad("config-directory", (*S, "--auto", "1", "--", "true"), F, "is a directory, not a TOML file", env={"GPULAUNCH_CONFIG": "{dir}"}),
    Bad("config-good", (*S, "--auto", "1", *RUN, "--", "true"), 0, env={"GPULAUNCH_CONFIG": "{dir}/good.toml"}),
    Bad("env-min-free-bad-unit", (*S, "--auto", "1", "--", "true"), U, "GPULAUNCH_MIN_FREE: unknown unit 'XB'",
        env={"GPULAUNCH_MIN_FREE": "20XB"}),
    Bad("env-idle-maybe", (*S, "--auto", "1", "--", "true"), U, "GPULAUNCH_IDLE: expected true/false",
        env={"GPULAUNCH_IDLE": "maybe"}),
    Bad("env-max-util-word", (*S, "ls"), U, "(hint: e.g. GPULAUNCH_MAX_UTIL=20)", env={"GPULAUNCH_MAX_UTIL": "abc"}),
    Bad("config-extra-argument", (*S, "config", "extra"), U, "`config` takes no arguments, got 'extra'"),
    Bad("completions-unknown-shell", ("completions", "tcsh"), U, "completions: unknown shell 'tcsh'"),
    Bad("completions-no-shell", ("completions",), U, "completions: name one shell"),
    # machines with nothing to give
    Bad("no-gpus-ls", ("--snapshot", "{dir}/no-gpus.json", "ls"), 0),
    Bad("no-gpus-auto", ("--snapshot", "{dir}/no-gpus.json", "--auto", "1", "--", "true"), N, "need 1 GPU, but this machine shows no GPUs"),
    Bad("no-gpus-all", ("--snapshot", "{dir}/no-gpus.json", "--gpus", "all", "--", "true"), N, "no GPUs to run on"),
    Bad("no-gpus-index", ("--snapshot", "{dir}/no-gpus.json", "--gpus", "0", "--", "true"), U, "this machine shows no GPUs"),
    # huge inputs: handled (exit 0) or refused clearly; timings are in benchmarks/huge_inputs.py
    Bad("huge-10mb-ls", ("--snapshot", "{dir}/padded-10mb.json", "ls"), 0),
    Bad("huge-jobline-10mb-word", ("--snapshot", "dgx-h100", "each", "{dir}/jobs-10mb-word.txt", "-q", "--log-dir",
                                   "{dir}/logs"), 9, "1 of 1 job failed: 1"),  # exec refuses a 10 MB argument
    Bad("huge-10mb-auto", ("--snapshot", "{dir}/padded-10mb.json", "--auto", "2", *RUN, "--", "true"), 0),
    Bad("huge-10mb-processes-ls", ("--snapshot", "{dir}/processes-10mb.json", "ls"), 0),
    Bad("huge-1000-gpus-ls", ("--snapshot", "{dir}/gpus-1000.json", "ls"), 0),
    Bad("huge-1000-gpus-json", ("--snapshot", "{dir}/gpus-1000-links.json", "ls", "--json"), 0),
    Bad("huge-1000-gpus-explicit", ("--snapshot", "{dir}/gpus-1000-links.json", "--gpus", "999,0", *RUN, "--", "true"), 0),
    Bad("huge-1000-gpus-auto", ("--snapshot", "{dir}/gpus-1000-links.json", "--auto", "2", *RUN, "--", "true"), 0),
    Bad("huge-1000-gpus-too-many", ("--snapshot", "{dir}/gpus-1000.json", "--auto", "1001", "--", "true"), N,
        "need 1001 GPUs, but this machine has 1000"),
    # --nodes (docs/several-nodes.md)
    Bad("nodes-zero", (*S, "--nodes", "0", "--", "true"), U, "--nodes: must be 1 or more, got 0"),
    Bad("nodes-nowhere", (*S, "--nodes", "2", "--", "true"), U, "--nodes 2 needs Slurm, or --node-rank and --head"),
    Bad("nodes-gpus-per-node-too-many", (*S, "--nodes", "2", "--gpus-per-node", "9", "--node-rank", "1", "--head",
                                         "h:1", "--", "true"), N, "node 1 of 2: need 9 GPUs, but this machine has 8"),
    Bad("nodes-nnodes-contradicts", (*S, "--nodes", "2", "--gpus-per-node", "4", "--node-rank", "1", "--head", "h:1",
                                     *RUN, "--", "torchrun",
                                     "--nnodes", "3", "x.py"), U, "`torchrun --nnodes 3` contradicts this run"),
    Bad("nodes-tgi", (*S, "--nodes", "2", "--node-rank", "1", "--head", "h:1", *RUN, "--", "text-generation-launcher"), U,
        "text-generation-inference shards a model over one machine's GPUs"),
    Bad("nodes-head-unresolvable", (*S, "--nodes", "2", "--gpus-per-node", "4", "--node-rank", "1", "--head",
                                    "no-such-head.invalid:1", "--", "true"), ExitCode.RENDEZVOUS_FAILED,
        "does not resolve"),
)

#: The codes a run over the catalogue must show it can produce (the rest come with other issues).
MUST_COVER = {ExitCode.USAGE, ExitCode.NOT_ENOUGH_GPUS, ExitCode.BAD_FILE, ExitCode.NOT_EXECUTABLE,
              ExitCode.COMMAND_NOT_FOUND, ExitCode.OK, ExitCode.NO_DRIVER, ExitCode.WAIT_TIMEOUT, ExitCode.RESERVED}


@pytest.fixture(scope="module")
def files_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    for name, content in FILES.items():
        (root / name).write_bytes(content() if callable(content) else content)
    (root / "noexec.sh").chmod(0o644)
    (root / "no exec.sh").chmod(0o644)
    (root / "script.sh").chmod(0o755)
    for name, size in SPARSE.items():
        with open(root / name, "wb") as fh:
            fh.truncate(size)
    return root


def run_row(row: Bad, files_dir: Path) -> subprocess.CompletedProcess[str]:
    argv = [a.replace("{dir}", str(files_dir)) for a in row.argv]
    env = {k: v.replace("{dir}", str(files_dir)) for k, v in row.env.items()}
    if row.hold is None:
        return run_gpulaunch(*argv, env=env, timeout=30)
    with _holding(row.hold):
        return run_gpulaunch(*argv, env=env, timeout=30)


@contextlib.contextmanager
def _holding(index: int) -> Iterator[None]:
    """Another gpulaunch job holds GPU ``index`` of workstation-4x (its command waits on stdin)."""
    from gpu_launch.reservations import holders
    from gpu_launch.hardware import snapshot

    uuid = snapshot.resolve("workstation-4x").gpus[index].uuid
    holder = subprocess.Popen(gpulaunch_argv("--snapshot", "workstation-4x", "-q", "--gpus", str(index), "--",
                                             sys.executable, "-c", "import sys; sys.stdin.read()"),
                              stdin=subprocess.PIPE, env=clean_env())
    try:
        deadline = time.monotonic() + 30
        while not holders.holders(LOCK_DIR, [uuid]):
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never took its GPU"
            time.sleep(0.02)
        yield
    finally:
        holder.communicate(timeout=30)  # closes stdin: the holder's command ends, and its lock with it
    assert holders.holders(LOCK_DIR, [uuid]) == {}, "the lock ends with the command that held it"


def _nvml_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _params() -> list[Any]:
    out = []
    for row in CATALOGUE:
        marks = []
        if row.needs and not has_option(row.needs):
            marks.append(pytest.mark.skip(reason=f"{row.needs} arrives with issue 3 (reservations/--wait)"))
        if row.no_driver and _nvml_loads():
            marks.append(pytest.mark.skip(reason="an NVIDIA driver is installed here"))
        out.append(pytest.param(row, id=row.id, marks=marks))
    return out


@pytest.mark.parametrize("row", _params())
def test_bad_input(row: Bad, files_dir: Path) -> None:
    result = run_row(row, files_dir)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == row.code, f"exit {result.returncode}, want {row.code}: {result.stderr}"
    if row.code == 0:
        assert "gpulaunch: error:" not in result.stderr
        return
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpulaunch: error: ")]
    assert len(errors) == 1, result.stderr
    assert result.stderr.rstrip("\n").splitlines()[-1] == errors[0], "the error is the last line"
    assert row.fragment in errors[0]
    if row.no_driver:  # most new users' first line: two rows of a terminal at most, said once
        assert len(errors[0]) <= 160 and errors[0].count("libnvidia-ml") <= 1, errors[0]
    assert result.stdout == "", "a failed run prints nothing on stdout"
    if row.code in (ExitCode.NOT_EXECUTABLE, ExitCode.COMMAND_NOT_FOUND):
        assert "cuda:0" not in result.stderr, "no mapping is shown for a command that cannot run"


def test_nothing_is_left_reserved_or_queued() -> None:
    """After every row above (failures, Ctrl-C, timeouts, holders): no GPU reserved, no waiter queued."""
    from gpu_launch.reservations import holders
    from gpu_launch.hardware import snapshot

    uuids = [g.uuid for name in snapshot.example_names() for g in snapshot.resolve(name).gpus]
    assert holders.holders(LOCK_DIR, uuids) == {}
    assert not list(Path(LOCK_DIR).glob("ticket-*"))


def test_catalogue_ids_are_unique_and_cover_the_codes() -> None:
    ids = [row.id for row in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert MUST_COVER <= {ExitCode(row.code) for row in CATALOGUE}
    for row in CATALOGUE:
        assert row.code == 0 or row.fragment or row.needs, f"{row.id}: a failing row names its message"


def test_codes_in_catalogue_are_documented() -> None:
    assert {row.code for row in CATALOGUE} <= {int(c) for c in ExitCode}


def _blocked_reading_a_pipe(pid: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Wait until ``pid`` sleeps inside read() of a pipe (nothing written yet), so SIGINT interrupts that
    very syscall. (A signal that lands just before a blocking syscall waits until it returns: a
    CPython limitation, which a test that signals at a random moment would trip over now and then.)"""
    wchan = Path(f"/proc/{pid}/wchan")
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if wchan.read_text().strip() in ("pipe_read", "pipe_wait", "anon_pipe_read"):
                return
        except OSError:
            pytest.skip("no /proc/PID/wchan here")
        time.sleep(0.01)
    raise AssertionError("gpulaunch never blocked reading the pipe")


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc/PID/wchan")
def test_ctrl_c_before_the_command_starts_exits_130(tmp_path: Path) -> None:
    """SIGINT while gpulaunch reads its snapshot from a pipe nobody writes: 130, one line, no command run."""
    marker = tmp_path / "ran"
    proc = subprocess.Popen(gpulaunch_argv("--snapshot", "/dev/stdin", "--auto", "1", "--", "touch", str(marker)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    try:
        _blocked_reading_a_pipe(proc.pid, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == ExitCode.INTERRUPTED
    assert b"Traceback" not in err
    assert err.decode().strip().splitlines() == ["gpulaunch: interrupted"]
    assert out == b""
    assert not marker.exists()
