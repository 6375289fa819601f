"""The slips in reading options a user would suffer (issue 37): words after `--` for a verb that takes
ids, short options written together with their value, a config file's counts, a snapshot's huge number
named without printing it. Unit-level: the parser and the readers as the commands use them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_launch.errors import GpuLaunchError, UsageError
from gpu_launch.options import args, config


def test_words_after_double_dash_are_a_verbs_positionals() -> None:
    inv = args.parse(["cancel", "--", "3", "4"])
    assert (inv.command, inv.positionals) == ("cancel", ("3", "4"))


def test_short_options_together_take_their_value_from_the_rest_of_the_word() -> None:
    inv = args.parse(["-qn2", "--", "true"])
    assert (inv.get("quiet"), inv.get("auto"), inv.argv) == (True, 2, ("true",))
    inv = args.parse(["-vvn", "3", "--", "true"])
    assert (inv.get("verbose"), inv.get("auto")) == (2, 3)
    with pytest.raises(UsageError, match="-n needs a value"):
        args.parse(["-qn"])


def test_a_config_count_is_taken_up_to_999(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("verbose = 999\n")
    assert config.read_file(str(path))["verbose"].value == 999
    path.write_text("verbose = 1000\n")
    with pytest.raises(GpuLaunchError, match="verbose: expected true/false or a count, got 1000"):
        config.read_file(str(path))


def test_a_snapshots_huge_number_is_named_by_its_digits(tmp_path: Path) -> None:
    from gpu_launch.hardware import snapshot
    from sharing_helpers import example, first_gpus

    doc = first_gpus(example("workstation-4x"), 1)
    key = next(k for k, v in doc["gpus"][0].items() if k.startswith("memory_total") and isinstance(v, int))
    for value, shown in ((10 ** 30, "a 31-digit number"), (10 ** 30 - 1, str(10 ** 30 - 1))):
        doc["gpus"][0][key] = value
        path = tmp_path / "snap.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(GpuLaunchError) as err:
            snapshot.load(str(path))
        assert f"{shown} is above" in err.value.message


def test_whole_numbers_are_up_to_nine_digits_and_watch_intervals_from_a_tenth_of_a_second() -> None:
    from gpu_launch.options import values

    assert values.whole_number("123456789", "--auto", "2") == 123456789
    with pytest.raises(UsageError, match="is not a whole number"):
        values.whole_number("1234567890", "--auto", "2")
    assert values.interval("0.1", "--watch") == 0.1 and values.interval("0.5", "--watch") == 0.5
    assert values.interval("1d", "--watch") == 86400
    for bad in ("0.09", "25h"):
        with pytest.raises(UsageError, match="is not between 0.1s and 1d"):
            values.interval(bad, "--watch")



def test_the_help_lines_its_options_descriptions_up_in_one_column_at_80() -> None:
    """`gpulaunch --help` at 80 columns: each option's description starts in column 25, its continuation lines
    too, so the eye runs down one edge (a description one column off is a help that reads ragged)."""
    from gpu_launch.options import helptext

    lines = helptext.usage(columns=80).splitlines()
    assert "  --gpus, -g SPEC        physical GPUs as `gpulaunch ls` numbers them: 4-7," in lines
    rows = [line for line in lines if line.startswith("  --") and "  " in line[2:].strip()]
    assert len(rows) > 20
    for line in rows:
        flags, _, text = line[2:].partition("  ")
        if len(flags) < 21:  # a flag too long for its column puts its description on the next line
            assert line.index(text.lstrip()) == 25, line


def test_an_optional_value_is_taken_only_when_it_converts_and_the_words_after_stay_the_commands() -> None:
    inv = args.parse(["--auto", "1", "--wait", "python", "train.py", "--lr", "3e-4"])
    assert inv.argv == ("python", "train.py", "--lr", "3e-4") and "wait" in inv.flags
    timed = args.parse(["--auto", "1", "--wait", "2h", "--", "python", "train.py"])
    assert timed.get("wait") == 7200 and timed.argv == ("python", "train.py")
    assert args.parse(["ls", "--watch"]).get("watch") is not None  # alone: its default interval


def test_an_option_for_other_verbs_names_them_in_its_hint() -> None:
    with pytest.raises(UsageError) as err:
        args.parse(["ls", "--follow"])
    assert (err.value.message, err.value.hint) == ("--follow does not apply to `ls`",
                                                   "it is for `config`/`each`/`log`/a launch")


def test_help_wraps_to_the_terminal_but_never_narrower_than_40_or_wider_than_its_most(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_launch.options import helptext

    for columns, wraps in (("20", 40), ("40", 40), ("72", 72), ("500", helptext.MAX_WIDTH)):
        monkeypatch.setenv("COLUMNS", columns)
        assert helptext.width() == wraps


def test_the_apis_keywords_take_gpu_0_in_a_list_and_a_ctx_of_nine_digits() -> None:
    from gpu_launch.in_process.keywords import invocation

    inv = invocation("run", {"gpus": [0, 2], "ctx": 999_999_999})
    assert [(i.first, i.last) for i in inv.get("gpus")] == [(0, 0), (2, 2)] and inv.get("ctx") == 999_999_999
    with pytest.raises(UsageError) as err:
        invocation("run", {"ctx": 1_000_000_000})
    assert err.value.message == "ctx: 1000000000 is out of range (1 to 999999999)"
