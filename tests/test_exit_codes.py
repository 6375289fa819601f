"""docs/exit-codes.md's table and ``errors.ExitCode`` must agree, row for row."""

from __future__ import annotations

import re

from cli_run import ROOT
from gpu_launch import errors
from gpu_launch.errors import ExitCode, GpuLaunchError

_BEGIN, _END = "<!-- exit-codes: begin", "<!-- exit-codes: end -->"
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`([A-Z_]+)`\s*\|\s*(.+?)\s*\|$")


def documented() -> list[tuple[int, str, str]]:
    """(code, name, meaning) rows of the docs/exit-codes.md table, in order."""
    text = (ROOT / "docs" / "exit-codes.md").read_text("utf-8")
    assert _BEGIN in text and _END in text, "docs/exit-codes.md lost its exit-codes markers"
    block = text[text.index(_BEGIN):text.index(_END)]
    rows = []
    for line in block.splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows.append((int(m.group(1)), m.group(2), m.group(3)))
    return rows


def expected_table() -> str:
    """The rows the enum asks for (meaning left to fill in): printed when the test fails."""
    return "\n".join(f"| {int(c)} | `{c.name}` | … |" for c in ExitCode)


def test_readme_table_matches_the_enum() -> None:
    rows = documented()
    assert [(code, name) for code, name, _ in rows] == [(int(c), c.name) for c in ExitCode], (
        "docs/exit-codes.md and errors.ExitCode disagree; the table should have:\n" + expected_table())
    assert all(meaning and meaning != "…" for _, _, meaning in rows)


def test_codes_are_distinct_and_leave_room_for_the_command() -> None:
    values = [int(c) for c in ExitCode]
    assert len(values) == len(set(values))
    # 1 is what a crashed Python prints with a traceback: gpulaunch never uses it on purpose.
    assert 1 not in values
    assert ExitCode.NOT_EXECUTABLE == 126 and ExitCode.COMMAND_NOT_FOUND == 127 and ExitCode.INTERRUPTED == 130


def test_every_error_class_has_a_documented_code() -> None:
    documented_codes = {code for code, _, _ in documented()}
    classes = [getattr(errors, name) for name in errors.__all__]
    error_classes = [c for c in classes if isinstance(c, type) and issubclass(c, GpuLaunchError)]
    assert len(error_classes) > 5
    for cls in error_classes:
        assert int(cls.exit_code) in documented_codes, cls
        assert cls.exit_code != ExitCode.OK, cls
