"""The --wait queue can be seen (issue 26 item 1): `ls` lists who waits for what, in the order they will
be served, `ls --json` carries it, and a waiter that was served says how long it waited."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sharing_helpers import HOLD, Lines, env, example, first_gpus, run, start, write_snapshot
from terminal import Terminal


def test_two_waiters_from_two_terminals_are_listed_in_ls_in_order(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    locks, release = tmp_path / "locks", tmp_path / "release"
    one = write_snapshot(tmp_path / "one.json", first_gpus(example("workstation-4x"), 1))
    holder = start(["--snapshot", str(one), "--gpus", "0", "--", "python3", "-c", HOLD, str(release)], locks)
    request.addfinalizer(lambda: (holder.kill(), holder.wait()))  # a failed test leaves nothing running
    Lines(holder.stdout).wait("CVD=0")
    environ = env(locks)
    first = Terminal(["--snapshot", str(one), "--auto", "1", "--wait", "--", "python3", "-c", "print('first ran')"],
                     environ)
    first.wait_for("waiting")
    # the second one's command has an escape sequence in it: ls must show it escaped, never raw
    second = Terminal(["--snapshot", str(one), "--gpus", "0", "--wait=1h", "--", "python3", "-c",
                       "print('second ran') # \x1b[2J"], environ)
    second.wait_for("1 waiter ahead")

    shown = run(["--snapshot", str(one), "ls"], locks, env={**environ, "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    head = next(i for i, line in enumerate(lines) if line.startswith("QUEUE"))
    assert lines[head].split() == ["QUEUE", "USER", "PID", "SINCE", "WAITING", "REQUEST"]
    assert lines[head - 1] == ""  # a section of its own, under the GPU table
    rows = [line.split() for line in lines[head + 1:] if line[:1].isdigit()]
    # backfill (issue 36): the last line says what the head keeps and lends; nothing here (no GPU is free)
    assert lines[-1] == "kept for the head: none yet; it lends no GPU"  # GPU 0 is held: nothing free to keep
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", me, str(first.pid)), ("2", me, str(second.pid))]
    assert "1 GPU" in lines[head + 1] and "GPU 0: python3 -c" in lines[head + 2]
    assert "\x1b" not in shown.stdout
    wide = run(["--snapshot", str(one), "ls"], locks, env={**environ, "COLUMNS": "200"}).stdout
    assert "second ran'\"'\"') # \\x1b[2J" in wide and "\x1b" not in wide  # whole, and escaped

    doc = json.loads(run(["--snapshot", str(one), "ls", "--json"], locks, env=environ).stdout)
    jsonschema = pytest.importorskip("jsonschema")
    from gpu_launch.views import schemas

    jsonschema.Draft202012Validator(schemas.SNAPSHOT).validate(doc)
    queue = doc["queue"]
    assert [(w["position"], w["pid"], w["user"], w["uid"]) for w in queue] == [
        (1, first.pid, me, os.getuid()), (2, second.pid, me, os.getuid())]
    assert queue[0]["request"].startswith("1 GPU") and queue[0]["command"] == "python3 -c 'print('\"'\"'first ran'\"'\"')'"
    assert queue[1]["request"] == "GPU 0" and "\x1b[2J" in queue[1]["command"]  # JSON keeps the words, escaped by JSON
    assert queue[0]["since"] <= queue[1]["since"] <= time.time() and queue[0]["waited_s"] >= queue[1]["waited_s"]

    release.touch()
    assert holder.wait(timeout=60) == 0
    assert first.finish() == 0 and second.finish() == 0
    for term, ran in ((first, b"first ran"), (second, b"second ran")):
        assert ran in term.out
        assert b"gpulaunch: waited " in term.out and b"s for the GPUs" in term.out, term.out
    after = run(["--snapshot", str(one), "ls"], locks, env={**environ, "COLUMNS": "80"})
    assert "QUEUE" not in after.stdout  # nobody waits: no section at all
    assert json.loads(run(["--snapshot", str(one), "ls", "--json"], locks, env=environ).stdout)["queue"] == []

    at_once = run(["--snapshot", str(one), "--auto", "1", "--wait", "--", "python3", "-c", "pass"], locks)
    assert at_once.returncode == 0 and "waited" not in at_once.stderr  # free at once: it did not wait
