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


def test_a_streamed_line_too_long_is_one_failed_job_and_its_rest_is_no_job_of_its_own() -> None:
    """`each -`: a line over 1 MiB is that job's failure, named by its line; what follows it on the same line
    (still arriving when it was dropped) is dropped with it, never run as a command, and the next line is
    the next job, with its own line number (found by the mutation run of seed 38: the rest ran as job 3)."""
    import os
    import threading

    from gpu_launch.sweeps.feed import MAX_LINE, Feed

    read_end, write_end = os.pipe()
    data = b"echo one\n" + b"x" * (MAX_LINE + 200_000) + b"\n" + b"echo three\n"

    def write() -> None:
        for at in range(0, len(data), 65536):
            os.write(write_end, data[at:at + 65536])
        os.close(write_end)

    writer = threading.Thread(target=write)
    writer.start()
    feed, taken = Feed(read_end, "-", True), []
    try:
        while feed.open:
            taken += feed.take(lambda job: None, block=True)
    finally:
        writer.join()
        os.close(read_end)
    assert [(job.number, job.line, job.source, why) for job, why in taken] == [
        (1, 1, "echo one", ""), (2, 2, "?", "-, line 2: longer than 1024 KiB"), (3, 3, "echo three", "")]


def test_a_streamed_line_that_is_not_utf8_is_named_by_its_byte_in_the_whole_input() -> None:
    import os

    from gpu_launch.sweeps.feed import Feed

    read_end, write_end = os.pipe()
    os.write(write_end, b"echo one\n\xef\xbb\xbfecho \xff\n")
    os.close(write_end)
    feed, taken = Feed(read_end, "-", True), []
    try:
        while feed.open:
            taken += feed.take(lambda job: None, block=True)
    finally:
        os.close(read_end)
    assert [why for _, why in taken] == ["", "-: not UTF-8 text (byte 18 is 0xff)"]  # 9 + 1 + the mark's 3 + 5
