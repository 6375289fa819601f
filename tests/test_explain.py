"""--explain: why this set, what each excluded GPU failed, where the next-best sets lost; text and JSON."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from gpu_launch.base.records import replace
from gpu_launch.choose import explain
from gpu_launch.hardware import snapshot
from gpu_launch.choose.ranking import CRITERIA
from gpu_launch.choose.select import Constraints, choose_auto

TOP_KEYS = ["schema", "how", "chosen", "uuids", "warnings", "excluded", "thresholds", "exact", "criteria", "set",
            "less_available", "next_best"]
SET_KEYS = ["gpus", "availability", "gpus_by_availability", "models", "worst_link", "links", "pairs_at_worst_link", "nvlinks_inside", "nvswitch", "numa_nodes", "numa_groups",
            "least_free_mib", "total_free_mib"]


def explain_json(*args: str) -> dict:
    result = run_cli(*args, "--explain", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_json_has_a_schema_and_a_stable_key_order():
    doc = explain_json("--snapshot", "workstation-4x", "--auto", "2")
    assert list(doc) == TOP_KEYS
    assert doc["schema"] == 1
    assert list(doc["set"]) == SET_KEYS
    assert all(list(s) == SET_KEYS + ["lost_on"] for s in doc["next_best"])
    assert doc["criteria"] == list(CRITERIA)


def test_json_says_why_this_set():
    doc = explain_json("--snapshot", "workstation-4x", "--auto", "2")
    assert doc["chosen"] == [0, 2] and doc["how"] == "auto" and doc["exact"] is True
    s = doc["set"]
    assert s["availability"] == "idle" and s["models"] == ["NVIDIA RTX A6000"]
    assert s["links"] == [{"a": 0, "b": 2, "link": "NV4"}] and s["worst_link"] == "NV4"
    assert s["nvlinks_inside"] == 4 and s["numa_nodes"] == [0]
    assert s["least_free_mib"] == 49137 and s["total_free_mib"] == 2 * 49137
    # GPU 3 (erin's process) is only partly used: left out, since three idle GPUs exist.
    assert doc["less_available"] == [{"gpu": 3, "availability": "partly used"}]
    assert [(n["gpus"], n["lost_on"]) for n in doc["next_best"]] == [([0, 1], "worst link"), ([1, 2], "worst link")]


def test_json_names_the_constraint_each_excluded_gpu_failed():
    doc = explain_json("--snapshot", "dgx-h100", "--auto", "2", "--max-util", "50", "--exclude", "2", "--idle")
    assert doc["excluded"] == [
        {"gpu": 0, "reason": "98% utilisation > --max-util 50%"},
        {"gpu": 1, "reason": "97% utilisation > --max-util 50%"},
        {"gpu": 2, "reason": "excluded by --exclude"},
        {"gpu": 5, "reason": "not idle (partly used; --idle)"},
    ]
    assert doc["chosen"] == [4, 6]  # GPU 3 is alone on NUMA node 0 now; 4 and 6 share node 1
    assert doc["next_best"][-1] == {**doc["next_best"][-1], "gpus": [3, 4], "lost_on": "NUMA nodes spanned"}
    text = run_cli("--snapshot", "dgx-h100", "--auto", "2", "--min-free", "70GiB", "--explain").stdout
    assert "  GPU 5: 65.1 GiB free < 70.0 GiB asked by --min-free\n" in text


def test_next_best_lose_on_numa_and_indices_on_nvswitch():
    doc = explain_json("--snapshot", "dgx-h100", "--auto", "2")
    assert doc["chosen"] == [2, 3]
    lost = {tuple(n["gpus"]): n["lost_on"] for n in doc["next_best"]}
    assert lost == {(4, 6): "lower indices", (4, 7): "lower indices", (6, 7): "lower indices"}


def test_text_explains_set_exclusions_and_runner_ups():
    result = run_cli("--snapshot", "pcie-8x", "--auto", "2", "--exclude", "0", "--explain")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("chosen: GPU 4, GPU 5 (auto)\n")
    assert "  links: 4–5 PIX" in text
    assert "ranked by: availability > non-idle GPUs taken > GPU models > worst link" in text
    assert "≤ 5% memory used" in text
    assert "excluded:\n  GPU 0: excluded by --exclude\n" in text
    # Others' busy and full GPUs are not --auto's to take: excluded, saying how to take them anyway.
    assert ("  GPU 2: busy by carol (60% utilisation; --max-util 100 takes it anyway)\n"
            "  GPU 6: full by dave (100% utilisation; --max-util 100 takes it anyway)\n") in text
    assert "full: ≥ 90% memory used or none free" in text
    assert "  GPU 1, GPU 3: lost on worst link (PXB vs PIX)" in text
    # With --max-util 100 they are eligible, and left out as less available than the idle ones.
    anyway = run_cli("--snapshot", "pcie-8x", "--auto", "2", "--exclude", "0", "--max-util", "100", "--explain")
    assert "  GPU 2: busy\n  GPU 6: full\n" in anyway.stdout  # 2.6 GiB of 48 GiB free: full


def test_text_for_an_explicit_choice_shows_the_warnings():
    result = run_cli("--snapshot", "pcie-8x", "--gpus", "6", "--explain")
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["chosen: GPU 6 (explicit)",
                                          "warning: GPU 6 is full by dave (100% utilisation, 2.6 GiB free)"]


def test_explain_does_not_run_the_command():
    result = run_cli("--snapshot", "workstation-4x", "--auto", "2", "--explain", "--", "false")
    assert result.returncode == 0 and result.stdout.startswith("chosen: GPU 0, GPU 2")


def test_explain_is_deterministic():
    first = run_cli("--snapshot", "dgx1-v100", "--auto", "4", "--explain", "--json").stdout
    assert first == run_cli("--snapshot", "dgx1-v100", "--auto", "4", "--explain", "--json").stdout
    doc = json.loads(first)
    assert doc["chosen"] == [0, 1, 2, 3]
    assert doc["next_best"][0]["gpus"] == [4, 5, 6, 7] and doc["next_best"][0]["lost_on"] == "lower indices"
    assert all(n["lost_on"] == "worst link" and n["worst_link"] == "SYS" for n in doc["next_best"][1:])


def test_single_gpu_explanation_has_no_links():
    machine = snapshot.resolve("dgx-h100")
    selection = choose_auto(machine, 1, Constraints(), runner_ups=3)
    doc = explain.as_json(selection, machine)
    assert doc["set"]["links"] == [] and doc["set"]["worst_link"] is None
    assert "links: single GPU" in explain.as_text(selection, machine)


@pytest.mark.parametrize(("columns", "widest"), [("80", 80), ("60", 60), ("200", 100)])
def test_explain_text_wraps_to_the_terminal_at_most_100_columns(columns: str, widest: int) -> None:
    """At an 80-column terminal the explanation wraps at 80 (it wrapped at 100, and the terminal then
    broke words mid-line); a wide one still gets at most 100 columns."""
    for snap, count in (("dgx-h100", "2"), ("dgx1-v100", "4"), ("pcie-8x", "3")):
        text = run_cli("--snapshot", snap, "--auto", count, "--explain", env={"COLUMNS": columns}).stdout
        assert "ranked by:" in text
        assert max(len(line) for line in text.splitlines()) <= widest, text


def _three_of_the_workstation(width: int) -> str:
    machine = snapshot.resolve("workstation-4x")
    return explain.as_text(choose_auto(machine, 3, Constraints(), runner_ups=1), machine, width)


def test_text_names_the_sets_numa_nodes_or_says_unknown():
    assert "\n  NUMA node(s): 0; free memory: least 48.0 GiB, total 144.0 GiB\n" in _three_of_the_workstation(100)
    machine = snapshot.resolve("workstation-4x")
    unknown = replace(machine, gpus=tuple(replace(g, numa_node=None) for g in machine.gpus))
    text = explain.as_text(choose_auto(unknown, 2, Constraints()), unknown)
    assert "\n  NUMA node(s): unknown; free memory:" in text


def test_a_parenthesis_that_just_fits_a_continued_line_is_kept_whole():
    # At 46 columns a continued line has 46 - 2 - 4 = 40 columns, the parenthesis' exact length: kept whole.
    lines = _three_of_the_workstation(46).splitlines()
    assert lines[3:5] == ["  links: PHB: 0–1, 1–2; NV4: 0–2", "      (worst PHB on 2 pairs, 4 NVLinks inside)"]
    assert max(len(line) for line in lines) <= 46


def test_links_are_grouped_by_kind_only_when_that_is_shorter():
    # Four GPUs whose six pairs read 54 characters either way: pair by pair, as they come (grouped is not shorter).
    codes = {(0, 1): "NODE", (0, 2): "NV4", (0, 3): "NV2", (1, 2): "PIX", (1, 3): "PXB", (2, 3): "NODE"}
    machine = snapshot.resolve("workstation-4x")
    machine = replace(machine, links=tuple(tuple("X" if i == j else codes[min(i, j), max(i, j)] for j in range(4))
                                           for i in range(4)))
    text = explain.as_text(choose_auto(machine, 4, Constraints()), machine)
    assert "\n  links: 0–1 NODE, 0–2 NV4, 0–3 NV2, 1–2 PIX, 1–3 PXB, 2–3 NODE\n" in text
    # Two PHB pairs of three: grouped is shorter.
    assert "\n  links: PHB: 0–1, 1–2; NV4: 0–2 (worst PHB on 2 pairs" in _three_of_the_workstation(100)
