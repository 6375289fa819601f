"""Property tests (hypothesis): parsers fail only with gpulaunch's own errors, selection keeps its word.

Every test runs under :data:`PROFILE` (200 examples, no deadline, derandomized), applied per test
rather than as a global profile, so CI runs the same examples every time and other test modules keep
their own settings. ``pytest --hypothesis-show-statistics tests/test_properties.py`` shows the counts.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from cli_run import LOCK_DIR, scrubbed
from gpu_launch.options import args
from gpu_launch.choose import select
from gpu_launch.hardware import snapshot
from gpu_launch.choose import spec
from gpu_launch.errors import GpuLaunchError, NotEnoughGpus, SnapshotError, UsageError
from gpu_launch.hardware.model import Gpu, GpuProcess, Machine
from gpu_launch.base.units import Size

PROFILE = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- the --gpus grammar ---------------------------------------------------------------------

_index = st.integers(0, 4096)
_hex = st.text("0123456789abcdef-", min_size=1, max_size=36)


@st.composite
def _item(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["index", "range", "gpu", "mig"]))
    if kind == "index":
        return str(draw(_index))
    if kind == "range":
        first = draw(st.integers(0, 4095))
        return f"{first}-{draw(st.integers(first + 1, 4096))}"  # "3-3" is spelt "3"
    return ("GPU-" if kind == "gpu" else "MIG-") + draw(_hex)


canonical_specs = st.one_of(st.just("all"), st.lists(_item(), min_size=1, max_size=8).map(",".join))


@PROFILE
@given(canonical_specs)
def test_spec_canonical_text_round_trips(text: str) -> None:
    items = spec.parse(text)
    assert spec.format_items(items) == text
    assert spec.parse(spec.format_items(items)) == items


@PROFILE
@given(st.lists(_item(), min_size=1, max_size=8), st.lists(st.sampled_from(["", " ", "\t"]), min_size=16, max_size=16),
       st.sampled_from([str.lower, str.upper, lambda s: s]))
def test_spec_round_trips_through_whitespace_and_case(items: list[str], pads: list[str], case: Any) -> None:
    text = ",".join(f"{pads[2 * i % 16]}{case(word) if word[:4].upper() in ('GPU-', 'MIG-') else word}{pads[(2 * i + 1) % 16]}"
                    for i, word in enumerate(items))
    parsed = spec.parse(text)
    assert len(parsed) == len(items)
    assert spec.parse(spec.format_items(parsed)) == parsed


@PROFILE
@given(st.one_of(st.text(max_size=40),
                 st.text("0123456789,- allGPUMIG\t", max_size=30),
                 st.lists(st.one_of(_item(), st.text(max_size=6)), max_size=6).map(",".join)))
def test_spec_rejects_garbage_with_usage_error_only(text: str) -> None:
    try:
        items = spec.parse(text)
    except UsageError as exc:
        event("rejected")
        assert exc.message and "\n" not in exc.message.replace(repr(text), "")
        return
    event("accepted")
    assert items and spec.parse(spec.format_items(items)) == items


# --- the option parser ----------------------------------------------------------------------

_names = [name for opt in args.OPTIONS for name in opt.names]
_values = ["0", "1", "-1", "2", "7-4", "0,1", "all", "GPU-", "20GiB", "20XB", "80%", "150", "abc", "", " ", "--",
           "-", "ls", "topo", "help", "python", "dgx-h100", "1" * 5000, "\udcff", "GPU-ab", "=", "-q"]
_tokens = st.one_of(st.sampled_from(_names), st.sampled_from(_values), st.sampled_from(list(args.SUBCOMMANDS)),
                    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(_names), st.sampled_from(_values)),
                    st.text(max_size=12))


@PROFILE
@given(st.lists(_tokens, max_size=10))
def test_args_parse_raises_only_gpulaunch_errors(argv: list[str]) -> None:
    try:
        inv = args.parse(argv)
    except GpuLaunchError as exc:
        event("rejected")
        assert exc.message and int(exc.exit_code) == 2
        return
    event("accepted")
    assert inv.command in (args.RUN, *args.SUBCOMMANDS)
    assert set(inv.argv) <= set(argv)


@PROFILE
@given(st.lists(_tokens, max_size=6), st.lists(st.text(max_size=8), min_size=1, max_size=6))
def test_args_command_after_double_dash_passes_untouched(before: list[str], command: list[str]) -> None:
    assume("--" not in before)
    try:
        inv = args.parse([*before, "--", *command])
    except GpuLaunchError:
        return
    if inv.command == args.RUN:  # the command began at or before the "--": its tail is untouched
        assert inv.argv[-len(command):] == tuple(command)


# --- snapshot files -------------------------------------------------------------------------

def _examples() -> list[dict[str, Any]]:
    files = resources.files("gpu_launch.hardware.examples")
    return [json.loads(files.joinpath(f"{n}.json").read_text("utf-8")) for n in snapshot.example_names()]


EXAMPLES = _examples()
_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                               st.text(max_size=8)),
                     lambda inner: st.one_of(st.lists(inner, max_size=4),
                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_snapshots(draw: st.DrawFn) -> str:
    """An example snapshot with 0-3 nodes (other than "schema") replaced, deleted or duplicated."""
    doc = json.loads(json.dumps(draw(st.sampled_from(EXAMPLES))))
    for _ in range(draw(st.integers(0, 3))):
        paths = [p for p in _paths(doc) if p and p != ("schema",)]
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if action == "replace":
            parent[path[-1]] = draw(_json)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[path[-1]])))
        else:
            parent[path[-1]] = [parent[path[-1]], parent[path[-1]]]
    return json.dumps(doc)


@PROFILE
@given(st.one_of(mutated_snapshots(), _json.map(json.dumps), st.text(max_size=60),
                 mutated_snapshots().map(lambda t: t[: len(t) // 2])))
def test_snapshot_loads_raises_only_snapshot_error(text: str) -> None:
    try:
        machine = snapshot.loads(text, source="fuzz.json")
    except SnapshotError as exc:
        event("rejected")
        assert exc.message.startswith("snapshot fuzz.json: ") and "\n" not in exc.message
        return
    event("accepted")
    # What it accepts is consistent, and survives its own round trip.
    assert len({g.index for g in machine.gpus}) == len(machine.gpus)
    assert len({g.uuid for g in machine.gpus}) == len(machine.gpus)
    assert machine.links is None or all(len(row) == len(machine.gpus) for row in machine.links)
    assert snapshot.loads(snapshot.dump(machine), source="fuzz.json") == machine


# --- selection ------------------------------------------------------------------------------

_LINKS = ["NV1", "NV2", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]


@st.composite
def machines(draw: st.DrawFn) -> Machine:
    n = draw(st.integers(1, 16))
    indices = sorted(draw(st.sets(st.integers(0, 40), min_size=n, max_size=n)))
    gpus = []
    for k, index in enumerate(indices):
        total = draw(st.sampled_from([16384, 24576, 49140, 81559]))
        used = draw(st.one_of(st.integers(0, total), st.sampled_from([0, 3, total // 20, total // 2, total])))
        procs = tuple(GpuProcess(pid=1000 + 10 * k + j, used_memory_mib=1) for j in range(draw(st.integers(0, 2))))
        available = draw(st.booleans().map(lambda b: b or n == 1)) if draw(st.integers(0, 9)) == 0 else True
        gpus.append(Gpu(
            index=index, uuid=f"GPU-{index:08x}-0000-4000-8000-{k:012x}",
            name=draw(st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA RTX A6000"])),
            memory_total_mib=total, memory_used_mib=used,
            memory_free_mib=draw(st.one_of(st.just(total - used), st.none())) if draw(st.integers(0, 9)) == 0
            else total - used,
            utilization_gpu=draw(st.one_of(st.none(), st.integers(0, 100))),
            numa_node=draw(st.one_of(st.none(), st.integers(0, 1))),
            processes=procs, available=available, error=None if available else "GPU is lost",
            mig_mode="enabled" if draw(st.integers(0, 9)) == 0 else draw(st.sampled_from(["disabled", "unknown"])),
            processes_known=draw(st.integers(0, 5)) > 0,
            health=("pages pending retirement",) if draw(st.integers(0, 9)) == 0 else (),
        ))
    links = None
    if draw(st.booleans()):
        matrix = [["X"] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                matrix[i][j] = matrix[j][i] = draw(st.sampled_from(_LINKS))
        links = tuple(tuple(row) for row in matrix)
    return Machine(gpus=tuple(gpus), links=links, source="hypothesis")


@st.composite
def constraints(draw: st.DrawFn, machine: Machine) -> select.Constraints:
    min_free = draw(st.one_of(st.none(), st.none(), st.integers(0, 90000).map(lambda m: Size(mib=float(m))),
                              st.integers(0, 100).map(lambda p: Size(percent=float(p)))))
    excluded = draw(st.sets(st.sampled_from([g.uuid for g in machine.gpus]), max_size=3))
    return select.Constraints(min_free=min_free, max_util=draw(st.one_of(st.none(), st.none(), st.integers(0, 100))),
                              idle=draw(st.integers(0, 3)) == 0, exclude=frozenset(excluded))


def allowed(gpu: Gpu, c: select.Constraints) -> bool:
    """The constraints, restated independently of select.py: may ``gpu`` be given to the job?"""
    if not gpu.available or gpu.uuid in c.exclude or gpu.mig_devices or gpu.mig_mode == "enabled" \
            or gpu.health or gpu.memory_free_mib is None:
        return False
    if c.min_free is not None:
        need = c.min_free.mib if c.min_free.mib is not None else gpu.memory_total_mib * c.min_free.percent / 100
        if gpu.memory_free_mib < need:
            return False
    if c.max_util is not None and (gpu.utilization_gpu is None or gpu.utilization_gpu > c.max_util):
        return False
    if c.idle and (gpu.processes or not gpu.processes_known or gpu.memory_used_mib > 0.05 * gpu.memory_total_mib
                   or (gpu.utilization_gpu or 0) >= 50):
        return False
    return True


@PROFILE
@given(st.data())
def test_auto_returns_n_distinct_allowed_gpus_or_not_enough(data: st.DataObject) -> None:
    machine = data.draw(machines())
    c = data.draw(constraints(machine))
    n = data.draw(st.integers(1, len(machine.gpus) + 1))
    ok = [g for g in machine.gpus if allowed(g, c)]
    try:
        chosen = select.choose_auto(machine, n, c)
    except NotEnoughGpus as exc:
        event("not enough")
        assert len(ok) < n, f"refused although {len(ok)} GPUs qualify: {exc.message}"
        assert str(n) in exc.message
        return
    event("chosen")
    gpus = [d.gpu for d in chosen.devices]
    assert len(gpus) == n
    assert len({g.uuid for g in gpus}) == n
    assert all(allowed(g, c) for g in gpus), "a chosen GPU breaks a constraint"
    assert all(d.mig is None for d in chosen.devices)
    # Never someone's GPU while an idle one is left: the worst chosen is the n-th best available.
    # Nor on more shared GPUs than it must take: the chosen classes are the n most available ones.
    classes = sorted(select.availability(g) for g in ok)
    assert max(select.availability(g) for g in gpus) == classes[n - 1]
    assert sorted(select.availability(g) for g in gpus) == classes[:n]
    # Deterministic: the same question gets the same answer.
    again = select.choose_auto(machine, n, c)
    assert [d.uuid for d in again.devices] == [d.uuid for d in chosen.devices]


@PROFILE
@given(st.data())
def test_fit_returns_a_power_of_two_that_holds_the_size_or_not_enough(data: st.DataObject) -> None:
    machine = data.draw(machines())
    c = data.draw(constraints(machine))
    need = Size(mib=float(data.draw(st.integers(1, 400_000))))
    try:
        chosen = select.choose_fit(machine, need, c)
    except NotEnoughGpus as exc:
        event("not enough")
        assert exc.message
        return
    event("chosen")
    gpus = [d.gpu for d in chosen.devices]
    assert len(gpus) in select.FIT_SIZES and len({g.uuid for g in gpus}) == len(gpus)
    assert all(allowed(g, c) for g in gpus)
    assert sum(g.memory_free_mib for g in gpus) >= need.mib
    assert [d.uuid for d in select.choose_fit(machine, need, c).devices] == [d.uuid for d in chosen.devices]


@PROFILE
@given(st.data())
def test_explicit_choice_is_obeyed_or_refused_never_crashes(data: st.DataObject) -> None:
    machine = data.draw(machines())
    c = data.draw(constraints(machine))
    picked = data.draw(st.lists(st.sampled_from(sorted(g.index for g in machine.gpus)), min_size=1, max_size=4,
                                unique=True))
    text = ",".join(map(str, picked))
    try:
        devices = spec.resolve(spec.parse(text), machine)
        chosen = select.check_explicit(devices, machine, select.Constraints(c.min_free, c.max_util, c.idle))
    except GpuLaunchError as exc:
        event("refused")
        # Only a GPU CUDA cannot run on is refused: unavailable, or in MIG mode (use its MIG devices).
        assert any(not machine.by_index(i).available or machine.by_index(i).in_mig_mode for i in picked), exc.message
        return
    event("obeyed, warned" if chosen.warnings else "obeyed")
    assert [d.gpu.index for d in chosen.devices] == picked  # order kept, nothing swapped
    for d in chosen.devices:
        if not allowed(d.gpu, select.Constraints(c.min_free, c.max_util, c.idle)):
            assert any(w.startswith(d.gpu.label + ":") for w in chosen.warnings), "a failed constraint warns"


@pytest.mark.parametrize("bad", [0, -1])
def test_choose_auto_rejects_counts_below_one(bad: int) -> None:
    machine = Machine(gpus=(Gpu(index=0, uuid="GPU-0", name="x", memory_total_mib=1, memory_used_mib=0,
                                memory_free_mib=1),))
    with pytest.raises(UsageError):
        select.choose_auto(machine, bad, select.Constraints())


# --- the whole command line, in process -----------------------------------------------------

class _Execed(Exception):
    """Raised instead of exec'ing: the random command line got as far as running its command."""


