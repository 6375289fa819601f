"""mypy checks the Python API, what it imports, and its signatures from a user's side (tests/typecheck/api_usage.py).

The usage file calls the API as a user would; every line must type-check except those marked
``# E:``, which must each be an error: so a signature that became too loose (``Any``) fails here
as surely as one that became too strict. The API's modules are checked with the strict flags
listed in pyproject.toml (``[tool.mypy]``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "tests" / "typecheck" / "api_usage.py"
_ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<text>.*)$")


def test_mypy_passes_on_the_api_and_its_signatures_hold() -> None:
    pytest.importorskip("mypy")
    # mypy follows every import, lazy ones included: all the modules the API runs are checked too.
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-color-output", "--show-error-codes",
                           "gpu_launch/__init__.py", "gpu_launch/api.py", str(USAGE.relative_to(ROOT))],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [m for m in map(_ERROR.match, done.stdout.splitlines()) if m]
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    in_package = [m.group(0) for m in errors if not m.group("path").endswith("api_usage.py")]
    assert in_package == [], done.stdout
    flagged = {int(m.group("line")) for m in errors if m.group("path").endswith("api_usage.py")}
    expected = {n for n, line in enumerate(USAGE.read_text("utf-8").splitlines(), 1) if "# E:" in line}
    assert len(expected) >= 8
    assert flagged == expected, done.stdout
