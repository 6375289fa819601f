"""How loaded a GPU is, at the edges, as a user sees it: the warning a ``--gpus`` choice prints and
which GPUs ``--auto`` gives (issue 28: mutants of gpu_launch/choose/ that the suite let live).

Each test names the slip it catches; benchmarks/mutation.py finds such slips.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_choice_states import TOTAL, auto, gpu, machine
from gpu_launch.choose.select import Constraints, check_explicit, choose_fit
from gpu_launch.errors import NotEnoughGpus
from gpu_launch.hardware import snapshot
from gpu_launch.hardware.model import Device, Gpu
from gpu_launch.units import parse_size


def _warnings(g: Gpu) -> tuple[str, ...]:
    m = machine([g, gpu(1)], lambda i, j: "NV12")
    return check_explicit((Device(m.gpus[0]),), m, Constraints()).warnings


def test_a_gpu_exactly_90_percent_used_is_full():
    # 90 % of the memory in use is the line of "full" (>=, not >).
    g = replace(gpu(0), memory_total_mib=81920, memory_used_mib=73728, memory_free_mib=8192)  # 90.0 %
    (warning,) = _warnings(g)
    assert warning.startswith("GPU 0 is full ("), warning


def test_a_gpu_with_no_free_memory_is_full_whatever_used_says():
    # NVML's v1 "used" leaves out the driver's reserve: 0 MiB free with 86 % "used" is still full.
    g = replace(gpu(0, used=70000), memory_free_mib=0)
    (warning,) = _warnings(g)
    assert warning == "GPU 0 is full (0% utilisation, 0 MiB free)"


def test_a_gpu_whose_memory_nvml_could_not_read_is_not_called_full():
    # Nothing running, no utilisation, memory unknown: --gpus says the memory is unknown, not that it is full.
    g = replace(gpu(0), memory_total_mib=None, memory_used_mib=None, memory_free_mib=None)
    assert _warnings(g) == ("GPU 0: free memory unknown (NVML could not read it)",)


def test_auto_prefers_a_busy_gpu_to_one_exactly_full():
    # GPU 0 at exactly 90 % used (full), GPU 1 at 60 % (busy): --auto 1 takes the busy one.
    full = replace(gpu(0), memory_total_mib=81920, memory_used_mib=73728, memory_free_mib=8192)
    m = machine([full, gpu(1, used=round(TOTAL * 0.6))], lambda i, j: "NV12")
    assert auto(m, 1) == [1]


def test_a_gpu_with_free_memory_but_no_total_counts_as_idle():
    # A snapshot may give free memory without the total: its share used is unknown, so it is not
    # called full (nor busy); with nothing running --auto takes it before a partly used GPU.
    blind = replace(gpu(0), memory_total_mib=None, memory_used_mib=None, memory_free_mib=80000)
    assert _warnings(blind) == ()
    blind_used = replace(blind, memory_used_mib=500)
    assert _warnings(blind_used) == ()
    m = machine([gpu(0, used=TOTAL // 10, users=("bob",)), replace(blind_used, index=1, uuid=gpu(1).uuid)],
                lambda i, j: "NV12")
    assert auto(m, 1) == [1]


@pytest.mark.parametrize("need, hint", [
    ("500GiB", "wait with --wait, or lower the size (quantise, shorter context)"),
    (f"{8 * 81559}MiB", "wait with --wait, or lower the size (quantise, shorter context)"),  # every GPU's total
    (f"{8 * 81559 + 1}MiB", "no wait can help: the 8 largest GPUs here have 637.2 GiB in total; "
                            "lower the size (quantise, shorter context)"),
])
def test_fit_that_fails_now_says_whether_waiting_can_help(need: str, hint: str):
    # Slip: the test between "wait" and "no wait can help" negated or moved off its line (what the
    # GPUs hold in total, free or not: 8 x 81,559 MiB on dgx-h100).
    with pytest.raises(NotEnoughGpus) as exc:
        choose_fit(snapshot.resolve("dgx-h100"), parse_size(need), Constraints())
    assert exc.value.hint == hint
    assert "holds at most 492.0 GiB free (on 8; 8 of 8 GPUs are eligible)" in exc.value.message
