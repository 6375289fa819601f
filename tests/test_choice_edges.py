"""How loaded a GPU is, at the edges, as a user sees it: the warning a ``--gpus`` choice prints and
which GPUs ``--auto`` gives (issue 28: mutants of gpu_launch/choose/ that the suite let live).

Each test names the slip it catches; benchmarks/mutation.py finds such slips.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_choice_states import TOTAL, auto, gpu, machine
from gpu_launch.choose import explain, mig, spec, visibility
from gpu_launch.choose.select import Constraints, check_explicit, choose_auto, choose_fit, eligibility
from gpu_launch.errors import NotEnoughGpus, UsageError
from gpu_launch.hardware import snapshot
from gpu_launch.hardware.model import Device, Gpu
from gpu_launch.base.units import parse_size


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


# --- what the messages say exactly ------------------------------------------------------------------

FOUR = machine([gpu(i) for i in range(4)], lambda i, j: "NV12")


def test_cuda_visible_devices_problems_name_the_entry_by_its_position():
    # Slip: the entry counted from 0 (or off by two) in the line a user reads to fix the variable.
    missing = visibility.read_cvd("GPU-00000001,GPU-ffff,GPU-00000002", FOUR)
    assert missing.problems == ("entry 2 'GPU-ffff' matches no GPU or MIG device here; CUDA ignores it and "
                                "everything after it ('GPU-00000002')",)
    ambiguous = visibility.read_cvd("GPU-00000001,GPU-0000", FOUR)
    assert ambiguous.problems == ("entry 2 'GPU-0000' is an ambiguous UUID prefix (GPU 0, GPU 1, GPU 2, GPU 3); "
                                  "CUDA ignores it",)


def test_nvidia_visible_devices_says_whether_an_entry_matched_no_gpu_or_several():
    # Slip: "no" and "more than one" swapped.
    _, none = visibility.read_nvd("GPU-ffff,0", FOUR)
    _, several = visibility.read_nvd("GPU-0000,0", FOUR)
    assert none == ("NVIDIA_VISIBLE_DEVICES entry 'GPU-ffff' matches no GPU here",)
    assert several == ("NVIDIA_VISIBLE_DEVICES entry 'GPU-0000' matches more than one GPU here",)


@pytest.mark.parametrize("count, names", [(4, "GPU 0, GPU 1, GPU 2, GPU 3"), (5, "GPU 0, GPU 1, GPU 2, GPU 3, ...")])
def test_an_ambiguous_uuid_prefix_lists_four_gpus_then_dots(count: int, names: str):
    # Slip: the dots after exactly four matches (>= for >).
    m = machine([gpu(i) for i in range(count)], lambda i, j: "NV12")
    with pytest.raises(UsageError) as exc:
        spec.resolve(spec.parse("GPU-0000"), m)
    assert exc.value.message == f"--gpus: UUID prefix 'GPU-0000' is ambiguous ({names})"


def test_an_implausible_gpu_index_is_quoted_to_40_characters():
    # Slip: the quote of the word cut one character later.
    word = "9" * 50
    with pytest.raises(UsageError) as exc:
        spec.parse(word)
    assert exc.value.message == f"--gpus: {'9' * 40!r} is not a plausible GPU index"


@pytest.mark.parametrize("n, need", [(1, "need 1 GPU,"), (2, "need 2 GPUs,")])
def test_a_machine_with_no_gpus_says_so_in_the_right_number(n: int, need: str):
    # Slip: "GPU" and "GPUs" swapped.
    with pytest.raises(NotEnoughGpus) as exc:
        choose_auto(machine([], lambda i, j: "NV12"), n, Constraints())
    assert exc.value.message.startswith(f"{need} but this machine shows no GPUs"), exc.value.message


def test_no_wait_can_help_counts_the_gpus_that_could_ever_hold_min_free():
    # Slip: each GPU counted twice in "N of M GPUs could ever have --min-free".
    small = [replace(gpu(i), memory_total_mib=16384, memory_used_mib=100, memory_free_mib=16284) for i in (1, 2, 3)]
    m = machine([gpu(0), *small], lambda i, j: "NV12")
    with pytest.raises(NotEnoughGpus) as exc:
        choose_auto(m, 2, Constraints(min_free=parse_size("40GiB")))
    assert exc.value.hint.startswith("no wait can help: 1 of 4 GPUs could ever have --min-free 40.0 GiB free"), \
        exc.value.hint


def test_fit_counts_the_largest_gpus_when_a_machine_has_more_than_eight():
    # Slip: the 8 smallest GPUs summed instead of the 8 largest (a machine of 9 or more, mixed sizes).
    small = replace(gpu(8), memory_total_mib=16384, memory_used_mib=100, memory_free_mib=16284)
    m = machine([*[gpu(i) for i in range(8)], small], lambda i, j: "NV12")
    with pytest.raises(NotEnoughGpus) as exc:
        choose_fit(m, parse_size("700GiB"), Constraints())
    assert exc.value.hint.startswith("no wait can help: the 8 largest GPUs here have 637.2 GiB in total"), \
        exc.value.hint


def test_idle_takes_a_mig_device_with_a_sliver_of_memory_used():
    # Slip: the 5 % idle line of a MIG device divided instead of multiplied (13 MiB used would be "busy").
    from test_choice_states import MIG0

    gpus = [gpu(0), replace(gpu(1), mig_mode="enabled", mig_devices=(MIG0,))]
    chosen = mig.choose_mig(machine(gpus, lambda i, j: "NV12"), 1, Constraints(idle=True))
    assert chosen.devices[0].mig == MIG0


@pytest.mark.parametrize("snap, n", [("dgx-h100", 2), ("dgx1-v100", 4)])
def test_explain_keeps_to_a_narrow_terminal(snap: str, n: int):
    # Slip: a parenthesis kept whole on a line that has no room for it (the room counted 8 columns too
    # wide): at 40 columns "(worst NV18 on 1 pair, 18 NVLinks inside)" would stick out.
    m = snapshot.resolve(snap)
    text = explain.as_text(choose_auto(m, n, Constraints(), runner_ups=3), m, width=40)
    assert "ranked by:" in text
    assert max(len(line) for line in text.splitlines()) <= 40, text


def test_explain_says_when_a_large_pool_was_not_searched_to_the_end():
    # Slip: the note on a search the node budget cut short shown for exact searches instead (and not
    # where it belongs): 64 idle GPUs in DGX-1 cube-mesh islands, 5 asked; and dgx-h100's 4 of 8.
    from benchmarks.selection import synthetic_machine

    note = "(large pool: the best set the heuristic and a bounded exact search found; it keeps the best link class)"
    large = synthetic_machine("cube-mesh", 64, 0, "idle")
    assert note in " ".join(explain.as_text(choose_auto(large, 5, Constraints(), runner_ups=3), large).split())
    m = snapshot.resolve("dgx-h100")
    text = explain.as_text(choose_auto(m, 4, Constraints(), runner_ups=3), m)
    assert "large pool" not in text
    assert "  links: all 6 pairs NV18\n" in text  # one link class: said once for all pairs


def test_a_missing_index_lists_the_gpus_there_are():
    # Slip: the list of indices joined wrongly (a crash) where they are not one span.
    odd = machine([replace(gpu(i), index=i * 2) for i in range(3)], lambda i, j: "NV12")
    with pytest.raises(UsageError) as exc:
        spec.resolve(spec.parse("7"), odd)
    assert exc.value.message == "--gpus: there is no GPU 7; this machine has GPUs 0,2,4"


def test_one_eligible_gpu_is_said_in_the_singular():
    # Slip: "is" for none instead of one ("only 1 of 3 are eligible").
    m = machine([gpu(0), gpu(1, used=80000), gpu(2, used=80000)], lambda i, j: "NV12")
    with pytest.raises(NotEnoughGpus) as exc:
        choose_auto(m, 2, Constraints(min_free=parse_size("10GiB")))
    assert exc.value.message.startswith("need 2 GPUs, but only 1 of 3 is eligible ("), exc.value.message


def test_with_two_mig_devices_visible_the_first_is_the_one_cuda_uses():
    # Slip: the last MIG device named instead of the first.
    from test_choice_states import MIG0

    small = replace(MIG0, uuid="MIG-22222222-2222-3333-4444-555555555555", profile="1g.10gb", gpu_instance_id=2)
    m = machine([replace(gpu(0), mig_mode="enabled", mig_devices=(MIG0, small))], lambda i, j: "NV12")
    assert visibility.read_cvd(f"{MIG0.uuid},{small.uuid}", m).problems == (
        "CUDA enumerates only one MIG device per process: in the parent itself only the first "
        "(GPU 0 MIG 3g.40gb) is usable",)


def test_a_cuda_visible_gpu_outside_nvidia_visible_devices_is_named_and_left_out():
    # Slip: the warning named the GPUs inside NVIDIA_VISIBLE_DEVICES instead of those outside it.
    vis = visibility.resolve(FOUR, {"NVIDIA_VISIBLE_DEVICES": FOUR.gpus[0].uuid, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert "GPU 1 in CUDA_VISIBLE_DEVICES is not in NVIDIA_VISIBLE_DEVICES; left out" in vis.warnings, vis.warnings
    assert [d.gpu.index for d in vis.allowed] == [0]


def test_nvidia_visible_devices_naming_every_gpu_but_not_their_mig_devices_narrows():
    # Slip: MIG devices subtracted instead of added when "every device is listed" is decided.
    from test_choice_states import MIG0

    m = machine([gpu(0), replace(gpu(1), mig_mode="enabled", mig_devices=(MIG0,))], lambda i, j: "NV12")
    devices, warnings = visibility.read_nvd(f"{m.gpus[0].uuid},{m.gpus[1].uuid}", m)
    assert devices is not None and [d.gpu.index for d in devices] == [0, 1] and warnings == ()
    everything, _ = visibility.read_nvd(f"{m.gpus[0].uuid},{m.gpus[1].uuid},{MIG0.uuid}", m)
    assert everything is None  # every GPU and MIG device listed: nothing to narrow


def test_a_waiting_jobs_refusal_names_who_keeps_a_gpu_busy():
    # Slip: "by alice" said when no user is known, and left out when one is.
    m = snapshot.resolve("dgx-h100")
    reasons = {e.gpu.index: e.reason for e in eligibility(m, Constraints(polite=True)).excluded}
    assert reasons[0] == "busy by alice (98% utilisation; --max-util 100 takes it anyway)"
    anonymous = machine([gpu(0, util=97), gpu(1)], lambda i, j: "NV12")
    (only,) = eligibility(anonymous, Constraints(polite=True)).excluded
    assert only.reason == "busy (97% utilisation; --max-util 100 takes it anyway)"
