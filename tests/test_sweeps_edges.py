"""The slips in reading a sweep's job file a user would suffer (issue 37): which program a shell line starts
(checked before anything is reserved: a typo is refused at once) and whether the shell execs it (then a
cancel's SIGTERM reaches the command itself). Unit-level: lines as written in a job file."""

from __future__ import annotations

import pytest

from gpu_launch.sweeps.jobfile import parse_line


@pytest.mark.parametrize(("line", "program", "execs"), [
    ("python train.py --lr 1", "python", True),
    ("pyhton train.py", "pyhton", True),  # checked (and refused, 127) before the sweep starts
    ("python t.py | tee out", "python", False),
    ("cd /x && python t.py", None, False),  # only the shell knows what runs
    ("X=1 python t.py", None, False),
    ("(python t.py)", None, False),
    (">out python t.py", None, False),
])
def test_a_shell_lines_program_is_checked_and_execd_when_it_is_the_whole_line(line: str, program: str | None,
                                                                             execs: bool) -> None:
    job = parse_line(line, 1, 1, "jobs.txt", shell=True)
    assert job is not None and (job.program(), job.execs) == (program, execs)
    assert job.command(1)[2].startswith("exec ") == execs