_cli_tokens = st.one_of(_tokens, st.sampled_from(["env", "config", "completions", "bash", "--mig", "--bind", "on",
                                                 "--shell", "fish", "mig-a100", "--snapshot", "ls", "topo"]))


@PROFILE
@given(st.lists(_cli_tokens, max_size=8), st.sampled_from(["dgx-h100", "mig-a100", "workstation-4x"]))
def test_cli_on_random_argv_fails_only_with_gpulaunch_errors(argv: list[str], example: str) -> None:
    """``cli.run`` over an example machine: it returns an exit code, gets to exec, or raises a
    GpuLaunchError, which ``cli.main`` prints as one line. Anything else would be a traceback."""
    import io
    import os
    from contextlib import redirect_stderr, redirect_stdout
    from unittest import mock

    from gpu_launch import cli

    assume("check" not in argv)  # `check` starts a CUDA probe process: covered in its own tests
    assume("each" not in argv)  # `each` reads stdin and runs jobs: covered in its own tests
    assume(not any(token.startswith("--wait") for token in argv))  # may wait for ever, by design
    env = scrubbed(("GPULAUNCH_", "CUDA_", "NVIDIA_", "SLURM_"))
    env["GPULAUNCH_CONFIG"] = ""
    env["GPULAUNCH_NO_LOCK"] = "1"  # a launch stopped just before exec must not keep lock descriptors
    env["GPULAUNCH_LOCK_DIR"] = LOCK_DIR
    with mock.patch.dict(os.environ, env, clear=True), \
            mock.patch("gpu_launch.run.execute.exec_command", side_effect=_Execed), \
            mock.patch("gpu_launch.run.affinity.apply", return_value=None), \
            redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        try:
            code = cli.run(["--snapshot", example, *argv])
        except _Execed:
            event("reached exec")
            return
        except GpuLaunchError as exc:
            event(f"error {int(exc.exit_code)}")
            assert exc.message and "\n" not in exc.message
            return
    event("returned")
    assert code == 0
